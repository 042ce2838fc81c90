"""nebula's two Hesai angle correctors, vectorised: encoder angles to spatial angles.

Both give, for a block group's encoder azimuth ``a`` (the group's first block's; AT128:
``(azimuth << 8) + fine_azimuth``), each channel's corrected azimuth (float32 radians in
``[0, 2 pi)``, what the scan cutter compares) and the angles of a return. Arithmetic (float is
float32, double float64; ``f(x)`` rounds a double to float32; each operation rounded once,
never fused; ``sinf``/``cosf`` are glibc's, :mod:`..velodyne.libm`; ``norm(x)`` is nebula's
``normalize_angle``: ``f(x - floor(x / m) * m)`` in double with ``m = 2 * M_PIf``):

**Calibration based** (the CSV; :class:`CalibrationAngles`):

1. per channel: ``elevation = f(elevation_deg * f(M_PI / 180))`` and ``offset =
   f(azimuth_deg * f(M_PI / 180))`` (float products), ``sin_el = sinf(elevation)``, ``cos_el =
   cosf(elevation)``;
2. ``block = f((a / 100.0) * (M_PI / 180.0))`` (double); ``spatial = block + offset`` (float);
3. azimuth ``norm(spatial)``; ``sin_az = sinf(spatial)``, ``cos_az = cosf(spatial)`` (of the
   sum before normalising, as nebula's tables hold them);
4. the cutter's extreme channels: the first channel of least and of greatest ``offset``.

**Correction based** (the AT128's ``.dat``; :class:`CorrectionAngles`), in 1/25600 degree
(integers; ``M`` = 9 216 000 a turn; ``%`` is the floored remainder):

1. the field: the first ``i`` of the file's frames with ``a`` between ``start_frame[i]`` and
   ``end_frame[i]`` (inclusive, wrapping; none: the packet is refused, where nebula throws);
2. the adjustments of channel ``c`` at ``a``: ``i = (int) floorf(f(a) / 51200.f)``, ``l = a -
   51200 i``, ``k = f(l) / 51200.f``, ``adjust = round_half_away((1.f - k) * T[180 c + i] + k *
   T[180 c + i + 1])`` in float (each product and the sum rounded), as int8;
3. azimuth ``A = ((a - start) * 2 - azimuth[c] + azimuth_adjust * 256) % M``, elevation ``E =
   elevation[c] + elevation_adjust * 256``;
4. azimuth ``f((A / 25600.0) * (M_PI / 180.0))``; elevation ``f((double) (2.f * E) * M_PI /
   M)``; ``sin``/``cos`` of table entry ``j`` (``A``, and ``E % M``) are
   ``sinf``/``cosf(f(f(f(2 j) * M_PIf) / 9216000.f))``;
5. the cutter's extreme channels: the first channel of least and of greatest azimuth of the
   group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..velodyne.libm import glibc_cosf, glibc_sinf
from .calibration import HesaiCalibration, HesaiCorrection
from .sensors import TWO_PI_F32, normalize_f32

#: ``(float) (M_PI / 180.0)``.
DEG_TO_RAD_F32 = np.float32(math.pi / 180.0)
#: ``M_PIf``.
PI_F32 = np.float32(math.pi)
#: The AT128's encoder units in a turn (1/25600 degree).
AT128_TURN = 360 * 25600
#: Encoder units between two ``.dat`` adjustments (2 degrees).
ADJUST_STEP = 200 * 256


@dataclass(frozen=True)
class CorrectedAzimuths:
    """Each channel's corrected azimuth of block groups, for the scan cutter.

    Attributes:
        azimuth: (G, C) float32 radians in ``[0, 2 pi)``.
        lagging, leading: (G,) int64: the channel of least and of greatest correction.
    """

    azimuth: np.ndarray
    lagging: np.ndarray
    leading: np.ndarray


@dataclass(frozen=True)
class ReturnAngles:
    """The angles of returns: float32 azimuth and elevation (radians) and their sines and
    cosines, as nebula's ``CorrectedAngleData``."""

    azimuth: np.ndarray
    elevation: np.ndarray
    sin_azimuth: np.ndarray
    cos_azimuth: np.ndarray
    sin_elevation: np.ndarray
    cos_elevation: np.ndarray


def block_radians(encoder: np.ndarray) -> np.ndarray:
    """Calibration-based step 2: ``f((a / 100.0) * (M_PI / 180.0))``."""
    return ((np.asarray(encoder, np.float64) / 100.0) * (math.pi / 180.0)).astype(np.float32)


@dataclass(frozen=True)
class CalibrationAngles:
    """The calibration-based corrector of a CSV calibration (the module docstring)."""

    calibration: HesaiCalibration
    elevation: np.ndarray = field(init=False)
    offset: np.ndarray = field(init=False)
    sin_elevation: np.ndarray = field(init=False)
    cos_elevation: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        elevation = self.calibration.elevation_deg.astype(np.float32) * DEG_TO_RAD_F32
        object.__setattr__(self, "elevation", elevation)
        object.__setattr__(
            self, "offset", self.calibration.azimuth_deg.astype(np.float32) * DEG_TO_RAD_F32
        )
        object.__setattr__(self, "sin_elevation", glibc_sinf(elevation))
        object.__setattr__(self, "cos_elevation", glibc_cosf(elevation))

    def azimuths(self, encoder: np.ndarray) -> CorrectedAzimuths:
        """Step 2-4 for (G,) encoder azimuths."""
        spatial = block_radians(encoder)[:, None] + self.offset[None, :]
        count = spatial.shape[0]
        lagging = np.full(count, int(np.argmin(self.offset)), np.int64)
        leading = np.full(count, int(np.argmax(self.offset)), np.int64)
        return CorrectedAzimuths(normalize_f32(spatial, float(TWO_PI_F32)), lagging, leading)

    def return_angles(self, encoder: np.ndarray, channel: np.ndarray) -> ReturnAngles:
        """The angles of returns of (N,) encoder azimuths and channels."""
        spatial = block_radians(encoder) + self.offset[channel]
        return ReturnAngles(
            azimuth=normalize_f32(spatial, float(TWO_PI_F32)),
            elevation=self.elevation[channel],
            sin_azimuth=glibc_sinf(spatial),
            cos_azimuth=glibc_cosf(spatial),
            sin_elevation=self.sin_elevation[channel],
            cos_elevation=self.cos_elevation[channel],
        )


def table_angle(index: np.ndarray) -> np.ndarray:
    """Correction-based step 4's table argument ``f(f(f(2 j) * M_PIf) / 9216000.f)``."""
    twice = np.asarray(index, np.int64).astype(np.float32) * np.float32(2.0)
    return (twice * PI_F32) / np.float32(AT128_TURN)


def _wrap_int32(values: np.ndarray) -> np.ndarray:
    return (np.asarray(values, np.int64) + 2**31) % 2**32 - 2**31


@dataclass(frozen=True)
class CorrectionAngles:
    """The correction-based corrector of an AT128 ``.dat`` (the module docstring)."""

    correction: HesaiCorrection

    def fields(self, encoder: np.ndarray) -> np.ndarray:
        """Step 1: (G,) the field of each encoder azimuth, -1 where none holds it."""
        encoder = np.asarray(encoder, np.int64)
        found = np.full(encoder.shape, -1, np.int64)
        corr = self.correction
        for index in range(corr.frames - 1, -1, -1):  # the first match wins
            start, end = int(corr.start_frame[index]), int(corr.end_frame[index])
            # nebula passes the uint32 frames as int32
            start, end = int(_wrap_int32(start)), int(_wrap_int32(end))
            inside = np.asarray(angle_between_int(start, end, encoder))
            found = np.where(inside, index, found)
        return found

    def _adjust(self, table: np.ndarray, channel: np.ndarray, encoder: np.ndarray) -> np.ndarray:
        """Step 2 (int64 values of int8 adjustments)."""
        position = np.floor(encoder.astype(np.float32) / np.float32(ADJUST_STEP)).astype(np.int64)
        within = (encoder - position * ADJUST_STEP) % 2**32
        k = within.astype(np.float32) / np.float32(ADJUST_STEP)
        base = channel * 180 + position
        low = table[np.clip(base, 0, table.shape[0] - 1)].astype(np.float32)
        high = table[np.clip(base + 1, 0, table.shape[0] - 1)].astype(np.float32)
        value = (np.float32(1.0) - k) * low + k * high
        rounded = np.trunc(value.astype(np.float64) + np.copysign(0.5, value)).astype(np.int64)
        return (rounded + 128) % 256 - 128

    def exact_azimuths(self, encoder: np.ndarray, channel: np.ndarray) -> np.ndarray:
        """Step 3's ``A`` (int64) of encoder azimuths and channels (broadcast), whose fields
        (:meth:`fields`) exist."""
        encoder = np.asarray(encoder, np.int64)
        corr = self.correction
        start = corr.start_frame[self.fields(encoder)]
        doubled = _wrap_int32(((encoder - start) % 2**32) * 2)
        adjust = self._adjust(corr.azimuth_adjust, channel, encoder)
        exact = _wrap_int32(doubled - corr.azimuth[channel] + adjust * 256)
        return exact % AT128_TURN

    def exact_elevations(self, encoder: np.ndarray, channel: np.ndarray) -> np.ndarray:
        """Step 3's ``E`` (int64)."""
        corr = self.correction
        adjust = self._adjust(corr.elevation_adjust, channel, np.asarray(encoder, np.int64))
        return _wrap_int32(corr.elevation[channel] + adjust * 256)

    def azimuths(self, encoder: np.ndarray) -> CorrectedAzimuths:
        """Step 3-5 for (G,) encoder azimuths whose fields exist."""
        encoder = np.asarray(encoder, np.int64)
        channel = np.arange(self.correction.channels)[None, :]
        exact = self.exact_azimuths(encoder[:, None], channel)
        radians = exact_radians(exact)
        return CorrectedAzimuths(radians, np.argmin(radians, axis=1), np.argmax(radians, axis=1))

    def return_angles(self, encoder: np.ndarray, channel: np.ndarray) -> ReturnAngles:
        """The angles of returns of (N,) encoder azimuths and channels."""
        azimuth = self.exact_azimuths(encoder, channel)
        elevation = self.exact_elevations(encoder, channel)
        twice = (elevation.astype(np.float32) * np.float32(2.0)).astype(np.float64)
        elevation_table = table_angle(elevation % AT128_TURN)
        azimuth_table = table_angle(azimuth)
        return ReturnAngles(
            azimuth=exact_radians(azimuth),
            elevation=((twice * math.pi) / AT128_TURN).astype(np.float32),
            sin_azimuth=glibc_sinf(azimuth_table),
            cos_azimuth=glibc_cosf(azimuth_table),
            sin_elevation=glibc_sinf(elevation_table),
            cos_elevation=glibc_cosf(elevation_table),
        )


def exact_radians(exact: np.ndarray) -> np.ndarray:
    """``to_radians``: ``f((A / 25600.0) * (M_PI / 180.0))``."""
    return ((np.asarray(exact, np.float64) / 25600.0) * (math.pi / 180.0)).astype(np.float32)


def angle_between_int(start: int, end: int, angle: np.ndarray) -> np.ndarray:
    """``angle_is_between`` with both ends inclusive (integers)."""
    if start == end:
        return np.ones(np.shape(angle), bool)
    if end < start:
        return (angle <= end) | (start <= angle)
    return (start <= angle) & (angle <= end)


def corrector_for(
    calibration: HesaiCalibration | HesaiCorrection,
) -> CalibrationAngles | CorrectionAngles:
    """The corrector of a calibration: :class:`CalibrationAngles` for a CSV,
    :class:`CorrectionAngles` for a ``.dat``."""
    if isinstance(calibration, HesaiCorrection):
        return CorrectionAngles(calibration)
    return CalibrationAngles(calibration)
