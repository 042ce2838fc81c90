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
