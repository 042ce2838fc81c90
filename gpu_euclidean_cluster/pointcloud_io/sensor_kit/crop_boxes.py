"""A kit's named crop boxes: bounds given, or derived from Autoware's vehicle parameters.

A box gives ``negative`` (required), ``frame`` (the kit's base frame, the default, or
``sensor``) and exactly one source of bounds: ``min`` and ``max`` (``[x, y, z]`` each, infinite
allowed); ``vehicle_info`` or ``vehicle_info_file`` (the self box,
:func:`~.autoware.self_box_bounds`); ``mirror`` or ``mirror_file``
(:func:`~.autoware.mirror_box_bounds`). The parameter files are ROS 2 parameter files
(``/**: ros__parameters``) as Autoware's launch reads them. Derived boxes are in the base
frame, as Autoware's are; ``min < max`` on every axis.
"""

from __future__ import annotations

from pathlib import Path

from . import model as m
from .autoware import (
    MIRROR_KEYS,
    VEHICLE_INFO_KEYS,
    VEHICLE_INFO_OTHER_KEYS,
    mirror_box_bounds,
    parameter_values,
    ros_parameters,
    self_box_bounds,
)
from .fields import NAME, Problems, mapping, number, read_into, resolve_path, text

BOX_SOURCES = ("min", "vehicle_info", "vehicle_info_file", "mirror", "mirror_file")
BOX_KEYS = ("negative", "frame", "max", *BOX_SOURCES)
#: ``frame`` of a box in each sensor's own frame.
SENSOR_FRAME = "sensor"


def _bounds(fields: dict, where: str, folder: Path, problems: Problems):
    """``(minimum, maximum, derived_from)`` of a crop box's one bounds source, or None."""
    given = [key for key in BOX_SOURCES if key in fields]
    if len(given) != 1 or ("min" in fields) != ("max" in fields):
        problems.add(where, "give min and max, vehicle_info(_file) or mirror(_file): exactly one")
        return None
    [key] = given
    if key == "min":
        corners = []
        for corner in ("min", "max"):
            values = fields[corner]
            if not isinstance(values, list) or len(values) != 3:
                problems.add(f"{where}.{corner}", f"must be [x, y, z], got {values!r}")
                return None
            corners.append([number(v, f"{where}.{corner}", problems, False) for v in values])
        if any(v is None for corner in corners for v in corner):
            return None
        return tuple(corners[0]), tuple(corners[1]), m.BOUNDS
    info = key.startswith("vehicle_info")
    keys = VEHICLE_INFO_KEYS if info else MIRROR_KEYS
    others = VEHICLE_INFO_OTHER_KEYS if info else ()
    if key.endswith("_file"):
        name = text(fields[key], f"{where}.{key}", problems)
        path = resolve_path(name, folder) if name else None
        values = path and read_into(problems, f"{where}.{key}", ros_parameters, path, keys, others)
    else:
        before = len(problems)
        values = parameter_values(fields[key], f"{where}.{key}", problems, keys, others)
        values = None if len(problems) > before else values
    if values is None:
        return None
    low, high = self_box_bounds(values) if info else mirror_box_bounds(values)
    return low, high, m.VEHICLE_INFO if info else m.MIRROR


def parse_crop_box(
    name: str, value: object, folder: Path, base: str | None, problems: Problems
) -> m.CropBox | None:
    """The crop box ``name`` of a kit's ``crop_boxes`` (its problems added to ``problems``);
    ``base`` is the kit's base frame."""
    where = f"crop_boxes.{name}"
    if not NAME.fullmatch(name):
        problems.add(where, "a crop box name is letters, digits and underscores")
    fields = mapping(value, where, problems, BOX_KEYS)
    if fields is None:
        return None
    negative = fields.get("negative")
    if not isinstance(negative, bool):
        problems.add(f"{where}.negative", f"must be true or false, got {negative!r}")
    frame = fields.get("frame", base)
    if frame not in (base, SENSOR_FRAME):
        problems.add(f"{where}.frame", f"must be {base} or {SENSOR_FRAME}, got {frame!r}")
    bounds = _bounds(fields, where, folder, problems)
    if bounds is None or not isinstance(negative, bool):
        return None
    low, high, derived = bounds
    if frame == SENSOR_FRAME and derived != m.BOUNDS:
        problems.add(f"{where}.frame", f"a {derived} box is in {base}, not the sensor's frame")
    for axis, lo, hi in zip("xyz", low, high, strict=True):
        if not lo < hi:
            problems.add(where, f"min {axis} {lo} is not below max {axis} {hi}")
    return m.CropBox(name, low, high, negative, frame == SENSOR_FRAME, derived)
