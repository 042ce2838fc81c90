"""The CPU backend against the brute-force oracle, for every method and search.

Partition equality with the oracle shows the neighbour rule and the labelling are right; label
equality with the oracle's canonical numbering and between all six method x search combinations
shows the numbering is the documented one and independent of the method.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer, euclidean_cluster
from gpu_euclidean_cluster.core.config import METHODS, SEARCHES

from .conftest import canonical_oracle_labels, oracle_components

COMBOS = list(itertools.product(METHODS, SEARCHES))


def _cluster_cpu(points: np.ndarray, d_th: float, method: str, search: str, **sizes: int):
    config = ClusterConfig(d_th=d_th, method=method, search=search, **sizes)
    return EuclideanClusterer(config, backend="cpu").cluster(points)


@pytest.mark.parametrize(("method", "search"), COMBOS)
def test_partition_equals_oracle(oracle_cloud, method, search, assert_same_partition):
    name, points, d_th = oracle_cloud
    result = _cluster_cpu(points, d_th, method, search)
    expected = oracle_components(points, d_th)
    assert result.labels.dtype == np.int32
    assert result.labels.shape == (len(points),)
    assert_same_partition(result.labels, expected)
    assert result.num_clusters == len(np.unique(expected[expected >= 0])), name


def test_labels_identical_across_methods_and_searches(oracle_cloud):
    _, points, d_th = oracle_cloud
    expected = canonical_oracle_labels(oracle_components(points, d_th))
    for method, search in COMBOS:
        result = _cluster_cpu(points, d_th, method, search)
        np.testing.assert_array_equal(result.labels, expected, err_msg=f"{method}/{search}")
        np.testing.assert_array_equal(
            result.cluster_sizes, np.bincount(expected[expected >= 0], minlength=0)
        )


def test_non_finite_points_are_unlabelled(oracle_cloud):
    _, points, d_th = oracle_cloud
    labels = _cluster_cpu(points, d_th, "edge", "range").labels
    finite = np.isfinite(np.asarray(points, dtype=np.float32)).all(axis=1)
    assert np.all(labels[~finite] == -1)
    assert np.all(labels[finite] >= 0)


def test_exact_threshold_pairs_are_not_neighbours():
    points = np.array([[0, 0, 0], [5, 0, 0], [-3, -4, 0], [0, 0, 5]], dtype=np.float32)
    for method, search in COMBOS:
        # All pairs from the first point are exactly d_th = 5 apart: strict "<" keeps them apart.
        result = _cluster_cpu(points, 5.0, method, search)
        assert result.num_clusters == 4
        result = _cluster_cpu(
            points, float(np.nextafter(np.float32(5), np.float32(6))), method, search
        )
        assert result.num_clusters == 1


def _pairs_where_float32_disagrees(d_th: float) -> tuple[np.ndarray, np.ndarray]:
    """Two point pairs: one beyond d_th in exact arithmetic yet a float32 neighbour, one within
    d_th yet not a float32 neighbour (rounding of the coordinates' differences and sums)."""
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (20000, 3)).astype(np.float32)
    direction = rng.normal(size=(20000, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    scale = d_th * (1 + rng.uniform(-1e-7, 1e-7, (20000, 1)))
    b = (a + direction * scale).astype(np.float32)
    d = b - a
    sq32 = (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + d[:, 2] * d[:, 2]
    sq_exact = np.sum((b.astype(np.float64) - a.astype(np.float64)) ** 2, axis=1)
    neighbour32 = sq32 < np.float32(d_th**2)
    far_but_neighbour = np.flatnonzero((sq_exact >= d_th**2) & neighbour32)[0]
    near_but_not = np.flatnonzero((sq_exact < d_th**2) & ~neighbour32)[0]
    pair = lambda i: np.stack((a[i], b[i]))  # noqa: E731
    return pair(far_but_neighbour), pair(near_but_not)


def test_rule_is_float32_not_exact_arithmetic():
    d_th = 0.3
    far_but_neighbour, near_but_not = _pairs_where_float32_disagrees(d_th)
    for method, search in COMBOS:
        assert _cluster_cpu(far_but_neighbour, d_th, method, search).num_clusters == 1
        assert _cluster_cpu(near_but_not, d_th, method, search).num_clusters == 2


def test_mask_excludes_points(assert_same_partition):
    rng = np.random.default_rng(3)
    points = rng.uniform(0, 5, (500, 3)).astype(np.float32)
    mask = rng.uniform(size=500) < 0.7
    for method, search in COMBOS:
        config = ClusterConfig(d_th=0.45, method=method, search=search)
        labels = EuclideanClusterer(config, backend="cpu").cluster(points, mask=mask).labels
        assert np.all(labels[~mask] == -1)
        expected = np.full(len(points), -1, dtype=np.int64)
        expected[mask] = oracle_components(points[mask], 0.45)
        assert_same_partition(labels, expected)


def test_float64_and_integer_input_are_clustered_in_float32():
    points64 = np.array([[0.0, 0.0, 0.0], [0.1 + 1e-12, 0.0, 0.0], [10.0, 0.0, 0.0]])
    result = euclidean_cluster(points64, 0.2, backend="cpu")
    np.testing.assert_array_equal(result.labels, [0, 0, 1])
    integers = np.array([[0, 0, 0], [1, 0, 0], [3, 0, 0]], dtype=np.int16)
    np.testing.assert_array_equal(euclidean_cluster(integers, 1.5, backend="cpu").labels, [0, 0, 1])


def test_larger_random_cloud_exhaustive_equals_range():
    rng = np.random.default_rng(11)
    points = rng.normal(0, 4, (3000, 3)).astype(np.float32)
    exhaustive = _cluster_cpu(points, 0.5, "edge", "exhaustive")
    ranged = _cluster_cpu(points, 0.5, "edge", "range")
    np.testing.assert_array_equal(exhaustive.labels, ranged.labels)
    assert exhaustive.num_edges == ranged.num_edges
    np.testing.assert_array_equal(
        exhaustive.labels, canonical_oracle_labels(oracle_components(points, 0.5))
    )
