"""Difference-of-Normals filtering (``cpu/stages/diffnormals.py`` and
``cuda/stages/diffnormals.py``, rules of ``core/diffnormals.py``): the neighbour counts equal a
brute-force application of the float32 rule, the normals equal LAPACK's smallest eigenvector, the
result does not depend on the order of the points or the batch size, flat surfaces are dropped and
thin structures kept (both twins), bad settings are refused with the reason, and the stage runs in
the frame pipeline. The CUDA twin equals the NumPy twin bit for bit: the same normals and validity
at each radius and the same kept points, on real frames (through Autoware.ai's height window, as the
stage sees them there) and simulated scenes, and the stage through the CUDA pipeline labels as
through the CPU pipeline. Real frames come from ``$LIDAR_DATA_DIR`` and skip when absent.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ClusterConfig, ConfigError
from gpu_euclidean_cluster.core.diffnormals import DiffNormalsSettings, fixed_point_scale
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.neighbour_rule import squared_distance, threshold_sq
from gpu_euclidean_cluster.cpu.stages import diffnormals
from gpu_euclidean_cluster.frame import DiffNormalsFilter, FramePipeline, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz, read_fields
from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene

from ..conftest import LIDAR_DATA_DIR, cuda_only, on_twin, to_host

FRAMES = {"kitti_000001.bin": 4, "kitti_000008.bin": 4, "nuscenes_lidar_top.pcd.bin": 5}
#: Autoware.ai's clip_min_height / clip_max_height: the points its DoN stage sees.
HEIGHTS = (-1.3, 0.5)


def twin_module(backend: str) -> ModuleType:
    """The ``backend`` twin's diffnormals module."""
    if backend == "cpu":
        return diffnormals
    from gpu_euclidean_cluster.cuda.stages import diffnormals as on_gpu

    return on_gpu


def kept_on(
    backend: str, points: np.ndarray, mask: np.ndarray | None, settings: DiffNormalsSettings
) -> np.ndarray:
    """The ``backend`` twin's ``difference_of_normals`` of host arrays, back on the host."""
    device_mask = None if mask is None else on_twin(backend, mask)
    module = twin_module(backend)
    return to_host(module.difference_of_normals(on_twin(backend, points), device_mask, settings))


def pole_and_floor(seed: int = 1) -> tuple[np.ndarray, int]:
    """A 20 m x 20 m floor with 1 cm noise, then a pole of radius 5 cm and 2 m height."""
    rng = np.random.default_rng(seed)
    floor = np.column_stack([rng.uniform(-10, 10, (3000, 2)), rng.normal(0, 0.01, 3000)])
    pole = np.column_stack([rng.normal(3, 0.05, (300, 2)), rng.uniform(0, 2, 300)])
    return np.concatenate([floor, pole]).astype(np.float32), 3000


def brute_force_counts(points: np.ndarray, radius: float) -> np.ndarray:
    near = squared_distance(points[:, None, :], points[None, :, :]) < threshold_sq(radius)
    return near.sum(axis=1)


@pytest.mark.parametrize("radius", [0.3, 0.5, 2.0])
def test_neighbour_counts_follow_the_float32_rule(radius):
    points, _ = pole_and_floor()
    sums = diffnormals.neighbour_sums(points, radius)
    assert np.array_equal(sums[:, 0], brute_force_counts(points, radius))


def test_normals_equal_the_smallest_eigenvector():
    points, _ = pole_and_floor()
    normals, valid = diffnormals.normals(points, 0.5)
    near = squared_distance(points[:, None, :], points[None, :, :]) < threshold_sq(0.5)
    checked = 0
    for i in np.random.default_rng(0).choice(len(points), 300, replace=False):
        neighbours = points[near[i]].astype(np.float64) - points[i].astype(np.float64)
        assert valid[i] == (len(neighbours) >= 3)
        if len(neighbours) < 3:
            continue
        values, vectors = np.linalg.eigh(np.cov(neighbours.T, bias=True))
        if values[1] - values[0] < 1e-3 * values[2]:
            continue  # an ill-posed normal: rounding may pick any vector of the plane
        expected = vectors[:, 0] if vectors[:, 0].sum() >= 0 else -vectors[:, 0]
        # the offsets are fixed-point numbers of 2**-21 m at this radius (rule 3)
        assert normals[i] == pytest.approx(expected, abs=1e-4), i
        checked += 1
    assert checked > 200


def test_fixed_point_scale_keeps_offsets_below_2_to_the_20():
    for radius in (0.001, 0.3, 0.5, 1.0, 2.0, 3.7, 10.0):
        scale = fixed_point_scale(radius)
        assert radius * scale <= 2**20 < 2 * radius * scale


def test_flat_floor_dropped_pole_kept(backend):
    points, floor = pole_and_floor()
    kept = kept_on(backend, points, None, DiffNormalsSettings())
    assert kept[:floor].mean() < 0.05, "the flat floor is dropped"
    assert kept[floor:].mean() > 0.5, "the pole is kept"


def test_result_independent_of_point_order_and_batch_size(monkeypatch):
    points, _ = pole_and_floor(seed=3)
    settings = DiffNormalsSettings(small_radius=0.3, large_radius=1.5, threshold=0.2)
    mask = np.random.default_rng(4).random(len(points)) < 0.9
    kept = diffnormals.difference_of_normals(points, mask, settings)
    assert not kept[~mask].any(), "only candidates can be kept"
    order = np.random.default_rng(5).permutation(len(points))
    monkeypatch.setattr(diffnormals, "PAIRS_PER_BATCH", 97)
    shuffled = diffnormals.difference_of_normals(points[order], mask[order], settings)
    assert np.array_equal(shuffled, kept[order])


def test_sparse_points_have_no_normal_and_are_dropped():
    points = np.array([[0, 0, 0], [0.1, 0, 0], [5, 5, 0]], dtype=np.float32)
    normals, valid = diffnormals.normals(points, 0.5)
    assert not valid.any() and not normals.any()
    assert not diffnormals.difference_of_normals(points, None, DiffNormalsSettings()).any()


def test_too_many_candidates_refused_with_the_count(backend, monkeypatch):
    monkeypatch.setattr(twin_module(backend), "MAX_CANDIDATES", 10)
    with pytest.raises(ValueError, match="at most 10 points, got 11"):
        kept_on(backend, np.zeros((11, 3), np.float32), None, DiffNormalsSettings())


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"small_radius": 0.0}, "small_radius must be in [0.001, 10] m"),
        ({"large_radius": float("inf")}, "large_radius must be in [0.001, 10] m"),
        ({"small_radius": 2.0, "large_radius": 2.0}, "must be larger than small_radius"),
        ({"threshold": 1.0}, "threshold must be in [0, 1)"),
        ({"threshold": float("nan")}, "threshold must be in [0, 1)"),
    ],
)
def test_bad_settings_refused_with_reason(changes, reason):
    with pytest.raises(ConfigError) as raised:
        DiffNormalsSettings(**changes)
    assert reason in str(raised.value)


def test_stage_in_the_frame_pipeline_clears_flat_points(backend):
    points, floor = pole_and_floor()
    pipeline = FramePipeline(backend, stages=[DiffNormalsFilter()])
    output = pipeline.process(from_xyz(points), ClusterConfig(d_th=0.3), FrameWindow())
    labels = read_fields(output.labeled, ["cluster_id"])["cluster_id"]
    kept = diffnormals.difference_of_normals(points, None, DiffNormalsSettings())
    assert (labels[~kept] == -1).all()
    assert (labels[floor:][kept[floor:]] >= 0).all(), "the pole's kept points are clustered"


# ---- CUDA only: the CUDA twin against the NumPy twin ------------------------------------------


def frame(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Points of a real frame or simulated scene and the mask of Autoware.ai's height window."""
    if name.startswith("scene"):
        xyz = LidarSimulator(get_sensor("vlp16"), seed=3).scan(street_scene(seed=3)).xyz
    else:
        path = LIDAR_DATA_DIR / name
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
    return diffnormals.normals(xyz[mask], radius)


@cuda_only
@pytest.mark.parametrize("name", [*FRAMES, "scene"])
@pytest.mark.parametrize(("radius", "tile"), [(0.5, 8), (2.0, 32), (0.5, 1), (2.0, 4)])
def test_cuda_normals_equal_the_cpu_twin_bit_for_bit(name, radius, tile):
    import cupy

    xyz, mask = frame(name)
    cloud = xyz[mask]
    expected, expected_valid = cpu_normals(name, radius)
    bounds = np.stack([cloud.min(axis=0), cloud.max(axis=0)])
    normals, valid = twin_module("cuda")._normals(cupy.asarray(cloud), radius, 0, bounds, tile)
    assert np.array_equal(valid.get().astype(bool), expected_valid)
    assert np.array_equal(normals.get().view(np.uint64), expected.view(np.uint64))


@cuda_only
@pytest.mark.parametrize("name", [*FRAMES, "scene"])
@pytest.mark.parametrize(
    "settings",
    [
        DiffNormalsSettings(),
        DiffNormalsSettings(small_radius=0.3, large_radius=1.2, threshold=0.2),
    ],
)
def test_cuda_kept_points_equal_the_cpu_twin(name, settings):
    xyz, mask = frame(name)
    expected = kept_on("cpu", xyz, mask, settings)
    assert np.array_equal(kept_on("cuda", xyz, mask, settings), expected)
    assert 0 < expected.sum() < mask.sum(), "the filter keeps some points and drops others"


@cuda_only
@pytest.mark.parametrize("name", ["kitti_000008.bin", "scene"])
def test_stage_through_the_cuda_pipeline_equals_the_cpu_pipeline(name):
    xyz, _ = frame(name)
    window = FrameWindow(min_z=HEIGHTS[0], max_z=HEIGHTS[1], use_height=False)
    config = ClusterConfig(d_th=0.75, min_cluster_size=20)
    labels = []
    for twin in ("cuda", "cpu"):
        stages = [GroundRemoval(), DiffNormalsFilter()]
        output = FramePipeline(twin, stages=stages).process(from_xyz(xyz), config, window)
        labels.append(read_fields(output.labeled, ["cluster_id"])["cluster_id"])
    assert np.array_equal(labels[0], labels[1])
    assert (labels[0] >= 0).any()
