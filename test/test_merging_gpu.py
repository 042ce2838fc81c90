"""Centroid merging on the GPU (``cuda/merging.py``) gives the CPU twin's partition
(``core/merging.py``): on the components of the real frames at several tolerances and merge
distances, at a link of exactly the threshold (the centroids' sums bit for bit, subnormal
coordinates included), and at the edges (no threshold, no points, large ids). The clustering
through both backends with merging is compared in ``test_range_bands_gpu.py``. Skips without
CuPy and a CUDA device; real frames come from ``$LIDAR_DATA_DIR`` and skip when absent.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.union_find import union_find_components

from .conftest import requires_cuda
from .test_merging import centroid, two_clusters

#: GPU tests: marked ``gpu`` and skipped without a CUDA device (conftest).
pytestmark = [pytest.mark.gpu, requires_cuda]

FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")


@pytest.fixture(scope="module")
def cuda_backend():
    from gpu_euclidean_cluster.cuda.backend import CudaBackend

    return CudaBackend(0)


def merged_on_gpu(cuda_backend, points: np.ndarray, ids: np.ndarray, threshold: float):
    import cupy

    merged = cuda_backend.merge_components(
        cupy.asarray(points), cupy.asarray(ids.astype(np.int32)), threshold
    )
    assert isinstance(merged, cupy.ndarray) and merged.dtype == cupy.int32
    return merged.get()


def partition(ids: np.ndarray) -> np.ndarray:
    return canonical_labels(np.asarray(ids), 1, 2**31 - 1)[0]


@pytest.mark.parametrize("threshold", [0.5, 1.5, 5.0])
@pytest.mark.parametrize("d_th", [0.3, 0.75])
@pytest.mark.parametrize("frame", FRAMES)
def test_real_frames_equal_cpu(cuda_backend, load_frame, frame, d_th, threshold):
    xyz = load_frame(frame)
    xyz = xyz[np.isfinite(xyz).all(axis=1)]
    components = union_find_components(xyz, d_th, "range")
    cpu = CpuBackend().merge_components(xyz, components, threshold)
    gpu = merged_on_gpu(cuda_backend, xyz, components, threshold)
    np.testing.assert_array_equal(partition(gpu), partition(cpu))
    assert len(np.unique(cpu)) < len(np.unique(components))  # something merged


@pytest.mark.parametrize("subnormal", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_a_link_at_exactly_the_threshold_equals_cpu(cuda_backend, seed, subnormal):
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
        cpu = CpuBackend().merge_components(points, ids, threshold)
        gpu = merged_on_gpu(cuda_backend, points, ids, threshold)
        assert len(np.unique(cpu)) == len(np.unique(gpu)) == groups


def test_edges_equal_cpu(cuda_backend):
    rng = np.random.default_rng(1)
    points = rng.uniform(-20, 20, (5000, 3)).astype(np.float32)
    ids = rng.integers(0, 2**31 - 1, 5000)  # sparse, up to the largest int32
    ids[rng.random(5000) < 0.5] = 2**31 - 2
    for threshold in (0.0, -1.0):
        assert (merged_on_gpu(cuda_backend, points, ids, threshold) == ids).all()
    for threshold in (0.2, 2.0, 100.0):
        cpu = CpuBackend().merge_components(points, ids, threshold)
        gpu = merged_on_gpu(cuda_backend, points, ids, threshold)
        np.testing.assert_array_equal(partition(gpu), partition(cpu))
    assert merged_on_gpu(cuda_backend, points[:0], ids[:0], 1.5).shape == (0,)
    one = merged_on_gpu(cuda_backend, points[:1], ids[:1], 1.5)
    assert one.shape == (1,)
