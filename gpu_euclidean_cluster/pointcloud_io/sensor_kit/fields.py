"""Reading the fields of a sensor kit and of the files it names, one problem a line.

Every check appends ``<where>: <what is wrong>`` to a :class:`Problems` list and goes on, so a
file with three mistakes is refused once, with three lines (:class:`SensorKitError`). ``where``
is the field's path (``sensors[1].input.packets.max_range``) or a file and the path inside it.

Files (the kit, Autoware's calibration and parameter files) are read by :func:`read_yaml`:
regular files (opened without blocking: a FIFO or a device is refused, not waited on) of at most
:data:`MAX_FILE_BYTES`, UTF-8, YAML's safe loader.
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import yaml

from .poses import FrameJoint, Pose

#: Largest file read: a sensor kit, a calibration file, a parameter file (Autoware's sample
#: calibration files are 2 kB).
MAX_FILE_BYTES = 256 * 1024
#: Sensor and crop box names: letters, digits, underscores, not starting with a digit.
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Keys of a pose: a translation with URDF's roll, pitch, yaw or with a quaternion.
TRANSLATION_KEYS = ("x", "y", "z")
RPY_KEYS = ("roll", "pitch", "yaw")
QUATERNION_KEYS = ("qx", "qy", "qz", "qw")


class SensorKitError(ValueError):
    """A sensor kit (or a file it names) that cannot be used: one line per problem.

    Attributes:
        problems: the lines, each ``<where>: <what is wrong>``.
    """

    def __init__(self, problems: list[str] | tuple[str, ...] | str) -> None:
        self.problems = (problems,) if isinstance(problems, str) else tuple(problems)
        super().__init__("\n".join(self.problems))


class Problems(list):
    """The problems found so far, as lines."""

    def add(self, where: str, message: str) -> None:
        self.append(f"{where}: {message}" if where else message)

    def raise_any(self) -> None:
        """Raise :class:`SensorKitError` with every line, when there is one."""
        if self:
            raise SensorKitError(list(self))


def read_yaml(path: Path) -> object:
    """The YAML document of the file ``path`` (see the module docstring for what is read).

    Raises:
        SensorKitError: missing, unreadable, not a regular file, too large, not UTF-8 or not
            YAML; one line naming the file.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise SensorKitError(f"{path}: cannot open: {error.strerror or error}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise SensorKitError(f"{path}: not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            raise SensorKitError(f"{path}: {info.st_size} bytes, over {MAX_FILE_BYTES}")
        data = os.read(descriptor, MAX_FILE_BYTES + 1)
    except OSError as error:
        raise SensorKitError(f"{path}: cannot read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)
    if len(data) > MAX_FILE_BYTES:
        raise SensorKitError(f"{path}: grew past {MAX_FILE_BYTES} bytes while read")
    try:
        return yaml.safe_load(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise SensorKitError(f"{path}: not UTF-8 text (byte {error.start})") from None
    except yaml.YAMLError as error:
        reason = " ".join(str(error).split())
        raise SensorKitError(f"{path}: not YAML: {reason}") from None


def resolve_path(value: str, folder: Path) -> Path:
    """``value`` with ``~`` and ``$VAR`` expanded, relative to ``folder`` unless absolute."""
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    return path if path.is_absolute() else folder / path


def read_into(problems: Problems, where: str, read: Callable, *args: object):
    """``read(*args)``, its SensorKitError's lines added to ``problems`` under ``where``."""
    try:
        return read(*args)
    except SensorKitError as error:
        for line in error.problems:
            problems.add(where, line)
        return None


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(value: object, where: str, problems: Problems, finite: bool = True) -> float | None:
    """``value`` as a float: an int or float, finite unless ``finite`` is false (never NaN)."""
    if not is_number(value) or math.isnan(value) or (finite and math.isinf(value)):
        kind = "a finite number" if finite else "a number (not NaN)"
        problems.add(where, f"must be {kind}, got {value!r}")
        return None
    return float(value)


def text(value: object, where: str, problems: Problems) -> str | None:
    """``value`` as a non-empty string without blanks."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        problems.add(where, f"must be a non-empty name without blanks, got {value!r}")
        return None
    return value


def mapping(value: object, where: str, problems: Problems, allowed: tuple = ()) -> dict | None:
    """``value`` as a dict with string keys; keys outside ``allowed`` (when given) refused."""
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        problems.add(where, f"must be a mapping of names, got {type(value).__name__}")
        return None
    unknown = [key for key in value if allowed and key not in allowed]
    if unknown:
        problems.add(where, f"unknown key {', '.join(unknown)}; known: {', '.join(allowed)}")
    return value


def pose_from_mapping(value: object, where: str, problems: Problems) -> Pose | None:
    """A pose ``{x, y, z, roll, pitch, yaw}`` (Autoware's calibration entries, URDF ``rpy``) or
    ``{x, y, z, qx, qy, qz, qw}``; a key left out is 0 (a quaternion needs all four)."""
    before = len(problems)
    fields = mapping(value, where, problems, TRANSLATION_KEYS + RPY_KEYS + QUATERNION_KEYS)
    if fields is None:
        return None
    values = {key: number(fields[key], f"{where}.{key}", problems) for key in fields}
    if len(problems) > before:
        return None
    xyz = [values.get(key, 0.0) for key in TRANSLATION_KEYS]
    given_quaternion = [key for key in QUATERNION_KEYS if key in fields]
    if not given_quaternion:
        return Pose.from_rpy(*xyz, *(values.get(key, 0.0) for key in RPY_KEYS))
    if any(key in fields for key in RPY_KEYS):
        problems.add(where, "give roll, pitch, yaw or a quaternion, not both")
        return None
    if len(given_quaternion) < 4:
        problems.add(where, "a quaternion needs all of qx, qy, qz, qw")
        return None
    try:
        return Pose.from_quaternion(*xyz, *(values[key] for key in QUATERNION_KEYS))
    except ValueError as error:
        problems.add(where, str(error))
        return None


def joints_from_mapping(
    document: object, where: str, problems: Problems, source: str
) -> list[FrameJoint]:
    """The joints of ``{parent: {child: pose}}``: Autoware's ``sensors_calibration.yaml`` and
    ``sensor_kit_calibration.yaml`` as they are, and a kit's inline poses."""
    joints = []
    parents = mapping(document, where, problems)
    for parent, children in (parents or {}).items():
        entries = mapping(children, f"{where}.{parent}" if where else parent, problems)
        for child, value in (entries or {}).items():
            place = f"{where}.{parent}.{child}" if where else f"{parent}.{child}"
            pose = pose_from_mapping(value, place, problems)
            if pose is not None:
                joints.append(FrameJoint(parent, child, pose, source))
    return joints
