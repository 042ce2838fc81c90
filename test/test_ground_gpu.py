"""RANSAC ground removal on the GPU (``cuda/ground.py``) equals the NumPy twin exactly: the same
ground mask, the same plane bit for bit, the same best hypothesis and inlier count, on real
frames and simulated scenes, for several seeds, thresholds and slopes; and the stage through the
CUDA pipeline equals it through the CPU pipeline. Skips without CuPy and a CUDA device; real
frames come from ``$LIDAR_DATA_DIR`` (default ``../shared/data``) and skip when absent.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.ground import GroundFit, GroundSettings
from gpu_euclidean_cluster.cpu.ground import fit_ground as fit_cpu
from gpu_euclidean_cluster.frame import FramePipeline, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz
from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene

from .conftest import requires_cuda

#: GPU tests: marked ``gpu`` and skipped without a CUDA device (conftest).
pytestmark = [pytest.mark.gpu, requires_cuda]

DATA_DIR = Path(
    os.environ.get("LIDAR_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
)
FRAMES = {"kitti_000001.bin": 4, "kitti_000008.bin": 4, "nuscenes_lidar_top.pcd.bin": 5}

SETTINGS = [
    GroundSettings(),
    GroundSettings(distance_threshold=0.1, seed=7),
    GroundSettings(distance_threshold=0.3, iterations=1000, seed=123),
    GroundSettings(max_slope_deg=3.0, iterations=64, seed=2**64 - 1),
    GroundSettings(distance_threshold=0.15, iterations=1, seed=42),
]


def real_frame(name: str) -> np.ndarray:
    path = DATA_DIR / name
    if not path.exists():
        pytest.skip(f"{path} not found")
    return np.fromfile(path, dtype=np.float32).reshape(-1, FRAMES[name])[:, :3].copy()


@cache
def simulated(seed: int) -> np.ndarray:
    scan = LidarSimulator(get_sensor("hdl64e"), seed=seed).scan(street_scene(seed=seed))
    return scan.xyz


def as_bytes(data: object) -> bytes:
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8).tobytes()


def assert_same_fit(gpu: GroundFit, cpu: GroundFit) -> None:
    import cupy

    np.testing.assert_array_equal(cupy.asnumpy(gpu.mask), cpu.mask)
    assert gpu.hypothesis == cpu.hypothesis and gpu.inliers == cpu.inliers
    if cpu.plane is None:
        assert gpu.plane is None
    else:  # bit for bit
        bits = np.array(gpu.plane).view(np.uint64), np.array(cpu.plane).view(np.uint64)
        np.testing.assert_array_equal(*bits)


def both(xyz: np.ndarray, mask: np.ndarray | None, settings: GroundSettings) -> GroundFit:
    import cupy

    from gpu_euclidean_cluster.cuda.ground import fit_ground as fit_gpu

    device_mask = None if mask is None else cupy.asarray(mask)
    gpu = fit_gpu(cupy.asarray(xyz), device_mask, settings)
    cpu = fit_cpu(xyz, mask, settings)
    assert_same_fit(gpu, cpu)
    return cpu


@pytest.mark.parametrize("name", list(FRAMES))
@pytest.mark.parametrize("settings", SETTINGS)
def test_real_frames_equal_cpu(name: str, settings: GroundSettings):
    xyz = real_frame(name)
    fit = both(xyz, np.isfinite(xyz).all(axis=1), settings)
    # one hypothesis may be a steep plane, rejected by the slope limit: then no plane at all
    assert fit.inliers > 0 or (settings.iterations == 1 and fit.plane is None)
    in_range = np.hypot(xyz[:, 0], xyz[:, 1]) <= 30.0
    both(xyz, in_range, settings)
    both(xyz.astype(np.float64), in_range, settings)


@pytest.mark.parametrize("scene", [0, 1])
@pytest.mark.parametrize("settings", SETTINGS)
def test_simulated_scenes_equal_cpu(scene: int, settings: GroundSettings):
    xyz = simulated(scene)
    both(xyz, None, settings)
    both(xyz.astype(np.float32), xyz[:, 0] > 0, settings)


def test_no_plane_and_too_few_candidates_equal_cpu():
    rng = np.random.default_rng(0)
    wall = np.stack([np.full(3000, 6.0), rng.uniform(-10, 10, 3000), rng.uniform(0, 5, 3000)], 1)
    assert both(wall, None, GroundSettings()).plane is None
    few = np.zeros(len(wall), dtype=bool)
    few[:2] = True
    assert both(wall, few, GroundSettings()).plane is None


def test_stage_through_cuda_pipeline_equals_cpu_pipeline():
    xyz = simulated(0).astype(np.float32)
    config = ClusterConfig(d_th=0.5)
    window = FrameWindow(max_range=50.0)
    outputs = [
        FramePipeline(backend, stages=[GroundRemoval()]).process(from_xyz(xyz), config, window)
        for backend in ("cuda", "cpu")
    ]
    gpu, cpu = outputs
    assert isinstance(gpu.ground, np.ndarray)
    np.testing.assert_array_equal(gpu.ground, cpu.ground)
    assert gpu.ground_plane == cpu.ground_plane
    assert as_bytes(gpu.labeled.data) == as_bytes(cpu.labeled.data)
    np.testing.assert_array_equal(gpu.table, cpu.table)
