"""Work known before it is spent: pairs counted exactly, slow configurations refused or replaced;
the RANSAC ground fit's tests estimated and its hypotheses capped to its bound.

The pair counts are checked against brute force; the refusal against the library, the CLI and the
frame layer (the node's path), each with a cloud whose estimate crosses the limit while ``auto``
on the same cloud is never refused. The ground fit's bound is checked here as arithmetic; the
capped fit itself in test/backends/test_ground.py, the frame layer's report of it in
test/frame/test_frame_ground.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, ConfigError, euclidean_cluster
from gpu_euclidean_cluster.clusterer import EuclideanClusterer, estimate_work
from gpu_euclidean_cluster.commands import cli
from gpu_euclidean_cluster.core.ground import GroundSettings, bounded_settings
from gpu_euclidean_cluster.core.work import (
    HYPOTHESIS_TESTS,
    WorkTooLargeError,
    affordable_hypotheses,
    examined_pairs,
    ground_work,
    needs_estimate,
)
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.labelling.graph import _candidate_count
from gpu_euclidean_cluster.cpu.labelling.voxel_grid import build_voxel_grid
from gpu_euclidean_cluster.frame import FramePipeline, FrameWindow
from gpu_euclidean_cluster.pointcloud_io import Cloud, write_pcd
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz, read_fields

from ..conftest import requires_cuda

#: 40 000 points in a 4 m cube: 8e8 pairs for exhaustive search, about 16 s on the CPU.
DENSE = np.random.default_rng(0).uniform(0.0, 4.0, (40_000, 3)).astype(np.float32)


def brute_force_range_pairs(points: np.ndarray, d_th: float) -> int:
    """Pairs of distinct points whose voxels in the CPU range search's grid touch."""
    cells = build_voxel_grid(points, d_th).point_voxels
    touching = np.abs(cells[:, None, :] - cells[None, :, :]).max(axis=2) <= 1
    return int((touching.sum() - len(points)) // 2)


@pytest.mark.parametrize("d_th", [0.05, 0.3, 1.0, 7.0, 1e-20])
def test_range_pairs_equal_brute_force(d_th):
    rng = np.random.default_rng(1)
    points = rng.uniform(-3.0, 3.0, (700, 3)).astype(np.float32)
    points[::50] *= 1e4  # far outliers: gaps of many empty cells
    points[1] = (3e38, -3e38, 0.0)  # the grid's window is clamped: boundary voxels fill up
    pairs = examined_pairs(points, d_th, "range")
    assert pairs == brute_force_range_pairs(points, d_th)
    assert pairs == _candidate_count(build_voxel_grid(points, d_th))  # what the search compares
    assert examined_pairs(points, d_th, "exhaustive") == 700 * 699 // 2


def test_a_grid_clamped_by_a_tiny_threshold_is_estimated_as_it_is_searched():
    """At d_th 1e-20 a 100 m cloud spans 1e22 voxels: the grid's window piles every point into
    its 8 corner voxels, and the paper's methods compare an eighth of all pairs (the estimate
    said none before, and the search ran for minutes on a real frame)."""
    points = np.random.default_rng(2).uniform(-50.0, 50.0, (20_000, 3)).astype(np.float32)
    pairs = examined_pairs(points, 1e-20, "range")
    assert pairs == _candidate_count(build_voxel_grid(points, 1e-20)) > 20_000 * 19_999 // 20
    config = ClusterConfig(d_th=1e-20, method="edge", max_work_s=1.0)  # the node's limit
    with pytest.raises(WorkTooLargeError, match="use method 'auto'"):
        EuclideanClusterer(config, "cpu").cluster(points)
    assert EuclideanClusterer(config.with_changes(method="auto"), "cpu").cluster(
        points
    ).num_clusters == len(points)


def test_degenerate_clouds():
    assert examined_pairs(np.zeros((0, 3), np.float32), 0.5, "range") == 0
    assert examined_pairs(np.zeros((1, 3), np.float32), 0.5, "range") == 0
    assert examined_pairs(np.zeros((5, 3), np.float32), 0.5, "range") == 10


def test_only_pair_bound_configurations_are_estimated():
    assert not needs_estimate("auto", "range") and not needs_estimate("auto", "exhaustive")
    assert not needs_estimate("union_find", "range")
    assert needs_estimate("union_find", "exhaustive") and needs_estimate("edge", "range")


def test_slow_configuration_is_refused_with_the_fast_choice():
    with pytest.raises(WorkTooLargeError) as caught:
        euclidean_cluster(DENSE, 0.5, method="edge", search="exhaustive", backend="cpu")
    message = str(caught.value)
    assert "\n" not in message and "799980000 point pairs" not in message
    assert "method edge with exhaustive search on the cpu backend" in message
    assert "8e+08 point pairs" in message and "use method 'auto'" in message
    assert caught.value.estimate.pairs == 40_000 * 39_999 // 2
    assert caught.value.estimate.seconds > 10


def test_auto_is_never_refused_and_the_limit_can_be_lifted():
    tight = ClusterConfig(d_th=0.5, max_work_s=1e-9)
    result = EuclideanClusterer(tight, "cpu").cluster(DENSE[:2000])
    assert result.method == "union_find"
    small = DENSE[:300]
    lifted = EuclideanClusterer(tight.with_changes(method="edge", max_work_s=None), "cpu")
    expected = euclidean_cluster(small, 0.5, backend="cpu").labels
    assert np.array_equal(lifted.cluster(small).labels, expected)
    with pytest.raises(WorkTooLargeError):
        EuclideanClusterer(tight.with_changes(method="edge"), "cpu").cluster(small)


def test_estimate_uses_the_backends_rate():
    config = ClusterConfig(d_th=0.5, method="vertex", search="exhaustive")
    estimate = estimate_work(CpuBackend(), DENSE[:1000], config)
    rate = CpuBackend().pairs_per_second("vertex", "exhaustive")
    assert estimate.pairs == 1000 * 999 // 2
    assert estimate.seconds == pytest.approx(estimate.pairs / rate)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_max_work_s_is_validated(bad):
    with pytest.raises(ConfigError, match="max_work_s must be"):
        ClusterConfig(max_work_s=bad)


def test_frame_over_the_limit_runs_with_union_find():
    pipeline = FramePipeline("cpu")
    config = ClusterConfig(d_th=0.5, method="matrix", search="exhaustive", max_work_s=1.0)
    output = pipeline.process(from_xyz(DENSE), config, FrameWindow())
    assert output.result.method == "union_find"
    assert "would examine" in output.fallback_reason
    assert output.fallback_reason.endswith("frame run with union_find")
    labels = read_fields(output.labeled, ["cluster_id"])["cluster_id"]
    assert np.array_equal(labels, euclidean_cluster(DENSE, 0.5, backend="cpu").labels)


def test_cli_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "dense.pcd"
    write_pcd(path, Cloud(DENSE, {}))
    status = cli.main(["cluster", str(path), "--backend", "cpu", "--search", "exhaustive",
                       "--method", "edge"])  # fmt: skip
    out, err = capsys.readouterr()
    assert status != 0 and out == ""
    assert err.count("\n") == 1 and "use method 'auto'" in err and "Traceback" not in err
    status = cli.main(["cluster", str(path), "--backend", "cpu", "--json"])
    assert status == 0 and '"method": "union_find"' in capsys.readouterr().out


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("search", ["range", "exhaustive"])
def test_gpu_counts_equal_the_cpus_and_the_gpu_refuses_too(search):
    import cupy

    points = DENSE[:5000].copy()
    points[::97] *= 1e5
    assert examined_pairs(cupy.asarray(points), 0.3, search) == examined_pairs(points, 0.3, search)
    tight = ClusterConfig(d_th=0.3, method="edge", search=search, max_work_s=1e-9)
    with pytest.raises(WorkTooLargeError, match="on the cuda backend"):
        EuclideanClusterer(tight, "cuda").cluster(points)
    auto = EuclideanClusterer(tight.with_changes(method="auto", search="range"), "cuda")
    expected = euclidean_cluster(points, 0.3, backend="cpu").labels
    assert np.array_equal(auto.cluster(points).labels, expected)


def cpu_work(hypotheses: int, candidates: int):
    """The ground fit's estimate at the CPU twin's declared rate (5e7 tests/s)."""
    return ground_work(hypotheses, candidates, candidates, "cpu", 5e7)


def test_ground_work_counts_every_hypothesis_against_every_point():
    estimate = cpu_work(1 << 20, 120_268)
    assert estimate.tests == (1 << 20) * (120_268 + HYPOTHESIS_TESTS)
    assert estimate.seconds == pytest.approx(estimate.tests / 5e7)  # about 2500 s
    assert estimate.describe() == (
        "1048576 RANSAC hypotheses against 120268 points on the cpu backend would take about "
        "2.52e+03 s (1.26e+11 distance tests)"
    )
    # The GPU kernel scores every point of the frame, however few the candidates ...
    assert ground_work(10, 1000, 3, "cuda", 5e10).tests == 10 * (1000 + HYPOTHESIS_TESTS)
    # ... but from fewer than 3 candidates nothing is drawn (a 1-point probe frame: no bound).
    assert ground_work(1 << 20, 1000, 2, "cuda", 5e10).tests == 0
    assert cpu_work(1 << 20, 1).seconds == 0.0


@pytest.mark.parametrize(
    ("hypotheses", "points", "limit_s", "expected"),
    [
        (1 << 20, 120_268, 1.0, 415),  # 5e7 / (120268 + 64) = 415.5
        (1 << 20, 120_268, 1e-9, 1),  # one hypothesis at least: it costs one pass over the points
        (256, 120_268, 1.0, 256),  # within the bound: every hypothesis
        (1 << 20, 3, 1.0, 746_268),  # 3 points: the hypotheses' own cost, 5e7 / 67
    ],
)
def test_affordable_hypotheses(hypotheses, points, limit_s, expected):
    affordable = affordable_hypotheses(cpu_work(hypotheses, points), limit_s)
    assert affordable == expected
    if 1 < affordable < hypotheses:  # the most that fit: one more would not
        assert cpu_work(affordable, points).seconds <= limit_s
        assert cpu_work(affordable + 1, points).seconds > limit_s


def test_ground_settings_are_capped_to_their_bound_with_one_line():
    settings = GroundSettings(iterations=1 << 20, max_work_s=1.0, seed=9)
    capped, reason = bounded_settings(settings, cpu_work(1 << 20, 120_268))
    assert capped == GroundSettings(iterations=415, max_work_s=1.0, seed=9)
    assert reason == (
        "ground removal: 1048576 RANSAC hypotheses against 120268 points on the cpu backend "
        "would take about 2.52e+03 s (1.26e+11 distance tests), over ground_max_work_s 1 s; "
        "plane fitted with the first 415 hypotheses only (as ground_iterations 415 gives)"
    )
    within = GroundSettings(iterations=256, max_work_s=1.0)
    assert bounded_settings(within, cpu_work(256, 120_268)) == (within, None)
    unbounded = replace(settings, max_work_s=None)
    assert bounded_settings(unbounded, cpu_work(1 << 20, 120_268)) == (unbounded, None)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), True, "1"])
def test_ground_max_work_s_is_validated(bad):
    with pytest.raises(ConfigError, match="max_work_s must be a finite number of seconds > 0"):
        GroundSettings(max_work_s=bad)
