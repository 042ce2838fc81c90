"""Downsampling's CUDA twin equals its CPU twin bit for bit (skipped without a CUDA device): the
voxels and centroids (``Backend.downsample``) and the labels, on the real frames and random and
adversarial clouds."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.timing import StageClock

from .test_downsample import FRAMES, LEAVES, load_frame, reference_labels
from .test_range_bands import AUTOWARE

pytestmark = pytest.mark.gpu

CONFIGS = {
    "plain": {"d_th": 0.5},
    "sizes": {"d_th": 0.5, "min_cluster_size": 10, "max_cluster_size": 5000},
    "autoware_ai": {**AUTOWARE, "min_cluster_size": 5},
    "edge_range": {"d_th": 0.3, "method": "edge"},
}
#: Configurations whose CPU twin would search too many pairs on a cloud (its leaves all).
TOO_SLOW_ON_CPU = {("dense", "edge_range")}


def _grids(points: np.ndarray, leaf: float) -> None:
    """The CPU and CUDA backends' voxels and centroids are identical."""
    cpu = EuclideanClusterer(backend="cpu").backend
    gpu = EuclideanClusterer(backend="cuda").backend
    clock = StageClock(lambda: None)
    voxel, centroids = cpu.downsample(points, leaf, clock)
    gpu_voxel, gpu_centroids = gpu.downsample(gpu.to_device(points), leaf, clock)
    np.testing.assert_array_equal(gpu_voxel.get(), voxel)
    assert gpu_centroids.get().tobytes() == centroids.tobytes()


def _both(points: np.ndarray, **config: object) -> np.ndarray:
    settings = ClusterConfig(**config)
    cpu = EuclideanClusterer(settings, "cpu").cluster(points)
    gpu = EuclideanClusterer(settings, "cuda").cluster(points)
    np.testing.assert_array_equal(gpu.labels, cpu.labels)
    np.testing.assert_array_equal(gpu.cluster_sizes, cpu.cluster_sizes)
    return cpu.labels


@pytest.mark.parametrize("leaf", LEAVES)
@pytest.mark.parametrize("name", FRAMES)
def test_frames_cuda_equals_cpu(name: str, leaf: float) -> None:
    points = load_frame(name)
    _grids(points, leaf)
    for config in CONFIGS.values():
        _both(points, downsample_leaf_size=leaf, **config)


def test_frame_cuda_equals_reference() -> None:
    points = load_frame("kitti_000001.bin")
    labels = _both(points, d_th=0.5, downsample_leaf_size=0.1)
    np.testing.assert_array_equal(labels, reference_labels(points, 0.1, 0.5))


def _clouds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(12)
    blobs = (rng.uniform(-30, 30, (30, 1, 3)) + rng.normal(0, 1.0, (30, 500, 3))).reshape(-1, 3)
    grid = np.stack(np.meshgrid(*[np.arange(15) * 0.1] * 3), -1).reshape(-1, 3)
    boundaries = np.concatenate([grid, grid + np.float32(1e-7), grid - 1e-7, -grid])
    dense = rng.normal(0, 0.02, (20000, 3))  # voxels of hundreds of points: batched sums
    nan = rng.uniform(-10, 10, (3000, 3))
    nan[::7] = np.nan
    far = np.concatenate([rng.uniform(-5, 5, (1000, 3)), [[30000.0, 30000.0, 0.0]]])
    tiny = rng.uniform(0, 1, (3000, 3))
    return {
        "blobs": blobs,
        "boundaries": boundaries,
        "dense": dense,
        "nan": nan,
        "overflow_guard": far,
        "one_voxel_per_point": tiny,
        "one_point": np.array([[1.0, 2.0, 3.0]]),
    }


@pytest.mark.parametrize("leaf", [1e-3, 0.1, 0.3, 2.0])
@pytest.mark.parametrize("cloud", list(_clouds()))
def test_clouds_cuda_equals_cpu(cloud: str, leaf: float) -> None:
    points = _clouds()[cloud].astype(np.float32)
    finite = points[np.isfinite(points).all(axis=1)]
    _grids(np.ascontiguousarray(finite), leaf)
    for name, config in CONFIGS.items():
        if (cloud, name) not in TOO_SLOW_ON_CPU:
            _both(points, downsample_leaf_size=leaf, **config)


def test_empty_and_masked() -> None:
    _both(np.empty((0, 3), np.float32), downsample_leaf_size=0.1)
    rng = np.random.default_rng(4)
    points = rng.uniform(-5, 5, (5000, 3)).astype(np.float32)
    mask = rng.uniform(size=5000) < 0.5
    settings = ClusterConfig(d_th=0.4, downsample_leaf_size=0.3)
    cpu = EuclideanClusterer(settings, "cpu").cluster(points, mask)
    gpu = EuclideanClusterer(settings, "cuda").cluster(points, mask)
    np.testing.assert_array_equal(gpu.labels, cpu.labels)
