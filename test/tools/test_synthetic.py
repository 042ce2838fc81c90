"""The Table 2 generator: feasibility, degree, layout, determinism, recovery by clustering."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, ConfigError, EuclideanClusterer
from gpu_euclidean_cluster.core.config import METHODS, PAPER_METHODS, SEARCHES
from gpu_euclidean_cluster.tools.synthetic import (
    FACTORS,
    TABLE2_EXPERIMENTS,
    _check_float32_rule,
    synthetic_cloud,
    synthetic_problems,
)

from ..conftest import GPU_VARIANTS, canonical_oracle_labels, oracle_components, requires_cuda

COMBOS = list(itertools.product(METHODS, SEARCHES))


def _measured_degree(points: np.ndarray, d_th: float) -> float:
    """Mean float32 neighbour count per point, the point itself included, by brute force."""
    threshold = np.float32(np.float64(d_th) ** 2)
    total = 0
    for start in range(0, len(points), 512):
        d = points[start : start + 512, None, :] - points[None, :, :]
        total += int(
            np.count_nonzero(
                (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2] < threshold
            )
        )
    return total / len(points)


@pytest.mark.parametrize(
    ("factors", "reason"),
    [
        ({"size": 10, "clusters": 11, "degree": 1, "distance": 1}, "must not exceed size"),
        ({"size": 100, "clusters": 10, "degree": 11, "distance": 1}, "degree * cluster number"),
        ({"size": 10, "clusters": 4, "degree": 2.5, "distance": 1}, "smallest cluster's size (2)"),
        ({"size": 100, "clusters": 4, "degree": 2, "distance": 8}, "must not exceed cluster"),
        ({"size": 100, "clusters": 6, "degree": 2, "distance": 4}, "must divide cluster number"),
        ({"size": 0, "clusters": 1, "degree": 1, "distance": 1}, "size must be an integer >= 1"),
        ({"size": 10.0, "clusters": 1, "degree": 1, "distance": 1}, "size must be an integer"),
        ({"size": 10, "clusters": True, "degree": 1, "distance": 1}, "clusters must be an integer"),
        ({"size": 10, "clusters": 2, "degree": 1, "distance": 0}, "distance must be an integer"),
        ({"size": 10, "clusters": 2, "degree": 0.5, "distance": 1}, "degree must be a finite"),
        ({"size": 10, "clusters": 2, "degree": float("nan"), "distance": 1}, "degree must be"),
        ({"size": 10, "clusters": 2, "degree": "3", "distance": 1}, "degree must be"),
    ],
)
def test_infeasible_factors_are_rejected(factors, reason):
    with pytest.raises(ConfigError, match=re.escape(reason)):
        synthetic_cloud(**factors)


@pytest.mark.parametrize("d_th", [0.0, -1.0, float("inf")])
def test_bad_threshold_is_rejected(d_th):
    with pytest.raises(ConfigError, match="d_th must be a finite number > 0"):
        synthetic_cloud(64, 4, 4, 2, d_th=d_th)


def test_every_problem_is_reported():
    problems = synthetic_problems(100, 6, 50, 12)
    assert len(problems) == 2
    assert synthetic_problems(262144, 128, 2048, 4) == []


@pytest.mark.parametrize(
    ("size", "clusters", "degree", "distance"),
    [
        (2048, 32, 32, 4),  # Table 2's shape, scaled down
        (1000, 7, 17, 7),  # clusters of 143 and 142 points, fully interleaved
        (999, 10, 5.5, 5),  # fractional degree
        (512, 16, 32, 16),  # degree == cluster size: complete clusters
        (512, 16, 1, 4),  # degree 1: every point alone
        (512, 16, 2, 4),  # degree 2: below connectivity, a chain prefix and single points
        (700, 1, 3, 1),  # one long cluster of degree 3 (graph degree 2: a path plus one chord)
        (1, 1, 1, 1),  # a single point
    ],
)
def test_ground_truth_and_degree_match_brute_force(size, clusters, degree, distance):
    cloud = synthetic_cloud(size, clusters, degree, distance, seed=5, d_th=0.3)
    assert cloud.points.shape == (size, 3) and cloud.points.dtype == np.float32
    assert cloud.labels.shape == (size,) and cloud.labels.dtype == np.int32
    expected = canonical_oracle_labels(oracle_components(cloud.points, cloud.d_th))
    np.testing.assert_array_equal(cloud.labels, expected)
    measured = _measured_degree(cloud.points, cloud.d_th)
    assert measured == pytest.approx(cloud.average_degree, abs=1e-12)
    # Each cluster's edge count is rounded to an integer: at most 1 / (cluster size) off.
    assert abs(measured - degree) <= 1 / (size // clusters) + 1e-12


def test_float32_guard_rejects_a_flipped_decision():
    # The generator verifies its design in float32 before returning (it trips for chains of
    # about 2**24 points); here the design claims a neighbour pair that sits exactly d_th apart.
    points = np.array([[0, 0, 0], [0.5, 0, 0], [2, 0, 0]], dtype=np.float32)
    cluster_of = np.zeros(3, dtype=np.int64)
    _check_float32_rule(points, np.array([1, 0, 0]), cluster_of, 0.6)  # the true reaches
    with pytest.raises(ConfigError, match="float32 rounding would change the neighbour graph"):
        _check_float32_rule(points, np.array([1, 0, 0]), cluster_of, 0.5)
    with pytest.raises(ConfigError, match="float32 rounding"):
        _check_float32_rule(points, np.array([0, 0, 0]), cluster_of, 0.6)  # misses a neighbour


def test_connected_clusters_are_numbered_in_generation_order():
    cloud = synthetic_cloud(4096, 128, 32, 4)
    assert cloud.num_components == 128
    first = np.array([np.flatnonzero(cloud.labels == k)[0] for k in range(128)])
    assert np.all(np.diff(first) > 0)


@pytest.mark.parametrize("distance", [1, 2, 8, 64])
def test_point_distance_layout(distance):
    # "points at indices i, i + D, i + 2D ... belong to the i-th cluster" (Section 5.1): groups
    # of D clusters, each group's points round robin over its clusters.
    clusters, per_cluster = 64, 16
    cloud = synthetic_cloud(clusters * per_cluster, clusters, 8, distance)
    index = np.arange(clusters * per_cluster)
    group, offset = np.divmod(index, distance * per_cluster)
    np.testing.assert_array_equal(cloud.labels, group * distance + offset % distance)


def test_uneven_clusters_put_extra_points_in_the_first_clusters():
    cloud = synthetic_cloud(103, 10, 3, 10)
    np.testing.assert_array_equal(np.bincount(cloud.labels), [11, 11, 11] + [10] * 7)
    # Fully interleaved: the first 100 points run round robin over all ten clusters.
    np.testing.assert_array_equal(cloud.labels[:100], np.tile(np.arange(10), 10))


def test_same_seed_same_cloud_other_seed_other_placement():
    a = synthetic_cloud(4096, 64, 16, 8, seed=42)
    b = synthetic_cloud(4096, 64, 16, 8, seed=42)
    c = synthetic_cloud(4096, 64, 16, 8, seed=43)
    np.testing.assert_array_equal(a.points, b.points)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.points, c.points)
    np.testing.assert_array_equal(a.labels, c.labels)
    assert a.num_edges == c.num_edges


def test_clusters_are_separated_and_coordinates_small():
    cloud = synthetic_cloud(8192, 256, 32, 4, d_th=0.5)
    # Points of different clusters differ by at least 2 d_th in y or z.
    y_z = cloud.points[:, 1:]
    per_cluster = np.unique(np.column_stack((cloud.labels, y_z)), axis=0)
    assert len(per_cluster) == 256  # one (y, z) line per cluster
    lines = per_cluster[:, 1:]
    gaps = np.abs(lines[:, None, :] - lines[None, :, :]).max(axis=2)
    np.fill_diagonal(gaps, np.inf)
    assert gaps.min() >= 2 * 0.5
    assert np.abs(cloud.points).max() < 100


def test_table2_matches_the_paper():
    experiments = {
        name: (e.factor, e.values[0], e.values[-1], dict(e.fixed))
        for name, e in TABLE2_EXPERIMENTS.items()
    }
    assert experiments == {
        "size": ("size", 4096, 262144, {"clusters": 128, "degree": 32, "distance": 4}),
        "cluster_number": ("clusters", 16, 8192, {"size": 262144, "degree": 32, "distance": 4}),
        "point_degree": ("degree", 1, 2048, {"size": 262144, "clusters": 128, "distance": 4}),
        "point_distance": ("distance", 1, 1024, {"size": 65536, "clusters": 1024, "degree": 32}),
    }
    for experiment in TABLE2_EXPERIMENTS.values():
        values = np.array(experiment.values)
        np.testing.assert_array_equal(values[1:], values[:-1] * 2)  # every power of two
        assert set(experiment.parameters(values[0])) == set(FACTORS)


@pytest.mark.parametrize("name", sorted(TABLE2_EXPERIMENTS))
def test_full_table2_clouds_have_the_requested_degree(name):
    experiment = TABLE2_EXPERIMENTS[name]
    for value, cloud in experiment.clouds(seed=1):
        factors = experiment.parameters(value)
        assert cloud.size == factors["size"] == len(cloud.points)
        assert cloud.average_degree == factors["degree"]
        # Below m - 1 edges a cluster of m points is a chain prefix plus single points.
        m = factors["size"] // factors["clusters"]
        edges = (factors["degree"] - 1) * m // 2
        per_cluster = 1 if edges >= m - 1 else m - edges
        assert cloud.num_components == factors["clusters"] * per_cluster


#: Table 2's experiments scaled to 4096 points or fewer for the CPU: (size, clusters, degree, D).
SMALL_TABLE2 = {
    "size": [(4096, 128, 32, 4), (1024, 128, 8, 4)],
    "cluster_number": [(4096, 16, 32, 4), (4096, 64, 32, 4)],
    "point_degree": [(4096, 16, 1, 4), (4096, 16, 2, 4), (4096, 16, 64, 4), (4096, 16, 256, 4)],
    "point_distance": [(4096, 64, 32, 1), (4096, 64, 32, 8), (4096, 64, 32, 64)],
}


@pytest.mark.parametrize("factors", [f for cases in SMALL_TABLE2.values() for f in cases], ids=str)
def test_cpu_recovers_small_table2_clouds(factors, assert_same_partition):
    cloud = synthetic_cloud(*factors, seed=3, d_th=0.5)
    for method, search in COMBOS:
        config = ClusterConfig(d_th=cloud.d_th, method=method, search=search)
        result = EuclideanClusterer(config, backend="cpu").cluster(cloud.points)
        assert_same_partition(result.labels, cloud.labels)
        np.testing.assert_array_equal(result.labels, cloud.labels)
        if result.method in PAPER_METHODS:  # union_find builds no edge list
            assert result.num_edges == cloud.num_edges


@pytest.mark.gpu
@pytest.mark.slow
@requires_cuda
@pytest.mark.parametrize(("method", "search", "jumping"), GPU_VARIANTS)
@pytest.mark.parametrize(
    ("name", "value"),
    [(name, v) for name, e in TABLE2_EXPERIMENTS.items() for v in e.values],
)
def test_gpu_recovers_full_table2_clouds(
    name, value, method, search, jumping, assert_same_partition
):
    cloud = synthetic_cloud(**TABLE2_EXPERIMENTS[name].parameters(value), seed=3)
    config = ClusterConfig(d_th=cloud.d_th, method=method, search=search, pointer_jumping=jumping)
    result = EuclideanClusterer(config, backend="cuda").cluster(cloud.points)
    assert result.backend == "cuda"
    assert_same_partition(result.labels, cloud.labels)
    np.testing.assert_array_equal(result.labels, cloud.labels)
