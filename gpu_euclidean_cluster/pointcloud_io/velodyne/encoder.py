"""Velodyne packet encoding, the decoder's inverse: returns in, a sensor's packets out (ROS-free).

    >>> encoder = VelodyneEncoder(load_calibration("VLP16.yaml"), DecoderSettings(model="VLP16"))
    >>> rotation = Rotation(rate_hz=10.0, start_centidegrees=0.0).azimuths(encoder.layout, 120)
    >>> geometry = encoder.geometry(rotation)        # the ray of every (firing, position)
    >>> raw = encoder.raw_distance(ranges, geometry.laser)    # ranges along those rays
    >>> packets, stamps_ns = encoder.packets(rotation, raw, intensity, first_firing_ns)

**Layout** (:class:`PacketLayout`). A *firing* is the returns that share one block azimuth, as
the model's :class:`~.sensors.FiringTiming` has it: one data block of the VLP-16 (its two
16-laser sequences), of the VLP-32C and the HDL-32E; the HDL-64E's upper and lower block; the
VLS-128's four blocks. Its *positions* are its blocks' slots in order, ``32 * blocks`` of them;
position ``p`` is laser ``p % 16`` on the VLP-16 and laser ``p`` otherwise (the block's bank
origin plus the slot: 0xEEFF lasers 0-31, 0xDDFF 32-63, 0xCCFF 64-95, 0xBBFF 96-127; the
VLP-16, VLP-32C and HDL-32E blocks are all 0xEEFF). A packet holds ``12 / blocks_per_firing``
firings in firing order. Dual return (``return_mode`` ``Dual``): every block is followed by its
second return's block, here the same return again (one target a ray: the decoder keeps the first
and labels it IDENTICAL); a VLS-128 dual packet holds one firing in blocks 0-7, and blocks 8-11,
which nebula never decodes, repeat its headers and rotation with no return.

**Rotation** (:class:`Rotation`). The sensor turns at ``rate_hz`` while it fires at its own
pace: firing ``k`` of a stream fires ``k * duration`` after the first (``duration`` the
model's ``FiringTiming.duration_us``, whole nanoseconds for every model) at azimuth ``start + k
* step`` centidegrees, ``step = 36000 * rate_hz * duration``; each of its blocks carries that
azimuth rounded half up, modulo 36000, as its rotation (a real sensor's steps jitter by a
centidegree the same way). Started at the decoder settings' scan phase, a stream's first packet
opens a sweep and every sweep nebula's cut (:mod:`.sweeps`, rules 1 and 2) makes is one whole
turn (the VLP-32 family's to a packet: below a scan phase of 270 degrees its decoder moves no
point across the cut, so its sweeps meet at the edge of the packet that completes one).

**Bytes**, little-endian: per block the header, the rotation and 32 returns of ``uint16
distance`` and ``uint8 intensity``; bytes 1200-1203 the packet's first firing's time in
microseconds past the hour; byte 1204 the return mode (57 ``Dual``, 56 ``SingleLast``, 55 for
``SingleStrongest`` and ``SingleFirst``: one return a ray is the strongest and the first);
byte 1205 the product id, the model's first in :data:`~.sensors.PRODUCT_IDS` (0, unset, for the
HDL-64E, which has none). Each packet is stamped with its first firing's time (a driver on the
sensor's clock; nebula stamps the time a packet arrives, a packet's duration later or more).

**The inverse** (:meth:`VelodyneEncoder.geometry`): for each (firing, position), what the
decoder (:mod:`.packets`) makes of it. Its step 1 (:func:`~.packets.block_azimuths`) and step 3
give the azimuth table index (step 3's arithmetic, per family and ``azimuth_timing``, is
restated here operation for operation, and the tests hold it to the decoder); step 6 puts a
return of decoded distance ``d`` at ``origin + d * direction`` with, from the float32 tables
(``c, s`` the heading's cosine and sine, ``cv, sv`` the laser's vertical ones, ``h, v`` its
horizontal and vertical offsets, 0 but for the HDL-64E's files)::

    direction = (cv * c, -cv * s, sv)
    origin    = (h * s - v * sv * c,  h * c + v * sv * s,  v * cv)

(the decoder evaluates this in float32; here the products are float64 of the float32 factors).
A ray cast along ``direction`` (not quite unit length: the float32 factors) from ``origin``
hitting a surface at parameter ``t`` therefore decodes onto that surface, ``t`` quantised.

**Range quantisation** (:meth:`VelodyneEncoder.raw_distance`): ``raw`` is the distance count
whose decoded distance (step 2: ``float32(raw) * resolution + dist_correction`` in float32;
``resolution`` the calibration's ``distance_resolution``, the constant 0.004 m for the VLS-128)
is nearest to ``t``: within ``resolution / 2`` of it, plus float32's rounding of the sum. A range
that would need fewer than 1 or more than 65535 counts is no return (raw 0), as is a NaN or an
infinite one.

**What round-trips**: a return of raw ``r != 0`` decodes to ``origin + d * direction`` (float32
arithmetic), ``d`` its decoded distance, exactly where the decoder keeps it
(:meth:`VelodyneEncoder.kept`: ``min_range < d < max_range`` compared in double, inside step 4's
angle windows); its intensity is the byte given (the VLP-32 family adds the focal correction:
none with the shipped VLP-32C and HDL-32E files, whose ``focal_slope`` is 0; the HDL-64E files
correct and clamp); its channel the laser's ring. Calibrations with the two-point distance
correction are refused (:class:`EncoderError`): it is not linear in the distance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .calibration import VelodyneCalibration, check_calibration_model
from .packets import (
    BLOCK_SIZE,
    BLOCKS,
    LOWER_BANK,
    MODE_DUAL,
    MODE_LAST,
    MODE_STRONGEST,
    PACKET_SIZE,
    RETURN_MODE_OFFSET,
    ROTATION_UNITS,
    SLOTS,
    UPPER_BANK,
    VLS128_BANKS,
    VLS128_DISTANCE_RESOLUTION,
    block_azimuths,
    rotation_tables,
    sensor_turns,
)
from .sensors import PRODUCT_ID_OFFSET, DecoderSettings, Family, SensorModel

#: Offset of the packet's time stamp (uint32 microseconds past the hour).
TIMESTAMP_OFFSET = 1200
#: Largest distance count a return's ``uint16`` holds.
MAX_RAW = 0xFFFF
US_PER_HOUR = 3_600_000_000
_F = np.float32


class EncoderError(ValueError):
    """A calibration or an input the encoder cannot turn into packets (one line)."""


def return_mode_byte(return_mode: str) -> int:
    """Factory byte 1204 for nebula's ``return_mode`` (the module docstring)."""
    if return_mode == "Dual":
        return MODE_DUAL
    return MODE_LAST if return_mode == "SingleLast" else MODE_STRONGEST


@dataclass(frozen=True)
class PacketLayout:
    """How a model's firings fill its packets (the module docstring's *Layout*)."""

    model: SensorModel
    dual: bool

    @property
    def blocks_per_firing(self) -> int:
        """Data blocks one firing takes: ``FiringTiming.blocks``, twice that in dual mode."""
        return self.model.firing.blocks_per_firing(self.dual)

    @property
    def firings_per_packet(self) -> int:
        return BLOCKS // self.blocks_per_firing

    @property
    def positions(self) -> int:
        """Returns of one firing (one return each): 32 a single-return block."""
        return self.model.firing.blocks * SLOTS

    @property
    def firing_ns(self) -> int:
        """Nanoseconds from one firing to the next."""
        return round(self.model.firing.duration_us * 1000)

    @property
    def packet_ns(self) -> int:
        return self.firings_per_packet * self.firing_ns

    @property
    def product_id(self) -> int:
        return self.model.product_ids[0] if self.model.product_ids else 0

    def lasers(self) -> np.ndarray:
        """(positions,) the laser of each position of a firing."""
        position = np.arange(self.positions)
        return position % 16 if self.model.family is Family.VLP16 else position

    def block_plan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each of a packet's 12 blocks: its header, the firing of the packet it holds (-1:
        none, VLS-128 dual blocks 8-11) and its first position in that firing (0, 32, ...)."""
        copies = 2 if self.dual else 1
        if self.model.family is Family.VLS128:
            banks = VLS128_BANKS
        else:
            banks = (UPPER_BANK, LOWER_BANK)[: self.model.firing.blocks]
        headers, firings, starts = [], [], []
        for block in range(BLOCKS):
            firing, within = divmod(block, self.blocks_per_firing)
            bank = within // copies
            whole = firing < self.firings_per_packet
            headers.append(banks[bank % len(banks)])
            firings.append(firing if whole else -1)
            starts.append(bank * SLOTS if whole else -1)
        return np.array(headers), np.array(firings), np.array(starts)

    def first_blocks(self) -> np.ndarray:
        """(firings_per_packet, blocks of a firing): the block holding each single-return block
        of each firing of a packet (dual mode: its first return's block)."""
        copies = 2 if self.dual else 1
        firing = np.arange(self.firings_per_packet)[:, None]
        bank = np.arange(self.model.firing.blocks)[None, :]
        return firing * self.blocks_per_firing + bank * copies


@dataclass(frozen=True)
class Rotation:
    """A sensor turning at ``rate_hz``, its first firing at ``start_centidegrees``."""

    rate_hz: float
    start_centidegrees: float = 0.0

    def step_centidegrees(self, layout: PacketLayout) -> float:
        """How far it turns from one firing to the next."""
        return ROTATION_UNITS * self.rate_hz * layout.firing_ns * 1e-9

    def azimuths(self, layout: PacketLayout, firings: int, first: int = 0) -> np.ndarray:
        """(firings,) int64 rotation fields of firings ``first`` to ``first + firings - 1``."""
        index = np.arange(first, first + firings, dtype=np.float64)
        exact = self.start_centidegrees + self.step_centidegrees(layout) * index
        return np.floor(exact + 0.5).astype(np.int64) % ROTATION_UNITS


@dataclass(frozen=True)
class FiringGeometry:
    """What the decoder makes of each (firing, position) of a stream (arrays ``(F, positions)``
    unless said otherwise; the module docstring's *The inverse*).

    Attributes:
        laser: (positions,) the laser of each position.
        azimuth_index: step 3's table index (centidegrees).
        point_azimuth: float32 radians the decoded point's ``azimuth`` will hold (what
            :func:`~.sweeps.trailing_moves` tests): the index's, the block rotation's for the
            VLP-32 family.
        origin: (F, positions, 3) float64 where the ray starts, sensor frame.
        direction: (F, positions, 3) float64 the ray's direction (length 1 up to float32's
            rounding): a return decoded at distance ``d`` lies at ``origin + d * direction``.
        in_window: step 4's angle windows (and the VLP-16 and VLS-128 block window) keep it.
    """

    laser: np.ndarray
    azimuth_index: np.ndarray
    point_azimuth: np.ndarray
    origin: np.ndarray
    direction: np.ndarray
    in_window: np.ndarray


class VelodyneEncoder:
    """Packets of one sensor: its model (from ``settings``), calibration and decoder settings.

    Raises:
        CalibrationError: the calibration is not the model's.
        EncoderError: it asks for the two-point distance correction.
    """

    def __init__(self, calibration: VelodyneCalibration, settings: DecoderSettings) -> None:
        check_calibration_model(calibration, settings.sensor)
        if calibration.two_pt_correction.any():
            raise EncoderError(
                f"{calibration.source}: two-point distance correction is not encoded"
            )
        self.calibration = calibration
        self.settings = settings
        self.layout = PacketLayout(settings.sensor, settings.return_mode == "Dual")
        family = settings.sensor.family
        self.resolution = (
            VLS128_DISTANCE_RESOLUTION
            if family is Family.VLS128
            else _F(calibration.distance_resolution)
        )

    # -- the inverse ----------------------------------------------------------------------------

    def geometry(self, rotation: np.ndarray) -> FiringGeometry:
        """The geometry of a stream's firings whose rotations are ``rotation`` ((F,) int, ``F`` a
        multiple of ``firings_per_packet``: packets are decoded whole)."""
        layout = self.layout
        per_packet = layout.firings_per_packet
        rotation = np.asarray(rotation, np.int64)
        if rotation.ndim != 1 or rotation.size % per_packet:
            raise EncoderError(f"{rotation.shape} rotations: not whole packets of {per_packet}")
        count = rotation.size // per_packet
        headers, firings, _ = layout.block_plan()
        block_rotation = rotation.reshape(count, per_packet)[:, np.where(firings < 0, 0, firings)]
        block_rotation[:, firings < 0] = rotation.reshape(count, per_packet)[:, -1:]
        azimuth, diff = block_azimuths(block_rotation, np.full(count, layout.dual), self.settings)
        origin = self._bank_origin(headers)
        slot = np.arange(SLOTS)
        if self.settings.sensor.family is Family.VLP16:
            laser = np.broadcast_to(slot % 16, (BLOCKS, SLOTS))
        else:
            laser = origin[:, None] + slot[None, :]
        index = self._azimuth_index(azimuth, diff, origin, laser)
        window = self._window(azimuth, block_rotation, index)
        # gather each firing's single-return blocks: (packets, firings, banks, slots)
        first = layout.first_blocks()
        index = index[:, first].reshape(-1, layout.positions)
        window = window[:, first].reshape(-1, layout.positions)
        firing_rotation = block_rotation[:, first[:, 0]].reshape(-1)
        radians, cos_table, sin_table = rotation_tables()
        if self.settings.sensor.family is Family.VLP32:
            point_azimuth = np.repeat(radians[firing_rotation][:, None], layout.positions, 1)
        else:
            point_azimuth = radians[index]
        lasers = layout.lasers()
        c = cos_table[index].astype(np.float64)
        s = sin_table[index].astype(np.float64)
        cal = self.calibration
        cv = cal.cos_vert[lasers].astype(np.float64)
        sv = cal.sin_vert[lasers].astype(np.float64)
        h = cal.horiz_offset_correction[lasers].astype(np.float64)
        v = cal.vert_offset_correction[lasers].astype(np.float64)
        direction = np.stack(np.broadcast_arrays(cv * c, -(cv * s), sv), axis=-1)
        ray_origin = np.stack(
            np.broadcast_arrays(h * s - v * sv * c, h * c + v * sv * s, v * cv), axis=-1
        )
        return FiringGeometry(lasers, index, point_azimuth, ray_origin, direction, window)

    def _bank_origin(self, headers: np.ndarray) -> np.ndarray:
        """The first laser of each block's bank, from its header (the decoder's rule)."""
        family = self.settings.sensor.family
        if family is Family.VLP16:
            return np.zeros(BLOCKS, np.int64)
        if family is Family.VLS128:
            return np.array([SLOTS * VLS128_BANKS.index(int(h)) for h in headers])
        return np.where(headers == LOWER_BANK, SLOTS, 0)

    def _azimuth_index(
        self, azimuth: np.ndarray, diff: np.ndarray, origin: np.ndarray, laser: np.ndarray
    ) -> np.ndarray:
        """Step 3 of :mod:`.packets` for ``(P, 12)`` block azimuths and differences: the
        ``(P, 12, 32)`` table index, each operation rounded as the decoder rounds it."""
        settings = self.settings
        family = settings.sensor.family
        slot = np.arange(SLOTS)
        gap = diff[:, :, None]
        if settings.azimuth_timing == "sensor":
            turn = gap * sensor_turns(settings.model)[origin[:, None] + slot[None, :]][None]
        elif family is Family.VLP16:
            timing = (slot % 16).astype(_F) * _F(2.304) + (slot // 16).astype(_F) * _F(55.296)
            turn = (gap * timing[None, None, :]) / _F(110.592)
        elif family is Family.VLP32:
            turn = ((gap * _F(2.304)) / _F(55.296)) * slot.astype(_F)[None, None, :]
        else:
            group = np.arange(16)
            cache = (_F(2.665) / _F(53.3)) * (group + group // 8).astype(_F)
            turn = gap * cache[laser // 8][None]
        partial = azimuth.astype(_F)[:, :, None] + turn
        rot_term = ((self.calibration.rot_correction.astype(np.float64) * 180.0) / np.pi) * 100.0
        corrected = (partial.astype(np.float64) - rot_term[laser][None]).astype(_F)
        corrected = np.where(
            corrected < 0, (corrected.astype(np.float64) + 36000.0).astype(_F), corrected
        )
        rounded = np.floor(corrected.astype(np.float64) + 0.5).astype(np.int64)
        return (rounded & 0xFFFF) % ROTATION_UNITS

    def _window(self, azimuth: np.ndarray, rotation: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Step 4: ``(P, 12, 32)`` whether the angle windows keep each slot."""
        low, high = int(self.settings.cloud_min_angle), int(self.settings.cloud_max_angle)

        def inside(value: np.ndarray) -> np.ndarray:
            if low < high:
                return (value >= low * 100) & (value <= high * 100)
            return (value <= high * 100) | (value >= low * 100)

        if self.settings.sensor.family is Family.VLP32:
            return np.broadcast_to(inside(rotation)[:, :, None], index.shape)
        block = (azimuth >= low * 100) & (azimuth <= high * 100) if low < high else azimuth >= 0
        return block[:, :, None] & inside(index)

    # -- distances ------------------------------------------------------------------------------

    def decoded_distance(self, raw: np.ndarray, laser: np.ndarray) -> np.ndarray:
        """Step 2: the float32 distance the decoder gives ``raw`` counts of ``laser``."""
        distance = np.asarray(raw).astype(_F) * self.resolution
        correction = self.calibration.dist_correction[laser]
        return np.where(distance.astype(np.float64) > 1e-6, distance + correction, distance)

    def raw_distance(self, distance: np.ndarray, laser: np.ndarray) -> np.ndarray:
        """The int64 counts whose decoded distance is nearest to ``distance`` (metres, float64,
        shaped like ``laser`` broadcast), 0 (no return) where that needs fewer than 1 or more
        than 65535 counts, or ``distance`` is not finite."""
        distance = np.asarray(distance, np.float64)
        correction = self.calibration.dist_correction[laser].astype(np.float64)
        finite = np.isfinite(distance)
        counts = np.where(finite, (distance - correction) / float(self.resolution), 0.0)
        guess = np.floor(counts + 0.5)
        reachable = finite & (guess >= 1) & (guess <= MAX_RAW)
        guess = np.where(reachable, guess, 1).astype(np.int64)
        best = guess
        error = np.abs(self.decoded_distance(guess, laser) - distance)
        for neighbour in (guess - 1, guess + 1):
            neighbour = np.clip(neighbour, 1, MAX_RAW)
            there = np.abs(self.decoded_distance(neighbour, laser) - distance)
            best = np.where(there < error, neighbour, best)
            error = np.minimum(there, error)
        return np.where(reachable, best, 0)

    def kept(self, raw: np.ndarray, geometry: FiringGeometry) -> np.ndarray:
        """(F, positions) whether the decoder keeps each return (a point comes out)."""
        distance = self.decoded_distance(raw, geometry.laser).astype(np.float64)
        settings = self.settings
        in_range = (distance > settings.min_range) & (distance < settings.max_range)
        return (raw != 0) & in_range & geometry.in_window

    # -- packets --------------------------------------------------------------------------------

    def packets(
        self,
        rotation: np.ndarray,
        raw: np.ndarray,
        intensity: np.ndarray,
        first_firing_ns: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The packets of a stream's firings.

        Args:
            rotation: (F,) int rotation of each firing (:meth:`Rotation.azimuths`); ``F`` a
                multiple of ``firings_per_packet``.
            raw: (F, positions) distance counts (0: no return; :meth:`raw_distance`).
            intensity: (F, positions) intensity bytes.
            first_firing_ns: the time of firing 0 (ns since the epoch).

        Returns:
            ``(packets, stamps_ns)``: ``(F / firings_per_packet, 1206)`` uint8 and each packet's
            stamp (int64 ns: its first firing's time).
        """
        layout = self.layout
        per_packet = layout.firings_per_packet
        rotation = np.asarray(rotation, np.int64)
        raw = np.asarray(raw, np.int64)
        if rotation.ndim != 1 or rotation.size % per_packet:
            raise EncoderError(f"{rotation.shape} rotations: not whole packets of {per_packet}")
        if raw.shape != (rotation.size, layout.positions) or raw.shape != np.shape(intensity):
            raise EncoderError(
                f"ranges {raw.shape} and intensities {np.shape(intensity)} for "
                f"{rotation.size} firings of {layout.positions} returns"
            )
        if raw.size and (raw.min() < 0 or raw.max() > MAX_RAW):
            raise EncoderError(f"distance counts outside 0-{MAX_RAW}")
        count = rotation.size // per_packet
        headers, firings, starts = layout.block_plan()
        raw = raw.reshape(count, per_packet, layout.positions)
        intensity = np.asarray(intensity, np.uint8).reshape(raw.shape)
        rotation = rotation.reshape(count, per_packet)
        head = np.zeros((count, BLOCKS, 4), np.uint8)  # header and rotation of each block
        data = np.zeros((count, BLOCKS, SLOTS, 3), np.uint8)
        for block in range(BLOCKS):
            firing, start = firings[block], starts[block]
            turned = rotation[:, firing if firing >= 0 else -1]
            head[:, block, 0:2] = np.array([headers[block]], "<u2").view(np.uint8)
            head[:, block, 2:4] = turned.astype("<u2")[:, None].view(np.uint8)
            if firing >= 0:
                returns = raw[:, firing, start : start + SLOTS]
                data[:, block, :, 0:2] = returns.astype("<u2")[..., None].view(np.uint8)
                data[:, block, :, 2] = intensity[:, firing, start : start + SLOTS]
        packets = np.zeros((count, PACKET_SIZE), np.uint8)
        blocks = np.concatenate([head, data.reshape(count, BLOCKS, SLOTS * 3)], axis=2)
        packets[:, : BLOCKS * BLOCK_SIZE] = blocks.reshape(count, BLOCKS * BLOCK_SIZE)
        stamps = int(first_firing_ns) + layout.packet_ns * np.arange(count, dtype=np.int64)
        micros = ((stamps // 1000) % US_PER_HOUR).astype("<u4")
        packets[:, TIMESTAMP_OFFSET : TIMESTAMP_OFFSET + 4] = micros[:, None].view(np.uint8)
        packets[:, RETURN_MODE_OFFSET] = return_mode_byte(self.settings.return_mode)
        packets[:, PRODUCT_ID_OFFSET] = layout.product_id
        return packets, stamps
