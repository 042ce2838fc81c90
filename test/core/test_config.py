"""Configuration validation, backend selection and input checks: every bad value, with a reason."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from gpu_euclidean_cluster import (
    ClusterConfig,
    ConfigError,
    EuclideanClusterer,
    cuda_available,
    euclidean_cluster,
    make_backend,
)
from gpu_euclidean_cluster.core.config import (
    DEFAULT_MATRIX_BLOCK,
    METHODS,
    SEARCHES,
    UNLIMITED_CLUSTER_SIZE,
    config_problems,
)


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("d_th", 0.0, "d_th must be > 0"),
        ("d_th", -0.5, "d_th must be > 0"),
        ("d_th", math.nan, "finite number"),
        ("d_th", math.inf, "finite number"),
        ("d_th", -math.inf, "finite number"),
        ("d_th", True, "finite number"),
        ("d_th", "0.5", "finite number"),
        ("d_th", None, "finite number"),
        ("method", "kdtree", "unknown method 'kdtree'"),
        ("method", "Matrix", "unknown method"),
        ("search", "octree", "unknown search 'octree'"),
        ("search", None, "unknown search"),
        ("min_cluster_size", 0, "min_cluster_size must be an integer >= 1"),
        ("min_cluster_size", -3, "min_cluster_size must be an integer >= 1"),
        ("min_cluster_size", 2.0, "min_cluster_size must be an integer"),
        ("min_cluster_size", True, "min_cluster_size must be an integer"),
        ("max_cluster_size", 0, "max_cluster_size must be an integer >= 1"),
        ("max_cluster_size", "10", "max_cluster_size must be an integer"),
        ("matrix_block", 0, "matrix_block must be a multiple of 32"),
        ("matrix_block", 48, "matrix_block must be a multiple of 32"),
        ("matrix_block", 2048, "in [32, 1024]"),
        ("matrix_block", 1056, "in [32, 1024]"),
        ("matrix_block", 64.0, "matrix_block must be a multiple of 32"),
        ("matrix_block", False, "matrix_block must be a multiple of 32"),
        ("pointer_jumping", 1, "pointer_jumping must be true or false"),
        ("pointer_jumping", "yes", "pointer_jumping must be true or false"),
        ("pointer_jumping", None, "pointer_jumping must be true or false"),
    ],
)
def test_invalid_value_is_rejected_with_reason(field, value, reason):
    with pytest.raises(ConfigError, match=re.escape(reason)) as caught:
        ClusterConfig(**{field: value})
    assert isinstance(caught.value, ValueError)
    assert repr(value) in str(caught.value) or str(value) in str(caught.value)


def test_min_above_max_is_rejected():
    with pytest.raises(ConfigError, match=r"min_cluster_size \(10\) must not exceed"):
        ClusterConfig(min_cluster_size=10, max_cluster_size=9)
    assert ClusterConfig(min_cluster_size=9, max_cluster_size=9).max_cluster_size == 9


def test_every_problem_is_reported():
    config = ClusterConfig()
    object.__setattr__(config, "d_th", -1.0)
    object.__setattr__(config, "method", "nope")
    object.__setattr__(config, "matrix_block", 33)
    problems = config_problems(config)
    assert len(problems) == 3
    assert any("d_th" in p for p in problems)
    assert any("method" in p for p in problems)
    assert any("matrix_block" in p for p in problems)


@pytest.mark.parametrize(("method", "search"), [(m, s) for m in METHODS for s in SEARCHES])
def test_valid_configurations(method, search):
    config = ClusterConfig(d_th=0.3, method=method, search=search, matrix_block=1024)
    assert config_problems(config) == []


def test_defaults():
    config = ClusterConfig()
    assert (config.d_th, config.method, config.search) == (0.5, "auto", "range")
    assert config.min_cluster_size == 1
    assert config.max_cluster_size == UNLIMITED_CLUSTER_SIZE
    assert config.matrix_block == DEFAULT_MATRIX_BLOCK
    assert config.pointer_jumping is True


def test_with_changes_validates_and_leaves_original():
    config = ClusterConfig(d_th=0.5)
    assert config.with_changes(d_th=1.0, method="edge").method == "edge"
    with pytest.raises(ConfigError, match="d_th"):
        config.with_changes(d_th=0)
    assert config.d_th == 0.5
    with pytest.raises(AttributeError):
        config.d_th = 1.0  # type: ignore[misc]


def test_unknown_backend_is_rejected():
    with pytest.raises(ConfigError, match="unknown backend 'tpu'"):
        make_backend("tpu")
    with pytest.raises(ConfigError, match="unknown backend"):
        EuclideanClusterer(ClusterConfig(), backend="gpu")


@pytest.mark.skipif(cuda_available(), reason="this machine has a CUDA device")
def test_cuda_backend_without_cuda_is_a_config_error():
    with pytest.raises(ConfigError, match="CuPy finds no CUDA device"):
        make_backend("cuda")
    with pytest.raises(ConfigError):
        euclidean_cluster(np.zeros((3, 3), np.float32), 0.5, backend="cuda")


@pytest.mark.skipif(cuda_available(), reason="this machine has a CUDA device")
def test_auto_backend_falls_back_to_cpu():
    assert make_backend("auto").name == "cpu"
    result = euclidean_cluster(np.zeros((2, 3), np.float32), 0.5, backend="auto")
    assert result.backend == "cpu" and result.device == "cpu"


@pytest.mark.parametrize(
    "points",
    [
        np.zeros((5, 2), np.float32),
        np.zeros((5, 4), np.float32),
        np.zeros(6, np.float32),
        np.zeros((2, 3, 3), np.float32),
        np.zeros((0, 2), np.float32),
    ],
    ids=["n_by_2", "n_by_4", "flat", "3d", "empty_n_by_2"],
)
def test_bad_points_shape_raises_value_error(points):
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        euclidean_cluster(points, 0.5, backend="cpu")


@pytest.mark.parametrize(
    "points",
    [np.array([["a", "b", "c"]]), np.zeros((2, 3), dtype=complex), np.zeros((2, 3), dtype=bool)],
    ids=["strings", "complex", "bool"],
)
def test_non_numeric_points_raise_value_error(points):
    with pytest.raises(ValueError, match="numeric"):
        euclidean_cluster(points, 0.5, backend="cpu")


@pytest.mark.parametrize(
    "mask",
    [np.ones(4, dtype=bool), np.ones(5, dtype=np.int8), np.ones((5, 1), dtype=bool)],
    ids=["wrong_length", "not_bool", "2d"],
)
def test_bad_mask_raises_value_error(mask):
    clusterer = EuclideanClusterer(ClusterConfig(), backend="cpu")
    with pytest.raises(ValueError, match="mask must be a boolean array"):
        clusterer.cluster(np.zeros((5, 3), np.float32), mask=mask)


def test_one_shot_function_validates_its_arguments():
    points = np.zeros((3, 3), np.float32)
    with pytest.raises(ConfigError, match="unknown method"):
        euclidean_cluster(points, 0.5, method="kmeans", backend="cpu")
    with pytest.raises(ConfigError, match="d_th"):
        euclidean_cluster(points, -1.0, backend="cpu")
    with pytest.raises(ConfigError, match="min_cluster_size"):
        euclidean_cluster(points, 0.5, backend="cpu", min_cluster_size=5, max_cluster_size=2)


def test_every_node_parameter_sets_a_field_it_names_and_every_field_has_one():
    """The settings loop (``ros/parameters/settings.py``) only follows the specs: a spec naming a
    missing field, or a settings field no spec sets, would be dropped without a word."""
    from dataclasses import fields

    from gpu_euclidean_cluster.core.diffnormals import DiffNormalsSettings
    from gpu_euclidean_cluster.core.ground import GroundSettings
    from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings
    from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS, SWITCHED_SECTIONS

    types = {
        "cluster": ClusterConfig,
        "ground": GroundSettings,
        "diffnormals": DiffNormalsSettings,
        "node": NodeSettings,
    }
    set_by: dict[tuple[str, str], str] = {}
    for spec in PARAMETERS:
        if spec.sets is not None:
            key = (spec.sets.section, spec.sets.name)
            assert key not in set_by, f"{spec.name} and {set_by.get(key)} set one field"
            set_by[key] = spec.name
    for section, settings_type in types.items():
        names = {f.name for f in fields(settings_type)}
        named = {name for owner, name in set_by if owner == section}
        assert named <= names, f"{section}: no such fields {named - names}"
        # every field is a parameter's but the library-only matrix_block and NodeSettings.cluster
        assert names - named == {"cluster": {"matrix_block"}, "node": {"cluster"}}.get(
            section, set()
        )
    assert {("node", s) for s in SWITCHED_SECTIONS} <= set(set_by)
    start_up = {spec.name for spec in PARAMETERS if spec.sets is None}
    assert start_up == {
        "backend", "device_id", "qos_depth", "qos_reliability", "sensor_model",
        "calibration_file", "return_mode", "scan_phase", "cloud_min_angle", "cloud_max_angle",
        "sensor_min_range", "sensor_max_range", "azimuth_timing", "cut_angle",
        "dual_return_distance_threshold", "sensor_kit", "ring_outlier_filter",
    }  # fmt: skip


def test_the_cli_and_the_node_build_one_config_from_the_specs():
    """``gpu-euclidean-cluster cluster``'s options set ClusterConfig as the node's parameters."""
    import argparse

    from gpu_euclidean_cluster.commands.cluster import add_parser, config_from_args
    from gpu_euclidean_cluster.ros.parameters.settings import settings_from_values
    from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    argv = ["cluster", "f.pcd", "--d-th", "0.7", "--method", "edge", "--no-pointer-jumping"]
    argv += ["--min-cluster-size", "3", "--max-cluster-size", "90", "--max-work-s", "0"]
    values = {spec.name: spec.default for spec in PARAMETERS}
    values.update(d_th=0.7, method="edge", pointer_jumping=False, min_cluster_size=3)
    values.update(max_cluster_size=90, max_work_s=0.0)
    node = settings_from_values(values).cluster
    assert config_from_args(parser.parse_args(argv)) == node
    assert node.max_work_s is None  # 0 = no limit, for both
    assert config_from_args(parser.parse_args(["cluster", "f.pcd"])) == ClusterConfig()
