"""The Hesai decoder on packets built here, for every model nebula decodes.

Three kinds of check:

- **Known points** for the models without a shared bag (AT128 with its ``.dat``, OT128
  (Pandar128E4X), XT16, QT64, XT32M): packets whose returns are points of known range and
  direction, the direction worked out here in double precision from the calibration's decimal
  text (or the ``.dat``'s bytes, parsed here); the decoded sweep holds exactly those points,
  in nebula's order, with their distance, intensity, channel and return type exact and their
  position, azimuth and elevation within float32 rounding.
- **The reference decoder** (``test/_hesai_helpers.py``: nebula's ``unpack`` and scan cutter
  transcribed literally, scalar) on random streams of every model in several return modes and
  cut/field-of-view settings (a wrapping field of view, a cut at its end, the AT128's mirror
  fields): the same sweeps, stamps and points, every field bit for bit.
- **Firing times** worked out by hand from nebula's formulas for a few returns of each model.
"""

from __future__ import annotations

import calendar
import csv
import math

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.hesai import (
    DecoderSettings,
    SweepDecoder,
    load_for_model,
    sensor_model,
)
from gpu_euclidean_cluster.pointcloud_io.hesai.packets import packet_seconds
from gpu_euclidean_cluster.pointcloud_io.hesai.timing import point_time_offsets

from .._hesai_helpers import (
    RETURNS,
    ReferenceCalibrationAngles,
    ReferenceCorrectionAngles,
    ReferenceDecoder,
    encode_packet,
    layout,
    synthetic_stream,
)
from ..conftest import LIDAR_DATA_DIR

CALIBRATION = LIDAR_DATA_DIR / "nebula_hesai" / "calibration"
pytestmark = pytest.mark.skipif(
    not CALIBRATION.is_dir(),
    reason=f"nebula's Hesai calibration files not found at {CALIBRATION} (set LIDAR_DATA_DIR)",
)
AT128_TURN = 9216000


def calibration_file(model: str) -> str:
    """nebula's calibration file of ``model`` (the 40M has the 40P's)."""
    if model == "PandarAT128":
        return "PandarAT128.dat"
    return "Pandar40P.csv" if model == "Pandar40M" else f"{model}.csv"


# ---------------------------------------------------------------------------------------------
# known points


#: model -> (return-mode byte, settings of nebula's parameter file overridden)
KNOWN = {
    "PandarXT16": (0x37, {"return_mode": "Strongest"}),
    "PandarQT64": (0x38, {"return_mode": "Last"}),
    "PandarXT32M": (0x3D, {}),
    "Pandar128E4X": (0x37, {"return_mode": "Strongest"}),
    "PandarAT128": (0x37, {"return_mode": "Strongest", "min_range": 1.0, "max_range": 180.0}),
}


def csv_angles(model: str) -> tuple[np.ndarray, np.ndarray]:
    """Elevation and azimuth offset (degrees, double) of each channel, from the CSV's text."""
    with open(CALIBRATION / f"{model}.csv", newline="") as stream:
        rows = [row for row in csv.reader(stream) if row and row[0].strip().isdigit()]
    rows.sort(key=lambda row: int(row[0]))
    return np.array([float(r[1]) for r in rows]), np.array([float(r[2]) for r in rows])


def known_stream(model: str, seed: int):
    """Packets of one sweep and the points they hold: ``(packets, sizes, targets)``, targets
    a list of ``(group, channel, return, raw, reflectivity)`` in nebula's order."""
    mode, _ = KNOWN[model]
    spec = layout(model)
    n = RETURNS[mode]
    per_packet = spec["blocks"] // n
    rng = np.random.default_rng(seed)
    if model == "PandarAT128":
        # encoder angles on the .dat's 2-degree grid, from 5 to ~190 degrees of output (field 0)
        first, step, low, high, turn = 13 * 51200, 51200, 22 * 51200, 46 * 51200, AT128_TURN
        wanted = 46
    else:  # from 120 degrees past the cut at 0 to 12 degrees beyond it
        first, step, low, high, turn = 12000, 100, 13000, 35000, 36000
        wanted = 252
    groups = -(-wanted // per_packet) * per_packet
    encoders = (first + np.arange(groups) * step) % turn
    inside = (encoders >= low) & (encoders <= high)
    targets = []
    for group in np.flatnonzero(inside)[::3]:
        for channel in sorted(rng.choice(spec["channels"], 3, replace=False)):
            ret = int(rng.integers(0, n))
            targets.append((int(group), int(channel), ret, int(rng.integers(500, 12500)),
                            int(rng.integers(1, 256))))  # fmt: skip
    raw = np.zeros((groups * n, spec["channels"]), np.int64)
    refl = np.zeros_like(raw)
    for group, channel, ret, value, reflectivity in targets:
        raw[group * n + ret, channel] = value
        refl[group * n + ret, channel] = reflectivity
    rows, sizes = [], []
    tail = {"operational_state": 1} if model == "Pandar128E4X" else {}
    for p in range(groups // per_packet):
        blocks = slice(p * spec["blocks"], (p + 1) * spec["blocks"])
        data, size = encode_packet(
            model, np.repeat(encoders[p * per_packet : (p + 1) * per_packet], n), raw[blocks],
            refl[blocks], mode, 1_700_000_000, p * 500, **tail,
        )  # fmt: skip
        rows.append(data)
        sizes.append(size)
    targets.sort(key=lambda t: (t[0], t[1], t[2]))
    return np.stack(rows), np.array(sizes), targets, encoders


def expected_direction(model: str, encoder: int, channel: int) -> tuple[float, float]:
    """(azimuth, elevation) in degrees, double precision."""
    if model == "PandarAT128":
        dat = ReferenceCorrectionAngles((CALIBRATION / "PandarAT128.dat").read_bytes())
        i = encoder // 51200  # on the grid: the adjustment is the table's entry itself
        assert encoder % 51200 == 0 and dat._field(encoder) == 0
        azimuth = (encoder - dat.start[0]) * 2 - dat.azimuth[channel]
        azimuth += dat.az_adjust[channel * 180 + i] * 256
        elevation = dat.elevation[channel] + dat.el_adjust[channel * 180 + i] * 256
        return (azimuth % AT128_TURN) / 25600.0, elevation / 25600.0
    elevation, offset = csv_angles(model)
    return (encoder / 100.0 + offset[channel]) % 360.0, elevation[channel]


@pytest.mark.parametrize("model", sorted(KNOWN))
def test_known_points_come_back(model: str):
    mode, overrides = KNOWN[model]
    settings = DecoderSettings.for_model(model, **overrides)
    decoder = SweepDecoder(load_for_model(CALIBRATION / calibration_file(model), settings.sensor),
                           settings)  # fmt: skip
    packets, sizes, targets, encoders = known_stream(model, seed=7)
    sweeps = decoder.feed(packets, sizes)
    assert len(sweeps) == 1
    points = sweeps[0].points
    assert points.shape[0] == len(targets)
    kinds = {0x37: [3], 0x38: [1], 0x3D: [2, 1, 3]}[mode]
    for point, (group, channel, ret, raw, reflectivity) in zip(points, targets, strict=True):
        distance = raw * 0.004
        assert point["channel"] == channel and point["intensity"] == reflectivity
        assert point["distance"] == np.float32(distance)
        assert point["return_type"] == kinds[ret]
        azimuth, elevation = expected_direction(model, int(encoders[group]), channel)
        a, e = math.radians(azimuth), math.radians(elevation)
        expected = distance * np.array([math.cos(e) * math.sin(a), math.cos(e) * math.cos(a),
                                        math.sin(e)])  # fmt: skip
        got = np.array([point["x"], point["y"], point["z"]], np.float64)
        np.testing.assert_allclose(got, expected, atol=2e-5 * max(distance, 1.0))
        assert abs(math.remainder(float(point["azimuth"]) - a, 2 * math.pi)) < 1e-6
        assert abs(float(point["elevation"]) - e) < 1e-6
    if model == "PandarAT128":  # the field of view 30-150 degrees, the cut at its end
        degrees = np.degrees(points["azimuth"])
        assert degrees.min() >= 30 and degrees.max() <= 150


# ---------------------------------------------------------------------------------------------
# against the reference decoder


#: (model, return-mode byte, settings overrides, encoder step, tail fields)
REFERENCE_CASES = [
    ("Pandar40P", 0x39, {}, 100, {}),
    ("Pandar40M", 0x37, {"return_mode": "Strongest", "cut_angle": 200.0}, 100, {}),
    ("Pandar64", 0x38, {"return_mode": "Last"}, 100, {}),
    ("PandarQT64", 0x3B, {"cut_angle": 90.0}, 100, {}),
    ("PandarQT128", 0x39, {"cloud_min_angle": 300, "cloud_max_angle": 60}, 200,
     {"mode_flag": 1}),
    ("PandarQT128", 0x33, {"return_mode": "First"}, 200, {}),
    ("PandarXT16", 0x3B, {}, 50, {}),
    ("PandarXT32", 0x3C, {"return_mode": "FirstStrongest", "cloud_max_angle": 180,
                          "cut_angle": 180.0}, 100, {}),
    ("PandarXT32M", 0x3D, {}, 100, {}),
    ("PandarXT32M", 0x3A, {}, 100, {}),
    ("PandarAT128", 0x39, {"return_mode": "LastStrongest", "min_range": 1.0,
                           "max_range": 180.0}, 51200, {}),
    ("Pandar128E4X", 0x3E, {}, 200, {"operational_state": 0, "azimuth_state": 0x4000}),
    ("Pandar128E4X", 0x38, {"return_mode": "Last"}, 200, {"operational_state": 1}),
]  # fmt: skip


def _reference(model: str, settings: DecoderSettings) -> ReferenceDecoder:
    sensor = settings.sensor
    if model == "PandarAT128":
        angles = ReferenceCorrectionAngles((CALIBRATION / "PandarAT128.dat").read_bytes())
    else:
        calibration = load_for_model(CALIBRATION / calibration_file(model), sensor)
        angles = ReferenceCalibrationAngles(calibration.elevation_deg, calibration.azimuth_deg)
    return ReferenceDecoder(model, settings, angles, float(sensor.min_range),
                            float(sensor.max_range), sensor.swaps_first_last)  # fmt: skip


@pytest.mark.parametrize(
    "model, mode, overrides, step, tail",
    REFERENCE_CASES,
    ids=[f"{case[0]}-{case[1]:#x}" for case in REFERENCE_CASES],
)
def test_sweeps_equal_the_reference_decoder(model, mode, overrides, step, tail):
    settings = DecoderSettings.for_model(model, **overrides)
    sensor = sensor_model(model)
    turn = AT128_TURN if model == "PandarAT128" else 36000
    per_packet = sensor.packet.blocks // RETURNS[mode]
    count = int(1.4 * turn / step / per_packet) + 1
    packets, sizes = synthetic_stream(model, count, step, mode, seed=11, first=turn // 3,
                                      turn=turn, **tail)  # fmt: skip
    decoder = SweepDecoder(load_for_model(CALIBRATION / calibration_file(model), sensor),
                           settings)  # fmt: skip
    got = [
        s for i in range(0, count, 37) for s in decoder.feed(packets[i : i + 37], sizes[i : i + 37])
    ]
    reference = _reference(model, settings)
    for packet in packets:
        reference.unpack(packet)
    expected = reference.take_sweeps()
    assert len(got) == len(expected) >= 1
    for mine, (points, stamp) in zip(got, expected, strict=True):
        assert mine.stamp_ns == stamp
        assert mine.points.shape == points.shape and points.shape[0] > 0
        for name in points.dtype.names:
            np.testing.assert_array_equal(mine.points[name], points[name], err_msg=name)


# ---------------------------------------------------------------------------------------------
# firing times


@pytest.mark.parametrize(
    "model, block, channel, returns, extra, expected",
    [
        # -28580 - 55560 * ((9 - 3) / 2) + (-3620)
        ("Pandar40P", 3, 3, 2, {}, -28580 - 55560 * 3 - 3620),
        # -42580 - 55560 * ((5 - 0) / 1) + (-23180)
        ("Pandar64", 0, 0, 1, {}, -42580 - 55560 * 5 - 23180),
        # 25710 + 500000 * (3 / 2) / 3 + 12960 (nebula's entry for channel 55)
        ("PandarQT64", 3, 55, 2, {}, 25710 + 166666 + 12960),
        # 9000 + 111110 * (1 - 0) / 2 + loop1[32] (mode flag bit 0 set)
        ("PandarQT128", 0, 32, 2, {"mode_flag": 1}, 9000 + 55555 + 27656),
        # 9000 + 0 + loop2[0] (block 1 of a single-return packet)
        ("PandarQT128", 1, 0, 1, {}, 9000 + 2312),
        # 5632 - 50000 * ((7 - 2) / 2) + 368 + 3024 * 15
        ("PandarXT16", 2, 15, 2, {}, 5632 - 100000 + 368 + 45360),
        ("PandarXT32", 7, 31, 1, {}, 5632 + 368 + 1512 * 31),
        # triple: 5632 - 50000 * ((5 - 1) / 3) + 368 + 2888 * (20 - 16)
        ("PandarXT32M", 1, 20, 3, {}, 5632 - 50000 + 368 + 2888 * 4),
        # -9249 - 41666 * (2 - 1) + 8240 (channel 2)
        ("PandarAT128", 1, 2, 1, {}, -9249 - 41666 + 8240),
        # single return, block 0: -55556 + 43346 + standard[0]
        ("Pandar128E4X", 0, 0, 1, {"operational_state": 1}, -55556 + 43346 + 49758),
        # high resolution, block 0's azimuth state 1 (bits 15-14): as1[0]
        ("Pandar128E4X", 0, 0, 2, {"operational_state": 0, "azimuth_state": 0x4000},
         43346 + 21980),
    ],
)  # fmt: skip
def test_firing_times_follow_nebulas_formulas(model, block, channel, returns, extra, expected):
    got = point_time_offsets(
        model,
        np.array([block]),
        np.array([channel]),
        np.array([returns]),
        np.array([extra.get("mode_flag", 0)]),
        np.array([extra.get("operational_state", 0)]),
        np.array([extra.get("azimuth_state", 0)]),
    )
    assert int(got[0]) == expected


def test_packet_dates_are_timegm():
    """The date fields become seconds as ``timegm`` makes them, out-of-range fields carried
    over (day 0 is the month's eve, second 60 the next minute, month 13 next January)."""
    model = sensor_model("PandarXT32")
    at = model.packet.date_at
    dates = [
        (123, 1, 1, 0, 0, 0, calendar.timegm((2023, 1, 1, 0, 0, 0))),
        (124, 2, 29, 23, 59, 59, calendar.timegm((2024, 2, 29, 23, 59, 59))),
        (200, 12, 31, 12, 0, 0, calendar.timegm((2100, 12, 31, 12, 0, 0))),
        (123, 3, 0, 0, 0, 0, calendar.timegm((2023, 2, 28, 0, 0, 0))),
        (123, 1, 1, 0, 0, 60, calendar.timegm((2023, 1, 1, 0, 1, 0))),
        (123, 13, 1, 0, 0, 0, calendar.timegm((2024, 1, 1, 0, 0, 0))),
    ]
    packets = np.zeros((len(dates), model.packet.size), np.uint8)
    for row, date in zip(packets, dates, strict=True):
        row[at : at + 6] = date[:6]
    np.testing.assert_array_equal(packet_seconds(packets, model), [d[6] for d in dates])
