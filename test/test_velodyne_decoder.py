"""The Velodyne decoder against nebula's own ground truth, and on packets built from known
returns for the HDL-32E and HDL-64E.

The three real packet bags (``$LIDAR_DATA_DIR/nebula``, see its README) are decoded with the
settings of nebula's decoder tests, which feed the decoder each packet's ``stamp.sec`` only,
hence ``VelodyneScanMessage.packet_whole_seconds``. nebula compares the sweep completed while
reading the message whose record time names the PCD, point by point in order; so do we, and
every field nebula wrote must match bit for bit (the VLP-32C and VLS-128 PCDs hold x y z only,
the VLP-16 PCD the whole ``PointXYZIRCAEDT``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import platform
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.pcd import read_pcd
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    POINT_DTYPE,
    DecoderSettings,
    SweepDecoder,
    decode_packets,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.calibration import float32_from_decimal
from gpu_euclidean_cluster.pointcloud_io.velodyne.libm import glibc_cosf, glibc_sinf
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import rotation_tables

from ._velodyne_helpers import encode_packets, expected_returns, raw_for_distance

REPO = Path(__file__).resolve().parents[1]
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


def _decode_bag(folder: str) -> tuple[dict[int, list], list]:
    """Sweeps completed per message (by record time), and the messages."""
    bag, _, settings, calibration = CASES[folder]
    decoder = SweepDecoder(load_calibration(CALIBRATION / calibration), settings)
    scans = list(read_velodyne_scans(NEBULA / folder / bag))
    sweeps = {s.bag_time_ns: decoder.feed(s.packets, s.packet_whole_seconds) for s in scans}
    return sweeps, scans


@needs_nebula
@pytest.mark.parametrize("folder", sorted(CASES))
def test_sweep_matches_nebula_bit_for_bit(folder: str):
    _, stem, settings, _ = CASES[folder]
    sweeps, _ = _decode_bag(folder)
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
def test_sweeps_do_not_depend_on_how_packets_are_grouped():
    """A sweep spans messages: feeding the VLS-128 packets 97 at a time gives the same sweeps."""
    _, _, settings, calibration = CASES["vls128"]
    by_message, scans = _decode_bag("vls128")
    expected = [s for sweeps in by_message.values() for s in sweeps]
    packets = np.concatenate([s.packets for s in scans])
    seconds = np.concatenate([s.packet_whole_seconds for s in scans])
    decoder = SweepDecoder(load_calibration(CALIBRATION / calibration), settings)
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
def test_hdl_packets_decode_to_the_returns_they_encode(model: str, calibration_name: str):
    path = CALIBRATION / calibration_name
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    calibration = load_calibration(path)
    settings = DecoderSettings(model, "SingleStrongest", "velodyne", 0.4, 130.0, 0.0, 0, 360)
    lasers = settings.sensor.lasers
    packets, rotation, raw, intensity, laser = _hdl_packets(lasers, calibration, seed=lasers)
    stamps = np.array([10.0, 10.0005, 10.001])
    points, packet_index = decode_packets(packets, stamps, 10.0, calibration, settings)
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


def test_cloud_window_and_ranges_drop_points():
    path = CALIBRATION / "HDL32.yaml"
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    calibration = load_calibration(path)
    packets, rotation, *_ = _hdl_packets(32, calibration, seed=3)
    everything = DecoderSettings("HDL32", "SingleStrongest", "v", 0.4, 130.0, 0.0, 0, 360)
    window = DecoderSettings("HDL32", "SingleStrongest", "v", 0.4, 50.0, 0.0, 359, 1)
    all_points, _ = decode_packets(packets, np.zeros(3), 0.0, calibration, everything)
    some, index = decode_packets(packets, np.zeros(3), 0.0, calibration, window)
    # VLP-32-family window: the raw block rotation, wrapped (>= 359 degrees or <= 1 degree)
    keep_block = (rotation >= 35900) | (rotation <= 100)
    near = all_points["distance"].astype(np.float64) < 50.0
    kept = np.repeat(keep_block.reshape(-1), 32) & near
    assert 0 < kept.sum() < kept.size
    assert some.tobytes() == all_points[kept].tobytes()
    assert np.all(np.diff(index) >= 0)
