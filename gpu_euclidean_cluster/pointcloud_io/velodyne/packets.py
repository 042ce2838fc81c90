"""Pure, vectorised decoding of Velodyne data packets into nebula's ``PointXYZIRCAEDT`` points.

:func:`decode_packets` maps ``(P, 1206)`` uint8 packets, their stamps and the sweep stamp in
force for each packet to the points nebula's decoders emit from them, in nebula's order (packet,
then block, then the 32 returns of the block in packet order); with the settings'
``azimuth_timing`` ``sensor``, each return's azimuth follows its model's manual instead (steps 1
and 3), everything else stays nebula's. It holds no state: cutting the stream into sweeps is
:mod:`.sweeps`' job. Every slot ``(packet, block, slot)`` is computed independently from its
packet, so a GPU twin can run one thread per firing and laser and compact the valid slots in the
same order.

Packet layout (little-endian): 12 blocks of 100 bytes (``uint16 header``, ``uint16 rotation`` in
centidegrees, 32 returns of ``uint16 distance`` and ``uint8 intensity``), then a ``uint32``
time stamp and two factory bytes: the return mode (offset 1204: 55 strongest, 56 last, 57 dual)
and the product id. In dual mode blocks come in pairs (0-1, 2-3, ...) whose partner is the
other return of the same firing.

Arithmetic of one slot, exactly as nebula's C++ (float is float32, double float64; ``f(x)``
rounds a double to float32; no fused multiply-add; ``->`` is a C conversion):

1. Per block, the azimuth recurrence (:func:`block_azimuths`) of the settings'
   ``azimuth_timing``. ``nebula`` (:func:`nebula_recurrence`): ``step = 1 + dual``; block 0's
   ``azimuth`` is its own ``rotation``, block ``b >= 1`` takes ``rotation[min(b - 1, 11 - step) +
   step]`` (so in dual mode an odd block reads the next pair's rotation: nebula's quirk, kept).
   ``azimuth_diff`` (float) is ``(36000 + rotation[b + step] - azimuth) % 36000`` (C int
   remainder) for ``b < 12 - step``, otherwise 0 for the family's ``zero_block`` (VLP-16: ``11 -
   dual``; VLP-32, VLS-128: ``11 - 4 * dual``) and the last computed difference for any other
   block. ``sensor`` (:func:`sensor_recurrence`): blocks go in firings of ``g`` blocks (the
   model's :class:`~.sensors.FiringTiming`, doubled in dual mode), firing ``f = b / g`` of ``n
   = 12 / g``; every block of a firing takes the firing's first rotation, ``azimuth =
   rotation[f * g]``, and ``azimuth_diff`` is the gap to the next firing, ``(36000 + rotation[(f
   + 1) * g] - azimuth) % 36000``, for ``f < n - 1``; the last firing takes the previous
   firing's gap (the manuals' recipe), a packet of one firing (VLS-128 dual) 0, and blocks past
   ``n * g`` (none decoded) their own rotation and 0.
2. ``distance = float(raw) * resolution`` (float; resolution from the calibration file, but the
   constant ``0.004f`` for VLS-128); if ``(double) distance > 1e-6`` then ``distance +=
   dist_correction`` (float). Kept when ``min_range < distance < max_range`` in double, ``raw !=
   0``, and in dual mode not (odd block and raw equal to the partner's raw).
3. Corrected azimuth, centidegrees: ``a = float(azimuth) + t`` in float. ``nebula``: ``t`` per
   family: VLP-16 ``(azimuth_diff * (float(dsr) * 2.304f + float(firing) * 55.296f)) /
   110.592f``, VLP-32 ``((azimuth_diff * 2.304f) / 55.296f) * float(slot)``, VLS-128
   ``azimuth_diff * cache[laser / 8]`` with ``cache[i] = (2.665f / 53.3f) * float(i + i / 8)``.
   ``sensor``: ``t = azimuth_diff * turn[origin + slot]`` (``origin`` the block's bank origin, 0
   for the VLP-16), ``turn`` the model's float32 table :func:`sensor_turns`. Then
   ``c = f((double) a - ((double) rot_correction * 180.0 / M_PI) * 100.0)``; if ``c < 0``:
   ``c = f((double) c + 36000.0)``; the table index is ``((int) round_half_away(c) & 0xffff) %
   36000``. (VLP-32 points report ``azimuth = radians[rotation]`` of the raw block rotation.)
4. Angle window: VLP-16 and VLS-128 test the block's ``azimuth`` (skip the block) and then the
   index; VLP-32 tests the raw block ``rotation`` only (see :class:`.sensors.DecoderSettings`).
5. Tables (:func:`rotation_tables`): ``radians[i] = f((0.01 * i) * M_PI / 180.0)``,
   ``cos[i] = cosf(radians[i])``, ``sin[i] = sinf(radians[i])`` with glibc's float32 functions
   (:mod:`.libm`; ship these tables to a GPU rather than calling its own ``sinf``/``cosf``).
6. Position, VLP-16 and VLS-128 (all float): ``xy = distance * cos_vert``; ``x = xy * cos``;
   ``y = -(xy * sin)``; ``z = distance * sin_vert``. VLP-32 (float; ``h``/``v`` the horizontal
   and vertical offsets): ``xy = distance * cos_vert - v * sin_vert``; with the two-point
   correction ``xx = |xy * sin - h * cos|``, ``yy = |xy * cos + h * sin|``, ``cx = f(((double)
   (dc - dcx) * ((double) xx - 2.4)) / 22.64 + dcx) - dc`` (``22.64`` is the double ``25.04 -
   2.4``), ``cy`` alike with ``dcy``, ``yy`` and ``1.93`` (``25.04 - 1.93``); else ``cx = cy =
   0``. ``dx = distance + cx``, ``dy = distance + cy``; ``X = (dx * cos_vert - v * sin_vert) *
   sin - h * cos``; ``Y = (dy * cos_vert - v * sin_vert) * cos + h * sin``; ``Z = dy * sin_vert +
   v * cos_vert``; the point is ``(Y, -X, Z)``.
7. Intensity: the raw byte; VLP-32 also adds the focal correction in float,
   ``i = (int) (float(raw) + focal_slope * |256 * a * a - 256 * s|) & 0xff`` with ``a = 1 -
   focal_distance / 13100`` and ``s = (1 - float(raw_distance) / 65535)`` squared (products left
   to right), then clamps to ``[min_intensity, max_intensity]``.
8. Return type (nebula's ``ReturnType``): mode byte 55 STRONGEST (3), 56 LAST (1), 57 dual:
   IDENTICAL (6) when the partner's raw is 0 or equal, else FIRST/LAST x STRONGEST/WEAK (9, 10,
   4, 5) with ``first = raw > partner_raw`` (VLP-16) or ``partner_raw >= raw`` (VLP-32, VLS-128),
   ``strongest = intensity > partner_intensity`` (ties: ``not first``); other bytes UNKNOWN (0).
9. ``channel = laser_ring``; ``elevation = sin_vert`` (nebula stores the sine, not the angle);
   ``distance`` is step 2's; ``azimuth = radians[index]``.
10. Time: ``offset`` is a float32 table entry (:func:`time_offsets`); ``t = (packet_seconds -
    scan_seconds) + (double) offset``; ``time_stamp = (uint32) trunc(max(t, 0) * 1e9)``, the low
    32 bits of the 64-bit truncation as on x86 (a packet 4.3 s or more after the sweep stamp
    wraps).

A packet stops at its first block with a bad header (VLP-16: not ``0xEEFF``; VLS-128: not one of
``0xEEFF 0xDDFF 0xCCFF 0xBBFF``, lasers 0/32/64/96 on); VLP-32 reads ``0xDDFF`` blocks as lasers
32-63 and any other header as 0-31. VLS-128 dual packets decode blocks 0-7 only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np

from .calibration import VelodyneCalibration
from .libm import glibc_cosf, glibc_sinf
from .sensors import DecoderSettings, Family, sensor_model

PACKET_SIZE = 1206
BLOCKS = 12
SLOTS = 32
BLOCK_SIZE = 100
RETURN_MODE_OFFSET = 1204
MODE_STRONGEST, MODE_LAST, MODE_DUAL = 55, 56, 57
UPPER_BANK, LOWER_BANK = 0xEEFF, 0xDDFF
VLS128_BANKS = (0xEEFF, 0xDDFF, 0xCCFF, 0xBBFF)
VLS128_DISTANCE_RESOLUTION = np.float32(0.004)
ROTATION_UNITS = 36000
FIRST_AZIMUTH_OFFSET = 2
LAST_AZIMUTH_OFFSET = 1102

#: nebula's ``ReturnType`` values.
RETURN_UNKNOWN, RETURN_LAST, RETURN_STRONGEST = 0, 1, 3
RETURN_FIRST_WEAK, RETURN_LAST_WEAK, RETURN_IDENTICAL = 4, 5, 6
RETURN_FIRST_STRONGEST, RETURN_LAST_STRONGEST = 9, 10

#: nebula's ``PointXYZIRCAEDT``: 32 bytes a point, these offsets (the PCD/PointCloud2 layout).
POINT_DTYPE = np.dtype(
    {
        "names": [
            "x", "y", "z", "intensity", "return_type", "channel",
            "azimuth", "elevation", "distance", "time_stamp",
        ],
        "formats": ["<f4", "<f4", "<f4", "u1", "u1", "<u2", "<f4", "<f4", "<f4", "<u4"],
        "offsets": [0, 4, 8, 12, 13, 14, 16, 20, 24, 28],
        "itemsize": 32,
    }
)  # fmt: skip

_F = np.float32


@lru_cache(maxsize=1)
def rotation_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(radians, cos, sin)`` float32 tables of the 36000 centidegree headings (step 5)."""
    index = np.arange(ROTATION_UNITS, dtype=np.float64)
    radians = ((0.01 * index) * np.pi / 180.0).astype(np.float32)
    return radians, glibc_cosf(radians), glibc_sinf(radians)


@cache
def time_offsets(family: Family) -> np.ndarray:
    """The float32 time table of a family (seconds), single-return layout (see
    :data:`.sensors.RETURN_MODES`): VLP-16 ``[block, slot]`` = ``f(55.296e-6 * (2 * block +
    slot / 16) + 2.304e-6 * (slot % 16))``; VLP-32 ``[block, slot]`` = ``f(55.296e-6 * block +
    2.304e-6 * (slot / 2))``; VLS-128 ``[block / 4, laser / 8 + laser / 64]`` = ``f(53.3e-6 *
    sequence + 2.665e-6 * group - 8.7e-6)`` (integer divisions; each constant is the double
    product written in nebula, e.g. ``55.296 * 1e-6``)."""
    full16, single16 = 55.296 * 1e-6, 2.304 * 1e-6
    if family is Family.VLP16:
        x, y = np.meshgrid(np.arange(BLOCKS), np.arange(SLOTS), indexing="ij")
        table = full16 * (x * 2 + y // 16).astype(np.float64) + single16 * (y % 16)
    elif family is Family.VLP32:
        x, y = np.meshgrid(np.arange(BLOCKS), np.arange(SLOTS), indexing="ij")
        table = full16 * x.astype(np.float64) + single16 * (y // 2).astype(np.float64)
    else:
        x, y = np.meshgrid(np.arange(3), np.arange(17), indexing="ij")
        table = (53.3 * 1e-6) * x + (2.665 * 1e-6) * y - 8.7 * 1e-6
    return table.astype(np.float32)


@cache
def sensor_turns(model: str) -> np.ndarray:
    """The float32 table of step 3's ``sensor`` timing: for each position ``bank origin + slot``
    (:data:`~.sensors.SEQUENCE_POSITIONS` of them), the share of the azimuth gap its laser fires
    at, ``f(offset_us / duration_us)`` of the model's :class:`~.sensors.FiringTiming` (the double
    quotient rounded once)."""
    firing = sensor_model(model).firing
    offsets = np.array(firing.offsets_us, np.float64)
    return (offsets / firing.duration_us).astype(np.float32)


def zero_block(family: Family, dual: bool) -> int:
    """The block whose ``azimuth_diff`` nebula sets to 0 when no later block is left (step 1)."""
    return BLOCKS - 1 - int(dual) if family is Family.VLP16 else BLOCKS - 1 - 4 * int(dual)


@cache
def nebula_recurrence(family: Family, dual: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index tables of step 1's ``nebula`` rule: the rotation each block's ``azimuth`` reads, the
    rotation its difference reads (-1: none), and the block whose difference it copies (-1:
    itself; -2: zero)."""
    step = 1 + int(dual)
    last = BLOCKS - 1 - step
    azimuth_from = np.array([0] + [min(b - 1, last) + step for b in range(1, BLOCKS)])
    next_from = np.array([b + step if b <= last else -1 for b in range(BLOCKS)])
    zero = zero_block(family, dual)
    copy_from = np.array([-1 if b <= last else (-2 if b == zero else last) for b in range(BLOCKS)])
    return azimuth_from, next_from, copy_from


@cache
def sensor_recurrence(firing_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index tables of step 1's ``sensor`` rule for firings of ``firing_blocks`` blocks, in the
    form of :func:`nebula_recurrence`'s."""
    firings = BLOCKS // firing_blocks
    azimuth_from, next_from, copy_from = [], [], []
    for block in range(BLOCKS):
        firing = block // firing_blocks
        if firing >= firings:  # past the packet's whole firings: never decoded
            azimuth_from.append(block)
            next_from.append(-1)
            copy_from.append(-2)
            continue
        azimuth_from.append(firing * firing_blocks)
        if firing + 1 < firings:
            next_from.append((firing + 1) * firing_blocks)
            copy_from.append(-1)
        else:
            next_from.append(-1)
            copy_from.append((firing - 1) * firing_blocks if firing > 0 else -2)
    return np.array(azimuth_from), np.array(next_from), np.array(copy_from)


def block_recurrence(
    settings: DecoderSettings, dual: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 1's index tables for the settings' model and ``azimuth_timing``, single-return
    (``dual`` false) or dual-return packets."""
    sensor = settings.sensor
    if settings.azimuth_timing == "sensor":
        return sensor_recurrence(sensor.firing.blocks_per_firing(dual))
    return nebula_recurrence(sensor.family, dual)


def block_azimuths(
    rotation: np.ndarray, dual: np.ndarray, settings: DecoderSettings
) -> tuple[np.ndarray, np.ndarray]:
    """Step 1 for ``(P, 12)`` int rotations: ``(azimuth int64, azimuth_diff float32)``."""
    rotation = rotation.astype(np.int64)
    azimuth = np.empty_like(rotation)
    diff = np.empty(rotation.shape, np.float32)
    for flag in (False, True):
        rows = np.flatnonzero(dual == flag)
        if rows.size == 0:
            continue
        azimuth_from, next_from, copy_from = block_recurrence(settings, flag)
        rot = rotation[rows]
        az = rot[:, azimuth_from]
        computed = np.fmod(36000 + rot[:, np.maximum(next_from, 0)] - az, 36000)
        d = np.where(next_from >= 0, computed, 0)
        copies = copy_from >= 0
        d[:, copies] = d[:, copy_from[copies]]
        azimuth[rows] = az
        diff[rows] = d.astype(np.float32)
    return azimuth, diff


def _angle_ok(value: np.ndarray, settings: DecoderSettings) -> np.ndarray:
    low, high = int(settings.cloud_min_angle) * 100, int(settings.cloud_max_angle) * 100
    if low < high:
        return (value >= low) & (value <= high)
    if low > high:
        return (value <= high) | (value >= low)
    return np.zeros(value.shape, bool)


def _block_window_ok(azimuth: np.ndarray, settings: DecoderSettings) -> np.ndarray:
    """The block-level test of the VLP-16 and VLS-128 decoders on the block's ``azimuth``."""
    low, high = int(settings.cloud_min_angle), int(settings.cloud_max_angle)
    if low < high:
        return (azimuth >= low * 100) & (azimuth <= high * 100)
    return np.full(azimuth.shape, low > high)


@dataclass(frozen=True)
class PacketFields:
    """The raw fields of ``(P, 1206)`` packets, split (little-endian)."""

    header: np.ndarray  # (P, 12) int64
    rotation: np.ndarray  # (P, 12) int64
    raw: np.ndarray  # (P, 12, 32) int64 distance units
    intensity: np.ndarray  # (P, 12, 32) uint8
    mode: np.ndarray  # (P,) uint8

    @property
    def dual(self) -> np.ndarray:
        return self.mode == MODE_DUAL


def split_packets(packets: np.ndarray) -> PacketFields:
    """Split ``(P, 1206)`` uint8 packets into their fields."""
    packets = np.asarray(packets, np.uint8)
    if packets.ndim != 2 or packets.shape[1] != PACKET_SIZE:
        raise ValueError(f"packets must be (P, {PACKET_SIZE}) uint8, got {packets.shape}")
    blocks = packets[:, : BLOCKS * BLOCK_SIZE].reshape(-1, BLOCKS, BLOCK_SIZE).astype(np.int64)
    header = blocks[:, :, 0] | (blocks[:, :, 1] << 8)
    rotation = blocks[:, :, 2] | (blocks[:, :, 3] << 8)
    data = blocks[:, :, 4:].reshape(-1, BLOCKS, SLOTS, 3)
    raw = data[..., 0] | (data[..., 1] << 8)
    intensity = data[..., 2].astype(np.uint8)
    return PacketFields(header, rotation, raw, intensity, packets[:, RETURN_MODE_OFFSET].copy())


def _bank_and_reach(fields: PacketFields, family: Family) -> tuple[np.ndarray, np.ndarray]:
    """``(bank origin (P, 12), block decoded (P, 12))`` from the headers (a bad header stops its
    packet) and, for VLS-128 dual packets, the 8-block limit."""
    header = fields.header
    if family is Family.VLP16:
        good = header == UPPER_BANK
        origin = np.zeros_like(header)
    elif family is Family.VLS128:
        origin = np.full_like(header, -1)
        for bank, value in enumerate(VLS128_BANKS):
            origin[header == value] = 32 * bank
        good = origin >= 0
        good &= ~(fields.dual[:, None] & (np.arange(BLOCKS) >= BLOCKS - 4)[None, :])
        origin = np.maximum(origin, 0)
    else:
        return np.where(header == LOWER_BANK, 32, 0), np.ones(header.shape, bool)
    return origin, np.cumprod(good, axis=1).astype(bool)


def packets_reaching_points(packets: np.ndarray, settings: DecoderSettings) -> np.ndarray:
    """(P,) bool: packets whose decoding reaches a return at all, the packets that set a
    sweep's stamp when none is set yet (nebula sets it before testing the return)."""
    family = settings.sensor.family
    fields = split_packets(packets)
    _, decoded = _bank_and_reach(fields, family)
    if family is Family.VLP32:
        return decoded.any(axis=1)
    azimuth, _ = block_azimuths(fields.rotation, fields.dual, settings)
    return (decoded & _block_window_ok(azimuth, settings)).any(axis=1)


def decode_packets(
    packets: np.ndarray,
    packet_seconds: np.ndarray,
    scan_seconds: np.ndarray | float,
    calibration: VelodyneCalibration,
    settings: DecoderSettings,
) -> tuple[np.ndarray, np.ndarray]:
    """Decode packets into points (the module docstring gives the arithmetic).

    Args:
        packets: (P, 1206) uint8 ``VelodynePacket.data``.
        packet_seconds: (P,) float64 stamp of each packet in seconds (what nebula's decoder is
            given: the ROS driver passes ``sec + nanosec / 1e9``, its decoder tests ``sec``).
        scan_seconds: the stamp of the sweep each packet's points belong to, (P,) or scalar.
        calibration: the sensor's calibration (:func:`.calibration.load_calibration`).
        settings: decoder settings; their ``model`` picks the family.

    Returns:
        ``(points, packet_index)``: points in :data:`POINT_DTYPE`, in nebula's order, and the
        (N,) int64 index of the packet each came from.
    """
    family = settings.sensor.family
    fields = split_packets(packets)
    count = fields.raw.shape[0]
    packet_seconds = np.broadcast_to(np.asarray(packet_seconds, np.float64), (count,))
    scan_seconds = np.broadcast_to(np.asarray(scan_seconds, np.float64), (count,))
    radians_table, cos_table, sin_table = rotation_tables()
    dual = fields.dual
    origin, decoded = _bank_and_reach(fields, family)
    azimuth, azimuth_diff = block_azimuths(fields.rotation, dual, settings)

    slot = np.arange(SLOTS)
    if family is Family.VLP16:
        laser = np.broadcast_to(slot % 16, fields.raw.shape)
    else:
        laser = origin[:, :, None] + slot[None, None, :]
    in_calibration = laser < calibration.size
    laser = np.where(in_calibration, laser, 0)

    # partner return (dual mode): block b pairs with b ^ 1
    partner = np.arange(BLOCKS) ^ 1
    partner_raw = fields.raw[:, partner, :]
    partner_intensity = fields.intensity[:, partner, :]
    odd = (np.arange(BLOCKS) % 2 == 1)[None, :, None]
    same_as_partner = partner_raw == fields.raw
    keep = decoded[:, :, None] & in_calibration & (fields.raw != 0)
    keep &= ~(dual[:, None, None] & odd & same_as_partner)
    if family is not Family.VLP32:
        keep &= _block_window_ok(azimuth, settings)[:, :, None]

    # step 2: distance
    resolution = (
        VLS128_DISTANCE_RESOLUTION if family is Family.VLS128 else calibration.distance_resolution
    )
    distance = fields.raw.astype(np.float32) * _F(resolution)
    distance = np.where(
        distance.astype(np.float64) > 1e-6,
        distance + calibration.dist_correction[laser],
        distance,
    )
    wide = distance.astype(np.float64)
    keep &= (wide > settings.min_range) & (wide < settings.max_range)

    # step 3: corrected azimuth
    diff = azimuth_diff[:, :, None]
    if settings.azimuth_timing == "sensor":
        turn = diff * sensor_turns(settings.model)[origin[:, :, None] + slot[None, None, :]]
    elif family is Family.VLP16:
        firing = (slot // 16).astype(np.float32)
        dsr = (slot % 16).astype(np.float32)
        timing = dsr * _F(2.304) + firing * _F(55.296)
        turn = (diff * timing[None, None, :]) / _F(110.592)
    elif family is Family.VLP32:
        turn = ((diff * _F(2.304)) / _F(55.296)) * slot.astype(np.float32)[None, None, :]
    else:
        group = np.arange(16)
        cache = (_F(2.665) / _F(53.3)) * (group + group // 8).astype(np.float32)
        turn = diff * cache[laser // 8]
    partial = azimuth.astype(np.float32)[:, :, None] + turn
    rot_term = ((calibration.rot_correction.astype(np.float64) * 180.0) / np.pi) * 100.0
    corrected = (partial.astype(np.float64) - rot_term[laser]).astype(np.float32)
    negative = corrected < 0
    corrected = np.where(
        negative, (corrected.astype(np.float64) + 36000.0).astype(np.float32), corrected
    )
    index = (np.floor(corrected.astype(np.float64) + 0.5).astype(np.int64) & 0xFFFF) % 36000

    # step 4: angle window on the point
    if family is Family.VLP32:
        keep &= _angle_ok(fields.rotation, settings)[:, :, None]
    else:
        keep &= _angle_ok(index, settings)

    # compact now: everything below is per kept slot, in (packet, block, slot) order
    where = np.nonzero(keep)
    p, b, s = where
    laser_k = laser[where]
    distance_k = distance[where]
    cos_rot = cos_table[index[where]]
    sin_rot = sin_table[index[where]]
    cos_vert = calibration.cos_vert[laser_k]
    sin_vert = calibration.sin_vert[laser_k]
    raw_k = fields.raw[where]
    intensity_raw = fields.intensity[where]

    points = np.zeros(p.shape[0], POINT_DTYPE)
    if family is Family.VLP32:
        x, y, z = _vlp32_position(
            distance_k, cos_rot, sin_rot, cos_vert, sin_vert, laser_k, calibration
        )
        intensity = _vlp32_intensity(intensity_raw, raw_k, laser_k, calibration)
        points["azimuth"] = radians_table[fields.rotation[p, b] % 36000]
    else:
        xy = distance_k * cos_vert
        x = xy * cos_rot
        y = -(xy * sin_rot)
        z = distance_k * sin_vert
        intensity = intensity_raw
        points["azimuth"] = radians_table[index[where]]
    points["x"], points["y"], points["z"] = x, y, z
    points["intensity"] = intensity
    points["channel"] = calibration.laser_ring[laser_k]
    points["elevation"] = sin_vert
    points["distance"] = distance_k
    points["return_type"] = _return_types(
        family,
        fields.mode[p],
        raw_k,
        partner_raw[where],
        intensity.astype(np.float32),
        partner_intensity[where].astype(np.float32),
    )

    # step 10: time
    table = time_offsets(family)
    vls = family is Family.VLS128
    offset = table[b // 4, laser_k // 8 + laser_k // 64] if vls else table[b, s]
    seconds = (packet_seconds[p] - scan_seconds[p]) + offset.astype(np.float64)
    # the low 32 bits of the truncated nanoseconds, as x86's double -> uint32 conversion (a 64-bit
    # truncation) gives them in nebula and the CUDA twin; never NumPy's float -> uint32 cast, whose
    # result past 2^32 depends on the array's length (0 or wrapped) and warns
    nanoseconds = np.trunc(np.maximum(seconds, 0.0) * 1e9).astype(np.int64)
    points["time_stamp"] = nanoseconds.astype(np.uint32)
    return points, p.astype(np.int64)


def _vlp32_position(distance, cos_rot, sin_rot, cos_vert, sin_vert, laser, calibration):
    """Step 6 for the VLP-32 family (VLP-32C, HDL-32E, HDL-64E)."""
    h = calibration.horiz_offset_correction[laser]
    v = calibration.vert_offset_correction[laser]
    distance_x = distance
    distance_y = distance
    two_pt = calibration.two_pt_correction[laser]
    if two_pt.any():
        dc = calibration.dist_correction[laser]
        xy = distance * cos_vert - v * sin_vert
        xx = np.abs(xy * sin_rot - h * cos_rot)
        yy = np.abs(xy * cos_rot + h * sin_rot)
        dcx = calibration.dist_correction_x[laser]
        dcy = calibration.dist_correction_y[laser]
        corr_x = (
            ((dc - dcx).astype(np.float64) * (xx.astype(np.float64) - 2.4)) / (25.04 - 2.4)
            + dcx.astype(np.float64)
        ).astype(np.float32) - dc
        corr_y = (
            ((dc - dcy).astype(np.float64) * (yy.astype(np.float64) - 1.93)) / (25.04 - 1.93)
            + dcy.astype(np.float64)
        ).astype(np.float32) - dc
        zero = np.float32(0.0)
        distance_x = distance + np.where(two_pt, corr_x, zero)
        distance_y = distance + np.where(two_pt, corr_y, zero)
    big_x = (distance_x * cos_vert - v * sin_vert) * sin_rot - h * cos_rot
    big_y = (distance_y * cos_vert - v * sin_vert) * cos_rot + h * sin_rot
    big_z = distance_y * sin_vert + v * cos_vert
    return big_y, -big_x, big_z


def _vlp32_intensity(intensity, raw, laser, calibration):
    """Step 7's focal correction and clamp (VLP-32 family)."""
    focal = calibration.focal_distance[laser]
    slope = calibration.focal_slope[laser]
    a = _F(1) - focal / _F(13100)
    focal_offset = (_F(256) * a) * a
    u = _F(1) - raw.astype(np.float32) / _F(65535)
    sqr = u * u
    value = intensity.astype(np.float32) + slope * np.abs(focal_offset - _F(256) * sqr)
    value = np.trunc(value.astype(np.float64)).astype(np.int64) & 0xFF
    value = np.where(
        value < calibration.min_intensity[laser], calibration.min_intensity[laser], value
    )
    value = np.where(
        value > calibration.max_intensity[laser], calibration.max_intensity[laser], value
    )
    return (value & 0xFF).astype(np.uint8)


def _return_types(family, mode, raw, partner_raw, intensity, partner_intensity):
    """Step 8."""
    out = np.full(raw.shape, RETURN_UNKNOWN, np.uint8)
    out[mode == MODE_STRONGEST] = RETURN_STRONGEST
    out[mode == MODE_LAST] = RETURN_LAST
    dual = mode == MODE_DUAL
    first = raw > partner_raw if family is Family.VLP16 else partner_raw >= raw
    strongest = np.where(intensity == partner_intensity, ~first, intensity > partner_intensity)
    kind = np.where(
        first,
        np.where(strongest, RETURN_FIRST_STRONGEST, RETURN_FIRST_WEAK),
        np.where(strongest, RETURN_LAST_STRONGEST, RETURN_LAST_WEAK),
    )
    identical = (partner_raw == 0) | (partner_raw == raw)
    kind = np.where(identical, RETURN_IDENTICAL, kind)
    out[dual] = kind[dual]
    return out
