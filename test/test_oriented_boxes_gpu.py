"""Oriented boxes on the GPU (``cuda/oriented_boxes.py``) equal the CPU twin
(``core/oriented_boxes.py``) bit for bit: on the clusters of the real frames at several
tolerances, from float32 and float64 coordinates, on constructed clusters (degenerate ones, large
ones, many edges of equal area, subnormal coordinates), through the frame pipeline with
Autoware.ai's stages, and in the errors they raise. Skips without CuPy and a CUDA device; real
frames come from ``$LIDAR_DATA_DIR`` (default ``../shared/data``) and skip when absent.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.ground import GroundSettings
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.union_find import union_find_components
from gpu_euclidean_cluster.frame import FramePipeline, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_structured, from_xyz

from .conftest import requires_cuda

#: GPU tests: marked ``gpu`` and skipped without a CUDA device (conftest).
pytestmark = [pytest.mark.gpu, requires_cuda]

FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")


@pytest.fixture(scope="module")
def cuda_backend():
    from gpu_euclidean_cluster.cuda.backend import CudaBackend

    return CudaBackend(0)


def both(cuda_backend, xyz: np.ndarray, labels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The CPU twin's boxes, after checking the GPU's (from device arrays) are the same bytes."""
    import cupy

    cpu = CpuBackend().oriented_boxes(xyz, labels, sizes)
    gpu = cuda_backend.oriented_boxes(cupy.asarray(xyz), cupy.asarray(labels), sizes)
    assert gpu.dtype == cpu.dtype
    assert gpu.tobytes() == cpu.tobytes()
    return cpu


def clustered(xyz: np.ndarray, d_th: float) -> tuple[np.ndarray, np.ndarray]:
    """Canonical labels and sizes of ``xyz`` clustered at ``d_th`` (CPU twin, clusters of at
    least two points)."""
    components = union_find_components(xyz, d_th, "range")
    labels, sizes, _ = canonical_labels(components, 2, 2**31 - 1)
    return labels, sizes


@pytest.mark.parametrize("d_th", [0.3, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("frame", FRAMES)
def test_real_frames_equal_cpu(cuda_backend, load_frame, frame, d_th):
    xyz = load_frame(frame)
    labels, sizes = clustered(xyz, d_th)
    boxes = both(cuda_backend, xyz, labels, sizes)
    assert len(boxes) == len(sizes) > 5
    assert (boxes["length"] > 0).mean() > 0.9  # real hulls, not only degenerate clusters
    both(cuda_backend, xyz.astype(np.float64), labels, sizes)


def test_constructed_clusters_equal_cpu(cuda_backend):
    rng = np.random.default_rng(5)
    parts = [
        np.array([[3.0, 4.0, 1.0]]),  # one point
        np.array([[1.0, 2.0, 0.0], [1.0, 2.0, 3.0], [1.0, 2.0, -1.0]]),  # vertical line
        np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [2.0, 2.0, 0.0], [3.0, 3.0, -0.0]]),  # line
        np.array([[5.0, 5.0, 0.0], [5.0, 7.0, 0.0]]),  # upright segment
        np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0.5, 0.5, 0]], float),  # square
        np.array([[0, -1, 0], [1, 0, 0], [0, 1, 0], [-1, 0, 0]], float),  # diamond
        rng.normal(0, 3, (20000, 3)),  # one large cluster: many quickhull rounds
        np.column_stack(  # a circle: a hull of 2000 vertices
            (
                np.cos(np.linspace(0, 2 * math.pi, 2000, endpoint=False)),
                np.sin(np.linspace(0, 2 * math.pi, 2000, endpoint=False)),
                np.zeros(2000),
            )
        ),
        np.array([[1e-40, 0, 0], [-1e-40, 1e-41, 0], [0, 3e-41, 1e-42]]),  # subnormal float32
        np.array([[-0.0, -0.0, -0.0], [0.0, 1.0, 0.0], [-0.0, 2.0, 0.0]]),  # zeros' signs
    ]
    parts += [rng.uniform(-50, 50, 3) + rng.normal(0, rng.uniform(0.05, 4), (s, 3)) for s in
              rng.integers(2, 400, 300)]  # fmt: skip
    xyz = np.concatenate(parts).astype(np.float32)
    labels = np.repeat(np.arange(len(parts)), [len(p) for p in parts]).astype(np.int32)
    order = rng.permutation(len(labels))
    xyz, labels = xyz[order], labels[order]
    noise = rng.random(len(labels)) < 0.05  # unlabelled points, some not finite
    labels[noise & (np.bincount(labels)[labels] > 3)] = -1
    xyz[(labels == -1) & (rng.random(len(labels)) < 0.5)] = np.nan
    labels, sizes, _ = canonical_labels(labels, 1, 2**31 - 1)
    boxes = both(cuda_backend, xyz, labels, sizes)
    assert (boxes["length"] >= boxes["width"]).all()
    both(cuda_backend, xyz.astype(np.float64), labels, sizes)


def test_ties_beyond_the_first_copy_equal_cpu(cuda_backend):
    """Axis-aligned squares and regular octagons: every hull edge ties for the least area (about
    three further edges per cluster, past what the first copy back holds)."""
    squares = np.array([[0, 0], [2, 0], [2, 2], [0, 2], [1, 1]], np.float64)
    angles = np.arange(8) * (math.pi / 4)
    octagon = np.column_stack((np.cos(angles), np.sin(angles)))
    parts = []
    for k in range(3000):
        shape = squares if k % 2 else octagon
        parts.append(np.add(shape, (k % 100 * 10.0, k // 100 * 10.0)))
    xy = np.concatenate(parts)
    xyz = np.column_stack((xy, np.zeros(len(xy)))).astype(np.float32)
    labels = np.repeat(np.arange(len(parts)), [len(p) for p in parts]).astype(np.int32)
    labels, sizes, _ = canonical_labels(labels, 1, 2**31 - 1)
    boxes = both(cuda_backend, xyz, labels, sizes)
    assert (boxes["yaw"][boxes["length"] == 2.0] == 0.0).all()


def test_errors_equal_cpu(cuda_backend):
    import cupy

    xyz = np.zeros((4, 3), np.float32)
    cases = [
        (np.array([0, 2, 2, -1]), np.array([1, 1, 2]), "non-empty"),  # cluster 1 empty
        (np.array([0, 1, 1, 3]), np.array([1, 2, 1]), "non-empty"),  # label beyond K
        (np.array([0, 0, 1, 1]), np.array([1, 3]), "non-empty"),  # sizes not the counts
        (np.array([0, 0, -1, -1]), np.array([], np.int64), "non-empty"),  # labels, K = 0
    ]
    for labels, sizes, message in cases:
        for backend, wrap in ((CpuBackend(), np.asarray), (cuda_backend, cupy.asarray)):
            with pytest.raises(ValueError, match=message):
                backend.oriented_boxes(wrap(xyz), wrap(labels.astype(np.int32)), sizes)
    bad = xyz.copy()
    bad[1, 2] = np.inf
    for backend, wrap in ((CpuBackend(), np.asarray), (cuda_backend, cupy.asarray)):
        with pytest.raises(ValueError, match="finite clustered coordinates"):
            backend.oriented_boxes(wrap(bad), wrap(np.array([0, 0, 1, 1], np.int32)), [2, 2])
        assert len(backend.oriented_boxes(wrap(xyz), wrap(np.full(4, -1, np.int32)), [])) == 0


AUTOWARE = ClusterConfig(
    d_th=0.75, min_cluster_size=20, max_cluster_size=100000, cluster_merge_threshold=1.5
)
GROUND = GroundSettings(distance_threshold=0.2, max_slope_deg=5.729577951308232, iterations=100)


@pytest.mark.parametrize("use_height", [False, True])
@pytest.mark.parametrize("frame", FRAMES)
def test_pipeline_boxes_equal_cpu(load_frame, frame, use_height):
    """Autoware.ai's defaults (height window, RANSAC ground, merging, boxes) through both
    frame pipelines: the same labelled cloud, clusters (box columns included) and boxes."""
    cloud = from_xyz(load_frame(frame))
    window = FrameWindow(min_z=-1.3, max_z=0.5, use_height=use_height)
    outputs = [
        FramePipeline(backend, stages=[GroundRemoval(GROUND)]).process(
            cloud, AUTOWARE, window, oriented_boxes=True
        )
        for backend in ("cpu", "cuda")
    ]
    cpu, cuda = outputs
    assert cuda.result.backend == "cuda" and cuda.fallback_reason is None
    assert cuda.boxes is not None and cpu.boxes is not None and len(cpu.boxes) > 5
    assert cuda.boxes.tobytes() == cpu.boxes.tobytes()
    for name in ("labeled", "clusters"):
        assert bytes(memoryview(getattr(cuda, name).data)) == bytes(
            memoryview(getattr(cpu, name).data)
        )


def test_pipeline_boxes_of_a_float64_cloud_equal_cpu(load_frame):
    """A cloud with float64 coordinates: the GPU fits the input's values, not the float32
    points it clusters."""
    xyz = load_frame("kitti_000008.bin").astype(np.float64)
    xyz += np.random.default_rng(3).uniform(-1e-9, 1e-9, xyz.shape)  # beyond float32
    records = np.zeros(len(xyz), dtype=[("x", "<f8"), ("y", "<f8"), ("z", "<f8")])
    records["x"], records["y"], records["z"] = xyz.T
    cloud = from_structured(records)
    config, window = ClusterConfig(d_th=0.5, min_cluster_size=5), FrameWindow(use_height=False)
    cpu, cuda = (
        FramePipeline(backend).process(cloud, config, window, oriented_boxes=True)
        for backend in ("cpu", "cuda")
    )
    assert cuda.boxes is not None and cpu.boxes is not None and len(cpu.boxes) > 5
    assert cuda.boxes.tobytes() == cpu.boxes.tobytes()
