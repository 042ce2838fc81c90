"""Hesai calibration files, read as nebula reads them, and checked.

Two kinds, by model (:attr:`.sensors.HesaiModel.corrector`):

- **CSV** (every model but the AT128; nebula's ``HesaiCalibrationConfiguration``): a header line
  (``Laser id,Elevation,Azimuth`` or ``Channel,...``), then one line per channel: its number
  (from 1), its elevation and its azimuth offset in degrees. Each angle is the float32 nearest
  to its decimal text (``std::stof``: ``strtof``, rounded once).
- **.dat** (the AT128's angle-correction file, nebula's ``HesaiCorrection``, version 1.5):
  after the ``0xEE 0xFF`` delimiter: version major and minor, channel count, mirror count,
  frame count, 8 frame-configuration bytes, the resolution; then ``uint32`` start and end
  frames (one each per mirror), ``int32`` azimuth and elevation per channel, and 180 ``int8``
  azimuth and elevation adjustments per channel; every value is multiplied by the resolution
  as nebula does (the adjustments stay ``int8``: their product wraps as C's conversion does).
  Angles are in 1/25600 degree, adjustments in 1/100 degree.

Bounds (checked before the work; any breach is a :class:`CalibrationError`, one line naming the
file and the reason): a regular file (FIFOs and devices are refused without waiting), at most
:data:`MAX_CALIBRATION_BYTES`; a CSV is UTF-8, its data lines hold exactly three fields (a whole
channel number, two decimal numbers of at most 40 characters), each channel once, elevations
within [-90, 90] and azimuth offsets within [-180, 180] degrees; a ``.dat`` is version 1.5
(nebula reads 1.3 as "not worked"), holds every byte its counts announce, 1 to 8 mirrors and
1 to ``mirrors`` frames, channels within [1, 128] and a resolution of at least 1.

:func:`check_calibration_model` then checks a calibration against its model: the kind, and
every channel of the model present, no other (nebula reads channel ``c`` with ``map.at(c)``
and throws on a missing one; it ignores extra ones, which here are refused as another model's
file).
"""

from __future__ import annotations

import os
import stat as stat_kind
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..velodyne.calibration import MAX_NUMBER_CHARS, decimal_value, float32_from_decimal
from .sensors import HesaiModel

#: Largest calibration file read, in bytes (nebula's largest, the AT128's ``.dat``, is 47 KB).
MAX_CALIBRATION_BYTES = 256 * 1024
#: Most channels of any model.
MAX_CHANNELS = 128
#: ``.dat`` adjustments per channel (one per 2 degrees of encoder angle).
ADJUSTMENTS_PER_CHANNEL = 180
#: ``.dat`` adjustment table entries nebula's structure holds (unused ones stay 0).
ADJUSTMENT_TABLE = 36000


class CalibrationError(ValueError):
    """A calibration file cannot be used; the message names the file and the reason."""


@dataclass(frozen=True)
class HesaiCalibration:
    """A CSV calibration: per channel (index = channel number - 1) its float32 elevation and
    azimuth offset in degrees; ``source`` names the file."""

    elevation_deg: np.ndarray
    azimuth_deg: np.ndarray
    source: str = "<calibration>"

    @property
    def channels(self) -> int:
        """Channels listed."""
        return int(self.elevation_deg.shape[0])


@dataclass(frozen=True)
class HesaiCorrection:
    """An AT128 ``.dat`` correction, every value already multiplied by ``resolution``.

    Attributes:
        version: ``(major, minor)``.
        channels, mirrors, frames: the counts of the file.
        resolution: the multiplier.
        start_frame, end_frame: (mirrors,) int64, encoder angles of each field, 1/25600 degree.
        azimuth, elevation: (channels,) int64 per-channel angles, 1/25600 degree.
        azimuth_adjust, elevation_adjust: (:data:`ADJUSTMENT_TABLE`,) int8 adjustments in 1/100
            degree, ``channel * 180 + i`` for encoder angle ``i * 2`` degrees (zeros past the
            file's entries, as nebula's value-initialised structure).
        source: the file.
    """

    version: tuple[int, int]
    channels: int
    mirrors: int
    frames: int
    resolution: int
    start_frame: np.ndarray
    end_frame: np.ndarray
    azimuth: np.ndarray
    elevation: np.ndarray
    azimuth_adjust: np.ndarray
    elevation_adjust: np.ndarray
    source: str = "<correction>"


def read_calibration_bytes(path: str | Path) -> bytes:
    """The bytes of the file ``path``: a regular file (opened without blocking, so a FIFO is
    refused, not waited on) of at most :data:`MAX_CALIBRATION_BYTES`.

    Raises:
        CalibrationError: missing, unreadable, not a regular file or too large.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise CalibrationError(f"{path}: cannot open: {error.strerror or error}") from None
    try:
        info = os.fstat(descriptor)
        if not stat_kind.S_ISREG(info.st_mode):
            kind = "a folder" if stat_kind.S_ISDIR(info.st_mode) else "a FIFO, a device or a socket"
            raise CalibrationError(f"{path}: not a regular file ({kind}): not a calibration")
        if info.st_size > MAX_CALIBRATION_BYTES:
            raise CalibrationError(
                f"{path}: {info.st_size} bytes, over the {MAX_CALIBRATION_BYTES} a calibration "
                "file may have"
            )
        data = os.read(descriptor, MAX_CALIBRATION_BYTES + 1)
    except OSError as error:
        raise CalibrationError(f"{path}: cannot read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_CALIBRATION_BYTES:
        raise CalibrationError(f"{path}: grew past {MAX_CALIBRATION_BYTES} bytes while read")
    return data


def _angle(text: str, where: str, what: str, limit: float) -> np.float32:
    try:
        exact = decimal_value(text)
    except ValueError as error:
        raise CalibrationError(f"{where}{what}: {error}") from None
    if abs(exact) > limit:
        raise CalibrationError(f"{where}{what} {text.strip()} is outside [-{limit:g}, {limit:g}]")
    return float32_from_decimal(text)


def parse_calibration_csv(text: str, source: str = "<calibration>") -> HesaiCalibration:
    """A CSV calibration from its text (the module docstring gives the rules).

    Raises:
        CalibrationError: a malformed line, a channel twice, a gap in the channel numbers, or no
            channel at all; the message names ``source`` and the line.
    """
    rows: dict[int, tuple[np.float32, np.float32]] = {}
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        where = f"{source}: line {number}: "
        fields = [field.strip() for field in line.split(",")]
        if not line.strip():
            continue
        first = fields[0]
        if not rows and not first.lstrip("+-").isdigit():
            continue  # the header line
        if len(fields) != 3:
            raise CalibrationError(
                f"{where}{len(fields)} fields, a channel line has 3 (channel, elevation, azimuth)"
            )
        if len(first) > MAX_NUMBER_CHARS or not first.lstrip("+").isdigit():
            raise CalibrationError(f"{where}channel {first[:MAX_NUMBER_CHARS]!r} is not a number")
        channel = int(first)
        if not 1 <= channel <= MAX_CHANNELS:
            raise CalibrationError(f"{where}channel {channel} is outside [1, {MAX_CHANNELS}]")
        if channel in rows:
            raise CalibrationError(f"{where}channel {channel} is listed twice")
        rows[channel] = (
            _angle(fields[1], where, "elevation", 90.0),
            _angle(fields[2], where, "azimuth", 180.0),
        )
    if not rows:
        raise CalibrationError(f"{source}: no channel lines (channel, elevation, azimuth)")
    count = max(rows)
    missing = [channel for channel in range(1, count + 1) if channel not in rows]
    if missing:
        shown = ", ".join(str(c) for c in missing[:8]) + (", ..." if len(missing) > 8 else "")
        raise CalibrationError(
            f"{source}: channel {shown} missing ({len(missing)} of channels 1-{count})"
        )
    elevation = np.array([rows[c][0] for c in range(1, count + 1)], np.float32)
    azimuth = np.array([rows[c][1] for c in range(1, count + 1)], np.float32)
    return HesaiCalibration(elevation, azimuth, source)


def _wrap_int8(values: np.ndarray) -> np.ndarray:
    return ((np.asarray(values, np.int64) + 128) % 256 - 128).astype(np.int8)


def parse_correction(data: bytes, source: str = "<correction>") -> HesaiCorrection:
    """An AT128 ``.dat`` correction from its bytes (the module docstring gives the layout).

    Raises:
        CalibrationError: no delimiter, another version, counts out of range, or fewer bytes
            than the counts announce; the message names ``source``.
    """
    start = data.find(b"\xee\xff")
    if start < 0:
        raise CalibrationError(f"{source}: no 0xEE 0xFF delimiter: not an AT128 correction file")
    head = data[start : start + 16]
    if len(head) < 16:
        raise CalibrationError(
            f"{source}: {len(data) - start} bytes after the delimiter, 16 needed"
        )
    major, minor, channels, mirrors, frames = head[2], head[3], head[4], head[5], head[6]
    resolution = head[15]
    if minor != 5:
        raise CalibrationError(
            f"{source}: version {major}.{minor}, nebula reads version 1.5 only (1.3: 'not worked')"
        )
    if not 1 <= channels <= MAX_CHANNELS:
        raise CalibrationError(f"{source}: {channels} channels, outside [1, {MAX_CHANNELS}]")
    if not 1 <= mirrors <= 8 or not 1 <= frames <= mirrors:
        raise CalibrationError(
            f"{source}: {mirrors} mirrors and {frames} frames (1 to 8 mirrors, at most one frame "
            "a mirror)"
        )
    if resolution < 1:
        raise CalibrationError(f"{source}: resolution 0: every angle would be 0")
    tables = ADJUSTMENTS_PER_CHANNEL * channels
    need = 16 + 8 * mirrors + 8 * channels + 2 * tables
    if len(data) - start < need:
        raise CalibrationError(
            f"{source}: {len(data) - start} bytes from the delimiter, the counts need {need}"
        )
    at = start + 16
    frames_u32 = np.frombuffer(data, "<u4", 2 * mirrors, at).astype(np.int64)
    at += 8 * mirrors
    angles = np.frombuffer(data, "<i4", 2 * channels, at).astype(np.int64)
    at += 8 * channels
    adjust = np.frombuffer(data, np.int8, 2 * tables, at).astype(np.int64)
    azimuth_adjust = np.zeros(ADJUSTMENT_TABLE, np.int8)
    elevation_adjust = np.zeros(ADJUSTMENT_TABLE, np.int8)
    azimuth_adjust[:tables] = _wrap_int8(adjust[:tables] * resolution)
    elevation_adjust[:tables] = _wrap_int8(adjust[tables:] * resolution)
    # uint32 and int32 products wrap as nebula's do
    return HesaiCorrection(
        version=(major, minor),
        channels=channels,
        mirrors=mirrors,
        frames=frames,
        resolution=resolution,
        start_frame=(frames_u32[:mirrors] * resolution) % 2**32,
        end_frame=(frames_u32[mirrors:] * resolution) % 2**32,
        azimuth=(angles[:channels] * resolution + 2**31) % 2**32 - 2**31,
        elevation=(angles[channels:] * resolution + 2**31) % 2**32 - 2**31,
        azimuth_adjust=azimuth_adjust,
        elevation_adjust=elevation_adjust,
        source=source,
    )


def load_calibration(path: str | Path) -> HesaiCalibration:
    """Read a CSV calibration (e.g. nebula's ``PandarXT32.csv``), every line checked.

    Raises:
        CalibrationError: the file is missing, not a regular file, too large, not UTF-8, or a
            line breaks the rules; one line naming the file.
    """
    data = read_calibration_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CalibrationError(f"{path}: not UTF-8 text (byte {error.start})") from None
    return parse_calibration_csv(text, str(path))


def load_correction(path: str | Path) -> HesaiCorrection:
    """Read an AT128 ``.dat`` correction file.

    Raises:
        CalibrationError: the file is missing, not a regular file, too large, or not a
            version 1.5 correction; one line naming the file.
    """
    return parse_correction(read_calibration_bytes(path), str(path))


def load_for_model(path: str | Path, model: HesaiModel) -> HesaiCalibration | HesaiCorrection:
    """The calibration ``model`` needs from ``path`` (a CSV, or the AT128's ``.dat``), checked
    against the model (:func:`check_calibration_model`).

    Raises:
        CalibrationError: see :func:`load_calibration`, :func:`load_correction` and
            :func:`check_calibration_model`.
    """
    if model.corrector == "correction":
        calibration: HesaiCalibration | HesaiCorrection = load_correction(path)
    else:
        calibration = load_calibration(path)
    check_calibration_model(calibration, model)
    return calibration


def check_calibration_model(
    calibration: HesaiCalibration | HesaiCorrection, model: HesaiModel
) -> None:
    """Refuse a calibration that is not one of ``model``'s: the kind its angle corrector reads
    (a CSV, or the AT128's ``.dat``), and exactly the model's channels.

    Raises:
        CalibrationError: the other kind, or another channel count (another model's file, or a
            broken one); the message names the file, the counts and the model.
    """
    wants_correction = model.corrector == "correction"
    if isinstance(calibration, HesaiCorrection) != wants_correction:
        kind = "an AT128 .dat correction" if wants_correction else "a CSV calibration"
        raise CalibrationError(f"{calibration.source}: a {model.name} needs {kind}")
    if calibration.channels != model.channels:
        raise CalibrationError(
            f"{calibration.source}: {calibration.channels} channels, but a {model.name} has "
            f"{model.channels} (the calibration of another model?)"
        )
