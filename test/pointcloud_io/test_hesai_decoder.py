"""The Hesai decoder against nebula's own ground truth: four real packet bags and their PCDs.

The bags (``$LIDAR_DATA_DIR/nebula_hesai``, see its README) are decoded with the settings of
nebula's ``hesai_ros_decoder_test_main.cpp`` (ranges as the test's float literals, ``0.3F``;
``dual_return_distance_threshold`` 0.1, its parameter default). nebula compares every sweep
completed while reading the message whose record time names the PCD, point by point in order,
x y z exactly; so do we, with their float bits. The other fields (the PCDs lack them) are
checked against the geometry here and, bit for bit, against a scalar transcription of nebula's
decoder in ``test_hesai_synthetic.py``. Also here: reading the bags (one has an empty storage
identifier) and the CDR parse of their messages.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.hesai import (
    POINT_DTYPE,
    DecoderSettings,
    SweepDecoder,
    load_for_model,
    pandar_typestore,
    read_pandar_scans,
    scan_from_cdr,
    scan_to_cdr,
)
from gpu_euclidean_cluster.pointcloud_io.pcd import read_pcd

from ..conftest import LIDAR_DATA_DIR

NEBULA_HESAI = LIDAR_DATA_DIR / "nebula_hesai"
CALIBRATION = NEBULA_HESAI / "calibration"

#: folder -> (bag, PCD stem, model, return_mode, min_range, max_range): nebula's test table.
CASES = {
    "40p": ("1673400149412331409", "1673400149711850138", "Pandar40P", "Dual", 0.3, 200.0),
    "64": ("1673403880599376836", "1673403880898440686", "Pandar64", "Dual", 0.3, 200.0),
    "xt32": ("1673400677802009732", "1673400678101968885", "PandarXT32", "Dual", 0.05, 120.0),
    "qt128": (
        "1730273789074637152", "1730273789174759609", "PandarQT128", "LastStrongest", 0.3, 300.0,
    ),
    # nebula's repository holds these three too; they run where the data folder has them
    "qt64": ("1673401195788312575", "1673401196087570870", "PandarQT64", "Dual", 0.1, 60.0),
    "xt16": ("1732848127890747768", "1732848128093928016", "PandarXT16", "Dual", 0.05, 120.0),
    "xt32m": (
        "1660893203042895158", "1660893203292679064", "PandarXT32M", "LastStrongest", 0.5, 300.0,
    ),
}  # fmt: skip
#: Points of each PCD (the README's table; nebula's PCDs of the other three).
PCD_POINTS = {
    "40p": 56762, "64": 93591, "xt32": 63021, "qt128": 73560, "qt64": 34158, "xt16": 26287,
    "xt32m": 13574,
}  # fmt: skip
#: The return types of each bag's return mode (dual last+strongest; the QT64's first+last; the
#: XT32M's first+strongest), IDENTICAL (6) included.
RETURN_TYPES = {"qt64": {1, 2, 6}, "xt32m": {2, 3, 6, 8, 9}}
DUAL_LAST_STRONGEST_TYPES = {1, 3, 6, 8, 10}


def bag_present(folder: str) -> bool:
    return (NEBULA_HESAI / folder / CASES[folder][0]).is_dir()


def needs_bag(folder: str):
    """Skip the test, with the reason, where ``folder``'s bag is absent."""
    return pytest.mark.skipif(
        not bag_present(folder),
        reason=f"nebula's {folder} bag not found in {NEBULA_HESAI} (set LIDAR_DATA_DIR)",
    )


def cases() -> list:
    """Each folder, skipped with the reason where its bag is absent."""
    return [pytest.param(folder, marks=needs_bag(folder)) for folder in CASES]


def settings_of(folder: str) -> DecoderSettings:
    """nebula's test settings for ``folder`` (its float literals rounded to float32 first)."""
    _, _, model, mode, low, high = CASES[folder]
    return DecoderSettings(
        model, mode, "hesai", float(np.float32(low)), float(np.float32(high)), 0, 360, 0.0, 0
    )


def decoder_of(folder: str) -> SweepDecoder:
    settings = settings_of(folder)
    calibration = load_for_model(CALIBRATION / f"{settings.model}.csv", settings.sensor)
    return SweepDecoder(calibration, settings)


def decode_bag(folder: str) -> dict[int, list]:
    """Sweeps completed per message, by the message's record time."""
    decoder = decoder_of(folder)
    scans = read_pandar_scans(NEBULA_HESAI / folder / CASES[folder][0])
    return {scan.bag_time_ns: decoder.feed(scan.packets, scan.sizes) for scan in scans}


@pytest.fixture(scope="module")
def decoded() -> dict[str, dict[int, list]]:
    """Each bag present decoded once for the module."""
    return {folder: decode_bag(folder) for folder in CASES if bag_present(folder)}


@pytest.mark.parametrize("folder", cases())
def test_sweep_matches_nebula_bit_for_bit(decoded, folder: str):
    _, stem, *_ = CASES[folder]
    completed = decoded[folder][int(stem)]
    assert len(completed) == 1, "nebula compares the one sweep completed in this message"
    sweep = completed[0]
    assert sweep.points.dtype == POINT_DTYPE and sweep.frame_id == "hesai"
    reference = read_pcd(NEBULA_HESAI / folder / f"{stem}.pcd")
    assert reference.xyz.shape[0] == PCD_POINTS[folder]
    assert sweep.points.shape[0] == reference.xyz.shape[0]
    xyz = np.stack([sweep.points["x"], sweep.points["y"], sweep.points["z"]], axis=1)
    np.testing.assert_array_equal(xyz.view(np.uint32), reference.xyz.view(np.uint32))


@pytest.mark.parametrize("folder", cases())
def test_sweep_fields_agree_with_the_geometry(decoded, folder: str):
    """The fields the PCDs lack: distance, azimuth and elevation describe x y z; channels,
    return types (a dual last+strongest stream) and point times are in range."""
    _, stem, *_ = CASES[folder]
    settings = settings_of(folder)
    sweep = decoded[folder][int(stem)][0]
    p = sweep.points
    xyz = np.stack([p["x"], p["y"], p["z"]], axis=1).astype(np.float64)
    norm = np.linalg.norm(xyz, axis=1)
    np.testing.assert_allclose(norm, p["distance"], rtol=2e-6, atol=2e-6)
    assert np.all((p["distance"] >= settings.min_range) & (p["distance"] <= settings.max_range))
    flat = np.hypot(xyz[:, 0], xyz[:, 1]) > 0.5
    heading = np.mod(np.arctan2(xyz[:, 0], xyz[:, 1]), 2 * np.pi)
    turn = np.angle(np.exp(1j * (heading - p["azimuth"])))
    assert np.abs(turn[flat]).max() < 1e-5
    np.testing.assert_allclose(np.arcsin(xyz[:, 2] / norm), p["elevation"], atol=1e-5)
    assert np.all((p["azimuth"] >= 0) & (p["azimuth"] < 2 * np.pi))
    assert p["channel"].max() < settings.sensor.channels
    assert set(np.unique(p["return_type"])) <= RETURN_TYPES.get(folder, DUAL_LAST_STRONGEST_TYPES)
    # a 10 Hz sweep cut at 0: a point fires about azimuth / 2 pi of 0.1 s after the stamp; one
    # at azimuth 0 exactly closes the sweep (the cut belongs to the sweep before it)
    turned = np.where(p["azimuth"] == 0, 2 * np.pi, p["azimuth"])
    lag = p["time_stamp"] / 1e9 - turned / (2 * np.pi) * 0.1
    assert np.ptp(lag) < 0.01


@needs_bag("64")
def test_sweeps_do_not_depend_on_how_packets_are_grouped(decoded):
    """A sweep spans messages: the 64's packets fed 97 at a time give the same sweeps."""
    expected = [s for sweeps in decoded["64"].values() for s in sweeps]
    scans = list(read_pandar_scans(NEBULA_HESAI / "64" / CASES["64"][0]))
    packets = np.concatenate([s.packets for s in scans])
    sizes = np.concatenate([s.sizes for s in scans])
    decoder = decoder_of("64")
    got = [
        sweep
        for start in range(0, packets.shape[0], 97)
        for sweep in decoder.feed(packets[start : start + 97], sizes[start : start + 97])
    ]
    assert [s.stamp_ns for s in got] == [s.stamp_ns for s in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.points.tobytes() == theirs.points.tobytes()


@needs_bag("xt32")
def test_sweep_stamps_are_nebulas_seconds(decoded):
    """Consecutive sweeps of a 10 Hz sensor are 0.1 s apart; ``stamp`` is nebula's double."""
    sweeps = [s for sweeps in decoded["xt32"].values() for s in sweeps]
    gaps = np.diff([s.stamp_ns for s in sweeps])
    assert np.all(np.abs(gaps - 100_000_000) < 2_000_000)
    stamp = sweeps[-1].stamp_ns
    assert sweeps[-1].stamp == float(stamp // 10**9) + float(stamp % 10**9) / 1e9


@needs_bag("qt128")
def test_empty_storage_identifier_is_read_as_sqlite3(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING):
        scans = list(read_pandar_scans(NEBULA_HESAI / "qt128" / CASES["qt128"][0]))
    assert "empty storage or serialization setting" in caplog.text
    assert [s.bag_time_ns for s in scans] == [1730273789074637152, 1730273789174759609]
    assert all(s.packets.shape == (900, 1500) and set(s.sizes) == {1127} for s in scans)


@pytest.mark.parametrize("folder", [pytest.param(f, marks=needs_bag(f)) for f in ("40p", "qt128")])
def test_cdr_parse_equals_rosbags(folder: str):
    """:func:`scan_from_cdr` of the bag's serialized bytes equals rosbags' message, and
    :func:`scan_to_cdr` writes those bytes back."""
    from rosbags.rosbag2 import Reader

    bag = NEBULA_HESAI / folder / CASES[folder][0]
    store = pandar_typestore()
    with Reader(next(Path(bag).glob("*.db3"))) as reader:
        connection, _, raw = next(iter(reader.messages()))
    message = store.deserialize_cdr(raw, connection.msgtype)
    scan = scan_from_cdr(raw)
    assert scan.frame_id == message.header.frame_id
    assert scan.stamp_ns == message.header.stamp.sec * 10**9 + message.header.stamp.nanosec
    assert scan.packets.shape[0] == len(message.packets)
    np.testing.assert_array_equal(scan.packets[5], np.asarray(message.packets[5].data))
    assert list(scan.sizes) == [p.size for p in message.packets]
    assert list(scan.stamp_nanosec) == [p.stamp.nanosec for p in message.packets]
    assert scan_to_cdr(scan) == bytes(raw)
