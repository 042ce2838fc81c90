"""Velodyne calibration files in nebula's YAML format, read as nebula reads them.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from .libm import glibc_cosf, glibc_sinf

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


class CalibrationError(ValueError):
    """A calibration file cannot be read; the message names the file and the reason."""


@dataclass(frozen=True)
class VelodyneCalibration:
    """Per-laser corrections as arrays indexed by laser number (length ``len(laser_id)``).

    All float arrays are float32, ``min_intensity``/``max_intensity`` int32, ``laser_ring``
    uint16, ``two_pt_correction`` bool. Lasers absent from the file (an index gap) are zeros.
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

    @property
    def size(self) -> int:
        """Entries of the per-laser arrays (``num_lasers`` or more if a ``laser_id`` exceeds it)."""
        return int(self.rot_correction.shape[0])


def float32_from_decimal(text: str) -> np.float32:
    """The float32 nearest to the decimal ``text`` (ties to even), rounded once like ``strtof``."""
    exact = Fraction(text.strip())
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


def parse_calibration(document: dict, source: str = "<calibration>") -> VelodyneCalibration:
    """Build the calibration from a YAML document loaded with every scalar as a string."""
    try:
        num_lasers = int(document["num_lasers"])
        resolution = float32_from_decimal(str(document["distance_resolution"]))
        lasers = list(document["lasers"])[:num_lasers]
    except (KeyError, TypeError, ValueError) as error:
        raise CalibrationError(f"{source}: bad header ({error})") from None
    if len(lasers) < num_lasers:
        raise CalibrationError(f"{source}: {len(lasers)} lasers listed, num_lasers {num_lasers}")
    entries = []
    for position, laser in enumerate(lasers):
        missing = [key for key in REQUIRED_KEYS if key not in laser]
        if missing:
            raise CalibrationError(f"{source}: laser {position} lacks {', '.join(missing)}")
        entries.append(laser)
    try:
        ids = [int(laser["laser_id"]) for laser in entries]
    except ValueError as error:
        raise CalibrationError(f"{source}: bad laser_id ({error})") from None
    if min(ids, default=0) < 0:
        raise CalibrationError(f"{source}: negative laser_id")
    size = max([num_lasers, *(i + 1 for i in ids)])
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
    min_intensity = np.zeros(size, np.int32)
    max_intensity = np.zeros(size, np.int32)
    two_pt = np.zeros(size, bool)
    try:
        for index, laser in zip(ids, entries, strict=True):
            for key, array in floats.items():
                if key in laser:
                    array[index] = float32_from_decimal(str(laser[key]))
            max_intensity[index] = (
                math.floor(float32_from_decimal(str(laser["max_intensity"])))
                if "max_intensity" in laser
                else 255
            )
            min_intensity[index] = (
                math.floor(float32_from_decimal(str(laser["min_intensity"])))
                if "min_intensity" in laser
                else 0
            )
            if "two_pt_correction_available" in laser:
                two_pt[index] = _bool(str(laser["two_pt_correction_available"]))
    except (ValueError, ZeroDivisionError) as error:
        raise CalibrationError(f"{source}: bad value ({error})") from None
    return VelodyneCalibration(
        num_lasers=num_lasers,
        distance_resolution=resolution,
        min_intensity=min_intensity,
        max_intensity=max_intensity,
        two_pt_correction=two_pt,
        cos_vert=glibc_cosf(floats["vert_correction"]),
        sin_vert=glibc_sinf(floats["vert_correction"]),
        cos_rot=glibc_cosf(floats["rot_correction"]),
        sin_rot=glibc_sinf(floats["rot_correction"]),
        laser_ring=laser_rings(floats["vert_correction"], num_lasers),
        **floats,
    )


def load_calibration(path: str | Path) -> VelodyneCalibration:
    """Read a nebula calibration YAML file (e.g. nebula's ``VLP16.yaml``).

    Raises:
        CalibrationError: the file is missing, not YAML, or lacks a key nebula requires.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    path = Path(path)
    try:
        document = YAML(typ="base").load(path.read_text())
    except (OSError, YAMLError) as error:
        raise CalibrationError(f"{path}: {error}") from None
    if not isinstance(document, dict):
        raise CalibrationError(f"{path}: not a calibration map")
    return parse_calibration(document, str(path))
