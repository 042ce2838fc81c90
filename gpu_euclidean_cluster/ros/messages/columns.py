"""Output messages defined once, as column specs (:class:`ArraySpec`): each output but the clouds
is an optional std_msgs/Header and one sequence of elements (DetectedObjects' ``objects``, ...),
which its spec's ``columns`` gives as :class:`Columns`: dotted member path -> one value or one
per element (``"kinematics.pose_with_covariance.pose.position.x": table["x"]``); members not
named keep their default; the paths' indices give the sequences' lengths. From them
:func:`array_cdr` writes the bytes (a :class:`~.cdr.RowCodec` of the installed element class: ROS
2 releases differ), :func:`array_message` the rclpy message, and :class:`ArrayEncoder` publishes
the bytes where they are ``serialize_message`` of the message on the spec's samples (checked once
per process: :func:`verified`), else the message. :class:`BoxGeometry`: the clusters' boxes.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from std_msgs.msg import Header

from ...core.cluster_stats import cluster_table
from ...core.frame import GroupedRecords, group_records
from ...core.oriented_boxes import oriented_boxes, yaw_quaternion
from ...pointcloud_io.pointcloud2 import FLOAT32, UINT8, Field, RawCloud, point_bytes
from .cdr import (
    CdrWriter,
    HeaderLike,
    RowCodec,
    Scratch,
    UnsupportedLayoutError,
    element_class,
    same_serialization,
)

log = logging.getLogger(__name__)

#: Message package -> why it cannot be imported (absent: it can).
MISSING: dict[str, str] = {}
#: Message name -> whether its bytes passed the check in this process (see :func:`verified`).
_VERIFIED: dict[str, bool] = {}
_INDEX = re.compile(r"\[(\d+)\]")


def message_classes(package: str, *names: str) -> list[Any]:
    """The message classes ``names`` of ``package``; Nones where it cannot be imported (why:
    :data:`MISSING`)."""
    try:
        module = importlib.import_module(f"{package}.msg")
        return [getattr(module, name) for name in names]
    except (ImportError, AttributeError) as error:
        absent = isinstance(error, ModuleNotFoundError) and (error.name or "").startswith(package)
        reason = f"cannot be imported ({type(error).__name__}: {error})"
        MISSING[package] = f"{package} {'is not installed' if absent else reason}"
        return [None] * len(names)


@dataclass(frozen=True)
class Columns:
    """One frame's ``rows`` elements: ``values``, dotted member path -> one value or a (rows,)
    array (strings as ``bytes`` or an ``S`` array; the blob's path: each element's blob size);
    the message's ``header`` (None: it has none); ``blob``, the blob bytes of every element, one
    after the other (uint8)."""

    rows: int
    values: dict[str, Any]
    header: HeaderLike | None = None
    blob: np.ndarray | None = None


@dataclass(frozen=True)
class ArraySpec:
    """An output message (its generated class ``message``, None where one of ``packages`` is
    missing): a header (where its columns have one) and the sequence ``member``, whose elements
    the function ``columns`` gives for a frame; ``samples`` gives the frames (argument tuples of
    ``columns``) its check is made on; ``blob`` is the dotted path of an element's
    ``sequence<uint8>`` member given as bytes (:attr:`Columns.blob`), if any."""

    message: type | None
    member: str
    columns: Callable[..., Columns]
    samples: Callable[[], Iterable[tuple[Any, ...]]]
    packages: tuple[str, ...] = ()
    blob: str | None = None

    def missing(self) -> str | None:
        """Why the message cannot be built here (a package is not installed), or None."""
        return next((MISSING[p] for p in self.packages if p in MISSING), None)


@functools.lru_cache(maxsize=64)
def _sequences(paths: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """Each sequence the dotted ``paths`` index -> its element count (the highest index + 1)."""
    counts: dict[str, int] = {}
    for path in paths:
        for match in _INDEX.finditer(path):
            prefix = path[: match.start()]
            counts[prefix] = max(counts.get(prefix, 0), int(match.group(1)) + 1)
    return tuple(sorted(counts.items()))


@functools.lru_cache(maxsize=16)
def _codec(element: type, sequences: tuple[tuple[str, int], ...], blob: str | None) -> RowCodec:
    return RowCodec(element, dict(sequences), blob)


def array_cdr(spec: ArraySpec, columns: Columns, scratch: Scratch | None = None) -> bytes:
    """The CDR bytes of the message of ``columns`` (unchecked: use :class:`ArrayEncoder`), built
    in ``scratch`` where given; the blob bytes are copied once, into the result."""
    writer = CdrWriter()
    if columns.header is not None:
        writer.header(columns.header)
    writer.pack("I", columns.rows)
    element = element_class(spec.message, spec.member)
    codec = _codec(element, _sequences(tuple(columns.values)), spec.blob)
    return codec.encode(writer.value(), columns.rows, columns.values, columns.blob, scratch)


def array_message(spec: ArraySpec, columns: Columns) -> Any:
    """The message of ``columns`` as rclpy message objects, member by member."""
    element = element_class(spec.message, spec.member)
    items = [element() for _ in range(columns.rows)]
    for path, count in _sequences(tuple(columns.values)):  # outer sequences first
        for item in items:
            parent, name = _member(item, path)
            setattr(parent, name, [element_class(type(parent), name)() for _ in range(count)])
    values = dict(columns.values)
    if spec.blob is not None and columns.blob is not None:
        ends = np.cumsum(np.broadcast_to(values[spec.blob], columns.rows)).tolist()
        pieces = zip([0, *ends][:-1], ends, strict=True)
        values[spec.blob] = [columns.blob[a:b].tobytes() for a, b in pieces]
    _fill(items, values)
    message = spec.message(**{spec.member: items})  # type: ignore[misc]
    if columns.header is not None:
        _fill([message], header_columns(columns.header, "header."))
    return message


def _fill(items: list[Any], values: dict[str, Any]) -> None:
    """Set the members of ``items`` at the dotted paths of ``values`` (one or one per item)."""
    for path, value in values.items():
        each = isinstance(value, (np.ndarray, list))
        for row, item in enumerate(items):
            parent, name = _member(item, path)
            setattr(parent, name, _python(value[row] if each else value, getattr(parent, name)))


def _member(item: Any, path: str) -> tuple[Any, str]:
    """The message holding the member at the dotted ``path`` of ``item``, and its name."""
    *parents, name = path.split(".")
    for part in parents:
        attribute, _, index = part.partition("[")
        item = getattr(item, attribute)
        if index:
            item = item[int(index[:-1])]
    return item, name


def _python(value: Any, current: Any) -> Any:
    """A column value as the Python type of the member's ``current`` value."""
    for kind in (bool, int, float):
        if isinstance(current, kind):
            return kind(value)
    return value.decode() if isinstance(current, str) else value


def verified(name: str, pairs: Callable[[], Iterable[tuple[bytes, Any]]]) -> bool:
    """Whether each ``(bytes, message)`` of ``pairs()`` is ``serialize_message(message)`` but for
    zero padding bytes (:func:`~.cdr.same_serialization`), checked once per process per message
    ``name``; a failure is logged."""
    if name not in _VERIFIED:
        try:
            passed = all(same_serialization(data, message) for data, message in pairs())
            reason = "its CDR encoding does not match this ROS 2"
        except (UnsupportedLayoutError, ValueError, KeyError, TypeError, AttributeError) as error:
            passed = False
            reason = f"it cannot be encoded column-wise ({type(error).__name__}: {error})"
        if not passed:
            log.warning("%s: %s; publishing message objects", name, reason)
        _VERIFIED[name] = passed
    return _VERIFIED[name]


class ArrayEncoder:
    """The message of ``spec`` per frame: CDR bytes where :func:`array_cdr` is rclpy's
    serialization of :func:`array_message` on every sample of ``spec`` (:func:`verified`), else
    (or where ``serialize`` is False) message objects."""

    def __init__(self, spec: ArraySpec, serialize: bool = True) -> None:
        self.spec = spec

        def pairs() -> Iterator[tuple[bytes, Any]]:
            for sample in spec.samples():
                columns = spec.columns(*sample)
                yield array_cdr(spec, columns), array_message(spec, columns)

        self._serializes = serialize and verified(spec.message.__name__, pairs)  # type: ignore[union-attr]
        self._scratch = Scratch() if spec.blob else None  # (~0.9 kB an object) reused

    @property
    def serializes(self) -> bool:
        """True when :meth:`build` returns CDR bytes, False when it returns message objects."""
        return self._serializes

    def build(self, *frame: Any) -> bytes | Any:
        """The message of ``frame`` (the arguments of the spec's ``columns``)."""
        columns = self.spec.columns(*frame)
        if self._serializes:
            return array_cdr(self.spec, columns, self._scratch)
        return array_message(self.spec, columns)


@dataclass(frozen=True)
class BoxGeometry:
    """Each cluster's box as the outputs draw it, one float64 per cluster in each of: ``centre``
    x, y, z; ``size`` along the box's own axes; ``turn``, z and w of its rotation about z."""

    centre: tuple[Any, Any, Any]
    size: tuple[Any, Any, Any]
    turn: tuple[Any, Any]

    def columns(self, pose: str, size: str) -> dict[str, Any]:
        """The members of a geometry_msgs/Pose under ``pose`` (the box's centre and rotation)
        and of a Vector3 under ``size`` (its size)."""
        columns = {f"{pose}orientation.z": self.turn[0], f"{pose}orientation.w": self.turn[1]}
        for axis, centre, side in zip("xyz", self.centre, self.size, strict=True):
            columns[f"{pose}position.{axis}"], columns[f"{size}{axis}"] = centre, side
        return columns


def box_geometry(table: np.ndarray, boxes: np.ndarray | None = None) -> BoxGeometry:
    """The boxes of the cluster rows ``table``: axis-aligned around the extents (centre their
    midpoint, size max - min), or the oriented ``boxes`` where given (``core.oriented_boxes``, one
    per row): centre (``center_x``, ``center_y``, middle of the z range), rotated by ``yaw``
    (quaternion z = sin(yaw/2), w = cos(yaw/2)), size ``length``, ``width``, z range."""
    if boxes is None:
        low = [table[f"min_{axis}"].astype(np.float64) for axis in "xyz"]
        high = [table[f"max_{axis}"].astype(np.float64) for axis in "xyz"]
        centre = [(a + b) / 2.0 for a, b in zip(low, high, strict=True)]
        size = [b - a for a, b in zip(low, high, strict=True)]
        return BoxGeometry(tuple(centre), tuple(size), (0.0, 1.0))  # type: ignore[arg-type]
    if len(boxes) != len(table):
        raise ValueError(f"{len(boxes)} boxes for {len(table)} clusters")
    low, high = boxes["min_z"].astype(np.float64), boxes["max_z"].astype(np.float64)
    centre = (boxes["center_x"], boxes["center_y"], (low + high) / 2.0)
    size = (boxes["length"], boxes["width"], high - low)
    return BoxGeometry(centre, size, yaw_quaternion(boxes["yaw"]))


def header_columns(header: HeaderLike, prefix: str) -> dict[str, Any]:
    """The members of a std_msgs/Header under ``prefix``: ``header``'s."""
    return {
        f"{prefix}stamp.sec": header.stamp.sec,
        f"{prefix}stamp.nanosec": header.stamp.nanosec,
        f"{prefix}frame_id": header.frame_id.encode(),
    }


def sample_frames() -> Iterator[tuple[np.ndarray, RawCloud, GroupedRecords, Header, Any]]:
    """The checks' frames ``(table, cloud, points, header, boxes)``: 14 clusters (ids of one and
    two digits, 1 to 10**6 points: labels of 5 to 13 bytes) of 13-byte points (x y z float32,
    uint8 ``ring``) whose bytes leave every remainder modulo 8, a frame id leaving the rest
    unaligned; then 11 of them with oriented boxes, none, and 3 with boxes."""
    sizes = (1, 2, 3, 5, 7, 4, 6, 8, 9, 1, 2, 3, 5, 7)
    rng = np.random.default_rng(5)
    labels = rng.permutation(np.repeat(np.arange(-1, len(sizes), dtype=np.int32), (4, *sizes)))
    xyz = rng.uniform(-40.0, 40.0, (len(labels), 3)).astype("<f4")
    data = np.column_stack((xyz.view(np.uint8).reshape(-1, 12), labels.astype(np.uint8)))
    fields = (
        *(Field(axis, 4 * i, FLOAT32) for i, axis in enumerate("xyz")),
        Field("ring", 12, UINT8),
    )
    cloud = RawCloud(fields, 1, len(labels), 13, 13 * len(labels), data.reshape(-1))
    header = Header(frame_id="lidar_top")
    header.stamp.sec, header.stamp.nanosec = 1_700_000_000, 123_456_789
    for clusters, oriented in ((14, False), (11, True), (0, False), (3, True)):
        kept = np.where(labels < clusters, labels, -1)
        table = cluster_table(xyz, kept, clusters)
        table["num_points"] = 10 ** (np.arange(clusters) % 7)
        boxes = oriented_boxes(*xyz.T, kept, clusters) if oriented else None
        yield table, cloud, group_records(point_bytes(cloud), kept, clusters), header, boxes
