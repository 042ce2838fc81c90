"""Range bands and centroid merging on CUDA: labels identical to the CPU twin on real frames.

With Autoware.ai's ``lidar_euclidean_cluster_detect`` defaults (bands at 15, 30, 45 and 60 m,
tolerances 0.5 to 2.6 m, merging at 1.5 m) and with each part alone. Skips without CuPy and a
CUDA device; real frames come from ``$LIDAR_DATA_DIR`` (default ``../shared/data`` beside the
repository) and skip when absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.pointcloud_io import load_points

DATA_DIR = Path(
    os.environ.get("LIDAR_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
)
FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")

RANGES = (15.0, 30.0, 45.0, 60.0)
DISTANCES = (0.5, 1.1, 1.6, 2.1, 2.6)
CONFIGS: dict[str, dict[str, object]] = {
    "autoware": {
        "clustering_ranges": RANGES,
        "clustering_distances": DISTANCES,
        "cluster_merge_threshold": 1.5,
    },
    "autoware_sizes": {
        "clustering_ranges": RANGES,
        "clustering_distances": DISTANCES,
        "cluster_merge_threshold": 1.5,
        "min_cluster_size": 20,
        "max_cluster_size": 100000,
    },
    "bands": {"clustering_ranges": RANGES, "clustering_distances": DISTANCES},
    "merge": {"cluster_merge_threshold": 1.5},
}

#: GPU tests: marked ``gpu`` and skipped without a CUDA device (conftest).
gpu = pytest.mark.gpu


def load_frame(name: str) -> np.ndarray:
    path = DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"LiDAR frame {path} not found (set LIDAR_DATA_DIR)")
    return load_points(path).xyz


@gpu
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("frame", FRAMES)
def test_cuda_equals_cpu_on_real_frames(frame, config):
    points = load_frame(frame)
    cfg = ClusterConfig(**CONFIGS[config])
    cpu = EuclideanClusterer(cfg, backend="cpu").cluster(points)
    cuda = EuclideanClusterer(cfg, backend="cuda").cluster(points)
    assert isinstance(cuda.labels, np.ndarray)
    np.testing.assert_array_equal(cuda.labels, cpu.labels)
    np.testing.assert_array_equal(cuda.cluster_sizes, cpu.cluster_sizes)
    assert cuda.num_components == cpu.num_components
    assert cpu.num_clusters > 0


@gpu
def test_cupy_input_gives_cupy_labels_equal_to_the_cpu():
    import cupy

    points = load_frame("kitti_000001.bin")
    cfg = ClusterConfig(**CONFIGS["autoware"])
    cpu = EuclideanClusterer(cfg, backend="cpu").cluster(points)
    cuda = EuclideanClusterer(cfg, backend="cuda").cluster(cupy.asarray(points))
    assert isinstance(cuda.labels, cupy.ndarray)
    np.testing.assert_array_equal(cuda.labels.get(), cpu.labels)
