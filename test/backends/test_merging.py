"""Centroid merging (``core/merging.py``, the CPU twin, and ``cuda/stages/merging.py``): the
centroids are the package's fixed-order float64 sums, so a link at exactly the threshold is decided
the same way on both backends, subnormal coordinates included. The reference here sums in plain
Python, leaf by leaf and pairwise, independently of ``core/cluster_stats.py``'s NumPy code. The CUDA
twin also gives the CPU twin's partition on the components of the real frames at several tolerances
and merge distances, and at the edges (no threshold, no points, large ids). The clustering through
both backends with merging is compared in ``test_range_bands.py``. Real frames come from
``$LIDAR_DATA_DIR`` and skip when absent.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_euclidean_cluster.core.cluster_stats import SUM_LEAF
from gpu_euclidean_cluster.core.merging import merge_components
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.cpu.labelling.union_find import union_find_components

from ..conftest import cuda_only, on_twin, twin_backend

FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")


def tree_sum(values: list[float]) -> float:
    """Leaves of ``SUM_LEAF`` values added left to right, then the leaf sums pairwise."""
    level = []
    for start in range(0, len(values), SUM_LEAF):
        total = values[start]
        for value in values[start + 1 : start + SUM_LEAF]:
            total += value
        level.append(total)
    while len(level) > 1:
        level = [
            level[i] + level[i + 1] if i + 1 < len(level) else level[i]
            for i in range(0, len(level), 2)
        ]
    return level[0]


def centroid(xy: np.ndarray) -> tuple[float, float]:
    """The reference centroid of (n, 2) float32 points, in index order."""
    x = [float(v) for v in xy[:, 0]]
    y = [float(v) for v in xy[:, 1]]
    return tree_sum(x) / len(x), tree_sum(y) / len(y)


def two_clusters(seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Two interleaved clusters of a few hundred float32 points (several leaves each; values of
    very different magnitudes, so that their float64 sums round, differently in other orders) and
    the float64 distance of their reference centroids."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(130, 700, 2)
    xy = np.concatenate(
        [rng.normal(c, 3.0, (s, 2)) for c, s in zip(((90.0, 0.0), (92.0, 1.0)), sizes, strict=True)]
    )
    xy[rng.random(len(xy)) < 0.3] *= 1e-9  # fine ulps beside coarse ones: sums that round
    xy = xy.astype(np.float32)
    ids = np.repeat(np.array([7, 3]), sizes)
    order = rng.permutation(len(ids))
    xy, ids = xy[order], ids[order]
    (ax, ay), (bx, by) = (centroid(xy[ids == c]) for c in (7, 3))
    dx, dy = ax - bx, ay - by
    return xy, ids, math.sqrt(dx * dx + dy * dy)


@pytest.mark.parametrize("seed", range(40))
def test_a_link_at_exactly_the_threshold_uses_the_fixed_order_sums(seed):
    xy, ids, distance = two_clusters(seed)
    assert len(set(merge_components(xy, ids, distance, passes=1).tolist())) == 1
    below = math.nextafter(distance, 0.0)
    assert len(set(merge_components(xy, ids, below, passes=1).tolist())) == 2


def merged_on(backend: str, points: np.ndarray, ids: np.ndarray, threshold: float) -> np.ndarray:
    """The ``backend`` twin's ``merge_components`` of host arrays, back on the host."""
    if backend == "cpu":
        return twin_backend("cpu").merge_components(points, ids, threshold)
    import cupy

    merged = twin_backend("cuda").merge_components(
        on_twin("cuda", points), on_twin("cuda", ids.astype(np.int32)), threshold
    )
    assert isinstance(merged, cupy.ndarray) and merged.dtype == cupy.int32
    return merged.get()


def partition(ids: np.ndarray) -> np.ndarray:
    return canonical_labels(np.asarray(ids), 1, 2**31 - 1)[0]


@cuda_only
@pytest.mark.parametrize("threshold", [0.5, 1.5, 5.0])
@pytest.mark.parametrize("d_th", [0.3, 0.75])
@pytest.mark.parametrize("frame", FRAMES)
def test_real_frames_cuda_equals_cpu(load_frame, frame, d_th, threshold):
    xyz = load_frame(frame)
    xyz = xyz[np.isfinite(xyz).all(axis=1)]
    components = union_find_components(xyz, d_th, "range")
    cpu = merged_on("cpu", xyz, components, threshold)
    gpu = merged_on("cuda", xyz, components, threshold)
    np.testing.assert_array_equal(partition(gpu), partition(cpu))
    assert len(np.unique(cpu)) < len(np.unique(components))  # something merged


@pytest.mark.parametrize("subnormal", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_a_link_at_exactly_the_threshold_merges(backend, seed, subnormal):
    xy, ids, distance = two_clusters(seed)
    if subnormal:  # the same test a factor 2**-140 down: many coordinates float32 subnormals
        xy = (xy.astype(np.float64) * 2.0**-140).astype(np.float32)
        xy64 = xy.astype(np.float64)
        (ax, ay), (bx, by) = (centroid(xy[ids == c]) for c in (7, 3))
        dx, dy = ax - bx, ay - by
        distance = math.sqrt(dx * dx + dy * dy)
        assert (np.abs(xy64[xy64 != 0]) < 2.0**-126).any()
    points = np.column_stack((xy, np.zeros(len(xy), np.float32)))
    for threshold, groups in ((distance, 1), (math.nextafter(distance, 0.0), 2)):
        assert len(np.unique(merged_on(backend, points, ids, threshold))) == groups


def edge_case_components() -> tuple[np.ndarray, np.ndarray]:
    """5000 random points, their component ids sparse up to the largest int32."""
    rng = np.random.default_rng(1)
    points = rng.uniform(-20, 20, (5000, 3)).astype(np.float32)
    ids = rng.integers(0, 2**31 - 1, 5000)
    ids[rng.random(5000) < 0.5] = 2**31 - 2
    return points, ids


def test_edges(backend):
    points, ids = edge_case_components()
    for threshold in (0.0, -1.0):
        assert (merged_on(backend, points, ids, threshold) == ids).all()
    assert merged_on(backend, points[:0], ids[:0], 1.5).shape == (0,)
    one = merged_on(backend, points[:1], ids[:1], 1.5)
    assert one.shape == (1,)


@cuda_only
def test_edges_cuda_equals_cpu():
    points, ids = edge_case_components()
    for threshold in (0.2, 2.0, 100.0):
        cpu = merged_on("cpu", points, ids, threshold)
        gpu = merged_on("cuda", points, ids, threshold)
        np.testing.assert_array_equal(partition(gpu), partition(cpu))
