"""Hostile input to the Velodyne decoder: every refusal before the work, one line.

- Calibration files: each value's text and range, the laser count and ids, the file's kind and
  size, checked before parsing (no hang, no traceback, no gigabytes); against the sensor model.
- Decoder settings under which no return could be kept.
- The sweep decoder's budget (two rotations at 300 RPM) for a call and for a sweep, and the
  packets' product id against the model; each twin alike (the CUDA twin shares the state
  machine: its case runs where CUDA is).

The shipped calibrations (``config/velodyne/``) and synthetic packets: no recording needed.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    SENSOR_MODELS,
    CalibrationError,
    DecoderSettings,
    SweepDecoder,
    decode_packets,
    load_calibration,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.calibration import (
    MAX_CALIBRATION_BYTES,
    float32_from_decimal,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import DecoderSettingsError
from gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps import PacketsRefusedError

from .._velodyne_helpers import packet_stamps, rotating_packets, stuck_packets
from ..conftest import cuda_only, twin_backend

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "velodyne"
VLP16_TEXT = (SHIPPED / "VLP16.yaml").read_text()
VLP16 = DecoderSettings("VLP16", "SingleStrongest")


def _first(old: str, new: str) -> str:
    assert old in VLP16_TEXT, old
    return VLP16_TEXT.replace(old, new, 1)


#: name -> (the VLP-16 file broken so, the reason the refusal gives)
BROKEN_CALIBRATIONS = {
    "num_lasers 0": (_first("num_lasers: 16", "num_lasers: 0"), "num_lasers 0 is outside [1, 128]"),
    "num_lasers -5": (_first("num_lasers: 16", "num_lasers: -5"), "num_lasers -5 is outside"),
    "num_lasers 1e3": (_first("num_lasers: 16", "num_lasers: 1e3"), "is not a whole number"),
    "a value of 1e39": (
        _first("dist_correction: 0.0", "dist_correction: 1e39"),
        "laser 0: dist_correction 1e39 is outside [-100, 100]",
    ),
    "a value of 1e400": (
        _first("dist_correction: 0.0", "dist_correction: 1e400"),
        "laser 0: dist_correction: '1e400' has an exponent beyond +-64",
    ),
    "max_intensity 1e30": (
        _first("focal_slope: 0.0,", "focal_slope: 0.0, max_intensity: 1e30,"),
        "laser 0: max_intensity 1e30 is outside [0, 255]",
    ),
    "laser_id 1e8": (_first("laser_id: 0,", "laser_id: 100000000,"), "laser_id 100000000 is"),
    "every laser_id 0": (
        re.sub(r"laser_id: \d+", "laser_id: 0", VLP16_TEXT),
        "laser 1: laser_id 0 is laser 0's too",
    ),
    "distance_resolution 0": (
        _first("distance_resolution: 0.002", "distance_resolution: 0"),
        "distance_resolution 0 is outside (0, 1]",
    ),
    "distance_resolution -0.002": (
        _first("distance_resolution: 0.002", "distance_resolution: -0.002"),
        "distance_resolution -0.002 is outside (0, 1]",
    ),
    "a list for a number": (
        _first("rot_correction: 0.0", "rot_correction: [1, 2]"),
        "rot_correction is a list, not a scalar",
    ),
    "a word for a number": (
        _first("rot_correction: 0.0", "rot_correction: .nan"),
        "'.nan' is not a decimal number",
    ),
    "100 digits": (
        _first("rot_correction: 0.0", "rot_correction: 0." + "1" * 100),
        "a number of 102 characters (at most 40)",
    ),
    "nested 20 000 deep": ("a: " + "[" * 20_000 + "]" * 20_000, "not YAML"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_CALIBRATIONS))
def test_a_broken_calibration_is_one_calibration_error(tmp_path, name):
    text, reason = BROKEN_CALIBRATIONS[name]
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(CalibrationError) as refused:
        load_calibration(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: ") and reason in message and "\n" not in message


def test_numbers_are_bounded_before_any_arithmetic():
    assert float32_from_decimal("0.2617993877991494") == np.float32(0.2617993877991494)
    assert float32_from_decimal("1e-64") == np.float32(0)  # read: 64 is the bound
    for text, reason in [
        ("1e-999999999", "exponent beyond"),
        ("1e39", "beyond float32's range"),
        ("9" * 41, "at most 40"),
        ("0x10", "not a decimal number"),
        ("inf", "not a decimal number"),
    ]:
        with pytest.raises(ValueError, match=reason):
            float32_from_decimal(text)


def _load_in_a_process(path: Path) -> subprocess.CompletedProcess:
    """``load_calibration(path)`` in a process of its own, with 2 GiB of address space and a
    minute: what hung or ran out of memory before (a FIFO, ``/dev/zero``, a tiny exponent) ends
    the process either way."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    code = (
        "import sys\n"
        "from gpu_euclidean_cluster.pointcloud_io.velodyne import CalibrationError, "
        "load_calibration\n"
        "try:\n    load_calibration(sys.argv[1])\nexcept CalibrationError as error:\n"
        "    print(error)\n    sys.exit(2)\n"
    )
    try:
        return subprocess.run(
            [sys.executable, "-c", code, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=limit,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"loading {path} did not end within a minute")


@pytest.mark.parametrize("name", ["fifo", "/dev/zero", "folder", "large", "tiny exponent"])
def test_what_hung_or_bloated_start_up_is_refused_at_once(tmp_path, name):
    path = {"/dev/zero": Path("/dev/zero"), "folder": tmp_path}.get(name, tmp_path / "c.yaml")
    reason = "not a regular file"
    if name == "fifo":
        os.mkfifo(path)
    elif name == "large":
        path.write_text(VLP16_TEXT + "#" * MAX_CALIBRATION_BYTES)
        reason = f"over the {MAX_CALIBRATION_BYTES} a calibration file may have"
    elif name == "tiny exponent":
        path.write_text(_first("rot_correction: 0.0", "rot_correction: 1e-999999999"))
        reason = "has an exponent beyond +-64"
    done = _load_in_a_process(path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout.startswith(f"{path}: ") and reason in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("file", "model", "reason"),
    [
        ("VLS128.yaml", "VLP16", "num_lasers 128, but a VLP16 has 16 lasers"),
        ("VLP32.yaml", "VLP16", "num_lasers 32, but a VLP16 has 16 lasers"),
        ("VLP16.yaml", "VLS128", "num_lasers 16, but a VLS128 has 128 lasers"),
        ("num_lasers 8", "VLP16", "num_lasers 8, but a VLP16 has 16 lasers"),
        ("laser_id 20", "VLP16", "laser_id 20 is beyond a VLP16's lasers 0-15"),
    ],
)
def test_a_calibration_of_another_model_is_refused(backend, tmp_path, file, model, reason):
    path = SHIPPED / file
    if file == "num_lasers 8":
        path = tmp_path / "eight.yaml"
        path.write_text(_first("num_lasers: 16", "num_lasers: 8"))
    elif file == "laser_id 20":
        path = tmp_path / "twenty.yaml"
        path.write_text(_first("laser_id: 15,", "laser_id: 20,"))
    calibration = load_calibration(path)  # a calibration in itself: refused for the model
    with pytest.raises(CalibrationError, match=re.escape(f"{path}: {reason}")):
        twin_backend(backend).sweep_decoder(calibration, DecoderSettings(model))


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (dict(min_range=5.0, max_range=1.0), "min_range 5.0 is not below max_range 1.0"),
        (dict(min_range=1.0, max_range=1.0), "min_range 1.0 is not below max_range 1.0"),
        (dict(min_range=math.nan), "min_range nan is not a distance"),
        (dict(max_range=math.nan), "is not below max_range nan"),
        (dict(max_range=-1.0), "is not below max_range -1.0"),
        (dict(cloud_min_angle=90, cloud_max_angle=90), "cloud_min_angle 90 equals"),
        (dict(cloud_min_angle=0.5), "cloud_min_angle 0.5 is not a whole degree"),
        (dict(scan_phase=math.nan), "scan_phase nan outside [0, 360]"),
    ],
)
def test_settings_that_keep_no_return_are_refused(settings, reason):
    with pytest.raises(DecoderSettingsError, match=re.escape(reason)):
        DecoderSettings("VLP16", **settings)
    assert DecoderSettings("VLP16", max_range=math.inf).max_range == math.inf
    assert DecoderSettings("VLP16", cloud_min_angle=360, cloud_max_angle=0).cloud_max_angle == 0


def test_a_refusal_names_the_settings_as_a_front_end_calls_them():
    with pytest.raises(DecoderSettingsError) as refused:
        DecoderSettings("VLP16", min_range=5.0, max_range=1.0)
    names = {"min_range": "sensor_min_range", "max_range": "sensor_max_range"}
    assert refused.value.naming(names) == (
        "sensor_min_range 5.0 is not below sensor_max_range 1.0: no return would be kept"
    )


def test_the_budget_is_two_rotations_at_300_rpm_in_dual_return():
    budgets = {name: model.sweep_packet_budget for name, model in SENSOR_MODELS.items()}
    assert budgets == {"VLP16": 603, "VLP32": 1206, "HDL32": 1447, "HDL64": 2315, "VLS128": 7505}
    # a VLP-16 sends 754 single-return packets a second (its manual), 1 508 in dual return
    assert SENSOR_MODELS["VLP16"].packets_per_second(False) == pytest.approx(753.5, abs=0.1)
    assert SENSOR_MODELS["VLS128"].sweep_point_budget == 7505 * 384


# --- the sweep decoder's budget and product check, on each twin -------------------------------


def _decoder(backend: str, settings: DecoderSettings = VLP16) -> SweepDecoder:
    calibration = load_calibration(SHIPPED / f"{settings.model}.yaml")
    return twin_backend(backend).sweep_decoder(calibration, settings)


def _bytes(points: Any) -> bytes:
    return points.tobytes() if isinstance(points, np.ndarray) else points.get().tobytes()


def _sweeps(decoder: SweepDecoder, messages: list[np.ndarray], start_s: float) -> list[tuple]:
    """(stamp, packets, point bytes) of the sweeps ``messages`` complete, fed in turn."""
    sweeps = []
    for index, packets in enumerate(messages):
        stamps = packet_stamps(len(packets), start_s + index)
        for sweep in decoder.feed(packets, stamps):
            sweeps.append((sweep.stamp, sweep.packet_count, _bytes(sweep.points)))
    return sweeps


def _turning(count: int = 5) -> list[np.ndarray]:
    """``count`` messages of a turning VLP-16 (75 packets a turn), 60 packets each."""
    packets = rotating_packets(60 * count, product=0x22)
    return [packets[60 * i : 60 * (i + 1)] for i in range(count)]


def test_a_message_over_the_budget_is_refused_before_any_work(backend):
    decoder = _decoder(backend)
    turning = _turning()
    _sweeps(decoder, turning[:2], 50.0)  # a sweep in progress

    def no_work(*args: object) -> None:
        raise AssertionError("decoded a refused message")

    decode, decoder.decode = decoder.decode, no_work
    for packets in (stuck_packets(604), rotating_packets(10_000)):
        with pytest.raises(PacketsRefusedError, match=r"packets at once, over the VLP16 budget"):
            decoder.feed(packets, packet_stamps(len(packets)))
    decoder.decode = decode
    fresh = _decoder(backend)
    _sweeps(fresh, turning[:2], 50.0)
    assert _sweeps(decoder, turning[2:], 52.0) == _sweeps(fresh, turning[2:], 52.0)  # untouched


def test_a_sweep_that_never_completes_is_cut_at_the_budget(backend):
    decoder = _decoder(backend)
    budget = VLP16.sensor.sweep_packet_budget
    held, cuts = [], []
    for index in range(42):  # 4 200 packets of a sensor that does not turn, ending on a cut
        packets = stuck_packets(100, product=0x22)
        try:
            assert decoder.feed(packets, packet_stamps(100, 10.0 + index)) == []
        except PacketsRefusedError as error:
            assert error.kind == "sweep_over_budget"
            assert "a sweep still not complete after 600 packets, 100 more would pass" in str(error)
            cuts.append(index)
        held.append(decoder.held_packets)
    assert max(held) == 600 <= budget and cuts == list(range(6, 42, 7))
    turning = _turning()  # after the cut, the decoder is a fresh one
    assert _sweeps(decoder, turning, 60.0) == _sweeps(_decoder(backend), turning, 60.0) != []


def test_packets_of_another_model_are_refused_and_unset_ids_pass(backend):
    decoder = _decoder(backend)
    turning = _turning()
    _sweeps(decoder, turning[:2], 50.0)
    foreign = turning[2].copy()
    foreign[7:9, 1205] = 0x28  # two VLP-32C packets
    with pytest.raises(PacketsRefusedError) as refused:
        decoder.feed(foreign, packet_stamps(60))
    assert refused.value.kind == "other_model"
    assert str(refused.value).startswith(
        "2 of 60 packets carry product id 0x28 (VLP-32C), not a VLP16's (0x22 or 0x24)"
    )
    unset = [packets.copy() for packets in turning[2:]]
    unset[0][:, 1205] = 0  # a recording that left the byte unset
    unset[1][:, 1205] = 0x24  # a Puck Hi-Res
    fresh = _decoder(backend)
    _sweeps(fresh, turning[:2], 50.0)
    assert _sweeps(decoder, unset, 52.0) == _sweeps(fresh, turning[2:], 52.0)  # untouched


def test_the_hdl64_product_byte_is_a_status_and_never_checked():
    assert SENSOR_MODELS["HDL64"].product_ids == ()
    assert not any(SENSOR_MODELS["HDL64"].foreign_product(i) for i in range(256))
    vlp16 = SENSOR_MODELS["VLP16"]
    assert [i for i in range(256) if vlp16.foreign_product(i)] == [0x21, 0x28, 0x31, 0x63, 0xA1]


def test_a_failure_inside_the_decoding_leaves_a_fresh_decoder(backend):
    decoder = _decoder(backend)
    turning = _turning()
    _sweeps(decoder, turning[:2], 50.0)

    def out_of_memory(*args: object) -> None:
        raise MemoryError

    decode, decoder.decode = decoder.decode, out_of_memory
    with pytest.raises(MemoryError):
        decoder.feed(turning[2], packet_stamps(60))
    decoder.decode = decode
    assert _sweeps(decoder, turning, 60.0) == _sweeps(_decoder(backend), turning, 60.0) != []


def test_a_packet_seconds_after_its_sweep_stamp_keeps_the_low_32_bits_silently():
    """nebula's ``(uint32_t)`` of the nanoseconds (x86: the low 32 bits of a 64-bit truncation),
    as the CUDA twin computes it, without a NumPy warning: 6 s after the sweep stamp."""
    calibration = load_calibration(SHIPPED / "VLP16.yaml")
    packets = rotating_packets(40)
    stamps = packet_stamps(40, 106.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        points, index = decode_packets(packets, stamps, 100.0, calibration, VLP16)
    first = points["time_stamp"][index == 0][0]  # block 0, slot 0: offset 0
    assert first == (6_000_000_000 % 2**32)


@cuda_only
def test_both_twins_refuse_alike_and_then_cut_the_same_bytes():
    """The hostile stream (a cut sweep, another model's packets, a message over the budget) and a
    turning sensor after it, into each twin: the same refusals, the same sweeps byte for byte."""
    stuck = [stuck_packets(101, product=0x22) for _ in range(6)]  # the sixth: cut at 606
    foreign = rotating_packets(10, product=0x28)
    hostile = [*stuck, foreign, stuck_packets(604)]
    results = {}
    for backend in ("cpu", "cuda"):
        decoder = _decoder(backend)
        kinds = []
        for index, packets in enumerate(hostile):
            try:
                decoder.feed(packets, packet_stamps(len(packets), 10.0 + index))
            except PacketsRefusedError as error:
                kinds.append(error.kind)
        results[backend] = (kinds, _sweeps(decoder, _turning(), 60.0))
    assert results["cpu"][0] == ["sweep_over_budget", "other_model", "message_over_budget"]
    assert results["cuda"] == results["cpu"] and results["cpu"][1]
