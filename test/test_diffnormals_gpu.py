"""Difference-of-Normals filtering on the GPU (``cuda/diffnormals.py``) equals the NumPy twin
bit for bit: the same normals and validity at each radius and the same kept points, on real
frames (through Autoware.ai's height window, as the stage sees them there) and simulated scenes;
and the stage through the CUDA pipeline labels as through the CPU pipeline. Skips without CuPy
and a CUDA device; real frames come from ``$LIDAR_DATA_DIR`` and skip when absent.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.diffnormals import DiffNormalsSettings
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.cpu import diffnormals as on_cpu
from gpu_euclidean_cluster.frame import DiffNormalsFilter, FramePipeline, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz, read_fields
from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene

from .conftest import requires_cuda

#: GPU tests: marked ``gpu`` and skipped without a CUDA device (conftest).
pytestmark = [pytest.mark.gpu, requires_cuda]

DATA_DIR = Path(
    os.environ.get("LIDAR_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
)
FRAMES = {"kitti_000001.bin": 4, "kitti_000008.bin": 4, "nuscenes_lidar_top.pcd.bin": 5}
#: Autoware.ai's clip_min_height / clip_max_height: the points its DoN stage sees.
HEIGHTS = (-1.3, 0.5)


def frame(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Points of a real frame or simulated scene and the mask of Autoware.ai's height window."""
    if name.startswith("scene"):
        xyz = LidarSimulator(get_sensor("vlp16"), seed=3).scan(street_scene(seed=3)).xyz
    else:
        path = DATA_DIR / name
        if not path.exists():
            pytest.skip(f"{path} not found")
        xyz = np.fromfile(path, dtype=np.float32).reshape(-1, FRAMES[name])[:, :3]
    xyz = np.ascontiguousarray(xyz, dtype=np.float32)
    mask = (xyz[:, 2] >= HEIGHTS[0]) & (xyz[:, 2] <= HEIGHTS[1])
    return xyz, mask


@cache
def cpu_normals(name: str, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """The CPU twin's normals of a frame's windowed points (computed once per module run)."""
    xyz, mask = frame(name)
    return on_cpu.normals(xyz[mask], radius)


@pytest.mark.parametrize("name", [*FRAMES, "scene"])
@pytest.mark.parametrize(("radius", "tile"), [(0.5, 8), (2.0, 32), (0.5, 1), (2.0, 4)])
def test_normals_equal_the_cpu_twin_bit_for_bit(name, radius, tile):
    import cupy

    from gpu_euclidean_cluster.cuda import diffnormals as on_gpu

    xyz, mask = frame(name)
    cloud = xyz[mask]
    expected, expected_valid = cpu_normals(name, radius)
    bounds = np.stack([cloud.min(axis=0), cloud.max(axis=0)])
    normals, valid = on_gpu._normals(cupy.asarray(cloud), radius, 0, bounds, tile)
    assert np.array_equal(valid.get().astype(bool), expected_valid)
    assert np.array_equal(normals.get().view(np.uint64), expected.view(np.uint64))


@pytest.mark.parametrize("name", [*FRAMES, "scene"])
@pytest.mark.parametrize(
    "settings",
    [
        DiffNormalsSettings(),
        DiffNormalsSettings(small_radius=0.3, large_radius=1.2, threshold=0.2),
    ],
)
def test_kept_points_equal_the_cpu_twin(name, settings):
    import cupy

    from gpu_euclidean_cluster.cuda import diffnormals as on_gpu

    xyz, mask = frame(name)
    expected = on_cpu.difference_of_normals(xyz, mask, settings)
    kept = on_gpu.difference_of_normals(cupy.asarray(xyz), cupy.asarray(mask), settings)
    assert np.array_equal(kept.get(), expected)
    assert 0 < expected.sum() < mask.sum(), "the filter keeps some points and drops others"


@pytest.mark.parametrize("name", ["kitti_000008.bin", "scene"])
def test_stage_through_the_cuda_pipeline_equals_the_cpu_pipeline(name):
    xyz, _ = frame(name)
    window = FrameWindow(min_z=HEIGHTS[0], max_z=HEIGHTS[1], use_height=False)
    config = ClusterConfig(d_th=0.75, min_cluster_size=20)
    labels = []
    for backend in ("cuda", "cpu"):
        stages = [GroundRemoval(), DiffNormalsFilter()]
        output = FramePipeline(backend, stages=stages).process(from_xyz(xyz), config, window)
        labels.append(read_fields(output.labeled, ["cluster_id"])["cluster_id"])
    assert np.array_equal(labels[0], labels[1])
    assert (labels[0] >= 0).any()
