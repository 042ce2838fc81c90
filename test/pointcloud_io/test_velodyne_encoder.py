"""The Velodyne packet encoder against the decoder: returns encoded per model come back.

Each round trip encodes returns at known ranges along the rays the encoder says the decoder will
put them on, decodes the packets with :func:`decode_packets` (nebula's rules) and compares with
what is expected, computed here without the encoder: the range given (within the distance
quantisation), a float64 model of nebula's heading for single-return packets (the block
rotation, nebula's per-family interpolation and the laser's rotation correction), and the laser's
vertical angle and offsets from the calibration.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    CalibrationError,
    DecoderSettings,
    SweepDecoder,
    decode_packets,
    load_calibration,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.encoder import (
    EncoderError,
    FiringGeometry,
    Rotation,
    VelodyneEncoder,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import split_packets
from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import Family

CALIBRATIONS = Path(__file__).resolve().parents[2] / "config" / "velodyne"
#: model -> (calibration file, product id its packets carry, block headers of a packet)
MODELS = {
    "VLP16": ("VLP16.yaml", 0x22, [0xEEFF] * 12),
    "VLP32": ("VLP32.yaml", 0x28, [0xEEFF] * 12),
    "HDL32": ("HDL32.yaml", 0x21, [0xEEFF] * 12),
    "HDL64": ("HDL64e_s3.yaml", 0x00, [0xEEFF, 0xDDFF] * 6),
    "VLS128": ("VLS128.yaml", 0xA1, [0xEEFF, 0xDDFF, 0xCCFF, 0xBBFF] * 3),
}
MODE_BYTES = {"SingleStrongest": 55, "SingleLast": 56, "SingleFirst": 55, "Dual": 57}
RETURN_TYPES = {"SingleStrongest": 3, "SingleLast": 1, "SingleFirst": 3, "Dual": 6}
START_NS = 1_700_000_000_123_456_789


def encoder_for(model: str, **settings) -> VelodyneEncoder:
    calibration = load_calibration(CALIBRATIONS / MODELS[model][0])
    return VelodyneEncoder(calibration, DecoderSettings(model=model, **settings))


def resolution(encoder: VelodyneEncoder) -> float:
    family = encoder.settings.sensor.family
    return 0.004 if family is Family.VLS128 else float(encoder.calibration.distance_resolution)


@dataclasses.dataclass(frozen=True)
class RoundTrip:
    """Returns encoded at known ranges, and what the decoder made of their packets."""

    rotation: np.ndarray  # (F,) each firing's rotation
    geometry: FiringGeometry
    ranges: np.ndarray  # (F, positions) metres along each ray
    intensity: np.ndarray  # (F, positions) bytes
    packets: np.ndarray
    stamps_ns: np.ndarray
    points: np.ndarray  # decoded

    @property
    def xyz(self) -> np.ndarray:
        return np.stack([self.points[a] for a in "xyz"], axis=1).astype(np.float64)


def round_trip(encoder: VelodyneEncoder, packets: int, seed: int) -> RoundTrip:
    """Returns at random ranges (2 to 100 m) on every ray of ``packets`` packets of a sensor
    turning at 10 Hz from a random azimuth, and their decoded points."""
    rng = np.random.default_rng(seed)
    layout = encoder.layout
    rotation = Rotation(10.0, rng.uniform(0, 36000)).azimuths(
        layout, packets * layout.firings_per_packet
    )
    geometry = encoder.geometry(rotation)
    ranges = rng.uniform(2.0, 100.0, geometry.azimuth_index.shape)
    raw = encoder.raw_distance(ranges, geometry.laser)
    intensity = rng.integers(0, 256, raw.shape).astype(np.uint8)
    data, stamps_ns = encoder.packets(rotation, raw, intensity, START_NS)
    points, _ = decode_packets(
        data, stamps_ns / 1e9, stamps_ns[0] / 1e9, encoder.calibration, encoder.settings
    )
    return RoundTrip(rotation, geometry, ranges, intensity, data, stamps_ns, points)


def on_rays(trip: RoundTrip, where: np.ndarray | None = None) -> np.ndarray:
    """(N, 3) the given ranges along the encoder's rays (of the returns ``where`` selects)."""
    geometry = trip.geometry
    points = geometry.origin + trip.ranges[..., None] * geometry.direction
    return points.reshape(-1, 3) if where is None else points[where]


def nebula_heading_cd(model: str, rotation: np.ndarray) -> np.ndarray:
    """nebula's heading (centidegrees, float64, before the rotation correction) of every slot
    ``(P, 12, 32)`` of single-return packets with block rotations ``rotation`` ``(P, 12)``: the
    block's rotation plus its gap to the next block (none for the last block) times the slot's
    share of it, per family."""
    rotation = rotation.astype(np.float64)
    gap = np.zeros_like(rotation)
    gap[:, :-1] = np.mod(rotation[:, 1:] - rotation[:, :-1], 36000)
    slot = np.arange(32)
    if model == "VLP16":
        share = (2.304 * (slot % 16) + 55.296 * (slot // 16)) / 110.592
    elif model == "VLS128":
        share = None  # per laser group: below
    else:  # the VLP-32 family
        share = 2.304 / 55.296 * slot
    if share is None:
        bank = np.arange(12) % 4
        group = (32 * bank[:, None] + slot[None, :]) // 8
        fraction = 2.665 / 53.3 * (group + group // 8)
        return rotation[:, :, None] + gap[:, :, None] * fraction[None, :, :]
    return rotation[:, :, None] + gap[:, :, None] * share[None, None, :]


def expected_points(calibration, laser, distance, heading_cd) -> np.ndarray:
    """(N, 3) float64: ``distance`` along each laser's ray at the heading (centidegrees), from
    its origin (the horizontal and vertical offsets), as nebula's geometry places a return."""
    heading = np.radians(np.mod(heading_cd, 36000) / 100)
    vert = calibration.vert_correction[laser].astype(np.float64)
    h = calibration.horiz_offset_correction[laser].astype(np.float64)
    v = calibration.vert_offset_correction[laser].astype(np.float64)
    c, s, cv, sv = np.cos(heading), np.sin(heading), np.cos(vert), np.sin(vert)
    return np.stack(
        [
            h * s - v * sv * c + distance * cv * c,
            h * c + v * sv * s - distance * cv * s,
            v * cv + distance * sv,
        ],
        axis=1,
    )


def slot_lasers(model: str, header: np.ndarray) -> np.ndarray:
    """(P, 12, 32) the laser of every slot, from the block headers."""
    slot = np.arange(32)[None, None, :]
    if model == "VLP16":
        return np.broadcast_to(slot % 16, (*header.shape, 32))
    bank = {0xEEFF: 0, 0xDDFF: 1, 0xCCFF: 2, 0xBBFF: 3}
    origin = np.vectorize(bank.get)(header) * 32
    return origin[:, :, None] + slot


@pytest.mark.parametrize("model", list(MODELS))
def test_single_return_packets_decode_to_the_returns_encoded(model: str):
    encoder = encoder_for(model, return_mode="SingleStrongest", min_range=0.3, max_range=300.0)
    trip = round_trip(encoder, 40, 1)
    geometry, ranges, points, data = trip.geometry, trip.ranges, trip.points, trip.packets
    calibration = encoder.calibration
    # every return is in range and inside the window: one point per return, in firing order
    assert points.shape[0] == ranges.size
    fields = split_packets(data)
    laser = slot_lasers(model, fields.header).reshape(-1)
    assert np.array_equal(laser, np.tile(geometry.laser, ranges.shape[0]))
    given = ranges.reshape(-1)
    half = resolution(encoder) / 2
    # distance: the given range, quantised (half a count, and float32's rounding)
    assert np.abs(points["distance"] - given).max() <= half + 2e-5
    # heading: nebula's float64 model, less the laser's rotation correction, rounded as nebula
    # rounds; within 1e-3 centidegree of a half (whole rotations make many exact halves) its
    # float32 arithmetic may round either way: either neighbour is right there
    correction_cd = np.degrees(calibration.rot_correction[laser].astype(np.float64)) * 100
    heading_cd = nebula_heading_cd(model, fields.rotation).reshape(-1) - correction_cd
    tie = np.abs(heading_cd - np.floor(heading_cd) - 0.5) <= 1e-3
    xyz = trip.xyz
    nearest = expected_points(calibration, laser, given, np.floor(heading_cd + 0.5))
    error = np.abs(xyz - nearest).max(axis=1)
    for neighbour in (np.floor(heading_cd), np.floor(heading_cd) + 1):
        there = np.abs(xyz - expected_points(calibration, laser, given, neighbour)).max(axis=1)
        error = np.where(tie, np.minimum(error, there), error)
    # the point: the given range from the laser's origin, along its direction at that heading
    assert error.max() <= half + 1e-4
    # ... and on the ray the encoder cast it along, everywhere
    assert np.abs(xyz - on_rays(trip)).max() <= half + 1e-4
    # intensity: the byte given (the HDL-64E's file corrects it: focal distance and slope)
    if model != "HDL64":
        assert np.array_equal(points["intensity"], trip.intensity.reshape(-1))
    assert np.array_equal(points["channel"], calibration.laser_ring[laser])
    assert np.all(points["return_type"] == 3)
    # the bytes: headers, factory bytes, time stamps
    product, headers = MODELS[model][1], MODELS[model][2]
    assert np.array_equal(fields.header, np.tile(headers, (data.shape[0], 1)))
    assert np.all(data[:, 1204] == 55) and np.all(data[:, 1205] == product)
    micros = data[:, 1200:1204].copy().view("<u4").reshape(-1)
    assert np.array_equal(micros, (trip.stamps_ns // 1000) % 3_600_000_000)
    # packets come at the model's pace
    period_ns = 1e9 / encoder.settings.sensor.packets_per_second(False)
    assert np.allclose(np.diff(trip.stamps_ns), period_ns, rtol=0, atol=1)


@pytest.mark.parametrize(
    ("model", "return_mode", "timing"),
    [
        ("VLP16", "Dual", "nebula"),
        ("VLP16", "SingleLast", "sensor"),
        ("VLP32", "Dual", "sensor"),
        ("HDL64", "Dual", "nebula"),
        ("VLS128", "Dual", "nebula"),
        ("VLS128", "SingleFirst", "sensor"),
    ],
)
def test_every_mode_and_timing_decodes_onto_the_rays(model: str, return_mode: str, timing: str):
    encoder = encoder_for(
        model, return_mode=return_mode, azimuth_timing=timing, min_range=0.3, max_range=300.0
    )
    trip = round_trip(encoder, 40, 2)
    geometry, ranges, points = trip.geometry, trip.ranges, trip.points
    # dual: the second return repeats the first; the decoder keeps one (IDENTICAL)
    assert points.shape[0] == ranges.size
    assert np.all(points["return_type"] == RETURN_TYPES[return_mode])
    assert np.all(trip.packets[:, 1204] == MODE_BYTES[return_mode])
    half = resolution(encoder) / 2
    xyz = trip.xyz
    assert np.abs(xyz - on_rays(trip)).max() <= half + 1e-4
    assert np.abs(points["distance"] - ranges.reshape(-1)).max() <= half + 2e-5
    # the heading stays within one firing's turn of the firing's own rotation
    step = Rotation(10.0).step_centidegrees(encoder.layout)
    laser = np.tile(geometry.laser, ranges.shape[0])
    correction_cd = np.degrees(encoder.calibration.rot_correction[laser].astype(np.float64)) * 100
    firing_cd = np.repeat(trip.rotation, encoder.layout.positions) - correction_cd
    heading_cd = np.round(np.degrees(np.arctan2(-xyz[:, 1], xyz[:, 0])) * 100)
    if model != "HDL64":  # no offsets: the heading is the point's own
        off = np.mod(heading_cd - firing_cd + 18000, 36000) - 18000
        assert np.all((off >= -1) & (off <= step + 1))
    period_ns = 1e9 / encoder.settings.sensor.packets_per_second(return_mode == "Dual")
    assert np.allclose(np.diff(trip.stamps_ns), period_ns, rtol=0, atol=1)


@pytest.mark.parametrize(
    ("model", "window"), [("VLP16", (300, 60)), ("VLP32", (10, 200)), ("VLS128", (90, 270))]
)
def test_the_encoder_says_which_returns_the_decoder_keeps(model: str, window: tuple[int, int]):
    encoder = encoder_for(
        model, min_range=5.0, max_range=50.0, cloud_min_angle=window[0], cloud_max_angle=window[1]
    )
    turn = math.ceil(1e9 / 10.0 / encoder.layout.packet_ns)
    trip = round_trip(encoder, turn, 3)
    raw = encoder.raw_distance(trip.ranges, trip.geometry.laser)
    kept = encoder.kept(raw, trip.geometry)
    # the window leaves out a part of the returns in range, about in proportion
    in_range = (trip.ranges > 5.0) & (trip.ranges < 50.0)
    share = ((window[1] - window[0]) % 360) / 360
    assert abs(kept.sum() / in_range.sum() - share) < 0.02
    assert not (kept & ~((trip.ranges > 4.99) & (trip.ranges < 50.01))).any()
    assert trip.points.shape[0] == kept.sum()
    assert np.abs(trip.xyz - on_rays(trip, kept)).max() <= resolution(encoder) / 2 + 1e-4


@pytest.mark.parametrize("model", ["VLP16", "VLP32", "HDL64", "VLS128"])
def test_a_stream_from_the_scan_phase_decodes_into_whole_turns(model: str):
    """Three turns and a little more from the scan phase: three sweeps, each all the way round."""
    encoder = encoder_for(model, scan_phase=123.45, min_range=0.3, max_range=300.0)
    layout = encoder.layout
    rate_hz = 10.0
    packets = math.ceil(3.1 * 1e9 / rate_hz / layout.packet_ns)
    rotation = Rotation(rate_hz, encoder.settings.phase_centidegrees).azimuths(
        layout, packets * layout.firings_per_packet
    )
    geometry = encoder.geometry(rotation)
    raw = encoder.raw_distance(np.full(geometry.azimuth_index.shape, 10.0), geometry.laser)
    intensity = np.full(raw.shape, 50, np.uint8)
    data, stamps_ns = encoder.packets(rotation, raw, intensity, START_NS)
    sweeps = SweepDecoder(encoder.calibration, encoder.settings).feed(data, stamps_ns / 1e9)
    assert len(sweeps) == 3
    per_turn = layout.firings_per_packet * layout.positions * 1e9 / rate_hz / layout.packet_ns
    # the VLP-32 family's decoder moves no point across the cut (scan phase below 270): its
    # sweeps meet at a packet's edge (a gap of up to a packet's firings), a firing's otherwise
    step = Rotation(rate_hz).step_centidegrees(layout)
    seam = step * (layout.firings_per_packet + 1 if model in ("VLP32", "HDL64") else 1)
    for sweep in sweeps:
        azimuth_cd = np.unique(np.round(np.degrees(sweep.points["azimuth"]) * 100))
        gaps = np.diff(np.concatenate([azimuth_cd, azimuth_cd[:1] + 36000]))
        assert gaps.max() <= seam + 2
        # one turn of returns, to the packet at either end
        assert (
            abs(sweep.points.shape[0] - per_turn)
            <= 2 * layout.firings_per_packet * layout.positions
        )
    # the first sweep starts at the first packet: stamped with it (float seconds: 0.25 us)
    assert abs(sweeps[0].stamp_ns - stamps_ns[0]) < 1000


def test_ranges_are_quantised_to_the_nearest_count():
    encoder = encoder_for("HDL64", return_mode="SingleStrongest")  # corrections of ~1.3-1.6 m
    laser = np.tile(np.arange(64), 1000)
    rng = np.random.default_rng(4)
    distance = rng.uniform(2.0, 120.0, laser.size)
    raw = encoder.raw_distance(distance, laser)
    decoded = encoder.decoded_distance(raw, laser).astype(np.float64)
    error = np.abs(decoded - distance)
    assert error.max() <= 0.001 + 2e-5  # half of 0.002 m, and float32's rounding
    for neighbour in (raw - 1, raw + 1):
        there = np.abs(encoder.decoded_distance(neighbour, laser) - distance)
        assert np.all(error <= there)
    # out of reach: below one count, past 65535 counts, not a number
    far = 65535 * 0.002 + float(encoder.calibration.dist_correction[0]) + 1.0
    unreachable = np.array([-1.0, 0.0, far, np.inf, np.nan])
    assert not encoder.raw_distance(unreachable, np.zeros(5, int)).any()


def test_a_calibration_the_encoder_cannot_serve_is_refused():
    calibration = load_calibration(CALIBRATIONS / "HDL64e_s3.yaml")
    two_point = dataclasses.replace(
        calibration, two_pt_correction=np.ones_like(calibration.two_pt_correction)
    )
    with pytest.raises(EncoderError, match="two-point distance correction is not encoded"):
        VelodyneEncoder(two_point, DecoderSettings(model="HDL64"))
    with pytest.raises(CalibrationError, match="a VLP16 has 16 lasers"):
        VelodyneEncoder(calibration, DecoderSettings(model="VLP16"))


def test_packets_refuse_what_does_not_fit():
    encoder = encoder_for("VLP16", return_mode="SingleStrongest")
    rotation = Rotation(10.0).azimuths(encoder.layout, 12)
    fine = np.ones((12, 32), np.int64)
    with pytest.raises(EncoderError, match="not whole packets of 12"):
        encoder.packets(rotation[:11], fine[:11], fine[:11], 0)
    with pytest.raises(EncoderError, match="distance counts outside 0-65535"):
        encoder.packets(rotation, fine * 70000, fine, 0)
    with pytest.raises(EncoderError, match="for 12 firings of 32 returns"):
        encoder.packets(rotation, fine[:, :16], fine[:, :16], 0)
