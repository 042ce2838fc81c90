"""The Velodyne decoder against nebula's own ground truth, and on packets built from known
returns for the HDL-32E and HDL-64E.

The three real packet bags (``$LIDAR_DATA_DIR/nebula``, see its README) are decoded with the
settings of nebula's decoder tests, which feed the decoder each packet's ``stamp.sec`` only,
hence ``VelodyneScanMessage.packet_whole_seconds``. nebula compares the sweep completed while
reading the message whose record time names the PCD, point by point in order; so do we, and
every field nebula wrote must match bit for bit (the VLP-32C and VLS-128 PCDs hold x y z only,
the VLP-16 PCD the whole ``PointXYZIRCAEDT``). These tests run on both twins (``backend``
fixture): ``decode_packets`` and the CUDA decoder (``cuda/codecs/velodyne.py``) in its place.

The CUDA decoder also equals the CPU twin ``decode_packets`` byte for byte: same points, same
order, same bits of every field, same packet index, under both azimuth timings (``nebula`` and
``sensor``: the decoding settings' ``azimuth_timing``). Without CuPy (CI) three things run
against ``decode_packets`` on the three real bags, the HDL-32E/HDL-64E synthetic packets and
random packets (every filter and branch, dual pairs, a calibration with the two-point correction
on, one with subnormal ``sin_vert`` values):

- the host side (tables, kernel parameter order, staging, the point rows);
- :func:`kernel_model`, a NumPy transcription of ``cuda/kernels/codecs/velodyne.cu`` (float32
  operations as double operations rounded to float32, the uploaded tables, flag-then-rank);
- the kernel source itself, built as host C++ with g++ (:func:`host_kernels`; skipped without
  g++), its blocks and threads looped over.

With a GPU (``-m gpu``): the kernels on the device on the same inputs, from host memory and from
packets already on the device, and the sweeps of the real bags cut with the GPU decoding in
place of ``decode_packets``. A failure prints the first mismatching point, field by field, with
both sides' values and float bits, and how many points differ in each field.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import logging
import os
import platform
import re
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.cuda.codecs.velodyne import (
    F64_TABLES,
    FAMILY_CODES,
    I32_TABLES,
    KERNELS,
    PACKET_THREADS,
    RETURN_KINDS,
    SCALAR_PARAMS,
    SENSOR_TIMING,
    TIMING_CODES,
    VelodyneTables,
    build_tables,
    packet_deltas,
    points_to_host,
    scalar_args,
    stage_batch,
    staging_layout,
)
from gpu_euclidean_cluster.pointcloud_io.pcd import read_pcd
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    POINT_DTYPE,
    SENSOR_MODELS,
    DecoderSettings,
    SweepDecoder,
    decode_packets,
    load_calibration,
    read_velodyne_scans,
    sensor_model,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne import packets as packets_module
from gpu_euclidean_cluster.pointcloud_io.velodyne.calibration import float32_from_decimal
from gpu_euclidean_cluster.pointcloud_io.velodyne.libm import glibc_cosf, glibc_sinf
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import rotation_tables
from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import AZIMUTH_TIMINGS, Family

from .._velodyne_helpers import encode_packets, expected_returns, raw_for_distance
from ..conftest import cuda_only

REPO = Path(__file__).resolve().parents[2]
NEBULA = Path(os.environ.get("LIDAR_DATA_DIR", REPO.parent / "shared" / "data")) / "nebula"
CALIBRATION = NEBULA / "calibration"

#: folder -> (bag, PCD stem, settings of nebula's velodyne_ros_decoder_test_*.cpp, calibration)
CASES = {
    "vlp16": (
        "1673400471837873222",
        "1673400472138016708",
        DecoderSettings("VLP16", "Dual", "velodyne", 0.3, 300.0, 0.0, 0, 359, view_width=300.0),
        "VLP16.yaml",
    ),
    "vlp32": (
        "1713492677464078412",
        "1713492677464078412",
        DecoderSettings(
            "VLP32", "SingleStrongest", "velodyne_front", 0.4, 50.0, 180.0, 270, 90,
            view_width=180.0,
        ),
        "VLP32.yaml",
    ),
    "vls128": (
        "1614315746471294674",
        "1585897255376374245",
        DecoderSettings("VLS128", "Dual", "velodyne", 0.3, 300.0, 0.0, 0, 359, view_width=300.0),
        "VLS128.yaml",
    ),
}  # fmt: skip

needs_nebula = pytest.mark.skipif(
    not NEBULA.is_dir(), reason=f"nebula packet bags not found at {NEBULA} (set LIDAR_DATA_DIR)"
)


def _decoder(calibration, settings):
    from gpu_euclidean_cluster.cuda.codecs.velodyne import CudaPacketDecoder

    return CudaPacketDecoder(calibration, settings, device_id=0)


def sweep_decoder(backend: str, calibration, settings) -> SweepDecoder:
    """A ``SweepDecoder`` decoding on the ``backend`` twin: ``decode_packets``, or the CUDA
    decoder in its place."""
    if backend == "cpu":
        return SweepDecoder(calibration, settings)
    return SweepDecoder(calibration, settings, decode=_decoder(calibration, settings).decode_with)


def decode_on(backend: str, packets, packet_seconds, scan_seconds, calibration, settings):
    """``(points, packet_index)`` of the ``backend`` twin, on the host: ``decode_packets``, or
    the CUDA decoder's ``decode_to_host``."""
    if backend == "cpu":
        return decode_packets(packets, packet_seconds, scan_seconds, calibration, settings)
    return _decoder(calibration, settings).decode_to_host(packets, packet_seconds, scan_seconds)


def _decode_bag(folder: str, backend: str = "cpu") -> tuple[dict[int, list], list]:
    """Sweeps completed per message (by record time) on the ``backend`` twin, and the messages."""
    bag, _, settings, calibration = CASES[folder]
    decoder = sweep_decoder(backend, load_calibration(CALIBRATION / calibration), settings)
    scans = list(read_velodyne_scans(NEBULA / folder / bag))
    sweeps = {s.bag_time_ns: decoder.feed(s.packets, s.packet_whole_seconds) for s in scans}
    return sweeps, scans


@needs_nebula
@pytest.mark.parametrize("folder", sorted(CASES))
def test_sweep_matches_nebula_bit_for_bit(backend: str, folder: str):
    _, stem, settings, _ = CASES[folder]
    sweeps, _ = _decode_bag(folder, backend)
    completed = sweeps[int(stem)]
    assert len(completed) == 1, "nebula compares one sweep completed in this message"
    points = completed[0].points
    assert points.dtype == POINT_DTYPE and POINT_DTYPE.itemsize == 32
    assert completed[0].frame_id == settings.frame_id
    reference = read_pcd(NEBULA / folder / f"{stem}.pcd")
    assert points.shape[0] == reference.xyz.shape[0]
    xyz = np.stack([points["x"], points["y"], points["z"]], axis=1)
    # bit for bit: the decoder replays nebula's float32/float64 operations and glibc's sinf/cosf
    np.testing.assert_array_equal(xyz.view(np.uint32), reference.xyz.view(np.uint32))
    for name, values in reference.fields.items():
        np.testing.assert_array_equal(points[name], values, err_msg=name)
    if folder == "vlp16":
        assert set(reference.fields) == set(POINT_DTYPE.names) - {"x", "y", "z"}


@needs_nebula
def test_sweeps_do_not_depend_on_how_packets_are_grouped(backend: str):
    """A sweep spans messages: feeding the VLS-128 packets 97 at a time gives the same sweeps."""
    _, _, settings, calibration = CASES["vls128"]
    by_message, scans = _decode_bag("vls128", backend)
    expected = [s for sweeps in by_message.values() for s in sweeps]
    packets = np.concatenate([s.packets for s in scans])
    seconds = np.concatenate([s.packet_whole_seconds for s in scans])
    decoder = sweep_decoder(backend, load_calibration(CALIBRATION / calibration), settings)
    got = [
        s
        for i in range(0, len(packets), 97)
        for s in decoder.feed(packets[i : i + 97], seconds[i : i + 97])
    ]
    assert [s.stamp for s in got] == [s.stamp for s in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.points.tobytes() == theirs.points.tobytes()


@needs_nebula
def test_empty_serialization_format_is_read_as_cdr(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING):
        scans = list(read_velodyne_scans(NEBULA / "vls128" / CASES["vls128"][0]))
    assert len(scans) == 4 and all(s.packets.shape[1] == 1206 for s in scans)
    assert "empty serialization_format" in caplog.text
    assert scans[0].packet_seconds[0] == pytest.approx(
        scans[0].stamp_sec[0] + scans[0].stamp_nanosec[0] * 1e-9, abs=1e-6
    )


def test_float32_parsing_rounds_the_decimal_once():
    # 1 + 2^-24 + 2^-60: a double rounds it to the midpoint 1 + 2^-24, which then goes to 1.0
    # (ties to even); the decimal itself lies above the midpoint, so strtof gives 1 + 2^-23
    text = repr(1 + 2**-24) + "0000000000001"
    assert float32_from_decimal(text) == np.float32(1 + 2**-23)
    assert float32_from_decimal("0.002") == np.float32(0.002)


@pytest.mark.skipif(
    platform.system() != "Linux"
    or platform.machine() != "x86_64"
    or platform.libc_ver()[0] != "glibc",
    reason="compares with this machine's glibc sinf/cosf (x86-64 Linux only)",
)
def test_sinf_cosf_tables_equal_glibc():
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    for name in ("sinf", "cosf"):
        getattr(libm, name).restype = ctypes.c_float
        getattr(libm, name).argtypes = [ctypes.c_float]
    radians, cos_table, sin_table = rotation_tables()
    sample = np.concatenate([radians[::7], np.linspace(-1.6, 1.6, 2001, dtype=np.float32)])
    assert np.array_equal(glibc_sinf(sample), [libm.sinf(float(v)) for v in sample])
    assert np.array_equal(glibc_cosf(sample), [libm.cosf(float(v)) for v in sample])
    assert cos_table[0] == 1 and sin_table[9000] == 1


def _hdl_packets(lasers: int, calibration, seed: int):
    """Three packets of known returns: 12 blocks of 32 lasers (HDL-64E: upper/lower pairs)."""
    rng = np.random.default_rng(seed)
    count = 3
    if lasers == 64:
        header = np.tile([0xEEFF, 0xDDFF], (count, 6))
        pair_rotation = 3500 + 8 * np.arange(count * 6).reshape(count, 6)
        rotation = np.repeat(pair_rotation, 2, axis=1)
    else:
        header = np.full((count, 12), 0xEEFF)
        rotation = 35900 + 16 * np.arange(count * 12).reshape(count, 12)
    rotation = rotation % 36000
    laser = np.where(header == 0xDDFF, 32, 0)[:, :, None] + np.arange(32)[None, None, :]
    distance = rng.uniform(2.0, 100.0, laser.shape)
    raw = raw_for_distance(distance, laser, calibration)
    intensity = rng.integers(0, 256, laser.shape)
    packets = encode_packets(rotation, raw, intensity, header, mode=55)
    return packets, rotation, raw, intensity, laser


@pytest.mark.parametrize(
    ("model", "calibration_name"),
    [("HDL32", "HDL32.yaml"), ("HDL64", "HDL64e_s2.yaml"), ("HDL64", "HDL64e_s3.yaml")],
)
def test_hdl_packets_decode_to_the_returns_they_encode(
    backend: str, model: str, calibration_name: str
):
    path = CALIBRATION / calibration_name
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    calibration = load_calibration(path)
    settings = DecoderSettings(model, "SingleStrongest", "velodyne", 0.4, 130.0, 0.0, 0, 360)
    lasers = settings.sensor.lasers
    packets, rotation, raw, intensity, laser = _hdl_packets(lasers, calibration, seed=lasers)
    stamps = np.array([10.0, 10.0005, 10.001])
    points, packet_index = decode_on(backend, packets, stamps, 10.0, calibration, settings)
    # every return is in range and inside the window: one point per slot, in packet order
    assert points.shape[0] == raw.size
    assert np.array_equal(packet_index, np.repeat(np.arange(3), 12 * 32))
    expected = expected_returns(rotation, raw, intensity, laser, calibration)
    flat = {k: v.reshape(-1) for k, v in expected.items()}
    assert np.array_equal(points["channel"], calibration.laser_ring[laser.reshape(-1)])
    assert np.all(points["return_type"] == 3)  # STRONGEST
    assert set(np.unique(laser)) == set(range(lasers))
    # distance: float32 product and sum of float32 values: within 2 float32 ulps of 130 m
    np.testing.assert_allclose(points["distance"], flat["distance"], rtol=0, atol=2e-5)
    # heading: nebula rounds the corrected heading to 0.01 degree; its float32 arithmetic and
    # the float64 model agree on that rounding except within 1e-3 centidegree of a half, where
    # the two may pick neighbouring headings: those few returns are left out of the xyz check
    fraction = flat["azimuth_cd"] - np.floor(flat["azimuth_cd"])
    clear = np.abs(fraction - 0.5) > 1e-3
    assert clear.mean() > 0.95
    # VLP-32-family points report the block's raw rotation as their azimuth (nebula's rule)
    block_rotation = np.repeat(rotation.reshape(-1), 32)
    np.testing.assert_array_equal(points["azimuth"], rotation_tables()[0][block_rotation])
    # positions: float32 arithmetic of float32 inputs, some 10 roundings of values below 130 m:
    # within 1e-4 m of the float64 model at the same 0.01-degree heading
    xyz = np.stack([points["x"], points["y"], points["z"]], axis=1).astype(np.float64)
    model_xyz = np.stack([flat["x"], flat["y"], flat["z"]], axis=1)
    np.testing.assert_allclose(xyz[clear], model_xyz[clear], rtol=0, atol=1e-4)
    # one 0.01-degree step moves a point at most 130 m * 1.75e-4 rad = 2.3 cm
    np.testing.assert_allclose(xyz, model_xyz, rtol=0, atol=0.025)
    # intensity: float32 focal correction, truncated to its low byte and clamped; the float64
    # model may fall on the other side of an integer (off by one, or 255 against 0 at the wrap)
    off = np.abs(points["intensity"].astype(int) - flat["intensity"])
    assert np.all((off <= 1) | (off == 255))
    assert np.mean(off == 0) > 0.95
    # time: (stamp - 10 s) + 55.296 us per block + 2.304 us per laser pair, truncated to ns
    block = np.tile(np.repeat(np.arange(12), 32), 3)
    pair = np.tile(np.arange(32) // 2, 36)
    seconds = np.repeat(stamps - 10.0, 384) + 55.296e-6 * block + 2.304e-6 * pair
    assert np.max(np.abs(points["time_stamp"].astype(np.int64) - seconds * 1e9)) <= 2


def test_cloud_window_and_ranges_drop_points(backend: str):
    path = CALIBRATION / "HDL32.yaml"
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    calibration = load_calibration(path)
    packets, rotation, *_ = _hdl_packets(32, calibration, seed=3)
    everything = DecoderSettings("HDL32", "SingleStrongest", "v", 0.4, 130.0, 0.0, 0, 360)
    window = DecoderSettings("HDL32", "SingleStrongest", "v", 0.4, 50.0, 0.0, 359, 1)
    all_points, _ = decode_on(backend, packets, np.zeros(3), 0.0, calibration, everything)
    some, index = decode_on(backend, packets, np.zeros(3), 0.0, calibration, window)
    # VLP-32-family window: the raw block rotation, wrapped (>= 359 degrees or <= 1 degree)
    keep_block = (rotation >= 35900) | (rotation <= 100)
    near = all_points["distance"].astype(np.float64) < 50.0
    kept = np.repeat(keep_block.reshape(-1), 32) & near
    assert 0 < kept.sum() < kept.size
    assert some.tobytes() == all_points[kept].tobytes()
    assert np.all(np.diff(index) >= 0)


def test_sensor_model_names_follow_one_rule_any_case_in_the_tables_spelling():
    assert sensor_model("vlp16").name == "VLP16" and sensor_model(" Hdl64 ").name == "HDL64"
    assert DecoderSettings(model="vls128").model == "VLS128"  # written as the table spells it
    assert sensor_model(SENSOR_MODELS["VLP32"]) is SENSOR_MODELS["VLP32"]
    with pytest.raises(
        ValueError, match=r"unknown Velodyne sensor model 'VLP64' \(--sensor-model\)"
    ):
        sensor_model("VLP64", "--sensor-model")
    with pytest.raises(ValueError, match=r"choose one of VLP16, VLP32, HDL32, HDL64, VLS128$"):
        DecoderSettings(model="HDL128")


# ---------------------------------------------------------------------------------------------
# The CUDA decoder against the CPU twin

KERNEL_FILE = (
    Path(__file__).resolve().parents[2] / "gpu_euclidean_cluster/cuda/kernels/codecs/velodyne.cu"
)
HDL_CASES = [("HDL32", "HDL32.yaml"), ("HDL64", "HDL64e_s2.yaml"), ("HDL64", "HDL64e_s3.yaml")]
#: Random-packet cases: label -> (model, calibration file, variant). ``two_pt`` turns on the
#: two-point correction (no shipped calibration does); ``subnormal`` gives lasers 0-3 float32
#: subnormal ``sin_vert`` values (subnormal ``z`` and ``elevation``: CuPy's ``-ftz=true`` would
#: flush them in float arithmetic).
SENSORS = {
    "VLP16": ("VLP16", "VLP16.yaml", None),
    "VLP16-subnormal": ("VLP16", "VLP16.yaml", "subnormal"),
    "VLP32": ("VLP32", "VLP32.yaml", None),
    "VLP32-two-pt": ("VLP32", "VLP32.yaml", "two_pt"),
    "VLS128": ("VLS128", "VLS128.yaml", None),
    "HDL32": ("HDL32", "HDL32.yaml", None),
    "HDL64": ("HDL64", "HDL64e_s2.yaml", None),
    "HDL64-two-pt": ("HDL64", "HDL64e_s3.yaml", "two_pt"),
}


# ---------------------------------------------------------------------------------------------
# Inputs and the comparison


def _calibration(name: str):
    path = CALIBRATION / name
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    return load_calibration(path)


def _variant(label: str):
    """``(calibration, model)`` of a :data:`SENSORS` label."""
    model, name, variant = SENSORS[label]
    calibration = _calibration(name)
    if variant == "two_pt":
        size = calibration.size
        rng = np.random.default_rng(size)
        calibration = dataclasses.replace(
            calibration,
            two_pt_correction=np.arange(size) % 3 != 0,
            dist_correction_x=(calibration.dist_correction + rng.uniform(-0.05, 0.05, size)).astype(
                np.float32
            ),
            dist_correction_y=(calibration.dist_correction + rng.uniform(-0.05, 0.05, size)).astype(
                np.float32
            ),
        )
    elif variant == "subnormal":
        sin_vert = calibration.sin_vert.copy()
        sin_vert[:4] = np.array([1, 0x7FFFFF, 0x80000123, 0x00400000], np.uint32).view(np.float32)
        calibration = dataclasses.replace(calibration, sin_vert=sin_vert)
    return calibration, model


def _bag(folder: str, timing: str = "nebula"):
    """``(packets, whole-second stamps, calibration, settings)`` of a real bag, all messages,
    with nebula's settings but the azimuth timing ``timing``."""
    bag, _, settings, calibration = CASES[folder]
    settings = dataclasses.replace(settings, azimuth_timing=timing)
    scans = list(read_velodyne_scans(NEBULA / folder / bag))
    packets = np.concatenate([s.packets for s in scans])
    seconds = np.concatenate([s.packet_whole_seconds for s in scans])
    return packets, seconds, _calibration(calibration), settings


def _random_packets(count: int, seed: int, family: Family) -> np.ndarray:
    """Packets with random returns, rotations (some past 36000), headers (mostly valid) and
    return modes (mostly 55/56/57): every branch of the decoding, dual pairs included."""
    rng = np.random.default_rng(seed)
    headers = {
        Family.VLP16: [0xEEFF],
        Family.VLP32: [0xEEFF, 0xDDFF],
        Family.VLS128: [0xEEFF, 0xDDFF, 0xCCFF, 0xBBFF],
    }[family]
    header = rng.choice(headers, (count, 12))
    header[rng.random((count, 12)) < 0.02] = 0x1234
    rotation = rng.integers(0, 36000, (count, 12))
    rotation[rng.random((count, 12)) < 0.05] = rng.integers(36000, 65536)
    raw = rng.integers(0, 65536, (count, 12, 32))
    raw[rng.random(raw.shape) < 0.1] = 0
    near = rng.random(raw.shape) < 0.5
    raw[near] = rng.integers(1, 3000, int(near.sum()))
    intensity = rng.integers(0, 256, (count, 12, 32))
    packets = encode_packets(rotation, raw, intensity, header, mode=55)
    # dual-mode pairs: odd blocks repeat some of the even blocks' returns
    packets[:, 1204] = rng.choice([55, 56, 57, 57, 57, 0], count)
    blocks = packets[:, :1200].reshape(count, 12, 100)
    same = rng.random((count, 6, 32)) < 0.3
    for pair in range(6):
        even, odd = blocks[:, 2 * pair, 4:], blocks[:, 2 * pair + 1, 4:]
        mask = np.repeat(same[:, pair, :], 3, axis=1)
        odd[mask] = even[mask]
    packets[:, :1200] = blocks.reshape(count, 1200)
    return packets


def _describe(points: np.ndarray, i: int) -> str:
    row = points[i]
    parts = []
    for name in POINT_DTYPE.names:
        value = row[name]
        bits = f" (0x{np.asarray(value).view(np.uint32):08x})" if value.dtype.kind == "f" else ""
        parts.append(f"{name}={value!r}{bits}")
    return ", ".join(parts)


def assert_same_points(got, want, label: str = "") -> None:
    """``(points, packet_index)`` equal byte for byte; else the first differing point, field by
    field, and how many points differ in each field."""
    got_points, got_index = got
    want_points, want_index = want
    assert got_points.dtype == POINT_DTYPE, f"{label}: dtype {got_points.dtype}"
    assert got_index.dtype == np.int64, f"{label}: packet_index dtype {got_index.dtype}"
    if got_points.shape != want_points.shape:
        shown = min(got_points.shape[0], want_points.shape[0])
        first = np.flatnonzero(got_index[:shown] != want_index[:shown])
        at = int(first[0]) if first.size else shown
        pytest.fail(
            f"{label}: {got_points.shape[0]} points on the GPU, {want_points.shape[0]} on the CPU; "
            f"packet_index first differs at {at} (GPU packet "
            f"{got_index[at] if at < got_index.size else None}, CPU packet "
            f"{want_index[at] if at < want_index.size else None})"
        )
    if got_points.tobytes() == want_points.tobytes() and np.array_equal(got_index, want_index):
        return
    rows = got_points.view(np.uint8).reshape(-1, 32) != want_points.view(np.uint8).reshape(-1, 32)
    bad = np.flatnonzero(rows.any(axis=1) | (got_index != want_index))
    i = int(bad[0])
    counts = {
        name: int(
            np.sum(
                got_points[name].view(f"u{got_points[name].itemsize}")
                != want_points[name].view(f"u{want_points[name].itemsize}")
            )
        )
        for name in POINT_DTYPE.names
    }
    pytest.fail(
        f"{label}: {bad.size} of {want_points.shape[0]} points differ; fields differing "
        f"{ {k: v for k, v in counts.items() if v} }; first at {i} (packet GPU {got_index[i]} "
        f"CPU {want_index[i]}):\n  GPU {_describe(got_points, i)}\n"
        f"  CPU {_describe(want_points, i)}"
    )


# ---------------------------------------------------------------------------------------------
# The kernel, transcribed to NumPy


def _f32(x):
    """velo_f32: a double rounded to float32, back as a double."""
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def _mul(a, b):
    return _f32(np.multiply(a, b, dtype=np.float64))


def _div(a, b):
    return _f32(np.divide(a, b, dtype=np.float64))


def _add(a, b):
    return _f32(np.add(a, b, dtype=np.float64))


def _sub(a, b):
    return _f32(np.subtract(a, b, dtype=np.float64))


def _angle_ok(value, low, high):
    if low < high:
        return (value >= low) & (value <= high)
    if low > high:
        return (value <= high) | (value >= low)
    return np.zeros(value.shape, bool)


def kernel_model(
    tables: VelodyneTables, packets: np.ndarray, deltas: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``velo_flags``, the inclusive scan and ``velo_points`` over all slots at once, with the
    kernels' arguments (:func:`scalar_args`, the tables) and their arithmetic."""
    a = scalar_args(tables)
    i32, f64 = tables.i32, tables.f64
    family = int(a["family"])
    sensor_timing = int(a["azimuth_timing"]) == SENSOR_TIMING
    vlp16, vlp32, vls128 = (FAMILY_CODES[f] == family for f in Family)
    count = packets.shape[0]
    t = np.arange(count * PACKET_THREADS)
    p, bs = t // PACKET_THREADS, t % PACKET_THREADS
    b, s = bs // 32, bs % 32
    pk = packets.astype(np.int64)

    def u16(offset):
        return pk[p, offset] | (pk[p, offset + 1] << 8)

    def rotation_of(block):
        return u16(block * 100 + 2)

    mode = pk[p, 1204]
    dual = (mode == a["mode_dual"]).astype(np.int64)
    keep = np.ones(t.shape, bool)
    origin = np.zeros(t.shape, np.int64)
    if vlp16:
        for k in range(12):
            keep &= (k > b) | (u16(k * 100) == a["upper_bank"])
    elif vls128:
        for k in range(12):
            header = u16(k * 100)
            bank = np.full(t.shape, -1)
            for i in (3, 2, 1, 0):
                bank = np.where(header == i32["vls_banks"][i], i, bank)
            good = (bank >= 0) & ~((dual == 1) & (k >= 12 - 4))
            keep &= (k > b) | good
            origin = np.where(k == b, np.where(bank >= 0, 32 * bank, 0), origin)
    else:
        origin = np.where(u16(b * 100) == a["lower_bank"], 32, 0)
    laser = s % 16 if vlp16 else origin + s
    keep &= laser < a["laser_count"]
    laser = np.where(keep, laser, 0)  # table lookups of dropped slots read laser 0 (unused)
    ret = b * 100 + 4 + 3 * s
    partner = (b ^ 1) * 100 + 4 + 3 * s
    raw, partner_raw = u16(ret), u16(partner)
    keep &= (raw != 0) & ~((dual == 1) & (b % 2 == 1) & (partner_raw == raw))
    rec = i32["recurrence"].reshape(2, 3, 12)
    azimuth = rotation_of(rec[dual, 0, b])
    low, high = int(a["window_low"]), int(a["window_high"])
    if not vlp32:
        keep &= ((azimuth >= low) & (azimuth <= high)) if low < high else low > high

    distance = _mul(raw.astype(np.float64), a["resolution"])
    distance = np.where(distance > 1e-6, _add(distance, f64["dist_correction"][laser]), distance)
    keep &= (distance > a["min_range"]) & (distance < a["max_range"])

    copy = rec[dual, 2, b]
    k = np.where(copy >= 0, copy, b)
    nxt = rec[dual, 1, k]
    difference = np.fmod(
        36000 + rotation_of(np.maximum(nxt, 0)) - rotation_of(rec[dual, 0, k]), 36000
    )
    diff = np.where((copy == -2) | (nxt < 0), 0, difference).astype(np.float64)
    if sensor_timing:
        turn = _mul(diff, f64["sensor_turn"][origin + s])
    elif vlp16:
        turn = _div(_mul(diff, f64["slot_turn"][s]), a["turn_div"])
    elif vlp32:
        turn = _mul(_div(_mul(diff, a["turn_mul"]), a["turn_div"]), s.astype(np.float64))
    else:
        turn = _mul(diff, f64["group_turn"][laser // 8])
    partial = _add(azimuth.astype(np.float64), turn)
    corrected = _f32(partial - f64["rot_term"][laser])
    corrected = np.where(corrected < 0.0, _f32(corrected + 36000.0), corrected)
    index = (np.floor(corrected + 0.5).astype(np.int64) & 0xFFFF) % 36000
    rotation = rotation_of(b)
    keep &= _angle_ok(rotation if vlp32 else index, low, high)

    rank = np.cumsum(keep.astype(np.int32), dtype=np.int32)  # what cupy.cumsum gives
    kept = np.flatnonzero(keep)
    assert np.array_equal(rank[kept] - 1, np.arange(kept.size))
    p, b, s, laser, raw, partner_raw = (v[kept] for v in (p, b, s, laser, raw, partner_raw))
    ret, partner, mode, dual = ret[kept], partner[kept], mode[kept], dual[kept]
    distance, index, rotation = distance[kept], index[kept], rotation[kept]

    cos_rot, sin_rot = f64["cos_table"][index], f64["sin_table"][index]
    cv, sv = f64["cos_vert"][laser], f64["sin_vert"][laser]
    raw_intensity, partner_intensity = pk[p, ret + 2], pk[p, partner + 2]
    if vlp32:
        h, v = f64["horiz"][laser], f64["vert"][laser]
        dx = dy = distance
        two_pt = i32["two_pt"][laser] != 0
        if two_pt.any():
            dc = f64["dist_correction"][laser]
            xy = _sub(_mul(distance, cv), _mul(v, sv))
            xx = np.abs(_sub(_mul(xy, sin_rot), _mul(h, cos_rot)))
            yy = np.abs(_add(_mul(xy, cos_rot), _mul(h, sin_rot)))

            def two_pt_axis(dcxy, r, near):
                scaled = (_sub(dc, dcxy) * (r - near)) / (25.04 - near)
                return _sub(_f32(scaled + dcxy), dc)

            dx = np.where(two_pt, _add(distance, two_pt_axis(f64["dist_x"][laser], xx, 2.4)), dx)
            dy = np.where(two_pt, _add(distance, two_pt_axis(f64["dist_y"][laser], yy, 1.93)), dy)
        big_x = _sub(_mul(_sub(_mul(dx, cv), _mul(v, sv)), sin_rot), _mul(h, cos_rot))
        big_y = _add(_mul(_sub(_mul(dy, cv), _mul(v, sv)), cos_rot), _mul(h, sin_rot))
        x, y, z = big_y, -big_x, _add(_mul(dy, sv), _mul(v, cv))
        u = _sub(1.0, _div(raw.astype(np.float64), 65535.0))
        sqr = _mul(u, u)
        boost = _mul(
            f64["focal_slope"][laser], np.abs(_sub(f64["focal_offset"][laser], _mul(256.0, sqr)))
        )
        value = np.trunc(_add(raw_intensity.astype(np.float64), boost)).astype(np.int64) & 0xFF
        value = np.where(value < i32["min_intensity"][laser], i32["min_intensity"][laser], value)
        value = np.where(value > i32["max_intensity"][laser], i32["max_intensity"][laser], value)
        intensity = value & 0xFF
        azimuth_out = f64["radians"][rotation % 36000]
    else:
        xy = _mul(distance, cv)
        x, y, z = _mul(xy, cos_rot), -_mul(xy, sin_rot), _mul(distance, sv)
        intensity = raw_intensity
        azimuth_out = f64["radians"][index]

    first = raw > partner_raw if vlp16 else partner_raw >= raw
    strongest = np.where(intensity == partner_intensity, ~first, intensity > partner_intensity)
    kind = np.where(first, np.where(strongest, 4, 5), np.where(strongest, 6, 7))
    kind = np.where((partner_raw == 0) | (partner_raw == raw), 3, kind)
    kind = np.where(dual == 1, kind, 0)
    kind = np.where(mode == a["mode_last"], 1, kind)
    kind = np.where(mode == a["mode_strongest"], 2, kind)

    columns = int(a["time_columns"])
    cell = (b // 4) * columns + laser // 8 + laser // 64 if vls128 else b * columns + s
    seconds = deltas[p] + f64["time_table"][cell]
    seconds = np.where(seconds < 0.0, 0.0, seconds)
    stamp = np.trunc(seconds * 1e9).astype(np.int64).astype(np.uint32)

    words = np.zeros((kept.size, 8), np.uint32)
    for column, value in ((0, x), (1, y), (2, z), (4, azimuth_out), (5, sv), (6, distance)):
        words[:, column] = value.astype(np.float32).view(np.uint32)
    words[:, 3] = (
        intensity.astype(np.uint32)
        | ((i32["return_codes"][kind] & 0xFF).astype(np.uint32) << 8)
        | ((i32["ring"][laser] & 0xFFFF).astype(np.uint32) << 16)
    )
    words[:, 7] = stamp
    return points_to_host(words.view(np.uint8)), p.astype(np.int64)


# ---------------------------------------------------------------------------------------------
# CPU: host side and the kernel model


def _kernel_parameters(macro: str) -> list[str]:
    source = KERNEL_FILE.read_text()
    match = re.search(rf"#define {macro}\s*\\\n(.*?)\n\n", source, re.S)
    assert match, f"{macro} not found in {KERNEL_FILE}"
    text = match.group(1).replace("\\\n", " ")
    return [re.findall(r"\w+", part)[-1] for part in text.split(",")]


def test_kernel_parameters_are_passed_in_their_order():
    expected = ["packets", "delta", "count", *SCALAR_PARAMS, *I32_TABLES, *F64_TABLES]
    expected += ["rank", "points", "packet_index"]
    assert _kernel_parameters("VELO_PARAMS") == expected
    assert _kernel_parameters("VELO_ARGS") == expected
    source = KERNEL_FILE.read_text()
    for name in KERNELS:
        assert f'extern "C" __global__ void {name}(VELO_PARAMS)' in source


def test_return_kinds_follow_the_kernel_indices():
    source = KERNEL_FILE.read_text()
    kinds = dict(re.findall(r"#define VELO_KIND_(\w+) (\d+)", source))
    assert len(kinds) == len(RETURN_KINDS)
    for name, index in kinds.items():
        assert RETURN_KINDS[int(index)] == getattr(packets_module, f"RETURN_{name}"), name


@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize("label", sorted(SENSORS))
def test_tables_hold_the_cpu_twins_values(label: str, timing: str):
    calibration, model = _variant(label)
    settings = DecoderSettings(model, "Dual", "v", 0.3, 200.0, 0.0, 10, 350, azimuth_timing=timing)
    tables = build_tables(calibration, settings)
    assert tables.azimuth_timing == TIMING_CODES[timing]
    sensor_turn = packets_module.sensor_turns(model)
    assert np.array_equal(tables.f64["sensor_turn"], sensor_turn.astype(np.float64))
    radians, cos_table, sin_table = packets_module.rotation_tables()
    assert np.array_equal(tables.f64["cos_table"].astype(np.float32), cos_table)
    assert np.array_equal(tables.f64["sin_table"].astype(np.float32), sin_table)
    assert np.array_equal(tables.f64["radians"].astype(np.float32), radians)
    family = settings.sensor.family
    time = packets_module.time_offsets(family)
    assert tables.time_columns == time.shape[1]
    assert np.array_equal(tables.f64["time_table"], time.reshape(-1).astype(np.float64))
    for name in F64_TABLES:
        values = tables.f64[name]
        if name != "rot_term":  # every other table holds float32 values exactly
            assert np.array_equal(values.astype(np.float32).astype(np.float64), values), name
    assert tables.laser_count == calibration.size
    assert (tables.window_low, tables.window_high) == (1000, 35000)
    assert tables.i32["recurrence"].shape == (2 * 3 * 12,)
    for dual in (False, True):
        block = np.arange(12)
        recurrence = tables.i32["recurrence"].reshape(2, 3, 12)[int(dual)]
        assert np.array_equal(recurrence, packets_module.block_recurrence(settings, dual))
        rotation = np.tile(1000 + 100 * block, (1, 1))
        azimuth, _ = packets_module.block_azimuths(rotation, np.array([dual]), settings)
        assert np.array_equal(azimuth[0], rotation[0, recurrence[0]])


def test_staging_holds_deltas_then_packets():
    rng = np.random.default_rng(0)
    packets = rng.integers(0, 256, (5, 1206), dtype=np.uint8)
    seconds = 100.0 + rng.random(5)
    deltas = packet_deltas(seconds, 100.25, 5)
    assert np.array_equal(deltas, seconds - np.float64(100.25))
    assert np.array_equal(packet_deltas(3.0, seconds, 5), np.float64(3.0) - seconds)
    offset, total = staging_layout(5)
    assert (offset, total) == (40, 40 + 5 * 1206)
    staging = np.zeros(total + 64, np.uint8)
    assert stage_batch(staging, packets, deltas) == total
    assert np.array_equal(staging[:offset].view(np.float64), deltas)
    assert np.array_equal(staging[offset:total].reshape(5, 1206), packets)


def test_points_to_host_views_rows_as_the_point_dtype():
    points = np.zeros(3, POINT_DTYPE)
    points["x"] = [1.5, -0.0, 2.0]
    points["channel"] = [1, 2, 65535]
    points["time_stamp"] = [7, 8, 2**32 - 1]
    rows = points.view(np.uint8).reshape(3, 32)
    assert points_to_host(rows).tobytes() == points.tobytes()
    assert points_to_host(np.zeros((0, 32), np.uint8)).shape == (0,)


@needs_nebula
@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize("folder", sorted(CASES))
def test_kernel_model_equals_the_cpu_twin_on_the_real_bags(folder: str, timing: str):
    packets, seconds, calibration, settings = _bag(folder, timing)
    scan = np.repeat(seconds[::50], 50)[: seconds.size] - 0.05  # some negative times
    want = decode_packets(packets, seconds, scan, calibration, settings)
    assert want[0].shape[0] > 10000
    got = kernel_model(
        build_tables(calibration, settings), packets, packet_deltas(seconds, scan, len(seconds))
    )
    assert_same_points(got, want, f"{folder} {timing}")


def _hdl_settings(model: str, timing: str) -> DecoderSettings:
    """The HDL packets' settings (single return, everything in range), azimuth timing ``timing``."""
    return DecoderSettings(
        model, "SingleStrongest", "velodyne", 0.4, 130.0, 0.0, 0, 360, azimuth_timing=timing
    )


@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize(("model", "calibration_name"), HDL_CASES)
def test_kernel_model_equals_the_cpu_twin_on_hdl_packets(model, calibration_name, timing):
    calibration = _calibration(calibration_name)
    settings = _hdl_settings(model, timing)
    packets, *_ = _hdl_packets(settings.sensor.lasers, calibration, seed=settings.sensor.lasers)
    stamps = np.array([10.0, 10.0005, 10.001])
    want = decode_packets(packets, stamps, 10.0, calibration, settings)
    got = kernel_model(build_tables(calibration, settings), packets, packet_deltas(stamps, 10.0, 3))
    assert_same_points(got, want, f"{model} {timing}")


def _random_input(label: str, seed: int, low: int, high: int, timing: str):
    """``(calibration, settings, packets, packet seconds)`` of a random-packet case: 40 packets
    from :func:`_random_packets`, dual returns, the cloud window ``low``-``high``, the azimuth
    timing ``timing``."""
    calibration, model = _variant(label)
    settings = DecoderSettings(
        model, "Dual", "v", 0.3, 100.0, 0.0, low, high, azimuth_timing=timing
    )
    packets = _random_packets(40, seed, settings.sensor.family)
    return calibration, settings, packets, 5.0 + 1e-4 * np.arange(40)


RANDOM_CASE = ("label", "seed", "low", "high", "timing")


def _random_cases():
    windows = [(0, 360), (0, 359), (270, 90), (100, 101), (359, 1)]
    for label in sorted(SENSORS):
        for seed, (low, high) in enumerate(windows):
            for timing in AZIMUTH_TIMINGS:
                yield label, seed, low, high, timing


@pytest.mark.parametrize(RANDOM_CASE, list(_random_cases()))
def test_kernel_model_equals_the_cpu_twin_on_random_packets(label, seed, low, high, timing):
    calibration, settings, packets, seconds = _random_input(label, seed, low, high, timing)
    want = decode_packets(packets, seconds, 5.001, calibration, settings)
    got = kernel_model(
        build_tables(calibration, settings), packets, packet_deltas(seconds, 5.001, 40)
    )
    assert_same_points(got, want, f"{label} seed {seed} window {low}-{high} {timing}")


# ---------------------------------------------------------------------------------------------
# CUDA only: the kernels on the device


def _both_paths(decoder, packets, seconds, scan, label):
    """The CPU twin's result, checked against the GPU's from host memory and from the device."""
    import cupy

    want = decode_packets(packets, seconds, scan, decoder.calibration, decoder.settings)
    assert_same_points(decoder.decode_to_host(packets, seconds, scan), want, f"{label}, host")
    device_packets = cupy.asarray(packets)
    got = decoder.decode_to_host(device_packets, seconds, scan)
    assert_same_points(got, want, f"{label}, packets on the device")
    scan_device = cupy.asarray(
        np.ascontiguousarray(np.broadcast_to(np.asarray(scan, np.float64), seconds.shape))
    )
    got = decoder.decode_to_host(device_packets, cupy.asarray(seconds), scan_device)
    assert_same_points(got, want, f"{label}, packets and stamps on the device")
    points, index = decoder.decode(packets, seconds, scan)
    assert points.dtype == cupy.uint8 and points.shape == (want[0].shape[0], 32)
    assert index.dtype == cupy.int64
    return want


@cuda_only
@needs_nebula
@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize("folder", sorted(CASES))
def test_gpu_equals_the_cpu_twin_on_the_real_bags(folder: str, timing: str):
    packets, seconds, calibration, settings = _bag(folder, timing)
    decoder = _decoder(calibration, settings)
    label = f"{folder} {timing}"
    want = _both_paths(decoder, packets, seconds, seconds[0], f"{label}, one scan stamp")
    assert want[0].shape[0] > 10000
    scan = np.repeat(seconds[::50], 50)[: seconds.size] - 0.05  # some negative times
    _both_paths(decoder, packets, seconds, scan, f"{label}, scan stamp per packet")
    # a batch of one packet, and batches reusing the grown buffers with fewer packets
    for start, stop in ((0, 1), (7, 8), (10, 300), (0, len(packets)), (3, 5)):
        _both_paths(decoder, packets[start:stop], seconds[start:stop], seconds[start],
                    f"{label}, packets {start}:{stop}")  # fmt: skip


@cuda_only
@needs_nebula
@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize("folder", sorted(CASES))
def test_gpu_sweeps_equal_the_cpu_sweeps(folder: str, timing: str):
    """``SweepDecoder`` with the GPU decoding in place of ``decode_packets``: the same sweeps."""
    bag, _, settings, calibration_name = CASES[folder]
    settings = dataclasses.replace(settings, azimuth_timing=timing)
    calibration = _calibration(calibration_name)
    scans = list(read_velodyne_scans(NEBULA / folder / bag))
    cpu = SweepDecoder(calibration, settings)
    want = [s for scan in scans for s in cpu.feed(scan.packets, scan.packet_whole_seconds)]
    gpu = SweepDecoder(calibration, settings, decode=_decoder(calibration, settings).decode_with)
    got = [s for scan in scans for s in gpu.feed(scan.packets, scan.packet_whole_seconds)]
    assert len(got) == len(want) > 0
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert (mine.stamp, mine.packet_count) == (theirs.stamp, theirs.packet_count)
        index = np.zeros(mine.points.shape[0], np.int64)
        want_index = np.zeros(theirs.points.shape[0], np.int64)
        assert_same_points((mine.points, index), (theirs.points, want_index), f"sweep {i}")


@cuda_only
@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize(("model", "calibration_name"), HDL_CASES)
def test_gpu_equals_the_cpu_twin_on_hdl_packets(model: str, calibration_name: str, timing: str):
    calibration = _calibration(calibration_name)
    settings = _hdl_settings(model, timing)
    packets, *_ = _hdl_packets(settings.sensor.lasers, calibration, seed=settings.sensor.lasers)
    want = _both_paths(_decoder(calibration, settings), packets, np.array([10.0, 10.0005, 10.001]),
                       10.0, f"{model} {timing}")  # fmt: skip
    assert want[0].shape[0] == packets.shape[0] * 384


@cuda_only
@pytest.mark.parametrize(RANDOM_CASE, list(_random_cases()))
def test_gpu_equals_the_cpu_twin_on_random_packets(label, seed, low, high, timing):
    calibration, settings, packets, seconds = _random_input(label, seed, low, high, timing)
    _both_paths(_decoder(calibration, settings), packets, seconds, 5.001,
                f"{label} seed {seed} window {low}-{high} {timing}")  # fmt: skip


@cuda_only
def test_gpu_edge_cases():
    import cupy

    calibration = _calibration("VLP16.yaml")
    settings = DecoderSettings("VLP16", "Dual", "v", 0.3, 100.0, 0.0, 0, 360)
    decoder = _decoder(calibration, settings)
    # empty batch, from host and device memory
    for empty in (np.zeros((0, 1206), np.uint8), cupy.zeros((0, 1206), cupy.uint8)):
        points, index = decoder.decode_to_host(empty, np.zeros(0), 0.0)
        assert points.dtype == POINT_DTYPE and points.shape == (0,) and index.shape == (0,)
    with pytest.raises(ValueError, match="1206"):
        decoder.decode(np.zeros((2, 1200), np.uint8), np.zeros(2), 0.0)
    packets = _random_packets(3, 11, Family.VLP16)
    _both_paths(decoder, packets[:1], np.array([1.0]), 0.5, "one packet")
    # everything filtered: a range beyond every return (2 bytes of 2 mm: 131 m at most), headers
    # all bad (an empty range or window is refused by the settings themselves)
    nothing = DecoderSettings("VLP16", "Dual", "v", 299.0, 300.0, 0.0, 0, 360)
    points, index = _decoder(calibration, nothing).decode_to_host(packets, np.ones(3), 0.0)
    assert points.shape == (0,) and index.shape == (0,)
    assert decode_packets(packets, np.ones(3), 0.0, calibration, nothing)[0].shape == (0,)
    bad = packets.copy()
    bad[:, 0] = 0
    points, index = decoder.decode_to_host(bad, np.ones(3), 0.0)
    assert points.shape == (0,) and index.shape == (0,)


# ---------------------------------------------------------------------------------------------
# CPU: the kernel source itself, compiled as host C++ (thread and block indices looped over)

HOST_SHIM = r"""
#include <math.h>
#include <string.h>
#define __device__
#define __global__
#define __forceinline__ inline
struct velo_dim3 { unsigned x, y, z; };
static velo_dim3 blockIdx, threadIdx, blockDim;
struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) {
    return uint4{a, b, c, d};
}
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline float __double2float_rn(double x) { return (float)x; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
"""

HOST_DRIVER = r"""
extern "C" void velo_host_run(int write, VELO_PARAMS) {
    blockDim.x = VELO_BLOCKS * VELO_SLOTS;
    for (int p = 0; p < count; ++p) {
        for (unsigned i = 0; i < blockDim.x; ++i) {
            blockIdx.x = p;
            threadIdx.x = i;
            if (write) velo_points(VELO_ARGS); else velo_flags(VELO_ARGS);
        }
    }
}
"""


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory: pytest.TempPathFactory):
    """``cuda/kernels/codecs/velodyne.cu`` built for the host with g++ (x86-64 SSE doubles, no
    contraction), as a ctypes function ``velo_host_run(write, VELO_PARAMS)``."""
    import shutil
    import subprocess

    from gpu_euclidean_cluster.cuda.codecs.velodyne import VELODYNE_CONSTANTS, VELODYNE_FILES
    from gpu_euclidean_cluster.cuda.module import KernelSource

    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found: the kernel source is not run on the host")
    source = KernelSource("velodyne", VELODYNE_FILES, VELODYNE_CONSTANTS)
    folder = tmp_path_factory.mktemp("velodyne_host")
    (folder / "velodyne_host.cpp").write_text(HOST_SHIM + source.code() + HOST_DRIVER)
    defines = [option for option in source.options() if option.startswith("-D")]
    library = folder / "velodyne_host.so"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared",
         "-fPIC", *defines, str(folder / "velodyne_host.cpp"), "-o", str(library)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    function = ctypes.CDLL(str(library)).velo_host_run
    kinds = []
    text = re.search(r"#define VELO_PARAMS\s*\\\n(.*?)\n\n", KERNEL_FILE.read_text(), re.S)
    for declaration in text.group(1).replace("\\\n", " ").split(","):
        kinds.append(
            ctypes.c_void_p if "*" in declaration
            else ctypes.c_double if declaration.split()[0] == "double"
            else ctypes.c_int
        )  # fmt: skip
    function.argtypes = [ctypes.c_int, *kinds]
    function.restype = None
    return function


def host_decode(run, tables: VelodyneTables, packets: np.ndarray, deltas: np.ndarray):
    """``CudaPacketDecoder.decode``'s steps with the host-built kernels."""
    count = packets.shape[0]
    packets = np.ascontiguousarray(packets)
    deltas = np.ascontiguousarray(deltas, np.float64)
    scalars = scalar_args(tables)
    keep_alive = [np.ascontiguousarray(tables.i32[k]) for k in I32_TABLES]
    keep_alive += [np.ascontiguousarray(tables.f64[k]) for k in F64_TABLES]
    head = [packets.ctypes.data, deltas.ctypes.data, count]
    head += [scalars[name].item() for name in SCALAR_PARAMS]
    head += [array.ctypes.data for array in keep_alive]
    flags = np.full(count * PACKET_THREADS, -1, np.int32)
    dummy_points, dummy_index = np.zeros(8, np.uint32), np.zeros(1, np.int64)
    run(0, *head, flags.ctypes.data, dummy_points.ctypes.data, dummy_index.ctypes.data)
    assert np.isin(flags, (0, 1)).all(), "velo_flags left a slot unwritten"
    rank = np.cumsum(flags, dtype=np.int32)
    total = int(rank[-1]) if rank.size else 0
    points = np.zeros((total, 8), np.uint32)
    index = np.full(total, -1, np.int64)
    if total:
        run(1, *head, rank.ctypes.data, points.ctypes.data, index.ctypes.data)
    return points_to_host(points.view(np.uint8)), index


@needs_nebula
@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize("folder", sorted(CASES))
def test_kernel_source_on_the_host_equals_the_cpu_twin_on_the_real_bags(
    folder, timing, host_kernels
):
    packets, seconds, calibration, settings = _bag(folder, timing)
    scan = np.repeat(seconds[::50], 50)[: seconds.size] - 0.05
    want = decode_packets(packets, seconds, scan, calibration, settings)
    deltas = packet_deltas(seconds, scan, len(seconds))
    got = host_decode(host_kernels, build_tables(calibration, settings), packets, deltas)
    assert_same_points(got, want, f"{folder} {timing} (kernel source on the host)")


@pytest.mark.parametrize("timing", AZIMUTH_TIMINGS)
@pytest.mark.parametrize(("model", "calibration_name"), HDL_CASES)
def test_kernel_source_on_the_host_equals_the_cpu_twin_on_hdl_packets(
    model, calibration_name, timing, host_kernels
):
    calibration = _calibration(calibration_name)
    settings = _hdl_settings(model, timing)
    packets, *_ = _hdl_packets(settings.sensor.lasers, calibration, seed=settings.sensor.lasers)
    stamps = np.array([10.0, 10.0005, 10.001])
    want = decode_packets(packets, stamps, 10.0, calibration, settings)
    tables = build_tables(calibration, settings)
    got = host_decode(host_kernels, tables, packets, packet_deltas(stamps, 10.0, 3))
    assert_same_points(got, want, f"{model} {timing} (kernel source on the host)")


@pytest.mark.parametrize(RANDOM_CASE, list(_random_cases()))
def test_kernel_source_on_the_host_equals_the_cpu_twin_on_random_packets(
    label, seed, low, high, timing, host_kernels
):
    calibration, settings, packets, seconds = _random_input(label, seed, low, high, timing)
    want = decode_packets(packets, seconds, 5.001, calibration, settings)
    tables = build_tables(calibration, settings)
    got = host_decode(host_kernels, tables, packets, packet_deltas(seconds, 5.001, 40))
    assert_same_points(got, want, f"{label} seed {seed} window {low}-{high} {timing} (host)")
