"""The ``voxel_grid`` algorithm's CUDA twin equals its CPU twin label for label (skipped without
a CUDA device): real frames with several parameter sets, random and adversarial clouds."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_euclidean_cluster import EuclideanClusterer
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.voxel_split import split_oversized

from .test_autoware_voxel import canonical, split_clouds

pytestmark = pytest.mark.gpu

FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")
PARAMS = {
    "defaults": {},
    "no_split": {"max_voxels_per_cluster": 2**31 - 1},
    "min_points_per_voxel_3": {"min_points_per_voxel": 3},
    "tight": {
        "max_voxels_per_cluster": 50,
        "large_cluster_voxel_count_threshold": 5,
        "large_cluster_max_points_per_voxel": 2,
        "min_cluster_size": 3,
    },
    "leaf_0.5_edge": {"voxel_leaf_size": 0.5, "method": "edge", "d_th": 1.0},
    "split_7": {"max_voxels_per_cluster": 7},
    "split_1": {"max_voxels_per_cluster": 1, "large_cluster_voxel_count_threshold": 1},
}


def _config(**changes: object) -> ClusterConfig:
    base = {"d_th": 0.7, "algorithm": "voxel_grid", "min_cluster_size": 10}
    return ClusterConfig(**{**base, **changes})


def _both(points: np.ndarray, config: ClusterConfig) -> tuple[np.ndarray, np.ndarray]:
    cpu = EuclideanClusterer(config, "cpu").cluster(points)
    gpu = EuclideanClusterer(config, "cuda").cluster(points)
    assert np.array_equal(cpu.cluster_sizes, gpu.cluster_sizes)
    return cpu.labels, gpu.labels


@pytest.mark.parametrize("params", list(PARAMS))
@pytest.mark.parametrize("name", FRAMES)
def test_frames_cuda_equals_cpu(load_frame, name: str, params: str) -> None:
    cpu, gpu = _both(load_frame(name), _config(**PARAMS[params]))
    assert np.array_equal(cpu, gpu)


def _clouds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    blobs = (rng.uniform(-30, 30, (30, 1, 3)) + rng.normal(0, 1.0, (30, 500, 3))).reshape(-1, 3)
    grid = np.stack(np.meshgrid(*[np.arange(40) * 0.3] * 2, [0.0]), -1).reshape(-1, 3)
    boundaries = np.concatenate([grid, grid + np.float32(1e-7), grid - 1e-7, -grid])
    dense = rng.normal(0, 0.05, (20000, 3))  # few voxels with thousands of points
    line = np.stack([np.arange(20000) * 0.05, np.zeros(20000), rng.uniform(-1, 1, 20000)], 1)
    nan = rng.uniform(-10, 10, (3000, 3))
    nan[::7] = np.nan
    far = np.concatenate([rng.uniform(-5, 5, (1000, 3)), [[30000.0, 30000.0, 0.0]]])
    return {
        "blobs": blobs,
        "boundaries": boundaries,
        "dense": dense,
        "line": line,
        "nan": nan,
        "overflow_guard": far,
        "one_point": np.array([[1.0, 2.0, 3.0]]),
    }


@pytest.mark.parametrize("params", list(PARAMS))
@pytest.mark.parametrize("cloud", list(_clouds()))
def test_clouds_cuda_equals_cpu(cloud: str, params: str) -> None:
    points = _clouds()[cloud].astype(np.float32)
    config = _config(**{**PARAMS[params], "min_cluster_size": 1})
    cpu, gpu = _both(points, config)
    assert np.array_equal(cpu, gpu)


def test_empty_and_all_dropped() -> None:
    config = _config(min_points_per_voxel=5, min_cluster_size=1)
    for points in (np.empty((0, 3), np.float32), np.array([[0, 0, 0], [5, 5, 5]], np.float32)):
        cpu, gpu = _both(points, config)
        assert np.array_equal(cpu, gpu) and (gpu < 0).all()


@pytest.mark.parametrize("bound", [0, 1, 7, 100, 800])
@pytest.mark.parametrize("cloud", list(split_clouds()))
def test_split_cuda_equals_cpu(cloud: str, bound: int) -> None:
    """The split alone: every round of many oversized pieces at once, ties, twin centroids."""
    import cupy

    from gpu_euclidean_cluster.cuda.autoware_voxel import _pieces

    components, cx, cy = split_clouds()[cloud]
    flat = np.stack((cx, cy, np.zeros_like(cx)), axis=1).astype(np.float32)
    ids = np.unique(components, return_inverse=True)[1].reshape(-1).astype(np.int32)
    with cupy.cuda.Device(0):
        piece, piece_voxels = _pieces(0, cupy.asarray(flat), cupy.asarray(ids), bound)
        piece, piece_voxels = piece.get(), piece_voxels.get()
    want = split_oversized(components, cx, cy, bound)
    assert np.array_equal(canonical(piece), canonical(want))
    assert np.array_equal(piece_voxels[piece], np.bincount(piece)[piece])
