"""The kd-tree search (``search: kdtree``): layout, build invariant, exact pairs, GPU twin.

CPU tests check the closed-form layout of ``core/kdtree.py``, the partition every node of a built
tree must hold, the search radius' bound on the float32 rule, and that the query finds exactly the
rule's pairs (compared as pair sets with an all-pairs computation, not only as partitions). GPU
tests (marked ``gpu``) check the CUDA build against the same invariant and its queries against the
CPU twin: pairs, adjacency, components of every method, nearest neighbours.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer, euclidean_cluster
from gpu_euclidean_cluster.core.config import LABELLING_METHODS
from gpu_euclidean_cluster.core.kdtree import (
    SMALL_CHUNK,
    chunk_bounds,
    first_small_level,
    float_order_keys,
    level_segments,
    search_radius,
    splitter,
    tree_depth,
)
from gpu_euclidean_cluster.core.neighbour_rule import squared_distance, threshold_sq
from gpu_euclidean_cluster.cpu.search.kdtree import (
    build_kdtree,
    kdtree_pair_chunks,
    nearest_neighbours,
)

from ..conftest import ORACLE_CLOUDS, requires_cuda


def all_pairs(points: np.ndarray, d_th: float) -> set[tuple[int, int]]:
    """Every pair ``i < j`` the float32 rule accepts, by comparing all pairs."""
    points = np.asarray(points, dtype=np.float32)
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    found: set[tuple[int, int]] = set()
    for start in range(0, len(points), 256):
        with np.errstate(over="ignore", invalid="ignore"):
            sq = squared_distance(points[start : start + 256, None, :], points[None, :, :])
        i, j = np.nonzero(sq < thr)
        i += start
        keep = j > i
        found.update(zip(i[keep].tolist(), j[keep].tolist(), strict=True))
    return found


def pair_set(chunks) -> set[tuple[int, int]]:
    """The pairs of ``(i, j)`` chunks, failing on a pair given twice or not as ``i < j``."""
    found: list[tuple[int, int]] = []
    for i, j in chunks:
        assert np.all(i < j)
        found += zip(i.tolist(), j.tolist(), strict=True)
    assert len(found) == len(set(found)), "a pair was given twice"
    return set(found)


def finite_cloud(name: str) -> tuple[np.ndarray, float]:
    points, d_th = ORACLE_CLOUDS[name]
    points = np.asarray(points, dtype=np.float32)
    return points[np.isfinite(points).all(axis=1)], d_th


def node_violations(tree_points: np.ndarray) -> list[str]:
    """Nodes whose subtrees are not split at the node along the level's axis."""
    n = len(tree_points)
    problems = []
    for level in range(tree_depth(n) + 1):
        chunks = np.arange(1 << level, dtype=np.int64)
        lo, hi = chunk_bounds(level, chunks, n)
        split = splitter(level, chunks, n)
        for c in np.flatnonzero(lo < hi):
            axis = level % 3
            value = tree_points[split[c], axis]
            left = tree_points[lo[c] : split[c], axis]
            right = tree_points[split[c] + 1 : hi[c], axis]
            if np.any(left > value) or np.any(right < value):
                problems.append(f"level {level} node {c}")
    return problems


@pytest.mark.parametrize("n", [*range(1, 300), 1000, 2047, 2048, 2049, 3000])
def test_every_position_is_the_splitter_of_exactly_one_node(n):
    hits = np.zeros(n, dtype=np.int64)
    for level in range(tree_depth(n) + 2):  # one level past the deepest: all empty
        chunks = np.arange(1 << level, dtype=np.int64)
        lo, hi = chunk_bounds(level, chunks, n)
        live = lo < hi
        if level > tree_depth(n):
            assert not live.any()
            continue
        split = splitter(level, chunks[live], n)
        assert np.all((lo[live] <= split) & (split < hi[live]))
        np.add.at(hits, split, 1)
        # Children own [lo, s) and (s, hi).
        left_lo, left_hi = chunk_bounds(level + 1, 2 * chunks[live], n)
        right_lo, right_hi = chunk_bounds(level + 1, 2 * chunks[live] + 1, n)
        assert np.all(left_hi == split) and np.all(right_lo == split + 1)
        assert np.all(right_hi == hi[live])
        assert np.all((left_lo == lo[live]) | (left_lo >= left_hi))
    np.testing.assert_array_equal(hits, 1)


@pytest.mark.parametrize("n", [1, 2, 33, 100, 1000, 4097])
def test_level_segments_increase_and_keep_earlier_splitters_apart(n):
    for level in range(tree_depth(n) + 1):
        segments = level_segments(n, level)
        assert np.all(np.diff(segments) >= 0)
        odd = segments % 2 == 1
        # An earlier level's splitter is alone in its segment.
        assert len(np.unique(segments[odd])) == int(odd.sum())
        earlier = {int(s) for lv in range(level) for s in _live_splitters(n, lv)}
        assert set(np.flatnonzero(odd).tolist()) == earlier


def _live_splitters(n: int, level: int) -> np.ndarray:
    chunks = np.arange(1 << level, dtype=np.int64)
    lo, hi = chunk_bounds(level, chunks, n)
    return splitter(level, chunks[lo < hi], n)


def test_first_small_level_is_the_paper_cutoff():
    for n in (1, 32, 33, 64, 65, 1000, 120_000):
        level = first_small_level(n)
        assert -(-n >> level) <= SMALL_CHUNK
        assert level == 0 or -(-n >> (level - 1)) > SMALL_CHUNK


def test_float_order_keys_sort_like_the_floats():
    values = np.array(
        [-np.inf, -3e38, -1.0, -1e-40, -0.0, 0.0, 1e-45, 1e-40, 0.5, 1.0, 3e38, np.inf],
        dtype=np.float32,
    )
    keys = float_order_keys(values)
    assert np.all(np.diff(keys.astype(np.int64)) > 0)


@pytest.mark.parametrize(
    "name", ["near_threshold", "exactly_d_th", "random_uniform", "far_outliers"]
)
def test_search_radius_bounds_every_accepted_pair(name):
    points, d_th = finite_cloud(name)
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    radius = search_radius(thr)
    i, j = np.triu_indices(len(points), 1)
    with np.errstate(over="ignore", invalid="ignore"):
        accepted = squared_distance(points[i], points[j]) < thr
    true = np.linalg.norm(points[i].astype(np.float64) - points[j], axis=1)
    assert np.all(true[accepted] < radius)


def test_search_radius_covers_subnormal_thresholds():
    # T = the smallest subnormal: the rule rounds dx*dx to 0 for |dx| up to ~2.6e-23.
    thr = np.float32(1e-45)
    dx = np.float32(2.6e-23)
    a = np.zeros((1, 3), np.float32)
    b = np.array([[dx, 0, 0]], np.float32)
    assert squared_distance(a, b)[0] < thr
    assert float(dx) < search_radius(thr)
    assert search_radius(np.float32(np.inf)) == np.inf


@pytest.mark.parametrize("name", sorted(ORACLE_CLOUDS))
def test_build_splits_every_node(name):
    points, _ = finite_cloud(name)
    tree = build_kdtree(points)
    assert sorted(tree.index.tolist()) == list(range(len(points)))
    np.testing.assert_array_equal(tree.points, points[tree.index])
    assert not node_violations(tree.points)


@pytest.mark.parametrize("name", sorted(ORACLE_CLOUDS))
def test_query_finds_exactly_the_rule_pairs(name):
    points, d_th = finite_cloud(name)
    assert pair_set(kdtree_pair_chunks(points, d_th)) == all_pairs(points, d_th)


def test_query_with_many_ties_and_an_infinite_threshold():
    rng = np.random.default_rng(7)
    grid = rng.integers(0, 4, (600, 3)).astype(np.float32) * np.float32(0.25)  # heavy ties
    for d_th in (0.25, 0.26, 0.5):
        assert pair_set(kdtree_pair_chunks(grid, d_th)) == all_pairs(grid, d_th)
    few = rng.uniform(-1e3, 1e3, (50, 3)).astype(np.float32)
    assert len(pair_set(kdtree_pair_chunks(few, 1e20))) == 50 * 49 // 2  # d_th**2 is inf


@pytest.mark.parametrize("method", LABELLING_METHODS)
def test_every_method_with_kdtree_equals_range_search(method):
    points, d_th = ORACLE_CLOUDS["gaussian_blobs"]
    expected = euclidean_cluster(points, d_th, method=method, search="range", backend="cpu")
    result = euclidean_cluster(points, d_th, method=method, search="kdtree", backend="cpu")
    np.testing.assert_array_equal(result.labels, expected.labels)
    assert result.search == "kdtree"


def test_nearest_neighbours_follow_the_float32_rule_and_break_ties_low():
    rng = np.random.default_rng(3)
    points = rng.uniform(-20, 20, (500, 3)).astype(np.float32)
    points = np.concatenate((points, points[:50]))  # duplicates: ties go to the smaller index
    queries = np.concatenate((rng.uniform(-25, 25, (300, 3)), points[:60])).astype(np.float32)
    nearest = nearest_neighbours(points, queries)
    sq = squared_distance(queries[:, None, :], points[None, :, :])
    best = sq.min(axis=1)
    np.testing.assert_array_equal(sq[np.arange(len(queries)), nearest], best)
    assert np.all(nearest == np.argmax(sq == best[:, None], axis=1))
    assert np.all(nearest[-60:] < 500)
    with pytest.raises(ValueError, match="at least one point"):
        nearest_neighbours(np.empty((0, 3), np.float32), queries)


@pytest.mark.parametrize(("frame", "d_th"), [("kitti_000008.bin", 0.5), ("kitti_000001.bin", 0.3)])
def test_real_frame_cluster_count_equals_pcl(frame, d_th, load_frame, pcl_reference):
    result = euclidean_cluster(load_frame(frame), d_th, search="kdtree", backend="cpu")
    assert result.num_clusters == pcl_reference[frame][d_th]


# ---- GPU ----------------------------------------------------------------------------------------


def gpu_tree(points: np.ndarray, d_th: float):
    import cupy

    from gpu_euclidean_cluster.cuda.search.kdtree import build_kdtree as build_gpu

    return build_gpu(0, cupy.asarray(points), d_th)


def gpu_pairs(points: np.ndarray, d_th: float, search: str = "kdtree", rings=None):
    """The GPU edge set of ``search`` as a set of pairs (built through NeighbourSearch)."""
    import cupy

    from gpu_euclidean_cluster.cuda.labelling.graph import NeighbourSearch, build_edge_set

    device_rings = None if rings is None else cupy.asarray(rings)
    search_ = NeighbourSearch(0, cupy.asarray(points), d_th, search, device_rings)
    edges = build_edge_set(search_).get()
    found = list(zip(edges[:, 0].tolist(), edges[:, 1].tolist(), strict=True))
    assert len(found) == len(set(found)), "a pair was written twice"
    return set(found)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("name", sorted(set(ORACLE_CLOUDS) - {"empty", "all_nan"}))
def test_gpu_build_splits_every_node_and_finds_the_rule_pairs(name):
    points, d_th = finite_cloud(name)
    tree = gpu_tree(points, d_th)
    raw = tree.tree.get()
    index = raw[:, 3].copy()
    tree_points = np.ascontiguousarray(raw[:, :3]).view(np.float32)
    assert sorted(index.tolist()) == list(range(len(points)))
    np.testing.assert_array_equal(tree_points, points[index])
    assert not node_violations(tree_points)
    assert gpu_pairs(points, d_th) == all_pairs(points, d_th)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("method", LABELLING_METHODS)
@pytest.mark.parametrize(
    ("frame", "d_th"), [("kitti_000001.bin", 0.5), ("nuscenes_lidar_top.pcd.bin", 1.0)]
)
def test_gpu_kdtree_labels_equal_the_cpu_range_labels(
    frame, d_th, method, load_frame, pcl_reference
):
    points = load_frame(frame)
    gpu = EuclideanClusterer(ClusterConfig(d_th=d_th, method=method, search="kdtree"), "cuda")
    result = gpu.cluster(points)
    assert result.num_clusters == pcl_reference[frame][d_th]
    cpu = euclidean_cluster(points, d_th, method="union_find", search="range", backend="cpu")
    np.testing.assert_array_equal(result.labels, cpu.labels)


@pytest.mark.gpu
@requires_cuda
def test_gpu_kdtree_pairs_equal_the_cpu_twin_on_a_frame(load_frame):
    points = load_frame("kitti_000008.bin")
    assert gpu_pairs(points, 1.0) == pair_set(kdtree_pair_chunks(points, 1.0))


@pytest.mark.gpu
@requires_cuda
def test_gpu_nearest_neighbours_equal_the_definition():
    import cupy

    rng = np.random.default_rng(11)
    points = rng.uniform(-30, 30, (3000, 3)).astype(np.float32)
    points = np.concatenate((points, points[:200], np.round(points[:300])))  # ties
    queries = np.concatenate((rng.uniform(-35, 35, (2000, 3)), points[:400])).astype(np.float32)
    tree = gpu_tree(points, 1.0)
    nearest = tree.nearest(cupy.asarray(queries)).get()
    np.testing.assert_array_equal(nearest, nearest_neighbours(points, queries))
