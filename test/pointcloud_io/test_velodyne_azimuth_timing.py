"""The Velodyne decoder's two azimuth timings (``DecoderSettings.azimuth_timing``).

``nebula`` is nebula's rule (bit for bit against nebula's own clouds: test_velodyne_decoder.py);
``sensor`` places each return at its model's firing time from the user manual and interpolates a
packet's last firing with the previous firing's gap. Here:

- packets written from known rotations for every model, single and dual return: each point's
  heading (the 0.01-degree table entry its x and y come from) against the rule's exact azimuth,
  computed here in float64 from the manuals' numbers (``sensor``) or nebula's (``nebula``), and
  nothing but the heading differs between the rules;
- real recordings decoded with ``sensor`` against velodyne-decoder (PyPI, a test-only
  dependency), an independent decoder that interpolates with the manuals' timing: public pcaps
  of an HDL-32E and a VLP-16 (``$LIDAR_DATA_DIR/velodyne_pcap``) and nebula's VLP-32C and VLS-128
  bags. ``sensor`` puts at least 99.5 % of the points within 2.5 cm of velodyne-decoder's; with
  ``nebula`` fewer get there (HDL-32E: about 90 %).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    DecoderSettings,
    decode_packets,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import split_packets
from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import AZIMUTH_TIMINGS

from .._velodyne_helpers import encode_packets, raw_for_distance, read_pcap_packets
from ..conftest import LIDAR_DATA_DIR

CALIBRATION = LIDAR_DATA_DIR / "nebula" / "calibration"
PCAPS = LIDAR_DATA_DIR / "velodyne_pcap"
UPPER, LOWER, BANK_3, BANK_4 = 0xEEFF, 0xDDFF, 0xCCFF, 0xBBFF

#: model -> (calibration file, block headers of one firing in single-return and in dual-return
#: mode: the HDL-64E's upper and lower block, twice in dual mode; each VLS-128 bank twice)
MODELS = {
    "VLP16": ("VLP16.yaml", (UPPER,), (UPPER, UPPER)),
    "VLP32": ("VLP32.yaml", (UPPER,), (UPPER, UPPER)),
    "HDL32": ("HDL32.yaml", (UPPER,), (UPPER, UPPER)),
    "HDL64": ("HDL64e_s3.yaml", (UPPER, LOWER), (UPPER, LOWER, UPPER, LOWER)),
    "VLS128": (
        "VLS128.yaml",
        (UPPER, LOWER, BANK_3, BANK_4),
        (UPPER, UPPER, LOWER, LOWER, BANK_3, BANK_3, BANK_4, BANK_4),
    ),
}
BANKS = (UPPER, LOWER, BANK_3, BANK_4)
_HDL64E_S3_GROUP_US = (0.0, 1.3, 2.5, 3.7)


def manual_share(model: str, position: np.ndarray) -> np.ndarray:
    """When the laser at ``position`` (bank origin + slot) fires, as a share of the time between
    two firings' azimuths, from the user manuals (float64)."""
    slot = position % 32
    if model == "VLP16":  # 2.304 us a laser, 55.296 us a sequence, two sequences a block
        return (55.296 * (slot // 16) + 2.304 * (slot % 16)) / 110.592
    if model == "VLP32":  # pairs of lasers 2.304 us apart, 55.296 us a block
        return 2.304 * (slot // 2) / 55.296
    if model == "HDL32":  # 1.152 us a laser, 46.08 us a block
        return 1.152 * slot / 46.08
    if model == "HDL64":  # S3: groups of 4 lasers 7.2 us apart, 57.6 us an upper/lower pair
        return (7.2 * (slot // 4) + np.take(_HDL64E_S3_GROUP_US, slot % 4)) / 57.6
    # VLS128: groups of 8 lasers 2.665 us apart, a maintenance period after the 8th, 53.3 us
    return 2.665 * (position // 8 + position // 64) / 53.3


def nebula_share(model: str, position: np.ndarray) -> np.ndarray:
    """nebula's share of a block's azimuth difference for ``position`` (float64)."""
    slot = position % 32
    if model == "VLP16":
        return (2.304 * (slot % 16) + 55.296 * (slot // 16)) / 110.592
    if model == "VLS128":
        group = position // 8
        return 2.665 / 53.3 * (group + group // 8)
    return 2.304 / 55.296 * slot  # VLP-32C, HDL-32E, HDL-64E alike


def _calibration(model: str):
    """The model's nebula calibration without rotation and offset corrections: a point's heading
    is then its azimuth's table entry."""
    path = CALIBRATION / MODELS[model][0]
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    calibration = load_calibration(path)
    zero = np.zeros_like(calibration.rot_correction)
    return dataclasses.replace(
        calibration,
        rot_correction=zero,
        horiz_offset_correction=zero,
        vert_offset_correction=zero,
        two_pt_correction=np.zeros(calibration.size, bool),
    )


@dataclasses.dataclass(frozen=True)
class Firings:
    """Packets written from known firings, and what a rule makes of them."""

    packets: np.ndarray  # (P, 1206)
    rotation: np.ndarray  # (P, 12) block rotations
    firing_rotation: np.ndarray  # (P, n) the rotation of each firing
    position: np.ndarray  # (P, 12, 32) bank origin + slot
    firing_blocks: int  # blocks of one firing in these packets
    decoded_blocks: int  # blocks decoded (VLS-128 dual: 8)


def firing_packets(model: str, dual: bool, calibration, seed: int, count: int = 4) -> Firings:
    """Packets of ``count`` packets' worth of firings 14-22 centidegrees apart, some across
    36000, every return in range and distinct from its dual partner."""
    rng = np.random.default_rng(seed)
    firing_headers = MODELS[model][2 if dual else 1]
    firing_blocks = len(firing_headers)
    firings = 12 // firing_blocks
    gaps = rng.integers(14, 23, (count, firings + 1))  # the last: to the next packet's firing
    start = rng.integers(35700, 36000, count)  # some firings wrap past 0
    firing_rotation = (start[:, None] + np.cumsum(gaps, axis=1) - gaps[:, :1]) % 36000
    rotation = np.repeat(firing_rotation, firing_blocks, axis=1)  # blocks past the firings:
    rotation = np.concatenate([rotation, np.tile(firing_rotation[:, -1:], 12)], axis=1)[:, :12]
    header = np.tile(firing_headers, (count, firings + 1))[:, :12]
    origin = np.select([header == b for b in BANKS], [0, 32, 64, 96])
    position = origin[:, :, None] + np.arange(32)[None, None, :]
    laser = position % 16 if model == "VLP16" else position
    distance = rng.uniform(2.0, 100.0, laser.shape)
    if dual:  # the second return of a pair lies farther
        distance[:, 1::2] = distance[:, 0::2] + rng.uniform(0.5, 20.0, distance[:, 1::2].shape)
    raw = raw_for_distance(distance, laser, calibration)
    intensity = rng.integers(0, 256, laser.shape)
    packets = encode_packets(rotation, raw, intensity, header, mode=57 if dual else 55)
    decoded = 8 if model == "VLS128" and dual else 12
    return Firings(
        packets, rotation, firing_rotation[:, :firings], position, firing_blocks, decoded
    )


def sensor_azimuths(model: str, firings: Firings) -> np.ndarray:
    """(P, blocks, 32) centidegrees of the ``sensor`` rule: the firing's rotation plus the gap
    to the next firing (the last firing: the previous gap; one firing: none) times the share."""
    rotation = firings.firing_rotation.astype(np.float64)
    n = rotation.shape[1]
    gap = np.zeros_like(rotation)
    if n > 1:
        gap[:, :-1] = np.mod(rotation[:, 1:] - rotation[:, :-1], 36000)
        gap[:, -1] = gap[:, -2]
    block_firing = np.arange(firings.decoded_blocks) // firings.firing_blocks
    share = manual_share(model, firings.position[:, : firings.decoded_blocks])
    return rotation[:, block_firing, None] + gap[:, block_firing, None] * share


def nebula_azimuths(model: str, firings: Firings) -> np.ndarray:
    """(P, 12, 32) centidegrees of nebula's rule in single-return mode: the block's rotation
    plus the difference to the next block's (the last block: 0) times nebula's share."""
    rotation = firings.rotation.astype(np.float64)
    difference = np.zeros_like(rotation)
    difference[:, :-1] = np.mod(rotation[:, 1:] - rotation[:, :-1], 36000)
    return rotation[:, :, None] + difference[:, :, None] * nebula_share(model, firings.position)


def heading_entries(points: np.ndarray) -> np.ndarray:
    """The 0.01-degree heading table entry each point's x and y were computed with (``x = r cos
    h``, ``y = -r sin h`` without offsets)."""
    x, y = points["x"].astype(np.float64), points["y"].astype(np.float64)
    return np.mod(np.round(np.degrees(np.arctan2(-y, x)) * 100.0), 36000).astype(np.int64)


def assert_headings(points: np.ndarray, azimuth_cd: np.ndarray, label: str) -> None:
    """Each point's heading entry is its azimuth rounded to 0.01 degree: exactly where the
    azimuth is clear of a half (the decoder's float32 sums round within 0.004 cd), else one of
    the two neighbours."""
    expected = np.mod(azimuth_cd.reshape(-1), 36000.0)
    got = heading_entries(points)
    assert got.shape == expected.shape, f"{label}: {got.shape[0]} points for {expected.size}"
    off = np.abs(got - expected)
    off = np.minimum(off, 36000.0 - off)
    assert off.max() <= 0.51, f"{label}: a heading {off.max():.3f} cd from the rule's azimuth"
    clear = np.abs(expected - np.floor(expected) - 0.5) > 0.01
    rounded = np.mod(np.floor(expected + 0.5), 36000).astype(np.int64)
    wrong = np.flatnonzero(clear & (got != rounded))
    assert wrong.size == 0, f"{label}: {wrong.size} headings not the rule's, first at {wrong[0]}"
    assert clear.mean() > 0.75  # exact halves: k / 24 of an integer gap (VLP-32C), ties


def _decode(firings: Firings, calibration, model: str, timing: str, dual: bool):
    settings = DecoderSettings(
        model, "Dual" if dual else "SingleStrongest", "v", 0.3, 300.0, azimuth_timing=timing
    )
    points, _ = decode_packets(firings.packets, 10.0, 10.0, calibration, settings)
    return points


@pytest.mark.parametrize("dual", [False, True], ids=["single", "dual"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_sensor_timing_places_each_return_at_its_manual_firing_time(model: str, dual: bool):
    calibration = _calibration(model)
    firings = firing_packets(model, dual, calibration, seed=len(model) + dual)
    points = _decode(firings, calibration, model, "sensor", dual)
    assert_headings(points, sensor_azimuths(model, firings), f"{model} sensor")


@pytest.mark.parametrize("model", sorted(MODELS))
def test_nebula_timing_is_nebulas_rule(model: str):
    """Single return: every block at its rotation plus nebula's share of the difference to the
    next block; the last block of a packet (and the HDL-64E's upper blocks, which share their
    rotation with the lower ones) not interpolated."""
    calibration = _calibration(model)
    firings = firing_packets(model, False, calibration, seed=7)
    points = _decode(firings, calibration, model, "nebula", False)
    assert_headings(points, nebula_azimuths(model, firings), f"{model} nebula")


@pytest.mark.parametrize("dual", [False, True], ids=["single", "dual"])
@pytest.mark.parametrize("model", ["HDL32", "HDL64"])
def test_the_rules_differ_in_the_heading_only(model: str, dual: bool):
    calibration = _calibration(model)
    firings = firing_packets(model, dual, calibration, seed=3)
    nebula = _decode(firings, calibration, model, "nebula", dual)
    sensor = _decode(firings, calibration, model, "sensor", dual)
    assert nebula.shape == sensor.shape
    same = ("z", "intensity", "return_type", "channel", "azimuth", "elevation", "distance")
    for name in (*same, "time_stamp"):  # the VLP-32 family's azimuth: the block rotation's
        assert np.array_equal(nebula[name], sensor[name]), name
    moved = heading_entries(nebula) != heading_entries(sensor)
    assert moved.mean() > 0.5, "the HDL rules should place most returns differently"


def test_azimuth_timing_is_checked():
    assert AZIMUTH_TIMINGS == ("nebula", "sensor")
    assert DecoderSettings("HDL32").azimuth_timing == "nebula"
    with pytest.raises(ValueError, match=r"azimuth_timing 'Sensor' not in \('nebula', 'sensor'\)"):
        DecoderSettings("HDL32", azimuth_timing="Sensor")


# ---------------------------------------------------------------------------------------------
# Real recordings against velodyne-decoder


#: The public pcaps: MIT-licensed test files of github.com/jerry73204/rust-lidar-utils,
#: ``test_files/`` at commit 94ebe8c (removed from its later history), copied unchanged.
PCAP_SOURCE = "jerry73204/rust-lidar-utils@94ebe8c:test_files"


def _pcap(name: str):
    path = PCAPS / name
    if not path.is_file():
        pytest.skip(f"recording {path} not found (copy it from {PCAP_SOURCE}/{name})")
    return read_pcap_packets(path)


def _bag(folder: str, bag: str):
    path = LIDAR_DATA_DIR / "nebula" / folder / bag
    if not path.is_dir():
        pytest.skip(f"nebula packet bag {path} not found (set LIDAR_DATA_DIR)")
    scans = list(read_velodyne_scans(path))
    return np.concatenate([s.packets for s in scans]), np.concatenate(
        [s.packet_seconds for s in scans]
    )


#: Points compared (m): the decoders round a heading to 0.01 degree each its own way (nebula after
#: the laser's rotation correction, velodyne-decoder before), which alone parts points farther
#: than 143 m by more than 2.5 cm.
COMPARED_RANGE = 130.0

#: label -> (our model, velodyne-decoder's model name, calibration, the recording's loader, max
#: range in metres beyond the farthest return)
RECORDINGS = {
    "hdl32e_pcap": ("HDL32", "HDL32E", "HDL32.yaml", lambda: _pcap("hdl32_example.pcap"), 140.0),
    "vlp16_pcap": ("VLP16", "VLP16", "VLP16.yaml", lambda: _pcap("velodyne_example.pcap"), 140.0),
    "vlp32c_bag": (
        "VLP32", "VLP32C", "VLP32.yaml", lambda: _bag("vlp32", "1713492677464078412"), 270.0
    ),
    "vls128_bag": (
        "VLS128", "VLS128", "VLS128.yaml", lambda: _bag("vls128", "1614315746471294674"), 270.0
    ),
}  # fmt: skip


def _velodyne_decoder_points(vd, packets, stamps, model: str, calibration_text: str, max_range):
    """velodyne-decoder's points of each packet, decoded one packet at a time (its columns
    count the packet's firings from 0): ``(packet, column, ring, xyz)``."""
    config = vd.Config(model=getattr(vd.Model, model), min_range=0.0, max_range=max_range)
    config.calibration = vd.Calibration.from_string(calibration_text)
    decoder = vd.ScanDecoder(config)
    parts = []
    for index, (packet, stamp) in enumerate(zip(packets, stamps, strict=True)):
        _, cloud = decoder.decode([vd.VelodynePacket(float(stamp), packet.tobytes())], True)
        parts.append((np.full(cloud.shape[0], index), cloud))
    packet = np.concatenate([p for p, _ in parts])
    cloud = np.concatenate([c for _, c in parts])
    xyz = np.stack([cloud["x"], cloud["y"], cloud["z"]], axis=1).astype(np.float64)
    return packet, cloud["column"].astype(np.int64), cloud["ring"].astype(np.int64), xyz


def _our_keys(packets: np.ndarray, model: str, calibration) -> tuple[np.ndarray, ...]:
    """``(packet, column, ring)`` of every nonzero return in decoding order (the decoder keeps
    them all: no range or angle limit bites), columns counted as velodyne-decoder counts them."""
    fields = split_packets(packets)
    packet, block, slot = np.nonzero(fields.raw != 0)
    header = fields.header[packet, block]
    if model == "VLP16":
        return packet, 2 * block + slot // 16, calibration.laser_ring[slot % 16].astype(np.int64)
    if model == "VLS128":
        origin = np.select([header == b for b in BANKS], [0, 32, 64, 96])
        return packet, block // 4, calibration.laser_ring[origin + slot].astype(np.int64)
    return packet, block, calibration.laser_ring[slot].astype(np.int64)


def share_within(points, keys, theirs, reach: float) -> float:
    """The share of our points nearer than :data:`COMPARED_RANGE` that lie within ``reach``
    metres of velodyne-decoder's point of the same packet, column and laser (a point it lacks
    counts as off)."""
    packet, column, ring = keys
    their_packet, their_column, their_ring, their_xyz = theirs
    our_key = (packet * 4096 + column) * 256 + ring
    their_key = (their_packet * 4096 + their_column) * 256 + their_ring
    order = np.argsort(their_key)
    at = np.clip(np.searchsorted(their_key[order], our_key), 0, order.size - 1)
    found = their_key[order][at] == our_key
    xyz = np.stack([points["x"], points["y"], points["z"]], axis=1).astype(np.float64)
    distance = np.linalg.norm(xyz - their_xyz[order][at], axis=1)
    near = points["distance"] < COMPARED_RANGE
    return float(np.mean((found & (distance <= reach))[near]))


def _contiguous(packets: np.ndarray) -> np.ndarray:
    """Packets whose block rotations run on by less than 2 degrees a block (nebula's VLP-32C
    bag joins recordings inside some packets)."""
    rotation = split_packets(packets).rotation
    return (np.mod(np.diff(rotation, axis=1), 36000) < 200).all(axis=1)


@pytest.mark.parametrize("label", sorted(RECORDINGS))
def test_sensor_timing_matches_velodyne_decoder_on_real_recordings(label: str):
    vd = pytest.importorskip(
        "velodyne_decoder", reason="velodyne-decoder (pip install velodyne-decoder) is absent"
    )
    model, their_model, calibration_name, load, max_range = RECORDINGS[label]
    path = CALIBRATION / calibration_name
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    packets, stamps = load()
    keep = _contiguous(packets)
    packets, stamps = packets[keep], stamps[keep]
    assert keep.mean() > 0.98 and packets.shape[0] >= 80
    calibration = load_calibration(path)
    assert (
        np.unique(calibration.laser_ring[: calibration.num_lasers]).size == calibration.num_lasers
    )
    text = path.read_text()
    if model == "VLS128":  # nebula's VLS-128 decoder uses 4 mm, whatever the file says
        text = text.replace("distance_resolution: 0.007", "distance_resolution: 0.004")
    theirs = _velodyne_decoder_points(vd, packets, stamps, their_model, text, max_range)
    keys = _our_keys(packets, model, calibration)
    shares = {}
    for timing in AZIMUTH_TIMINGS:
        settings = DecoderSettings(
            model, "SingleStrongest", "v", 0.0, max_range, azimuth_timing=timing
        )
        points, _ = decode_packets(packets, stamps, stamps[0], calibration, settings)
        assert points.shape[0] == keys[0].size > 20000
        shares[timing] = share_within(points, keys, theirs, 0.025)
    assert shares["sensor"] >= 0.995, shares
    assert shares["nebula"] < shares["sensor"], shares
