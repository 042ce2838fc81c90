"""Velodyne calibration files in nebula's YAML format, read as nebula reads them, and checked.

A file holds ``num_lasers``, ``distance_resolution`` (metres per distance unit) and ``lasers``, a
list of maps with ``laser_id`` and the corrections of that laser: ``rot_correction`` and
``vert_correction`` (radians), ``dist_correction``, ``dist_correction_x``, ``dist_correction_y``,
``vert_offset_correction``, ``horiz_offset_correction`` (metres), ``focal_distance``,
``focal_slope``, optional ``min_intensity``/``max_intensity`` and ``two_pt_correction_available``.

Arithmetic, as nebula's C++ (``velodyne_calibration_decoder.cpp``) does it:

- every correction is a float32 rounded once from the decimal text (yaml-cpp's ``as<float>``, a
  correctly rounded ``strtof``), never through a double first;
- ``min_intensity``/``max_intensity`` are ``floor`` of that float32, as int (default 0 and 255);
- ``cos_vert``/``sin_vert`` (and ``cos_rot``/``sin_rot``) are glibc's float32 ``cosf``/``sinf``
  of the float32 angle (:mod:`.libm`, not correctly rounded);
- ``laser_ring`` (the ``channel`` of a point) ranks the lasers by ``vert_correction``, lowest first:
  ring ``r`` is the lowest angle strictly above ring ``r - 1``'s, the first laser index winning a
  tie; a laser that shares its angle with an earlier one keeps ring 0, as in nebula.

What is read, and the budget of reading it (checked before the work; a file outside it is a
:class:`CalibrationError`, one line naming the file, the key and the reason):

- a regular file (a FIFO, a device such as ``/dev/zero`` or a folder is refused before it is
  read: opened without blocking), of at most :data:`MAX_CALIBRATION_BYTES` (128 KiB; nebula's
  largest, ``VLS128.yaml``, is 40 KB; parsing 128 KiB of YAML takes at most a few seconds), UTF-8;
- a map whose values are scalars where numbers are expected (never a list or map, which aliases
  could make exponentially large);
- numbers as decimal text of at most :data:`MAX_NUMBER_CHARS` (40) characters with an exponent
  of at most :data:`MAX_EXPONENT` (64) either way (``1e-999999999`` is refused before any
  arithmetic, so each value costs microseconds), within each key's range (:data:`VALUE_RANGES`:
  ``rot_correction`` within a half turn, ``vert_correction`` a quarter, metres within 100 m,
  ``focal_distance`` within 13 100, ``focal_slope`` 100, intensities within 0-255,
  ``distance_resolution`` above 0 and at most 1 m);
- ``num_lasers`` a whole number from 1 to :data:`MAX_LASERS` (the most of any model, the
  VLS-128's 128), at least that many lasers listed, each ``laser_id`` a whole number below
  :data:`MAX_LASERS`, no id twice.

:func:`check_calibration_model` then checks a calibration against the sensor model it decodes
(the laser count and ids of the model's table, :data:`.sensors.SENSOR_MODELS`).
"""

from __future__ import annotations

import math
import os
import re
import stat as stat_kind
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from .libm import glibc_cosf, glibc_sinf
from .sensors import SENSOR_MODELS, SensorModel

#: Keys nebula requires in every laser's map (yaml-cpp throws without them).
REQUIRED_KEYS = (
    "laser_id",
    "rot_correction",
    "vert_correction",
    "dist_correction",
    "dist_correction_x",
    "dist_correction_y",
    "vert_offset_correction",
    "focal_distance",
    "focal_slope",
)
#: Largest calibration file read, in bytes (about three times nebula's largest).
MAX_CALIBRATION_BYTES = 128 * 1024
#: Most lasers a calibration may hold: the most of any model (the VLS-128's 128).
MAX_LASERS = max(model.lasers for model in SENSOR_MODELS.values())
#: Longest number text, in characters (nebula's files write at most 23).
MAX_NUMBER_CHARS = 40
#: Largest magnitude of a number's written exponent (``1e-64`` is read, ``1e-65`` refused).
MAX_EXPONENT = 64
#: The range of each key's value (inclusive; ``distance_resolution`` must be above its low end).
VALUE_RANGES: dict[str, tuple[float, float]] = {
    "distance_resolution": (0.0, 1.0),
    "rot_correction": (-math.pi, math.pi),
    "vert_correction": (-math.pi / 2, math.pi / 2),
    "dist_correction": (-100.0, 100.0),
    "dist_correction_x": (-100.0, 100.0),
    "dist_correction_y": (-100.0, 100.0),
    "vert_offset_correction": (-100.0, 100.0),
    "horiz_offset_correction": (-100.0, 100.0),
    "focal_distance": (-13100.0, 13100.0),
    "focal_slope": (-100.0, 100.0),
    "min_intensity": (0.0, 255.0),
    "max_intensity": (0.0, 255.0),
}
#: A decimal number: sign, digits with an optional point, optional exponent.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?")
_WHOLE = re.compile(r"[+-]?\d+")


class CalibrationError(ValueError):
    """A calibration file cannot be read; the message names the file and the reason."""


@dataclass(frozen=True)
class VelodyneCalibration:
    """Per-laser corrections as arrays indexed by laser number (length ``len(laser_id)``).

    All float arrays are float32, ``min_intensity``/``max_intensity`` int32, ``laser_ring``
    uint16, ``two_pt_correction`` bool. Lasers absent from the file (an index gap) are zeros.
    ``source`` names the file (for messages).
    """

    num_lasers: int
    distance_resolution: np.float32
    rot_correction: np.ndarray
    vert_correction: np.ndarray
    dist_correction: np.ndarray
    dist_correction_x: np.ndarray
    dist_correction_y: np.ndarray
    vert_offset_correction: np.ndarray
    horiz_offset_correction: np.ndarray
    focal_distance: np.ndarray
    focal_slope: np.ndarray
    min_intensity: np.ndarray
    max_intensity: np.ndarray
    two_pt_correction: np.ndarray
    cos_vert: np.ndarray
    sin_vert: np.ndarray
    cos_rot: np.ndarray
    sin_rot: np.ndarray
    laser_ring: np.ndarray
    source: str = "<calibration>"

    @property
    def size(self) -> int:
        """Entries of the per-laser arrays (``num_lasers`` or more if a ``laser_id`` exceeds it)."""
        return int(self.rot_correction.shape[0])


#: The largest finite float32, as an exact fraction.
_FLOAT32_MAX = Fraction(float(np.finfo(np.float32).max))


def decimal_value(text: str) -> Fraction:
    """The exact value of the decimal number ``text``, its size checked before any arithmetic.

    Raises:
        ValueError: not a decimal number (a sign, digits with an optional point, an optional
            exponent), longer than :data:`MAX_NUMBER_CHARS`, or an exponent beyond
            :data:`MAX_EXPONENT`; the message says which.
    """
    text = text.strip()
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    match = _NUMBER.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a decimal number")
    if match.group(1) is not None and abs(int(match.group(1))) > MAX_EXPONENT:
        raise ValueError(f"{text!r} has an exponent beyond +-{MAX_EXPONENT}")
    return Fraction(text)


def float32_from_decimal(text: str) -> np.float32:
    """The float32 nearest to the decimal ``text`` (ties to even), rounded once like ``strtof``.

    Raises:
        ValueError: ``text`` is refused by :func:`decimal_value`, or beyond float32's range.
    """
    exact = decimal_value(text)
    if abs(exact) > _FLOAT32_MAX:
        raise ValueError(f"{text.strip()!r} is beyond float32's range")
    guess = np.float32(float(exact))
    best = guess
    for candidate in (
        np.nextafter(guess, np.float32(-np.inf)),
        np.nextafter(guess, np.float32(np.inf)),
    ):
        if not np.isfinite(candidate):
            continue
        here = abs(Fraction(float(candidate)) - exact)
        there = abs(Fraction(float(best)) - exact)
        even = int(candidate.view(np.uint32)) % 2 == 0
        if here < there or (here == there and even):
            best = candidate
    return np.float32(best)


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "yes", "on", "y", "1"):
        return True
    if value in ("false", "no", "off", "n", "0"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def laser_rings(vert_correction: np.ndarray, num_lasers: int) -> np.ndarray:
    """Ring (``channel``) of each laser by rising vertical angle, as nebula numbers them."""
    rings = np.zeros(vert_correction.shape[0], np.uint16)
    angles = [float(a) for a in vert_correction[:num_lasers]]
    next_angle = -math.inf
    for ring in range(num_lasers):
        min_seen = math.inf
        next_index = num_lasers
        for index, angle in enumerate(angles):
            if next_angle < angle < min_seen:
                min_seen = angle
                next_index = index
        if next_index < num_lasers:
            rings[next_index] = ring
            next_angle = min_seen
    return rings


def _scalar(mapping: dict, key: str, where: str) -> str:
    """``mapping[key]`` when it is a scalar (every scalar is a string in the base loader's
    documents); a list or map is refused before it is looked at."""
    value = mapping[key]
    if not isinstance(value, str):
        raise CalibrationError(f"{where}{key} is a {type(value).__name__}, not a scalar")
    return value


def _number(mapping: dict, key: str, where: str) -> np.float32:
    """``mapping[key]`` as nebula's float32, its text and range (:data:`VALUE_RANGES`) checked."""
    text = _scalar(mapping, key, where)
    try:
        exact = decimal_value(text)
    except ValueError as error:
        raise CalibrationError(f"{where}{key}: {error}") from None
    low, high = VALUE_RANGES[key]
    above_low = exact > low if key == "distance_resolution" else exact >= low
    if not (above_low and exact <= high):
        bounds = f"({low:g}, {high:g}]" if key == "distance_resolution" else f"[{low:g}, {high:g}]"
        raise CalibrationError(f"{where}{key} {text.strip()} is outside {bounds}")
    return float32_from_decimal(text)


def _whole(mapping: dict, key: str, where: str, low: int, high: int) -> int:
    """``mapping[key]`` as a whole number in ``[low, high]``, its text checked first."""
    text = _scalar(mapping, key, where).strip()
    if len(text) > MAX_NUMBER_CHARS or not _WHOLE.fullmatch(text):
        raise CalibrationError(f"{where}{key} {text[:MAX_NUMBER_CHARS]!r} is not a whole number")
    value = int(text)
    if not low <= value <= high:
        raise CalibrationError(f"{where}{key} {value} is outside [{low}, {high}]")
    return value


def parse_calibration(document: object, source: str = "<calibration>") -> VelodyneCalibration:
    """Build the calibration from a YAML document loaded with every scalar as a string, every
    key and value checked (the module docstring lists the rules).

    Raises:
        CalibrationError: a key missing, a value that is not a number in its range, too few
            lasers, a repeated ``laser_id``; the message names ``source``, the laser and the key.
    """
    head = f"{source}: "
    if not isinstance(document, dict):
        raise CalibrationError(f"{head}not a calibration map")
    missing = [
        key for key in ("num_lasers", "distance_resolution", "lasers") if key not in document
    ]
    if missing:
        raise CalibrationError(f"{head}lacks {', '.join(missing)}")
    num_lasers = _whole(document, "num_lasers", head, 1, MAX_LASERS)
    resolution = _number(document, "distance_resolution", head)
    lasers = document["lasers"]
    if not isinstance(lasers, list):
        raise CalibrationError(f"{head}lasers is a {type(lasers).__name__}, not a list")
    if len(lasers) < num_lasers:
        raise CalibrationError(f"{head}{len(lasers)} lasers listed, num_lasers {num_lasers}")
    entries = lasers[:num_lasers]
    ids: list[int] = []
    for position, laser in enumerate(entries):
        where = f"{head}laser {position}: "
        if not isinstance(laser, dict):
            raise CalibrationError(f"{where}a {type(laser).__name__}, not a map")
        absent = [key for key in REQUIRED_KEYS if key not in laser]
        if absent:
            raise CalibrationError(f"{where}lacks {', '.join(absent)}")
        ids.append(_whole(laser, "laser_id", where, 0, MAX_LASERS - 1))
    first_of: dict[int, int] = {}
    for position, laser_id in enumerate(ids):
        if laser_id in first_of:
            raise CalibrationError(
                f"{head}laser {position}: laser_id {laser_id} is laser {first_of[laser_id]}'s "
                "too (every laser needs an id of its own)"
            )
        first_of[laser_id] = position
    size = max(num_lasers, max(ids) + 1)
    floats = {
        key: np.zeros(size, np.float32)
        for key in (
            "rot_correction",
            "vert_correction",
            "dist_correction",
            "dist_correction_x",
            "dist_correction_y",
            "vert_offset_correction",
            "horiz_offset_correction",
            "focal_distance",
            "focal_slope",
        )
    }
    intensity = {
        "min_intensity": np.zeros(size, np.int32),
        "max_intensity": np.zeros(size, np.int32),
    }
    default_intensity = {"min_intensity": 0, "max_intensity": 255}
    two_pt = np.zeros(size, bool)
    for position, (index, laser) in enumerate(zip(ids, entries, strict=True)):
        where = f"{head}laser {position}: "
        for key, array in floats.items():
            if key in laser:
                array[index] = _number(laser, key, where)
        for key, array in intensity.items():
            array[index] = (
                math.floor(_number(laser, key, where)) if key in laser else default_intensity[key]
            )
        if "two_pt_correction_available" in laser:
            text = _scalar(laser, "two_pt_correction_available", where)
            try:
                two_pt[index] = _bool(text)
            except ValueError as error:
                raise CalibrationError(f"{where}two_pt_correction_available: {error}") from None
    return VelodyneCalibration(
        num_lasers=num_lasers,
        distance_resolution=resolution,
        min_intensity=intensity["min_intensity"],
        max_intensity=intensity["max_intensity"],
        two_pt_correction=two_pt,
        cos_vert=glibc_cosf(floats["vert_correction"]),
        sin_vert=glibc_sinf(floats["vert_correction"]),
        cos_rot=glibc_cosf(floats["rot_correction"]),
        sin_rot=glibc_sinf(floats["rot_correction"]),
        laser_ring=laser_rings(floats["vert_correction"], num_lasers),
        source=source,
        **floats,
    )


def check_calibration_model(calibration: VelodyneCalibration, model: SensorModel) -> None:
    """Refuse a calibration that is not one of ``model``'s: it must list exactly the model's
    lasers (``num_lasers``) with the ids ``0`` to ``lasers - 1``, each once (the ids are unique
    already, :func:`parse_calibration`).

    Raises:
        CalibrationError: another laser count (another model's file, or a broken one), or an id
            beyond the model's lasers; the message names the file, the counts and the model.
    """
    if calibration.num_lasers != model.lasers:
        raise CalibrationError(
            f"{calibration.source}: num_lasers {calibration.num_lasers}, but a {model.name} has "
            f"{model.lasers} lasers (the calibration of another model?)"
        )
    if calibration.size != model.lasers:
        raise CalibrationError(
            f"{calibration.source}: laser_id {calibration.size - 1} is beyond a {model.name}'s "
            f"lasers 0-{model.lasers - 1}"
        )


def read_calibration_text(path: Path) -> str:
    """The text of the calibration file ``path``: a regular file (opened without blocking, so a
    FIFO is refused, not waited on) of at most :data:`MAX_CALIBRATION_BYTES`, UTF-8.

    Raises:
        CalibrationError: missing, unreadable, not a regular file, too large, or not UTF-8.
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
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CalibrationError(f"{path}: not UTF-8 text (byte {error.start})") from None


def load_calibration(path: str | Path) -> VelodyneCalibration:
    """Read a nebula calibration YAML file (e.g. nebula's ``VLP16.yaml``), every value checked
    (the module docstring).

    Raises:
        CalibrationError: the file is missing, not a regular file, too large, not YAML, lacks a
            key nebula requires, or holds a value outside its range; one line naming the file.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    path = Path(path)
    text = read_calibration_text(path)
    try:
        document = YAML(typ="base").load(text)
    except (YAMLError, RecursionError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise CalibrationError(f"{path}: not YAML ({reason[:300]})") from None
    return parse_calibration(document, str(path))
