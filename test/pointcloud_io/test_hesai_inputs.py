"""Bad input to the Hesai decoder: one clear line each, never a traceback or a wrong sweep.

Packets of another model or of the wrong size, return modes and azimuths the model never sends,
an empty ``PandarScan``, streams over the budget; calibration files with missing channels, the
wrong channel count or broken lines, ``.dat`` files that are cut short or of another version;
settings nebula refuses; files that are not bags or CDR. The packets and calibrations are built
here, so these tests need no shared data. A refused call leaves the decoder as it was (or fresh,
where said): the next good packets decode as on a fresh decoder.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.hesai import (
    CalibrationError,
    DecoderSettings,
    DecoderSettingsError,
    HesaiBagError,
    HesaiCalibration,
    HesaiCdrError,
    PacketsRefusedError,
    SweepDecoder,
    load_calibration,
    load_correction,
    load_for_model,
    read_pandar_scans,
    scan_from_cdr,
    sensor_model,
)
from gpu_euclidean_cluster.pointcloud_io.hesai.calibration import parse_correction

from .._hesai_helpers import encode_packet, layout, synthetic_stream


def one_line(error: BaseException) -> str:
    text = str(error)
    assert text and "\n" not in text and "Traceback" not in text
    return text


def flat_calibration(model: str) -> HesaiCalibration:
    """A CSV calibration of ``model``'s channels: elevations spread, no azimuth offsets."""
    channels = sensor_model(model).channels
    elevation = np.linspace(-15, 15, channels).astype(np.float32)
    return HesaiCalibration(elevation, np.zeros(channels, np.float32), f"<{model}>")


def correction_bytes(frames: list[tuple[int, int]], channels: int = 128, minor: int = 5) -> bytes:
    """A version 1.``minor`` ``.dat`` with the given fields (encoder units), resolution 1, no
    per-channel angles or adjustments."""
    head = bytes([0xEE, 0xFF, 1, minor, channels, len(frames), len(frames)]) + bytes(8) + b"\x01"
    body = struct.pack(f"<{len(frames)}I", *(s for s, _ in frames))
    body += struct.pack(f"<{len(frames)}I", *(e for _, e in frames))
    body += bytes(8 * channels + 2 * 180 * channels)
    return head + body + bytes(32)


def decoder(model: str, **overrides) -> SweepDecoder:
    settings = DecoderSettings.for_model(model, **overrides)
    if settings.sensor.corrector == "correction":
        calibration = parse_correction(correction_bytes([(0, 4_608_000), (4_608_000, 0)]))
    else:
        calibration = flat_calibration(model)
    return SweepDecoder(calibration, settings)


def stream(model: str, count: int = 40, **tail):
    """``count`` packets of ``model`` turning 1 degree a group (AT128: within its first field)."""
    turn = 9_216_000 if model == "PandarAT128" else 36000
    return synthetic_stream(model, count, turn // 360, 0x37, seed=3, first=turn // 12,
                            turn=turn, **tail)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# packets


@pytest.mark.parametrize(
    "model, other, kind",
    [
        ("PandarQT128", "PandarXT32", "packet_size"),  # 1080 bytes, a QT128's are 1095
        ("Pandar40P", "Pandar64", "packet_size"),
        ("PandarXT16", "PandarXT32", "other_model"),  # 32 lasers, not 16
        ("PandarXT32M", "PandarXT32", "other_model"),  # 8 blocks, not 6
        ("Pandar64", "Pandar40P", "other_model"),  # no 0xEE 0xFF header
        ("Pandar128E4X", "PandarQT128", "other_model"),  # 128 lasers, 2 blocks, protocol 3
        ("Pandar128E4X", "PandarAT128", "other_model"),  # protocol 4
    ],
)
def test_packets_of_another_model_are_refused(model: str, other: str, kind: str):
    subject = decoder(model)
    packets, sizes = stream(other)
    with pytest.raises(PacketsRefusedError) as caught:
        subject.feed(packets, sizes)
    assert caught.value.kind == kind
    assert model in one_line(caught.value)
    # the decoder is as it was: its own packets decode as on a fresh decoder
    own, own_sizes = stream(model, 400)
    fresh = decoder(model)
    got, expected = subject.feed(own, own_sizes), fresh.feed(own, own_sizes)
    assert len(got) == len(expected) >= 1
    assert all(a.points.tobytes() == b.points.tobytes() for a, b in zip(got, expected, strict=True))


@pytest.mark.parametrize("size", [1000, 1501, 0])
def test_packet_sizes_out_of_range_are_refused(size: int):
    packets, sizes = stream("PandarXT32")
    sizes[7] = size
    with pytest.raises(PacketsRefusedError) as caught:
        decoder("PandarXT32").feed(packets, sizes)
    assert caught.value.kind == "packet_size" and "packet 7" in one_line(caught.value)


def test_a_longer_packet_is_read_as_nebula_reads_it():
    """The UDP sequence or cyber-security trailer after nebula's structure changes nothing."""
    packets, sizes = stream("PandarXT32", 400)
    expected = decoder("PandarXT32").feed(packets, sizes)
    got = decoder("PandarXT32").feed(packets, sizes + 32)
    assert [s.points.tobytes() for s in got] == [s.points.tobytes() for s in expected]


@pytest.mark.parametrize(
    "model, byte, words",
    [
        ("PandarXT32", 0x00, "unknown"),
        ("PandarXT32", 0x3D, "TRIPLE_FIRST_LAST_STRONGEST, 3 returns"),  # at most 2 returns
    ],
)
def test_return_modes_the_model_never_sends_are_refused(model: str, byte: int, words: str):
    packets, sizes = stream(model)
    packets[3, sensor_model(model).packet.return_mode_at] = byte
    with pytest.raises(PacketsRefusedError) as caught:
        decoder(model).feed(packets, sizes)
    assert caught.value.kind == "return_mode" and words in one_line(caught.value)


def test_block_azimuths_beyond_a_turn_are_refused():
    packets, sizes = stream("PandarXT16")
    spec = layout("PandarXT16")
    packets[5, spec["header"] : spec["header"] + 2] = np.frombuffer(
        struct.pack("<H", 36000), np.uint8
    )
    with pytest.raises(PacketsRefusedError) as caught:
        decoder("PandarXT16").feed(packets, sizes)
    assert caught.value.kind == "azimuth" and "36000" in one_line(caught.value)


def test_at128_azimuths_outside_every_field_are_refused():
    """nebula throws "Azimuth ... not in any field"; here the call is refused."""
    settings = DecoderSettings.for_model("PandarAT128")
    narrow = parse_correction(correction_bytes([(0, 1_000_000)]))
    packets, sizes = stream("PandarAT128")  # encoder angles from 30 degrees: 768 000 units on
    with pytest.raises(PacketsRefusedError) as caught:
        SweepDecoder(narrow, settings).feed(packets, sizes)
    assert caught.value.kind == "azimuth" and "field" in one_line(caught.value)


def test_an_empty_pandar_scan_is_refused_in_one_line():
    subject = decoder("PandarQT64")
    with pytest.raises(PacketsRefusedError) as caught:
        subject.feed(np.zeros((0, 1500), np.uint8), np.zeros(0, np.int64))
    assert caught.value.kind == "no_packets" and "without packets" in one_line(caught.value)


def test_a_call_over_the_budget_is_refused():
    model = sensor_model("PandarXT16")
    packets, sizes = stream("PandarXT16", 1)
    count = model.sweep_packet_budget + 1
    with pytest.raises(PacketsRefusedError) as caught:
        decoder("PandarXT16").feed(np.repeat(packets, count, 0), np.repeat(sizes, count))
    assert caught.value.kind == "message_over_budget"
    assert str(model.sweep_packet_budget) in one_line(caught.value)


def test_a_sweep_that_never_completes_is_dropped_at_the_budget():
    """A motor turning 0.01 degree a firing never reaches the cut: at the budget the sweep is
    dropped and the decoder starts afresh."""
    model = sensor_model("PandarXT16")
    budget = model.sweep_packet_budget
    packet, size = stream("PandarXT16", 1)
    packets = np.repeat(packet, budget + 1, 0)
    spec = layout("PandarXT16")
    block = 2 + spec["channels"] * spec["unit"]
    encoder = 1000 + np.arange((budget + 1) * 8).reshape(-1, 8) // 2  # dual: pairs share one
    for b in range(8):
        at = spec["header"] + b * block
        packets[:, at] = encoder[:, b] & 0xFF
        packets[:, at + 1] = encoder[:, b] >> 8
    packets[:, model.packet.return_mode_at] = 0x39
    sizes = np.full(budget + 1, size)
    subject = decoder("PandarXT16")
    assert subject.feed(packets[:budget], sizes[:budget]) == []
    assert subject.held_packets == budget
    with pytest.raises(PacketsRefusedError) as caught:
        subject.feed(packets[budget:], sizes[budget:])
    assert caught.value.kind == "sweep_over_budget" and "turning" in one_line(caught.value)
    assert subject.held_packets == 0


# ---------------------------------------------------------------------------------------------
# calibration files


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def csv_text(channels: Iterable[int], header: str = "Laser id,Elevation,Azimuth") -> str:
    return header + "\n" + "".join(f"{c},{c * 0.5 - 10:.3f},{0.1:.3f}\n" for c in channels)


def test_a_calibration_with_missing_channels_is_refused(tmp_path: Path):
    path = write(tmp_path, "gaps.csv", csv_text([c for c in range(1, 33) if c not in (5, 9)]))
    with pytest.raises(CalibrationError) as caught:
        load_calibration(path)
    message = one_line(caught.value)
    assert "gaps.csv" in message and "channel 5, 9 missing" in message


def test_a_calibration_missing_the_last_channels_is_refused_for_its_model(tmp_path: Path):
    path = write(tmp_path, "short.csv", csv_text(range(1, 31)))
    with pytest.raises(CalibrationError) as caught:
        load_for_model(path, sensor_model("PandarXT32"))
    assert "30 channels, but a PandarXT32 has 32" in one_line(caught.value)


def test_another_models_calibration_is_refused(tmp_path: Path):
    path = write(tmp_path, "xt32.csv", csv_text(range(1, 33), "Channel,Elevation,Azimuth"))
    assert load_calibration(path).channels == 32
    with pytest.raises(CalibrationError) as caught:
        load_for_model(path, sensor_model("PandarQT128"))
    assert "32 channels, but a PandarQT128 has 128" in one_line(caught.value)
    with pytest.raises(CalibrationError) as caught:
        SweepDecoder(load_calibration(path), DecoderSettings.for_model("PandarQT128"))
    one_line(caught.value)


@pytest.mark.parametrize(
    "text, words",
    [
        ("Channel,Elevation,Azimuth\n1,2.5,0.1\n2,3.5\n", "line 3: 2 fields"),
        ("Channel,Elevation,Azimuth\n1,2.5,0.1\n1,3.5,0.2\n", "channel 1 is listed twice"),
        ("Channel,Elevation,Azimuth\n1,abc,0.1\n", "'abc' is not a decimal number"),
        ("Channel,Elevation,Azimuth\n1,95,0.1\n", "elevation 95 is outside [-90, 90]"),
        ("Channel,Elevation,Azimuth\n0,1,0.1\n", "channel 0 is outside [1, 128]"),
        ("Channel,Elevation,Azimuth\n", "no channel lines"),
        ("Channel,Elevation,Azimuth\n1,1e-999999,0\n", "exponent"),
    ],
)
def test_broken_calibration_lines_are_refused(tmp_path: Path, text: str, words: str):
    with pytest.raises(CalibrationError) as caught:
        load_calibration(write(tmp_path, "bad.csv", text))
    assert words in one_line(caught.value)


def test_a_folder_or_a_missing_file_is_not_a_calibration(tmp_path: Path):
    with pytest.raises(CalibrationError) as caught:
        load_calibration(tmp_path)
    assert "not a regular file" in one_line(caught.value)
    with pytest.raises(CalibrationError) as caught:
        load_correction(tmp_path / "absent.dat")
    assert "cannot open" in one_line(caught.value)


@pytest.mark.parametrize(
    "data, words",
    [
        (correction_bytes([(0, 100)])[:-2000], "the counts need"),
        (correction_bytes([(0, 100)], minor=3), "version 1.3"),
        (b"\x00" * 100, "no 0xEE 0xFF delimiter"),
        (correction_bytes([(0, 100)], channels=0), "0 channels"),
    ],
)
def test_broken_correction_files_are_refused(tmp_path: Path, data: bytes, words: str):
    path = tmp_path / "AT128.dat"
    path.write_bytes(data)
    with pytest.raises(CalibrationError) as caught:
        load_correction(path)
    assert words in one_line(caught.value)


def test_the_wrong_kind_of_calibration_is_refused(tmp_path: Path):
    dat = tmp_path / "AT128.dat"
    dat.write_bytes(correction_bytes([(0, 100)], channels=32))
    with pytest.raises(CalibrationError) as caught:
        SweepDecoder(load_correction(dat), DecoderSettings.for_model("PandarXT32"))
    assert "needs a CSV calibration" in one_line(caught.value)
    with pytest.raises(CalibrationError) as caught:
        SweepDecoder(flat_calibration("Pandar128E4X"), DecoderSettings.for_model("PandarAT128"))
    assert "needs an AT128 .dat correction" in one_line(caught.value)


# ---------------------------------------------------------------------------------------------
# settings, bags, CDR


@pytest.mark.parametrize(
    "model, overrides, words",
    [
        ("PandarXT99", {}, "unknown Hesai sensor model"),
        ("Pandar64", {"return_mode": "First"}, "return_mode 'First' is not one of a Pandar64's"),
        ("PandarXT32", {"cloud_min_angle": 30, "cloud_max_angle": 150, "cut_angle": 200.0},
         "outside the field of view"),
        ("PandarXT32", {"cloud_min_angle": 30, "cloud_max_angle": 150, "cut_angle": 30.0},
         "field of view's start"),
        ("PandarXT32", {"cut_angle": 360.0}, "cuts a whole circle at 360"),
        ("PandarXT32", {"dual_return_distance_threshold": 0.6}, "outside [0.01, 0.5]"),
        ("PandarAT128", {"sync_angle": 10}, "sync_angle 10 is not a whole degree in [30, 150]"),
        ("PandarQT64", {"min_range": 5.0, "max_range": 1.0}, "no return would be kept"),
        ("PandarQT64", {"cloud_max_angle": 400}, "cloud_max_angle 400"),
    ],
)  # fmt: skip
def test_settings_nebula_refuses_are_refused(model: str, overrides: dict, words: str):
    with pytest.raises(ValueError) as caught:
        DecoderSettings.for_model(model, **overrides)
    assert words in one_line(caught.value)
    if model != "PandarXT99":
        assert isinstance(caught.value, DecoderSettingsError)


def test_the_field_of_view_may_wrap_and_the_cut_may_end_it():
    wraps = DecoderSettings.for_model("PandarXT32", cloud_min_angle=300, cloud_max_angle=60)
    assert not wraps.cuts_at_fov_end and not wraps.whole_circle
    at_end = DecoderSettings.for_model("PandarAT128")
    assert at_end.cuts_at_fov_end
    assert DecoderSettings.for_model("PandarXT32").whole_circle


def test_not_a_bag_is_one_line(tmp_path: Path):
    with pytest.raises(HesaiBagError) as caught:
        list(read_pandar_scans(tmp_path))
    assert "no metadata.yaml" in one_line(caught.value)


@pytest.mark.parametrize(
    "data, words",
    [
        (b"\x00\x01\x00\x00", "too short"),
        (b"\x00\x07" + bytes(30), "not plain CDR"),
        (b"\x00\x01\x00\x00" + struct.pack("<iII", 1, 2, 1) + b"\0\0\0\0" + struct.pack("<I", 3),
         "3 packets need"),
    ],
)  # fmt: skip
def test_bytes_that_are_not_a_pandar_scan_are_one_line(data: bytes, words: str):
    with pytest.raises(HesaiCdrError) as caught:
        scan_from_cdr(data)
    assert words in one_line(caught.value)


def test_encoded_packets_carry_nebulas_sizes():
    """The packets built here have the sizes of nebula's structures (the layouts agree)."""
    for name, model in (("PandarXT32", 1080), ("PandarQT128", 1095), ("Pandar128E4X", 861)):
        spec = layout(name)
        _, size = encode_packet(
            name, np.zeros(spec["blocks"], int), np.zeros((spec["blocks"], spec["channels"]), int),
            np.zeros((spec["blocks"], spec["channels"]), int), 0x37, 0, 0,
        )  # fmt: skip
        assert size == model == sensor_model(name).packet.size
