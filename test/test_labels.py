"""Canonical numbering, the size filter and what ClusterResult reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.core.result import STAGES

from .conftest import canonical_oracle_labels

BIG = 2**31 - 1

#: Component ids in point order (ids lie in [0, N), as backends produce them): id 0 has 3 points,
#: ids 5 and 2 tie at 2 (5 holds index 0), id 7 has 1.
COMPONENTS = np.array([5, 5, 2, 2, 7, 0, 0, 0], dtype=np.int32)


@pytest.mark.parametrize(
    ("min_size", "max_size", "labels", "sizes"),
    [
        (1, BIG, [1, 1, 2, 2, 3, 0, 0, 0], [3, 2, 2, 1]),
        (2, BIG, [1, 1, 2, 2, -1, 0, 0, 0], [3, 2, 2]),
        (1, 2, [0, 0, 1, 1, 2, -1, -1, -1], [2, 2, 1]),
        (2, 2, [0, 0, 1, 1, -1, -1, -1, -1], [2, 2]),
        (4, BIG, [-1] * 8, []),
    ],
)
def test_canonical_numbering_and_filter(min_size, max_size, labels, sizes):
    got, got_sizes, components = canonical_labels(COMPONENTS, min_size, max_size)
    np.testing.assert_array_equal(got, labels)
    np.testing.assert_array_equal(got_sizes, sizes)
    assert got.dtype == np.int32
    assert got_sizes.dtype == np.int64
    assert components == 4


def test_ties_go_to_the_smallest_point_index():
    # Four clusters of two points; their smallest indices are 0, 1, 2, 3 for ids 6, 1, 4, 3.
    ids = np.array([6, 1, 4, 3, 1, 6, 3, 4])
    labels, sizes, _ = canonical_labels(ids, 1, BIG)
    np.testing.assert_array_equal(labels, [0, 1, 2, 3, 1, 0, 3, 2])
    np.testing.assert_array_equal(sizes, [2, 2, 2, 2])


def test_empty_input():
    labels, sizes, components = canonical_labels(np.empty(0, dtype=np.int32), 1, BIG)
    assert labels.shape == (0,) and labels.dtype == np.int32
    assert sizes.shape == (0,) and components == 0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("min_size", "max_size"), [(1, BIG), (3, BIG), (1, 6), (2, 9)])
def test_random_components_match_the_documented_rule(seed, min_size, max_size):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 120, 600) * 5  # arbitrary, sparse ids in [0, N)
    labels, sizes, components = canonical_labels(ids, min_size, max_size)
    np.testing.assert_array_equal(labels, canonical_oracle_labels(ids, min_size, max_size))
    assert components == len(np.unique(ids))
    np.testing.assert_array_equal(np.bincount(labels[labels >= 0], minlength=len(sizes)), sizes)
    assert np.all(np.diff(sizes) <= 0)
    assert np.all((sizes >= min_size) & (sizes <= max_size))


def _cloud_with_cluster_sizes(sizes: list[int]) -> np.ndarray:
    """Clusters of the given sizes, 10 m apart, points 0.1 m apart along x, shuffled."""
    parts = [
        np.column_stack((np.arange(n) * 0.1, np.full(n, 10.0 * k), np.zeros(n)))
        for k, n in enumerate(sizes)
    ]
    return np.random.default_rng(0).permutation(np.concatenate(parts)).astype(np.float32)


@pytest.mark.parametrize(
    ("min_size", "max_size", "kept"),
    [(1, BIG, [7, 5, 3, 3, 1]), (3, BIG, [7, 5, 3, 3]), (2, 5, [5, 3, 3]), (6, 6, [])],
)
def test_clusterer_size_filter(min_size, max_size, kept):
    points = _cloud_with_cluster_sizes([3, 7, 1, 5, 3])
    config = ClusterConfig(d_th=0.15, min_cluster_size=min_size, max_cluster_size=max_size)
    result = EuclideanClusterer(config, backend="cpu").cluster(points)
    np.testing.assert_array_equal(result.cluster_sizes, kept)
    assert result.num_clusters == len(kept)
    assert result.num_components == 5
    labels = result.labels
    np.testing.assert_array_equal(np.bincount(labels[labels >= 0], minlength=len(kept)), kept)
    assert int((labels == -1).sum()) == len(points) - sum(kept)
    assert set(np.unique(labels[labels >= 0])) == set(range(len(kept)))


def test_result_summary_is_json_ready():
    points = _cloud_with_cluster_sizes([4, 2])
    result = EuclideanClusterer(ClusterConfig(d_th=0.15, method="edge"), backend="cpu").cluster(
        points
    )
    summary = result.summary()
    assert set(summary) == {
        "points",
        "clusters",
        "components",
        "method",
        "search",
        "backend",
        "device",
        "iterations",
        "num_edges",
        "num_labels_after_initial",
        "peak_bytes",
        "cluster_sizes",
        "timings_ms",
    }
    assert summary["points"] == 6
    assert summary["clusters"] == 2
    assert summary["cluster_sizes"] == [4, 2]
    assert summary["method"] == "edge" and summary["backend"] == "cpu"
    assert summary["num_edges"] == 4
    assert set(summary["timings_ms"]) == {*STAGES, "total"}
    assert json.loads(json.dumps(summary)) == summary


def test_timings_cover_every_stage():
    result = EuclideanClusterer(ClusterConfig(d_th=0.15), backend="cpu").cluster(
        _cloud_with_cluster_sizes([5])
    )
    assert set(result.timings_ms) == {*STAGES, "total"}
    assert all(value >= 0 for value in result.timings_ms.values())
    assert result.timings_ms["total"] == pytest.approx(sum(result.timings_ms[s] for s in STAGES))
