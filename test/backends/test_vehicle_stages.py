"""The vehicle stages on both twins (``backend`` fixture): a sweep into the base frame and through
its crop boxes (``core/vehicle_frame.py``: ``to_vehicle_frame``, and ``transform_rows_into`` that
joins sensors' point rows into one buffer) and Autoware's ring outlier filter
(``core/ring_outlier.py``: ``filter_rings``).

Each test body runs on the twin the fixture names, picked as the frame layer picks it
(``frame/twins.py``), and checks it against a reference that is neither twin: the rules written
out point by point in Python floats (``test/core/test_vehicle_frame.py``'s ``reference``) and
Autoware's own loop (``test/core/test_ring_outlier.py``'s ``autoware_loop``). The CUDA case also
equals the NumPy twin bit for bit: coordinates compared as uint32 bits (a NaN only as a NaN: IEEE
leaves its sign and payload open, and a NaN point is never kept), masks, orders, counts.

The clouds probe where a GPU would differ: NaN, +-inf, float32's largest values and overflow to
inf, subnormal inputs and outputs (CuPy compiles with -ftz=true, which would flush them), sums
that cancel (a fused multiply-add or another order would show), points exactly on crop faces and
one float32 step either side, in the sensor's and in the base frame, the sample sensor kit's
poses and boxes; rings of 0-2 points, channels outside the rings (up to 65535), NaN and
subnormal ranges, azimuths that are not radians. The point rows are ``POINT_DTYPE``'s: the
structured array on the CPU, its ``(N, 32)`` uint8 rows on the GPU (CuPy has no structured
dtypes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from gpu_euclidean_cluster.core.ring_outlier import MAX_RINGS, RingOutlierSettings
from gpu_euclidean_cluster.core.vehicle_frame import CropBoxSettings, VehicleFrameSettings
from gpu_euclidean_cluster.cpu.stages.ring_outlier import filter_rings as cpu_filter_rings
from gpu_euclidean_cluster.cpu.stages.vehicle_frame import to_vehicle_frame as cpu_vehicle_frame
from gpu_euclidean_cluster.frame.twins import twin
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import load_sensor_kit, sensor_poses
from gpu_euclidean_cluster.pointcloud_io.sensor_kit.poses import rotation_from_rpy
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import POINT_DTYPE

from ..conftest import LIDAR_DATA_DIR, REPO_ROOT, cuda_only, on_twin, to_host
from ..core.test_ring_outlier import autoware_loop
from ..core.test_vehicle_frame import reference

F32 = np.float32
INF = math.inf
IDENTITY = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
ROW = POINT_DTYPE.itemsize
#: Coordinates where float arithmetic has its edges.
SPECIAL = np.array(
    [
        np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -3e-39,
        np.finfo(F32).tiny, np.finfo(F32).max, -np.finfo(F32).max, 3e38, 1e30, -1e20,
    ],
    dtype=F32,
)  # fmt: skip


# --- running a twin ---------------------------------------------------------------------------


def as_points(xyz: np.ndarray, seed: int = 0) -> np.ndarray:
    """``POINT_DTYPE`` points with ``xyz`` and random other fields (copied through by the rows
    variant, so they must survive it byte for byte)."""
    rng = np.random.default_rng(seed)
    points = np.zeros(len(xyz), POINT_DTYPE)
    raw = points.view(np.uint8).reshape(-1, ROW)
    raw[:] = rng.integers(0, 256, raw.shape, dtype=np.uint8)
    for axis, name in enumerate("xyz"):
        points[name] = xyz[:, axis]
    return points


def rows_of(points: np.ndarray) -> np.ndarray:
    """The ``(N, 32)`` uint8 rows of ``POINT_DTYPE`` points."""
    return np.ascontiguousarray(points).view(np.uint8).reshape(-1, ROW)


def vehicle_frame_on(
    backend: str, xyz: np.ndarray, settings: VehicleFrameSettings, rows: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``to_vehicle_frame`` of the ``backend`` twin on (N, 3) float32 ``xyz``, or on the same
    coordinates in point rows (``rows``: structured on the CPU, uint8 rows on the GPU)."""
    points: Any = xyz
    if rows:
        points = as_points(xyz)
        if backend == "cuda":
            points = rows_of(points)
    points = on_twin(backend, points)
    result = twin(points, "stages.vehicle_frame", "to_vehicle_frame")(points, settings)
    return to_host(result.xyz), to_host(result.keep)


def rows_into_on(
    backend: str, sweeps: list[tuple[np.ndarray, VehicleFrameSettings]], spare: int = 0
) -> tuple[np.ndarray, list[int]]:
    """``transform_rows_into`` of the ``backend`` twin joining ``sweeps`` (point rows, settings)
    into one buffer (``spare`` rows more than their points, filled with 0xAB), each start the
    previous start plus its count as the twin returned them (on the GPU: device arrays); the
    buffer and the counts on the host."""
    total = sum(len(rows) for rows, _ in sweeps) + spare
    out_rows = on_twin(backend, np.full((total, ROW), 0xAB, dtype=np.uint8))
    start: Any = 0
    counts = []
    for rows, settings in sweeps:
        device_rows = on_twin(backend, rows)
        function = twin(device_rows, "stages.vehicle_rows", "transform_rows_into")
        count = function(device_rows, settings, out_rows, start)
        assert count.shape == () and count.dtype == np.int64
        counts.append(count)
        start = start + count
    return to_host(out_rows), [int(to_host(count)) for count in counts]


def assert_same_floats(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Equal float32 bits, except that any NaN equals any NaN."""
    actual, expected = np.asarray(actual, F32), np.asarray(expected, F32)
    assert actual.shape == expected.shape, what
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan, err_msg=f"NaN places {what}")
    bits = np.where(nan, 0, actual.view(np.uint32))
    np.testing.assert_array_equal(bits, np.where(nan, 0, expected.view(np.uint32)), err_msg=what)


def check_vehicle_frame(
    backend: str, xyz: np.ndarray, settings: VehicleFrameSettings
) -> tuple[np.ndarray, np.ndarray]:
    """The twin's result on ``xyz`` and on the same points as rows, checked against the rules
    point by point (and, on the GPU, against the NumPy twin, bit for bit)."""
    out, keep = vehicle_frame_on(backend, xyz, settings, rows=False)
    for i, point in enumerate(xyz.tolist()):
        expected, kept = reference(tuple(point), settings)
        assert_same_floats(out[i], np.array(expected, F32), f"point {i} {point}")
        assert bool(keep[i]) == kept, (i, point)
    from_rows = vehicle_frame_on(backend, xyz, settings, rows=True)
    assert_same_floats(from_rows[0], out, "rows")
    np.testing.assert_array_equal(from_rows[1], keep)
    if backend == "cuda":
        cpu = cpu_vehicle_frame(xyz, settings)
        assert_same_floats(out, cpu.xyz, "CUDA vs NumPy")
        np.testing.assert_array_equal(keep, cpu.keep)
    return out, keep


def expected_rows(
    xyz: np.ndarray, points: np.ndarray, settings: VehicleFrameSettings
) -> np.ndarray:
    """The rows the rows variant writes for ``points``, made from the NumPy xyz variant."""
    result = cpu_vehicle_frame(xyz, settings)
    kept = points[result.keep].copy()
    for axis, name in enumerate("xyz"):
        kept[name] = result.xyz[result.keep, axis]
    return rows_of(kept)


# --- clouds and settings ----------------------------------------------------------------------


def edge_cloud(n: int, seed: int) -> np.ndarray:
    """(n, 3) float32 points over many magnitudes, 8 % of the coordinates :data:`SPECIAL`."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-3, 3, (n, 1))
    xyz = (rng.normal(size=(n, 3)) * scale).astype(F32)
    special = rng.random((n, 3)) < 0.08
    xyz[special] = rng.choice(SPECIAL, int(special.sum()))
    return xyz


def random_settings(seed: int) -> VehicleFrameSettings:
    """A random pose and four boxes: a small negative one in the base frame, a large positive one
    (in the sensor frame for even seeds), one open on four sides, and a half-space ``x > 0`` in
    the sensor frame (a subnormal x is inside, a zero is not; negative for even seeds)."""
    rng = np.random.default_rng(1000 + seed)
    small, large = rng.uniform(-30, 10, 3), rng.uniform(-500, -50, 3)
    boxes = (
        CropBoxSettings(tuple(small), tuple(small + rng.uniform(0.5, 50, 3)), True),
        CropBoxSettings(
            tuple(large), tuple(large + rng.uniform(100, 1000, 3)), False, seed % 2 == 0
        ),
        CropBoxSettings((-INF, -5.0, -INF), (INF, 5.0, INF), True),
        CropBoxSettings((0.0, -INF, -INF), (INF, INF, INF), seed % 2 == 0, True),
    )
    translation = (1e38, 0.0, 0.0) if seed == 0 else tuple(rng.uniform(-5, 5, 3))
    return VehicleFrameSettings(
        rotation_from_rpy(*rng.uniform(-math.pi, math.pi, 3)), translation, boxes
    )


def kit_settings() -> list[VehicleFrameSettings]:
    """Each sensor of ``config/sample_sensor_kit.yaml``: its pose in base_link, its boxes."""
    kit = load_sensor_kit(REPO_ROOT / "config" / "sample_sensor_kit.yaml")
    return [
        VehicleFrameSettings(
            pose.rotation,
            pose.translation,
            tuple(
                CropBoxSettings(b.minimum, b.maximum, b.negative, b.in_sensor_frame)
                for b in sensor.crop_boxes
            ),
        )
        for sensor, pose in zip(kit.sensors, sensor_poses(kit).values(), strict=True)
    ]


def ulps(value: float, steps: range) -> list[float]:
    """``value``'s float32 and its neighbours ``steps`` float32 steps away."""
    out, up, down = {0: F32(value)}, F32(value), F32(value)
    for step in range(1, max(abs(steps.start), abs(steps.stop)) + 1):
        up, down = np.nextafter(up, F32(INF)), np.nextafter(down, F32(-INF))
        out[step], out[-step] = up, down
    return [float(out[s]) for s in steps]


def face_points(settings: VehicleFrameSettings, box: CropBoxSettings) -> np.ndarray:
    """Sensor points near ``box``'s faces: for each face, the face's centre in the box's frame
    mapped back into the sensor frame (float64, rounded to float32) and moved by -2..2 float32
    steps on each axis, so that some land on the face exactly after the transform."""
    low, high = box.bounds32()
    centre = (low.astype(np.float64) + high) / 2
    rotation = np.array(settings.rotation)
    translation = np.array(settings.translation)
    points = []
    for axis in range(3):
        for face in (low[axis], high[axis]):
            target = centre.copy()
            target[axis] = face
            sensor = target if box.in_sensor_frame else rotation.T @ (target - translation)
            grid = np.meshgrid(*(ulps(float(c), range(-2, 3)) for c in sensor), indexing="ij")
            points.append(np.stack([g.reshape(-1) for g in grid], axis=1))
    return np.concatenate(points).astype(F32)


# --- vehicle frame tests ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_random_clouds_with_special_values_follow_the_rules(backend: str, seed: int):
    settings = random_settings(seed)
    xyz = edge_cloud(600, seed)
    out, keep = check_vehicle_frame(backend, xyz, settings)
    finite = np.isfinite(xyz).all(axis=1)
    assert not keep[~finite].any() and 0 < keep[finite].sum() < finite.sum()
    if seed == 0:  # the 1e38 translation: float32 overflow, dropped
        assert np.isinf(out[finite, 0]).any()


def test_subnormal_inputs_and_outputs_are_kept_as_subnormals(backend: str):
    tiny = np.array([1e-45, -1e-45, 1e-40, -3e-39, 0.0, -0.0, 2e-38], F32)
    xyz = np.stack([tiny, np.roll(tiny, 1), np.roll(tiny, 2)], axis=1)
    half_space = CropBoxSettings((0.0, -INF, -INF), (INF, INF, INF), False)
    for translation in ((0.0, 0.0, 0.0), (1e-300, -1e-300, 0.0)):
        settings = VehicleFrameSettings(IDENTITY, translation, (half_space,))
        out, keep = check_vehicle_frame(backend, xyz, settings)
        np.testing.assert_array_equal(out, xyz)  # x + 0.0 and x + 1e-300 round back to x
        assert keep.tolist() == (xyz[:, 0] > 0).tolist()
        assert keep[:3].sum() == 2  # 1e-45 and 1e-40 are inside; a flushed zero would not be


def test_cancelling_sums_pin_the_order_and_the_single_roundings(backend: str):
    from ..core.test_vehicle_frame import cancelling_points

    settings = VehicleFrameSettings(rotation_from_rpy(0.3, 0.2, 0.1), (0.0, 0.0, 0.0))
    check_vehicle_frame(backend, cancelling_points(settings.rotation), settings)


@pytest.mark.parametrize("kit_sensor", range(3))
def test_points_on_crop_faces_are_not_inside(backend: str, kit_sensor: int):
    kit = kit_settings()[kit_sensor]
    sensor_box = CropBoxSettings((-2.5, -1.0, -0.75), (3.0, 0.5, 1.25), True, True)
    for settings in (
        kit,
        VehicleFrameSettings(IDENTITY, (0.0, 0.0, 0.0), kit.crop_boxes),
        VehicleFrameSettings(kit.rotation, kit.translation, (sensor_box,)),
    ):
        for box in settings.crop_boxes:
            xyz = face_points(settings, box)
            out, _ = check_vehicle_frame(backend, xyz, settings)
            low, high = box.bounds32()
            frame = xyz if box.in_sensor_frame else out
            on_face = ((frame == low) | (frame == high)).any(axis=1)
            assert on_face.sum() >= 6, (settings, box)  # the test reaches every face


def test_sample_kit_sweeps_joined_into_one_buffer(backend: str):
    sweeps, expected = [], []
    for index, settings in enumerate(kit_settings()):
        xyz = edge_cloud(500, 50 + index) / F32(100)  # metres: mostly near the vehicle
        check_vehicle_frame(backend, xyz, settings)
        points = as_points(xyz, seed=index)
        sweeps.append((rows_of(points), settings))
        expected.append(expected_rows(xyz, points, settings))
    out_rows, counts = rows_into_on(backend, sweeps, spare=7)
    assert counts == [len(rows) for rows in expected] and all(counts)
    joined = np.concatenate(expected)
    np.testing.assert_array_equal(out_rows[: len(joined)], joined)
    assert (out_rows[len(joined) :] == 0xAB).all()  # nothing written past the kept rows


def test_rows_into_edge_cases(backend: str):
    settings = VehicleFrameSettings(IDENTITY, (0.0, 0.0, 0.0))
    empty = np.zeros((0, ROW), np.uint8)
    dropped = rows_of(as_points(np.full((4, 3), np.nan, F32)))
    kept = rows_of(as_points(np.ones((3, 3), F32)))
    out_rows, counts = rows_into_on(backend, [(empty, settings), (dropped, settings)])
    assert counts == [0, 0] and (out_rows == 0xAB).all()
    out_rows, counts = rows_into_on(
        backend, [(kept, settings), (empty, settings), (kept, settings)]
    )
    assert counts == [3, 0, 3]
    np.testing.assert_array_equal(out_rows, np.concatenate([kept, kept]))
    function = twin(on_twin(backend, kept), "stages.vehicle_rows", "transform_rows_into")
    buffer = on_twin(backend, np.zeros((4, ROW), np.uint8))
    for start in (-1, 2):
        with pytest.raises(ValueError, match="no room for 3"):
            function(on_twin(backend, kept), settings, buffer, start)
    with pytest.raises(ValueError, match="must be an integer"):
        function(on_twin(backend, kept), settings, buffer, 0.5)
    with pytest.raises(ValueError, match="uint8 point rows"):
        function(on_twin(backend, kept[:, :16]), settings, buffer, 0)


def test_bad_points_are_refused(backend: str):
    settings = VehicleFrameSettings(IDENTITY, (0.0, 0.0, 0.0))
    for bad in (np.zeros((3, 3), np.float64), np.zeros((3, 4), F32), np.zeros(3, F32)):
        points = on_twin(backend, bad)
        with pytest.raises(ValueError, match=r"\(N, 3\) float32"):
            twin(points, "stages.vehicle_frame", "to_vehicle_frame")(points, settings)


@cuda_only
def test_cuda_rows_into_a_device_start_past_the_buffer_writes_nothing_there():
    import cupy

    from gpu_euclidean_cluster.cuda.stages.vehicle_rows import transform_rows_into

    settings = VehicleFrameSettings(IDENTITY, (0.0, 0.0, 0.0))
    rows = rows_of(as_points(np.arange(15, dtype=F32).reshape(5, 3)))
    out_rows = cupy.full((7, ROW), 0xAB, dtype=cupy.uint8)
    count = transform_rows_into(cupy.asarray(rows), settings, out_rows, cupy.array([4]))
    assert int(count) == 5
    host = cupy.asnumpy(out_rows)
    np.testing.assert_array_equal(host[4:], rows[:3])
    assert (host[:4] == 0xAB).all()


# --- ring outlier tests -----------------------------------------------------------------------

NEWER = RingOutlierSettings(object_length_threshold=0.05, num_points_threshold=None)


def rings_on(backend: str, points: np.ndarray, settings: RingOutlierSettings):
    """``filter_rings`` of the ``backend`` twin on ``POINT_DTYPE`` points (the CUDA twin on their
    uint8 rows), checked against Autoware's loop; its mask, order and count on the host."""
    data = on_twin(backend, points if backend == "cpu" else rows_of(points))
    result = twin(data, "stages.ring_outlier", "filter_rings")(data, settings)
    mask, order = to_host(result.mask), to_host(result.order)
    assert mask.dtype == bool and order.dtype == np.int64 and isinstance(result.out_of_range, int)
    expected = autoware_loop(points, settings)
    assert order.tolist() == expected
    assert np.flatnonzero(mask).tolist() == sorted(expected)
    outside = int((points["channel"] >= settings.max_rings_num).sum())
    assert result.out_of_range == outside
    if backend == "cuda":
        cpu = cpu_filter_rings(points, settings)
        np.testing.assert_array_equal(mask, cpu.mask)
        np.testing.assert_array_equal(order, cpu.order)
        assert result.out_of_range == cpu.out_of_range
    return mask, order, result.out_of_range


def ring(ranges, channel=0, start=0.0, step=0.01) -> np.ndarray:
    """Points on one ring at ``ranges`` (m), azimuths from ``start`` by ``step`` (rad)."""
    points = as_points(np.zeros((len(ranges), 3), F32))
    azimuth = np.mod(start + step * np.arange(len(ranges)), 2 * np.pi)
    points["channel"] = channel
    points["azimuth"] = azimuth
    points["distance"] = ranges
    points["x"] = np.asarray(ranges) * np.cos(azimuth)
    points["y"] = np.asarray(ranges) * np.sin(azimuth)
    points["z"] = 0.0
    return points


def random_rings(seed: int, n: int) -> tuple[np.ndarray, RingOutlierSettings]:
    """A random cloud on a few rings, with rule 3's and rule 1's edges, and random settings."""
    rng = np.random.default_rng(seed)
    points = as_points(rng.normal(0, 0.06, (n, 3)).astype(F32), seed)
    points["channel"] = rng.choice([0, 0, 1, 2, 3, 4, 5, 7, 65534, 65535], n)
    odd = rng.choice([np.nan, -60.0, 60.0, 100.0, 1e-45, -1e-40], n)  # not radians, subnormal
    points["azimuth"] = np.where(rng.random(n) < 0.06, odd, rng.uniform(0, 2 * np.pi, n))
    near = np.nextafter(F32(5.0 * 1.03), F32(rng.choice([-np.inf, np.inf])))
    ranges = [5.0, 5.0, 5.0, near, 5.2, 12.0, np.nan, 0.0, 1e-40, 1.02e-40, np.inf]
    points["distance"] = rng.choice(ranges, n)
    rings = int(rng.choice([1, 3, 6, 65534, MAX_RINGS]))
    settings = RingOutlierSettings(
        distance_ratio=float(rng.choice([1.03, 1.0, 1.5])),
        object_length_threshold=float(rng.choice([0.1, 0.05, 0.0, 1e-23])),
        num_points_threshold=[None, 0, 4][seed % 3],
        max_rings_num=rings,
    )
    return points, settings


@pytest.mark.parametrize("seed", range(24))
def test_random_rings_equal_autowares_loop(backend: str, seed: int):
    points, settings = random_rings(seed, int(np.random.default_rng(seed).integers(0, 500)))
    rings_on(backend, points, settings)


@pytest.mark.parametrize("settings", [RingOutlierSettings(), NEWER])
def test_ring_edge_cases(backend: str, settings: RingOutlierSettings):
    empty = ring([])
    mask, order, outside = rings_on(backend, empty, settings)
    assert mask.shape == (0,) and order.shape == (0,) and outside == 0
    assert not rings_on(backend, ring([10.0]), settings)[0].any()
    assert not rings_on(backend, ring([10.0, 10.0]), settings)[0].any()
    zero = RingOutlierSettings(object_length_threshold=0.0, num_points_threshold=None)
    assert rings_on(backend, ring([10.0, 10.0]), zero)[0].tolist() == [True, False]
    # a spike, the ring's end, the azimuth wrap, several rings interleaved, one out of range
    spiked = ring([10.0] * 8 + [4.0, 4.0] + [10.0] * 10, channel=2, start=2 * np.pi - 0.05)
    others = ring([20.0] * 9, channel=0, step=0.002)
    outside = ring([10.0] * 5, channel=settings.max_rings_num)
    shuffle = np.random.default_rng(3).permutation(34)
    interleaved = np.concatenate([spiked, others, outside])[shuffle]
    mask, order, count = rings_on(backend, interleaved, settings)
    assert count == 5 and mask.sum() == len(order) > 0
    everything_outside = np.concatenate([outside, ring([5.0] * 3, channel=MAX_RINGS)])
    mask, order, count = rings_on(backend, everything_outside, settings)
    assert count == 8 and not mask.any() and order.shape == (0,)


def test_a_real_velodyne_sweep_on_both_twins(backend: str):
    from gpu_euclidean_cluster.pointcloud_io.pcd import read_pcd

    path = LIDAR_DATA_DIR / "nebula" / "vlp16" / "1673400472138016708.pcd"
    if not path.exists():
        pytest.skip(f"{path} not found (set LIDAR_DATA_DIR to the data folder)")
    cloud = read_pcd(path)
    points = as_points(cloud.xyz.astype(F32))
    for name in ("channel", "azimuth", "distance"):
        points[name] = cloud.fields[name]
    for settings, kept in ((RingOutlierSettings(), 12706), (NEWER, 11285)):
        assert rings_on(backend, points, settings)[0].sum() == kept


@cuda_only
def test_cuda_rings_of_a_mapping_of_columns_equal_the_numpy_twin():
    import cupy

    from gpu_euclidean_cluster.cuda.stages.ring_outlier import filter_rings

    points, drawn = random_rings(7, 700)
    rng = np.random.default_rng(7)
    columns: dict[str, np.ndarray] = {
        name: points[name].astype(np.float64) for name in ("x", "y", "z", "azimuth")
    }
    # float64 ranges that round to float32 subnormals, and ints beyond uint16
    columns["distance"] = rng.choice([5.0, 5.1, 1e-40, 1.0100000001e-40, np.nan], len(points))
    columns["channel"] = rng.choice([-1, 0, 1, 2, 65536, 65537, 70000], len(points))
    for settings in (drawn, RingOutlierSettings(max_rings_num=3)):
        cpu = cpu_filter_rings(columns, settings)
        gpu = filter_rings({k: cupy.asarray(v) for k, v in columns.items()}, settings)
        np.testing.assert_array_equal(cupy.asnumpy(gpu.mask), cpu.mask)
        np.testing.assert_array_equal(cupy.asnumpy(gpu.order), cpu.order)
        assert gpu.out_of_range == cpu.out_of_range > 0
    with pytest.raises(ValueError, match="integer column"):
        filter_rings({"channel": cupy.zeros(3)}, drawn)
