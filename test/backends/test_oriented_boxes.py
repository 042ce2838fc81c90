"""Oriented bounding boxes (``core/oriented_boxes.py``): the minimum-area rectangle of each
cluster's x-y points, against a brute force over every pair of points' direction; known rotated
boxes; degenerate clusters; the canonical yaw; determinism; the frame layer's columns and the
errors on both twins (``backend`` fixture); timing. The CUDA twin
(``cuda/stages/oriented_boxes.py``) equals the CPU twin bit for bit: on the clusters of the real
frames at several tolerances, from float32 and float64 coordinates, on constructed clusters
(degenerate ones, large ones, many edges of equal area, subnormal coordinates) and through the frame
pipeline with Autoware.ai's stages (skipped without a CUDA device). Real frames come from
``$LIDAR_DATA_DIR`` (default ``../shared/data``) and skip when absent.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.ground import GroundSettings
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.core.oriented_boxes import (
    BOX_DTYPE,
    EdgeRectangles,
    _edge_rectangles,
    _hulls,
    _lexicographic_extremes,
    box_rows,
    oriented_boxes,
    yaw_quaternion,
)
from gpu_euclidean_cluster.cpu.labelling.union_find import union_find_components
from gpu_euclidean_cluster.frame import FramePipeline, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_structured, from_xyz, read_fields

from ..conftest import cuda_only, on_twin, twin_backend

FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")


def brute_force_area(x: np.ndarray, y: np.ndarray) -> float:
    """The least area of a rectangle with a side along the direction of any two points (the
    hull edges are among those pairs), O(n**3)."""
    points = np.column_stack((x, y)).astype(np.float64)
    best = math.inf
    for i in range(len(points)):
        for j in range(len(points)):
            d = points[j] - points[i]
            norm = math.hypot(*d)
            if norm == 0.0:
                continue
            u = d / norm
            s, t = points @ u, points @ np.array([-u[1], u[0]])
            best = min(best, (s.max() - s.min()) * (t.max() - t.min()))
    return best


def box_corners(box: np.void) -> np.ndarray:
    c, s = math.cos(box["yaw"]), math.sin(box["yaw"])
    u, n = np.array([c, s]), np.array([-s, c])
    centre = np.array([box["center_x"], box["center_y"]])
    return np.array(
        [centre + a * box["length"] / 2 * u + b * box["width"] / 2 * n
         for a, b in ((-1, -1), (1, -1), (1, 1), (-1, 1))]
    )  # fmt: skip


def contains(box: np.void, x: np.ndarray, y: np.ndarray, tol: float = 1e-6) -> bool:
    c, s = math.cos(box["yaw"]), math.sin(box["yaw"])
    dx, dy = x - box["center_x"], y - box["center_y"]
    along, across = dx * c + dy * s, -dx * s + dy * c
    return bool(
        (np.abs(along) <= box["length"] / 2 + tol).all()
        and (np.abs(across) <= box["width"] / 2 + tol).all()
    )


def test_random_clusters_match_the_brute_force():
    rng = np.random.default_rng(0)
    sizes = rng.integers(2, 25, 120)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    scale = np.repeat(rng.uniform(0.1, 5.0, (len(sizes), 2)), sizes, axis=0)
    xy = (rng.normal(0.0, 1.0, (len(labels), 2)) * scale + np.repeat(
        rng.uniform(-50, 50, (len(sizes), 2)), sizes, axis=0)).astype(np.float32)  # fmt: skip
    order = rng.permutation(len(labels))
    x, y, labels = xy[order, 0], xy[order, 1], labels[order]
    z = rng.uniform(-2, 2, len(labels)).astype(np.float32)
    boxes = oriented_boxes(x, y, z, labels, len(sizes))
    assert boxes.dtype == BOX_DTYPE and boxes["cluster_id"].tolist() == list(range(len(sizes)))
    for k, box in enumerate(boxes):
        m = labels == k
        reference = brute_force_area(x[m], y[m])
        assert box["length"] * box["width"] == pytest.approx(reference, rel=1e-9, abs=1e-12)
        assert box["length"] >= box["width"] >= 0.0
        assert -math.pi / 2 < box["yaw"] <= math.pi / 2
        assert contains(box, x[m].astype(np.float64), y[m].astype(np.float64))
        assert (box["min_z"], box["max_z"]) == (float(z[m].min()), float(z[m].max()))


@pytest.mark.parametrize("yaw", [0.0, 0.3, -1.2, math.pi / 2, -math.pi / 4, 1.0, 1.5])
def test_known_rotated_boxes_are_recovered(yaw):
    rng = np.random.default_rng(1)
    local = np.concatenate(
        [
            rng.uniform((-2.0, -0.5), (2.0, 0.5), (300, 2)),
            [[-2, -0.5], [2, -0.5], [2, 0.5], [-2, 0.5]],
        ]
    )
    c, s = math.cos(yaw), math.sin(yaw)
    world = local @ np.array([[c, s], [-s, c]]) + (10.0, -5.0)
    box = oriented_boxes(
        world[:, 0], world[:, 1], np.zeros(len(world)), np.zeros(len(world), int), 1
    )[0]
    assert box["yaw"] == pytest.approx(yaw, abs=1e-6)
    assert (box["length"], box["width"]) == (
        pytest.approx(4.0, abs=1e-6),
        pytest.approx(1.0, abs=1e-6),
    )
    assert (box["center_x"], box["center_y"]) == (
        pytest.approx(10.0, abs=1e-6),
        pytest.approx(-5.0, abs=1e-6),
    )


def test_degenerate_clusters():
    x = np.array([3.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 3.0, 5.0, 5.0], np.float32)
    y = np.array([4.0, 2.0, 2.0, 2.0, 0.0, 1.0, 2.0, 3.0, 5.0, 7.0], np.float32)
    z = np.array([1.0, 0.0, 3.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], np.float32)
    labels = np.array([0, 1, 1, 1, 2, 2, 2, 2, 3, 3])
    boxes = oriented_boxes(x, y, z, labels, 4)
    one, vertical, line, upright = boxes
    assert tuple(one)[1:] == (0, 3.0, 4.0, 0.0, 0.0, 0.0, 1.0, 1.0)[1:]
    assert tuple(vertical)[1:] == (1.0, 2.0, 0.0, 0.0, 0.0, -1.0, 3.0)
    assert line["yaw"] == pytest.approx(math.pi / 4) and line["width"] == 0.0
    assert line["length"] == pytest.approx(3 * math.sqrt(2))
    assert (line["center_x"], line["center_y"]) == (pytest.approx(1.5), pytest.approx(1.5))
    assert upright["yaw"] == pytest.approx(math.pi / 2) and upright["width"] == 0.0  # not -pi/2
    assert (upright["length"], upright["center_y"]) == (2.0, 6.0)


def test_canonical_yaw_of_squares_and_half_turns():
    square = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], np.float64)
    box = oriented_boxes(square[:, 0], square[:, 1], np.zeros(4), np.zeros(4, int), 1)[0]
    assert (box["yaw"], box["length"], box["width"]) == (0.0, 1.0, 1.0)  # not pi/2
    diamond = np.array([[0, -1], [1, 0], [0, 1], [-1, 0]], np.float64)
    box = oriented_boxes(diamond[:, 0], diamond[:, 1], np.zeros(4), np.zeros(4, int), 1)[0]
    assert box["yaw"] == pytest.approx(math.pi / 4) and box["yaw"] > 0  # +pi/4, not -pi/4
    # a long box along -x..+x has yaw 0 whatever the side the hull starts from
    bar = np.array([[-3, -1], [3, -1], [3, 1], [-3, 1]], np.float64)
    box = oriented_boxes(bar[:, 0], bar[:, 1], np.zeros(4), np.zeros(4, int), 1)[0]
    assert (box["yaw"], box["length"], box["width"]) == (0.0, 6.0, 2.0)


def test_deterministic_and_independent_of_point_order():
    rng = np.random.default_rng(2)
    labels = rng.integers(-1, 40, 3000)
    xyz = rng.normal(0, 10, (3000, 3)).astype(np.float32)
    labels[:40] = np.arange(40)
    boxes = oriented_boxes(xyz[:, 0], xyz[:, 1], xyz[:, 2], labels, 40)
    again = oriented_boxes(xyz[:, 0], xyz[:, 1], xyz[:, 2], labels, 40)
    assert boxes.tobytes() == again.tobytes()
    order = rng.permutation(3000)
    shuffled = oriented_boxes(xyz[order, 0], xyz[order, 1], xyz[order, 2], labels[order], 40)
    np.testing.assert_allclose(
        shuffled["length"] * shuffled["width"], boxes["length"] * boxes["width"], rtol=1e-12
    )


def test_bad_labels_raise():
    with pytest.raises(ValueError, match="non-empty"):
        oriented_boxes(np.zeros(3), np.zeros(3), np.zeros(3), np.array([0, 2, 2]), 3)
    with pytest.raises(ValueError):
        oriented_boxes(np.zeros(3), np.zeros(2), np.zeros(3), np.array([0, 0, 0]), 1)
    assert len(oriented_boxes(np.zeros(2), np.zeros(2), np.zeros(2), np.array([-1, -1]), 0)) == 0


def test_yaw_quaternion():
    z, w = yaw_quaternion(np.array([0.0, math.pi / 2]))
    assert z.tolist() == [0.0, math.sin(math.pi / 4)] and w[0] == 1.0


def test_frame_layer_boxes_and_cluster_columns(backend, load_frame):
    xyz = load_frame("kitti_000001.bin")
    cloud = from_xyz(xyz)
    pipeline = FramePipeline(backend)
    plain = pipeline.process(cloud, ClusterConfig(d_th=0.5), FrameWindow())
    assert plain.boxes is None
    output = pipeline.process(cloud, ClusterConfig(d_th=0.5), FrameWindow(), oriented_boxes=True)
    labels = read_fields(output.labeled, ["cluster_id"])["cluster_id"]
    k = len(output.table)
    expected = oriented_boxes(xyz[:, 0], xyz[:, 1], xyz[:, 2], labels, k)
    assert output.boxes is not None and output.boxes.tobytes() == expected.tobytes()
    assert output.table.tobytes() == plain.table.tobytes()
    columns = read_fields(output.clusters, ["cluster_id", "x", "min_z", "yaw", "length", "width"])
    assert columns["yaw"].dtype == np.float32
    for name in ("yaw", "length", "width"):
        assert columns[name].tolist() == expected[name].astype(np.float32).tolist()
    assert columns["min_z"].tolist() == output.table["min_z"].tolist()
    assert (expected["min_z"] == output.table["min_z"]).all()
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        oriented_boxes(xyz[:, 0], xyz[:, 1], xyz[:, 2], labels, k)
        timings.append((time.perf_counter() - started) * 1e3)
    print(
        f"\noriented_boxes kitti_000001 d_th 0.5: {k} clusters, {min(timings):.1f} ms (best of 5)"
    )


def test_least_area_edges_alone_choose_the_same_boxes():
    """What the GPU twin hands :func:`box_rows`: each cluster's least-area edges only (squares
    tie on every edge) give the boxes of all the edges."""
    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 60, 200)
    labels = np.repeat(np.arange(len(sizes)), sizes)
    xy = rng.normal(0.0, 2.0, (len(labels), 2)) + np.repeat(
        rng.uniform(-40, 40, (len(sizes), 2)), sizes, axis=0
    )
    xy[labels % 7 == 0] = np.round(xy[labels % 7 == 0])  # on a grid: equal areas
    z = rng.uniform(-1, 1, len(labels))
    px, py, pz = (v.astype(np.float32).astype(np.float64) for v in (xy[:, 0], xy[:, 1], z))
    boxes = oriented_boxes(px, py, pz, labels, len(sizes))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    first, last = _lexicographic_extremes(px, py, labels, starts)
    flat = (px[first] == px[last]) & (py[first] == py[last])
    hull_cluster, hull = _hulls(px, py, labels, starts, first, last, flat)
    edges = _edge_rectangles(px, py, hull_cluster, hull)
    least = np.full(len(sizes), np.inf)
    np.minimum.at(least, edges.cluster, edges.area)
    keep = edges.area == least[edges.cluster]
    assert (~keep).any() and np.bincount(edges.cluster[keep]).max() > 1
    rows = box_rows(
        np.minimum.reduceat(pz, starts),
        np.maximum.reduceat(pz, starts),
        flat,
        px[first],
        py[first],
        EdgeRectangles(*(np.asarray(column)[keep] for column in edges)),
    )
    assert rows.tobytes() == boxes.tobytes()


def test_cpu_backend_checks_what_the_gpu_twin_checks():
    from gpu_euclidean_cluster.cpu.backend import CpuBackend

    backend = CpuBackend()
    xyz = np.zeros((4, 3), np.float64)
    with pytest.raises(ValueError, match="non-empty"):
        backend.oriented_boxes(xyz, np.array([0, 0, 1, 1]), np.array([1, 3]))
    with pytest.raises(ValueError, match="points of shape"):
        backend.oriented_boxes(xyz[:3], np.array([0, 0, 1, 1]), np.array([2, 2]))
    xyz[0, 0] = 1e200
    with pytest.raises(ValueError, match="finite clustered coordinates"):
        backend.oriented_boxes(xyz, np.array([0, 0, 1, 1]), np.array([2, 2]))
    xyz[0, 0] = np.nan  # not clustered: ignored
    boxes = backend.oriented_boxes(xyz, np.array([-1, 0, 1, 1]), np.array([1, 2]))
    assert boxes["length"].tolist() == [0.0, 0.0]


def test_errors_on_both_twins(backend):
    """Each twin (``Backend.oriented_boxes``, from arrays on its device) refuses labels that do
    not number the clusters of ``sizes`` and clustered coordinates that are not finite."""
    boxes_of = twin_backend(backend).oriented_boxes
    xyz = np.zeros((4, 3), np.float32)
    cases = [
        (np.array([0, 2, 2, -1]), np.array([1, 1, 2]), "non-empty"),  # cluster 1 empty
        (np.array([0, 1, 1, 3]), np.array([1, 2, 1]), "non-empty"),  # label beyond K
        (np.array([0, 0, 1, 1]), np.array([1, 3]), "non-empty"),  # sizes not the counts
        (np.array([0, 0, -1, -1]), np.array([], np.int64), "non-empty"),  # labels, K = 0
    ]
    for labels, sizes, message in cases:
        with pytest.raises(ValueError, match=message):
            boxes_of(on_twin(backend, xyz), on_twin(backend, labels.astype(np.int32)), sizes)
    bad = xyz.copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match="finite clustered coordinates"):
        boxes_of(on_twin(backend, bad), on_twin(backend, np.array([0, 0, 1, 1], np.int32)), [2, 2])
    unlabelled = on_twin(backend, np.full(4, -1, np.int32))
    assert len(boxes_of(on_twin(backend, xyz), unlabelled, [])) == 0


# ---- CUDA only: the CUDA twin against the CPU twin, bit for bit ---------------------------------


def both(xyz: np.ndarray, labels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The CPU twin's boxes, after checking the GPU's (from device arrays) are the same bytes."""
    cpu = twin_backend("cpu").oriented_boxes(xyz, labels, sizes)
    gpu = twin_backend("cuda").oriented_boxes(on_twin("cuda", xyz), on_twin("cuda", labels), sizes)
    assert gpu.dtype == cpu.dtype
    assert gpu.tobytes() == cpu.tobytes()
    return cpu


def clustered(xyz: np.ndarray, d_th: float) -> tuple[np.ndarray, np.ndarray]:
    """Canonical labels and sizes of ``xyz`` clustered at ``d_th`` (CPU twin, clusters of at
    least two points)."""
    components = union_find_components(xyz, d_th, "range")
    labels, sizes, _ = canonical_labels(components, 2, 2**31 - 1)
    return labels, sizes


@cuda_only
@pytest.mark.parametrize("d_th", [0.3, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("frame", FRAMES)
def test_real_frames_cuda_equals_cpu(load_frame, frame, d_th):
    xyz = load_frame(frame)
    labels, sizes = clustered(xyz, d_th)
    boxes = both(xyz, labels, sizes)
    assert len(boxes) == len(sizes) > 5
    assert (boxes["length"] > 0).mean() > 0.9  # real hulls, not only degenerate clusters
    both(xyz.astype(np.float64), labels, sizes)


@cuda_only
def test_constructed_clusters_cuda_equals_cpu():
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
    boxes = both(xyz, labels, sizes)
    assert (boxes["length"] >= boxes["width"]).all()
    both(xyz.astype(np.float64), labels, sizes)


@cuda_only
def test_ties_beyond_the_first_copy_cuda_equals_cpu():
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
    boxes = both(xyz, labels, sizes)
    assert (boxes["yaw"][boxes["length"] == 2.0] == 0.0).all()


AUTOWARE = ClusterConfig(
    d_th=0.75, min_cluster_size=20, max_cluster_size=100000, cluster_merge_threshold=1.5
)
GROUND = GroundSettings(distance_threshold=0.2, max_slope_deg=5.729577951308232, iterations=100)


@cuda_only
@pytest.mark.parametrize("use_height", [False, True])
@pytest.mark.parametrize("frame", FRAMES)
def test_pipeline_boxes_cuda_equal_cpu(load_frame, frame, use_height):
    """Autoware.ai's defaults (height window, RANSAC ground, merging, boxes) through both
    frame pipelines: the same labelled cloud, clusters (box columns included) and boxes."""
    cloud = from_xyz(load_frame(frame))
    window = FrameWindow(min_z=-1.3, max_z=0.5, use_height=use_height)
    outputs = [
        FramePipeline(twin, stages=[GroundRemoval(GROUND)]).process(
            cloud, AUTOWARE, window, oriented_boxes=True
        )
        for twin in ("cpu", "cuda")
    ]
    cpu, cuda = outputs
    assert cuda.result.backend == "cuda" and cuda.fallback_reason is None
    assert cuda.boxes is not None and cpu.boxes is not None and len(cpu.boxes) > 5
    assert cuda.boxes.tobytes() == cpu.boxes.tobytes()
    for name in ("labeled", "clusters"):
        assert bytes(memoryview(getattr(cuda, name).data)) == bytes(
            memoryview(getattr(cpu, name).data)
        )


@cuda_only
def test_pipeline_boxes_of_a_float64_cloud_cuda_equal_cpu(load_frame):
    """A cloud with float64 coordinates: the GPU fits the input's values, not the float32
    points it clusters."""
    xyz = load_frame("kitti_000008.bin").astype(np.float64)
    xyz += np.random.default_rng(3).uniform(-1e-9, 1e-9, xyz.shape)  # beyond float32
    records = np.zeros(len(xyz), dtype=[("x", "<f8"), ("y", "<f8"), ("z", "<f8")])
    records["x"], records["y"], records["z"] = xyz.T
    cloud = from_structured(records)
    config, window = ClusterConfig(d_th=0.5, min_cluster_size=5), FrameWindow(use_height=False)
    cpu, cuda = (
        FramePipeline(twin).process(cloud, config, window, oriented_boxes=True)
        for twin in ("cpu", "cuda")
    )
    assert cuda.boxes is not None and cpu.boxes is not None and len(cpu.boxes) > 5
    assert cuda.boxes.tobytes() == cpu.boxes.tobytes()
