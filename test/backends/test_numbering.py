"""Canonical numbering, the size filter and what ClusterResult reports.

The numbering tests run on both twins (``backend`` fixture: ``core/numbering.py`` and the GPU
filter stage, ``cuda/labelling/numbering.py``); the GPU stage also equals the CPU rule label for
label on constructed, random and real-frame components (skipped without a CUDA device).
``python -m benchmarks.numbering`` times the GPU stage.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.core.result import STAGES

from ..conftest import canonical_oracle_labels, cuda_only

UNLIMITED = 2**31 - 1

#: Component ids in point order (ids lie in [0, N), as backends produce them): id 0 has 3 points,
#: ids 5 and 2 tie at 2 (5 holds index 0), id 7 has 1.
COMPONENTS = np.array([5, 5, 2, 2, 7, 0, 0, 0], dtype=np.int32)


def number_on(backend: str, ids: np.ndarray, min_size: int, max_size: int):
    """The ``backend`` twin's ``(labels, sizes, count)`` of component ``ids``, labels on the host;
    the GPU stage's result types checked on the way."""
    if backend == "cpu":
        return canonical_labels(ids, min_size, max_size)
    import cupy

    from gpu_euclidean_cluster.cuda.labelling.numbering import canonical_labels_gpu

    with cupy.cuda.Device(0):
        labels, sizes, count = canonical_labels_gpu(0, cupy.asarray(ids), min_size, max_size)
    assert isinstance(sizes, np.ndarray) and sizes.dtype == np.int64
    assert labels.dtype == np.int32 and labels.shape == ids.shape
    return labels.get(), sizes, count


def _check(ids: np.ndarray, min_size: int = 1, max_size: int = UNLIMITED) -> None:
    """The GPU stage's numbering of ``ids`` is the CPU rule's."""
    ids = np.asarray(ids)
    labels, sizes, count = number_on("cuda", ids, min_size, max_size)
    want_labels, want_sizes, want_count = canonical_labels(ids, min_size, max_size)
    assert count == want_count
    np.testing.assert_array_equal(sizes, want_sizes)
    np.testing.assert_array_equal(labels, want_labels)


@pytest.mark.parametrize(
    ("min_size", "max_size", "labels", "sizes"),
    [
        (1, UNLIMITED, [1, 1, 2, 2, 3, 0, 0, 0], [3, 2, 2, 1]),
        (2, UNLIMITED, [1, 1, 2, 2, -1, 0, 0, 0], [3, 2, 2]),
        (1, 2, [0, 0, 1, 1, 2, -1, -1, -1], [2, 2, 1]),
        (2, 2, [0, 0, 1, 1, -1, -1, -1, -1], [2, 2]),
        (4, UNLIMITED, [-1] * 8, []),
    ],
)
def test_canonical_numbering_and_filter(backend, min_size, max_size, labels, sizes):
    got, got_sizes, components = number_on(backend, COMPONENTS, min_size, max_size)
    np.testing.assert_array_equal(got, labels)
    np.testing.assert_array_equal(got_sizes, sizes)
    assert got.dtype == np.int32
    assert got_sizes.dtype == np.int64
    assert components == 4


def test_ties_go_to_the_smallest_point_index(backend):
    # Four clusters of two points; their smallest indices are 0, 1, 2, 3 for ids 6, 1, 4, 3.
    ids = np.array([6, 1, 4, 3, 1, 6, 3, 4])
    labels, sizes, _ = number_on(backend, ids, 1, UNLIMITED)
    np.testing.assert_array_equal(labels, [0, 1, 2, 3, 1, 0, 3, 2])
    np.testing.assert_array_equal(sizes, [2, 2, 2, 2])


def test_empty_input(backend):
    labels, sizes, components = number_on(backend, np.empty(0, dtype=np.int32), 1, UNLIMITED)
    assert labels.shape == (0,) and labels.dtype == np.int32
    assert sizes.shape == (0,) and sizes.dtype == np.int64 and components == 0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("min_size", "max_size"), [(1, UNLIMITED), (3, UNLIMITED), (1, 6), (2, 9)])
def test_random_components_match_the_documented_rule(backend, seed, min_size, max_size):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 120, 600) * 5  # arbitrary, sparse ids in [0, N)
    labels, sizes, components = number_on(backend, ids, min_size, max_size)
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
    [(1, UNLIMITED, [7, 5, 3, 3, 1]), (3, UNLIMITED, [7, 5, 3, 3]), (2, 5, [5, 3, 3]), (6, 6, [])],
)
def test_clusterer_size_filter(backend, min_size, max_size, kept):
    points = _cloud_with_cluster_sizes([3, 7, 1, 5, 3])
    config = ClusterConfig(d_th=0.15, min_cluster_size=min_size, max_cluster_size=max_size)
    result = EuclideanClusterer(config, backend=backend).cluster(points)
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


# ---- CUDA only: the GPU filter stage against the CPU rule, label for label ---------------------


def _roots(ids: np.ndarray) -> np.ndarray:
    """Relabel each component by its smallest member (the union-find / vertex / edge ids)."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int32)


def _sized(sizes: list[int], rng: np.random.Generator) -> np.ndarray:
    """Components of the given sizes, points shuffled, ids arbitrary in [0, N)."""
    n = int(sum(sizes))
    names = rng.permutation(n)[: len(sizes)]
    return rng.permutation(np.repeat(names, sizes)).astype(np.int32)


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    cases: dict[str, np.ndarray] = {}
    cases["one_point"] = np.zeros(1, dtype=np.int32)
    cases["two_singletons"] = np.array([1, 0], dtype=np.int32)
    cases["many_small"] = rng.integers(0, 3000, 9000).astype(np.int32)
    cases["many_small_roots"] = _roots(rng.integers(0, 3000, 9000))
    giant = np.zeros(120_000, dtype=np.int32)
    tail = rng.choice(120_000, 4000, replace=False)
    giant[tail] = rng.integers(0, 120_000, 4000)
    cases["one_giant"] = giant
    cases["one_giant_roots"] = _roots(giant)
    cases["all_one"] = np.full(5000, 4999, dtype=np.int32)
    cases["singletons_fit"] = rng.permutation(5000).astype(np.int32)
    cases["singletons_large"] = rng.permutation(120_000).astype(np.int32)  # K > one block's sort
    cases["ties_pairs"] = _sized([2] * 3000, rng)
    cases["k_8192"] = _sized([3] * 100 + [1] * 8092, rng)
    cases["k_8193"] = _sized([3] * 100 + [1] * 8093, rng)
    cases["k_8193_roots"] = _roots(_sized([5] * 93 + [2] * 8000 + [1] * 100, rng))
    cases["k_16384"] = _sized([3] * 100 + [1] * 16284, rng)
    cases["k_16385"] = _sized([3] * 100 + [1] * 16285, rng)
    # Many components, few kept by a size filter (min 2 or 3): only the kept are sorted.
    cases["few_kept_of_many"] = _sized([9] * 40 + [3] * 3000 + [2] * 14000 + [1] * 40000, rng)
    cases["many_distinct_sizes"] = _sized(list(range(1, 300)) * 2, rng)
    cases["scan_order"] = np.repeat(np.arange(0, 40_000, 40), 40).astype(np.int32)
    cases["mixed_large"] = rng.integers(0, 60_000, 300_000).astype(np.int32)
    # Id -1: in no component (the voxel_grid algorithm's dropped and thinned points).
    minus = rng.integers(0, 3000, 9000).astype(np.int32)
    minus[rng.random(9000) < 0.3] = -1
    cases["minus_one"] = minus
    cases["minus_one_first"] = np.array([-1, 3, 3, -1, 0, 3], dtype=np.int32)
    cases["all_minus_one"] = np.full(700, -1, dtype=np.int32)
    large = rng.permutation(120_000).astype(np.int32)
    large[rng.random(120_000) < 0.5] = -1
    cases["minus_one_large"] = large  # K > one block's sort
    return cases


CASES = _cases()
FILTERS = [(1, UNLIMITED), (2, UNLIMITED), (3, 50), (2, 2), (10, 3), (0, 0), (-5, 10**12)]


@cuda_only
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize(("min_size", "max_size"), FILTERS)
def test_cuda_equals_cpu_rule(name, min_size, max_size):
    _check(CASES[name], min_size, max_size)


@cuda_only
@pytest.mark.parametrize("seed", range(12))
def test_random_shapes_cuda_equal_cpu(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40_000))
    spread = int(rng.integers(1, n + 1))
    ids = rng.integers(0, spread, n)
    if seed % 2:
        ids = _roots(ids)
    low = int(rng.integers(0, 5))
    _check(ids.astype(np.int32), low, int(rng.integers(low, n + 2)))


@cuda_only
def test_int64_ids_and_repeated_calls_cuda_equal_cpu():
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 700, 2000)
    _check(ids)  # int64 on the device
    for _ in range(3):
        _check(ids.astype(np.int32), 2, 9)


@cuda_only
def test_real_frame_components_cuda_equal_cpu(load_frame):
    import cupy

    from gpu_euclidean_cluster.cuda.labelling.union_find import label_union_find

    points = cupy.asarray(load_frame("kitti_000001.bin"))
    for d_th in (0.3, 0.5, 1.0):
        ids = label_union_find(0, points, d_th, "range").components.get()
        for min_size, max_size in ((1, UNLIMITED), (10, 5000)):
            _check(ids, min_size, max_size)
