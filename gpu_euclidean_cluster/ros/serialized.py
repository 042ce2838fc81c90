"""CDR bytes of the node's outputs, for ``Publisher.publish(bytes)``.

rclpy publishes a ``bytes`` object as an already serialized message, which skips its conversion of
a Python message into the C message and rmw's serialization of that. For a PointCloud2 the
payload is then copied into the ``bytes`` (here) and into a ``std::string`` (rclpy's
``publish_raw``) before rmw takes it, instead of into an ``array.array`` (``cloud_to_message``)
and the C message's sequence. This module builds those bytes:

- :func:`point_cloud_cdr`: sensor_msgs/PointCloud2 of a :class:`RawCloud`; the point payload is
  copied once, into the returned ``bytes``.
- :class:`MarkerEncoder`: the node's visualization_msgs/MarkerArray, the same markers as
  :class:`~.markers.MarkerBuilder` (same order, ids, namespaces and values), built column-wise
  with NumPy for all markers at once instead of one Python message per marker; with the
  frame's oriented boxes (``FrameOutput.boxes``) the boxes rotated by their yaw.

Encoding (plain CDR, XCDR1): the encapsulation header ``00 01 00 00`` (little-endian), then every
primitive aligned to its size relative to the first byte after that header; a string is a uint32
length (its UTF-8 bytes plus the NUL terminator), the bytes and the NUL; a sequence is a uint32
count and its elements. Padding bytes are zero (Fast CDR leaves them as they were in its buffer, so
``serialize_message`` output can differ from ours in padding bytes only).

Message definitions differ between ROS 2 distributions (Marker gained texture, uv and mesh fields
after Humble), so the marker layout is derived from the installed message classes, and both
encoders are checked once per process against ``rclpy.serialization.serialize_message`` of an
equivalent message. Where a check fails, :func:`publishable_cloud` and :meth:`MarkerEncoder.build`
return message objects instead of bytes: never wrong bytes.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import logging
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from rclpy.serialization import deserialize_message, serialize_message
from rosidl_parser import definition
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header
from visualization_msgs.msg import Marker, MarkerArray

from ..core.cluster_stats import CLUSTER_DTYPE, cluster_rgb
from ..core.oriented_boxes import BOX_DTYPE, yaw_quaternion
from ..pointcloud_io.pointcloud2 import FLOAT32, UINT8, Field, RawCloud
from .cloud_messages import cloud_to_message
from .markers import (
    BOX_ALPHA,
    BOX_NAMESPACE,
    LABEL_HEIGHT,
    LABEL_NAMESPACE,
    MIN_BOX_SIDE,
    MarkerBuilder,
)

log = logging.getLogger(__name__)

#: CDR encapsulation header: plain CDR, little-endian, no options.
ENCAPSULATION = b"\x00\x01\x00\x00"

#: rosidl basic type name -> its little-endian CDR representation (booleans as one byte 0 or 1).
_BASIC_TYPES: dict[str, np.dtype] = {
    name: np.dtype(code)
    for names, code in (
        (("boolean", "octet", "char", "uint8"), "u1"),
        (("int8",), "i1"),
        (("int16", "short"), "<i2"),
        (("uint16", "unsigned short"), "<u2"),
        (("int32", "long"), "<i4"),
        (("uint32", "unsigned long"), "<u4"),
        (("int64", "long long"), "<i8"),
        (("uint64", "unsigned long long"), "<u8"),
        (("float",), "<f4"),
        (("double",), "<f8"),
    )
    for name in names
}
_UINT32 = np.dtype("<u4")
#: Number size -> log2 (positions are divided by shifting).
_SHIFTS = {1: 0, 2: 1, 4: 2, 8: 3}


class Stamp(Protocol):
    """builtin_interfaces/Time, as far as the encoders read it."""

    sec: int
    nanosec: int


class HeaderLike(Protocol):
    """std_msgs/Header, as far as the encoders read it."""

    stamp: Stamp
    frame_id: str


class UnsupportedLayoutError(ValueError):
    """A message type has a member the column-wise encoder cannot write."""


class Scratch:
    """A grow-only byte buffer an encoder reuses frame after frame for :class:`RowCodec`'s
    stream, instead of allocating (and the kernel zeroing fresh pages of) a new one per frame.
    What a codec returns from it is valid until its next use."""

    def __init__(self) -> None:
        self._buffer = np.zeros(0, dtype=np.uint64)

    def zeros(self, nbytes: int) -> np.ndarray:
        """``nbytes`` (rounded up to whole 8-byte words) of zeros, as uint8."""
        words = -(-nbytes // 8)
        if self._buffer.size < words:
            self._buffer = np.zeros(words + words // 4, dtype=np.uint64)
        else:
            self._buffer[:words] = 0
        return self._buffer[:words].view(np.uint8)


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No garbage collection in the block (where it was enabled): for code that makes thousands
    of short-lived tracked objects (memoryviews) at once, which would otherwise start several
    collections per frame, and every few dozen frames a full one of the whole process (over
    10 ms in a node). The objects are freed in the block, so nothing is left to collect."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class CdrWriter:
    """Little-endian CDR of a few scalars and strings, aligned relative to the data start."""

    def __init__(self) -> None:
        self._buffer = bytearray(ENCAPSULATION)

    @property
    def position(self) -> int:
        """Bytes written after the encapsulation header."""
        return len(self._buffer) - len(ENCAPSULATION)

    def pack(self, code: str, *values: int) -> None:
        """``values`` as the struct ``code`` (one of ``?BiI``), aligned to its size."""
        size = struct.calcsize(code)
        self._buffer += bytes(-self.position % size)
        self._buffer += struct.pack("<" + code * len(values), *values)

    def string(self, text: str) -> None:
        """A CDR string: uint32 length with the terminator, UTF-8 bytes, NUL."""
        encoded = text.encode()
        self.pack("I", len(encoded) + 1)
        self._buffer += encoded + b"\0"

    def header(self, header: HeaderLike) -> None:
        """A std_msgs/Header."""
        self.pack("i", header.stamp.sec)
        self.pack("I", header.stamp.nanosec)
        self.string(header.frame_id)

    def value(self) -> bytes:
        """Everything written, header included."""
        return bytes(self._buffer)


def point_cloud_cdr(cloud: RawCloud, header: HeaderLike) -> bytes:
    """The serialized sensor_msgs/PointCloud2 of ``cloud`` with ``header``.

    The same message as :func:`~.cloud_messages.cloud_to_message` (all of ``cloud.data`` is the
    payload); the payload, which must be C-contiguous, is copied once, into the result. No check
    against the installed message definition: publish through :func:`publishable_cloud`.
    """
    payload = memoryview(cloud.data).cast("B")
    writer = CdrWriter()
    writer.header(header)
    writer.pack("I", cloud.height, cloud.width, len(cloud.fields))
    for field in cloud.fields:
        writer.string(field.name)
        writer.pack("I", field.offset)
        writer.pack("B", field.datatype)
        writer.pack("I", field.count)
    writer.pack("?", cloud.is_bigendian)
    writer.pack("I", cloud.point_step, cloud.row_step, payload.nbytes)
    return b"".join((writer.value(), payload, b"\x01" if cloud.is_dense else b"\x00"))


def publishable_cloud(cloud: RawCloud, header: Header) -> bytes | PointCloud2:
    """What to pass to ``publish`` for ``cloud``: its CDR bytes where :func:`point_cloud_cdr`
    matches this ROS 2 installation, else the message object."""
    if _cloud_encoding_verified():
        return point_cloud_cdr(cloud, header)
    return cloud_to_message(cloud, header)


class MarkerEncoder:
    """The node's markers as CDR bytes: a drop-in for :class:`~.markers.MarkerBuilder`.

    :meth:`build` returns the bytes of the MarkerArray that ``MarkerBuilder.build`` returns for the
    same table, header and previous frame: per cluster (in table order) a translucent CUBE in
    ``cluster_boxes`` and a TEXT_VIEW_FACING label ``"id (num_points)"`` in ``cluster_ids``, with
    marker id = cluster id, then a DELETE in both namespaces for every id from this frame's cluster
    count up to the previous frame's. Where the encoding does not match this ROS 2 installation,
    it builds the message objects with a MarkerBuilder instead (see :attr:`serializes`).
    """

    def __init__(self) -> None:
        self._codec = _verified_marker_codec()
        self._fallback = None if self._codec is not None else MarkerBuilder()
        self._previous = 0

    @property
    def serializes(self) -> bool:
        """True when :meth:`build` returns CDR bytes, False when it returns MarkerArray objects."""
        return self._codec is not None

    def forget(self) -> None:
        """Forget the previous frame's markers (when nobody received them, none need deleting)."""
        self._previous = 0
        if self._fallback is not None:
            self._fallback.forget()

    def build(
        self, table: np.ndarray, header: Header, boxes: np.ndarray | None = None
    ) -> bytes | MarkerArray:
        """The markers of the cluster rows ``table`` (see ``cluster_stats.cluster_table``), the
        boxes the oriented ``boxes`` where given (``core.oriented_boxes``, one per row)."""
        if self._codec is None:
            return self._fallback.build(table, header, boxes)  # type: ignore[union-attr]
        data = marker_array_cdr(self._codec, table, header, self._previous, boxes)
        self._previous = len(table)
        return data


class RowCodec:
    """CDR of consecutive messages of one type, built member by member for all of them at once.

    The member layout comes from the installed message class (``SLOT_TYPES`` and
    ``get_fields_and_field_types``, nested messages included): numbers, fixed-size arrays of
    numbers and strings can be set per message through dotted paths such as
    ``"pose.position.x"``; every member not set keeps the value of a default-constructed message.
    Sequences stay empty, but for those named in ``sequences``, which hold the same number of
    elements in every message (members ``"classification[0].probability"``, ...), and the one
    ``blob``, a sequence of bytes whose length varies per message (see :meth:`encode_pieces`).

    Strings have per-message lengths, so each message has its own start and alignment padding.
    The members between two strings form a run whose offsets and size depend only on where it
    starts modulo the largest alignment ``M``; they are tabulated once. Per batch, the message
    starts come first (:meth:`_row_starts`), then every member that is not zero is written into a
    zeroed buffer at its per-message positions, with one NumPy scatter for all messages.
    """

    def __init__(
        self,
        message_class: type,
        sequences: Mapping[str, int] | None = None,
        blob: str | None = None,
    ) -> None:
        """Args:
            message_class: the generated Python class of the message.
            sequences: dotted path of a sequence member -> its element count in every message.
            blob: dotted path of a ``sequence<uint8>`` (or ``octet``) member whose bytes are
                given per message to :meth:`encode_pieces`.

        Raises:
            UnsupportedLayoutError: a member is a wide string, a non-empty default sequence not in
                ``sequences``, or an array of anything but numbers; a path of ``sequences`` or
                ``blob`` is not such a member; or the message has strings and starts with a
                member of fewer than 4 bytes (see :func:`_scatter_string`).
        """
        sequences = dict(sequences or {})
        self._leaves = _leaves(message_class, "", message_class(), sequences, blob)
        expanded = {leaf.path for leaf in self._leaves if leaf.kind in ("sequence", "blob")}
        missing = (set(sequences) | ({blob} if blob else set())) - expanded
        if missing:
            raise UnsupportedLayoutError(f"{message_class.__name__}: no sequence {sorted(missing)}")
        strings = any(leaf.kind in ("string", "blob") for leaf in self._leaves)
        if strings and self._leaves[0].dtype.itemsize < 4:
            raise UnsupportedLayoutError(f"{message_class.__name__} starts unaligned")
        self._settable = {leaf.path for leaf in self._leaves if leaf.kind != "sequence"}
        self._blob = blob
        self._first_align = self._leaves[0].dtype.itemsize
        self._max_align = max(leaf.dtype.itemsize for leaf in self._leaves)
        self._steps: list[_Run | _Leaf] = []
        for leaf in self._leaves:
            if leaf.kind in ("string", "blob"):
                self._steps.append(leaf)
            elif self._steps and isinstance(self._steps[-1], _Run):
                self._steps[-1] = _Run.of((*self._steps[-1].leaves, leaf), self._max_align)
            else:
                self._steps.append(_Run.of((leaf,), self._max_align))

    def encode(
        self, rows: int, columns: Mapping[str, Any], start: int, scratch: Scratch | None = None
    ) -> np.ndarray:
        """The bytes of ``rows`` messages, the first one at ``start`` bytes after the header.

        Args:
            rows: how many messages.
            columns: dotted member path -> one value for every message or a (rows,) array;
                strings as ``bytes`` or a NumPy ``S`` array.
            start: stream position (after the encapsulation header) of the first message.
            scratch: the buffer to build them in (the result is then a view of it), or None for
                a new one.

        Returns:
            A uint8 array; the message after the last one starts at ``start + len(result)``.

        Raises:
            ValueError: a member in ``columns`` cannot be set, or the codec has a blob (use
                :meth:`encode_pieces`).
        """
        if self._blob is not None:
            raise ValueError(f"the codec has the blob {self._blob}: use encode_pieces")
        return self._encode(rows, columns, start, scratch)[0]

    def encode_joined(
        self,
        prefix: bytes,
        rows: int,
        columns: Mapping[str, Any],
        blob: np.ndarray,
        scratch: Scratch | None = None,
    ) -> bytes:
        """``prefix`` (the encapsulation header and whatever precedes the messages), then the
        messages of :meth:`encode_pieces` (the first one at ``len(prefix) - 4``), as one
        ``bytes``: the blob bytes copied once, with no garbage collection in between
        (:func:`collection_paused`)."""
        with collection_paused():
            start = len(prefix) - len(ENCAPSULATION)
            pieces = self.encode_pieces(rows, columns, start, blob, scratch)
            return b"".join((prefix, *pieces))

    def encode_pieces(
        self,
        rows: int,
        columns: Mapping[str, Any],
        start: int,
        blob: np.ndarray,
        scratch: Scratch | None = None,
    ) -> list[memoryview]:
        """Like :meth:`encode`, for a codec with a blob: ``columns[blob path]`` holds each
        message's blob size (one for all or a (rows,) array) and ``blob`` all their bytes, message
        after message (a C-contiguous uint8 array). Returns the buffers whose concatenation
        (``b"".join``) is the messages' bytes: stream and blob pieces in turn, the blob bytes
        not copied.

        The stream is built as :meth:`encode` builds it, except that each blob of ``L`` bytes
        takes ``L % M`` bytes there (``M`` the largest alignment: every later member keeps its
        alignment); those are then cut out and the blob's own bytes put in their place.
        """
        if self._blob is None:
            raise ValueError("the codec has no blob: use encode")
        sizes = np.broadcast_to(np.asarray(columns.get(self._blob, 0), dtype=np.int64), rows)
        if int(sizes.sum()) != blob.nbytes:
            raise ValueError(f"blob sizes add up to {int(sizes.sum())}, not {blob.nbytes}")
        stream, holes = self._encode(rows, columns, start, scratch)
        source = memoryview(stream)
        if rows == 0:
            return [source]
        blob_ends = np.cumsum(sizes).tolist()
        blob_starts = (np.cumsum(sizes) - sizes).tolist()
        stream_starts = np.concatenate(([0], holes + sizes % self._max_align)).tolist()
        stream_ends = [*holes.tolist(), len(stream)]
        bytes_ = memoryview(blob).cast("B")
        pieces: list[memoryview] = [source] * (2 * rows + 1)
        pieces[0::2] = [source[a:b] for a, b in zip(stream_starts, stream_ends, strict=True)]
        pieces[1::2] = [bytes_[a:b] for a, b in zip(blob_starts, blob_ends, strict=True)]
        return pieces

    def _encode(
        self, rows: int, columns: Mapping[str, Any], start: int, scratch: Scratch | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The stream from ``start`` and where each message's blob hole is in it (if any)."""
        unknown = set(columns) - self._settable
        if unknown:
            raise ValueError(f"not settable members: {sorted(unknown)}")
        holes = np.empty(0, dtype=np.int64)
        if rows == 0:
            return np.empty(0, dtype=np.uint8), holes
        values = {leaf.path: columns.get(leaf.path, leaf.default) for leaf in self._leaves}
        lengths = {
            leaf.path: _string_lengths(values[leaf.path])
            for leaf in self._leaves
            if leaf.kind == "string"
        }
        if self._blob is not None:  # its size modulo M, as long as the real one for alignment
            lengths[self._blob] = np.asarray(values[self._blob], dtype=np.int64) % self._max_align
        starts = self._row_starts(rows, lengths, start)
        end = int(starts[-1])
        # Indexed by stream position; whole 8-byte words, so that it views as any number type
        # with every aligned member at an element boundary.
        if scratch is None:
            stream = np.zeros(-(-end // 8), dtype=np.uint64).view(np.uint8)
        else:
            stream = scratch.zeros(end)
        position = starts[:-1]
        for step in self._steps:
            if isinstance(step, _Run):
                phase = position & (self._max_align - 1)
                if (phase == phase[0]).all():  # one layout for all rows: one scatter per type
                    phase = int(phase[0])
                    self._scatter_run(stream, position, phase, step, values)
                else:
                    for column, leaf in enumerate(step.leaves):
                        value = values[leaf.path]
                        if _nonzero(value):  # the stream starts zeroed
                            offset = position + step.offsets[phase, column]
                            _scatter_numbers(stream, offset, leaf, value)
                position = position + step.sizes[phase]
            elif step.kind == "blob":
                position = position + (-position & 3)  # a uint32 length
                _scatter_numbers(stream, position, step, values[step.path])
                position = position + _UINT32.itemsize
                holes = np.broadcast_to(position - start, rows)
                position = position + lengths[step.path]
            else:
                position = position + (-position & 3)  # a uint32 length
                _scatter_numbers(stream, position, step, lengths[step.path])
                position = position + _UINT32.itemsize
                _scatter_string(stream, position, values[step.path], lengths[step.path])
                position = position + lengths[step.path]
        return stream[start:end], holes

    def _scatter_run(
        self,
        stream: np.ndarray,
        position: np.ndarray,
        phase: int,
        run: _Run,
        values: Mapping[str, Any],
    ) -> None:
        """Write the members of ``run`` that are not zero, starting at ``position`` (every row
        at the same ``phase`` modulo ``M``): one scatter per number type for all of them.

        With ``position = M * q + phase``, a member at ``offset`` of size ``s`` is element
        ``q * (M / s) + (phase + offset) / s`` of the stream viewed as that type (exact: the
        member is aligned, and ``s`` divides ``M``).
        """
        big = self._max_align
        rows = len(position)
        groups: dict[np.dtype, list[tuple[int, _Leaf, Any]]] = {}
        for column, leaf in enumerate(run.leaves):
            value = values[leaf.path]
            if _nonzero(value):
                groups.setdefault(leaf.dtype, []).append((column, leaf, value))
        if not groups:
            return
        base = position // big
        for dtype, members in groups.items():
            size = dtype.itemsize
            width = sum(leaf.count for _, leaf, _ in members)
            elements = np.empty(width, dtype=np.int64)
            block = np.empty((rows, width), dtype=dtype)
            at = 0
            for column, leaf, value in members:
                first = (phase + int(run.offsets[phase, column])) // size
                elements[at : at + leaf.count] = np.arange(first, first + leaf.count)
                if isinstance(value, np.ndarray) and value.ndim == 1 and leaf.count == 1:
                    value = value[:, None]  # one per row
                block[:, at : at + leaf.count] = value
                at += leaf.count
            index = base[:, None] * (big // size) + elements
            stream.view(dtype)[index] = block

    def _row_starts(self, rows: int, lengths: Mapping[str, Any], start: int) -> np.ndarray:
        """Stream positions where each message begins (before its first member's alignment),
        and, last, where the one after them would begin.

        A message's size depends on where it starts only modulo the largest alignment ``M``, and
        its first member aligns the start to ``a``, so there is a size for each aligned start in
        ``range(0, M, a)``. Where the message ends modulo ``M`` does not depend on its start: the
        member aligned to ``M`` (there is one) resets it. So each message's aligned start, hence
        its size, follows from the message before without a loop.
        """
        big, first = self._max_align, self._first_align
        phases = np.arange(0, big, first)
        ends = phases[:, None]  # per aligned start (rows), per message (columns)
        for step in self._steps:
            if isinstance(step, _Run):
                ends = ends + step.sizes[ends & (big - 1)]
            else:
                ends = ends + (-ends & 3) + _UINT32.itemsize + lengths[step.path]
        ends = np.broadcast_to(ends, (len(phases), rows))
        unaligned = np.empty(rows, dtype=np.int64)  # each message's start modulo M
        unaligned[0] = start % big
        unaligned[1:] = ends[0, :-1] % big
        aligned = (unaligned + (-unaligned) % first) % big
        sizes = ends[aligned // first, np.arange(rows)] - aligned
        steps = (aligned - unaligned) % big + sizes
        return start + np.concatenate(([0], np.cumsum(steps)))


@dataclass(frozen=True)
class _Leaf:
    """A primitive member: a number (or fixed array), a string, or an empty sequence's count."""

    path: str
    kind: str  # "number", "string", "sequence" (its element count) or "blob" (its byte count)
    dtype: np.dtype  # of one number; uint32 for the length of a string or a sequence
    count: int
    default: Any


@dataclass(frozen=True)
class _Run:
    """Members without a string between them, laid out for each start modulo ``M``."""

    leaves: tuple[_Leaf, ...]
    offsets: np.ndarray  # (M, len(leaves)): each member's offset from where the run starts
    sizes: np.ndarray  # (M,): bytes from where the run starts to its end

    @classmethod
    def of(cls, leaves: tuple[_Leaf, ...], big: int) -> _Run:
        """The run of ``leaves`` with ``big`` the largest alignment in the message."""
        offsets = np.empty((big, len(leaves)), dtype=np.int64)
        sizes = np.empty(big, dtype=np.int64)
        for start in range(big):
            position = start
            for column, leaf in enumerate(leaves):
                position += -position % leaf.dtype.itemsize
                offsets[start, column] = position - start
                position += leaf.dtype.itemsize * leaf.count
            sizes[start] = position - start
        return cls(leaves, offsets, sizes)


def _leaves(
    message_class: type,
    prefix: str,
    instance: Any,
    sequences: Mapping[str, int] | None = None,
    blob: str | None = None,
) -> list[_Leaf]:
    """The primitive members of ``message_class`` in CDR order, defaults from ``instance``;
    the sequences of ``sequences`` expanded to their element counts, ``blob`` as a blob."""
    sequences = sequences or {}
    leaves = []
    names = message_class.get_fields_and_field_types()  # type: ignore[attr-defined]
    for name, slot in zip(names, message_class.SLOT_TYPES, strict=True):  # type: ignore[attr-defined]
        path, value = prefix + name, getattr(instance, name)
        if isinstance(slot, definition.BasicType) and slot.typename in _BASIC_TYPES:
            leaves.append(_Leaf(path, "number", _BASIC_TYPES[slot.typename], 1, value))
        elif isinstance(slot, definition.AbstractString):
            leaves.append(_Leaf(path, "string", _UINT32, 1, value.encode()))
        elif isinstance(slot, definition.NamespacedType):
            nested = _message_class(slot)
            leaves.extend(_leaves(nested, f"{path}.", value, sequences, blob))
        elif (
            path == blob
            and isinstance(slot, definition.AbstractSequence)
            and isinstance(slot.value_type, definition.BasicType)
            and slot.value_type.typename in ("uint8", "octet")
        ):
            leaves.append(_Leaf(path, "blob", _UINT32, 1, 0))
        elif isinstance(slot, definition.AbstractSequence) and sequences.get(path):
            count = sequences[path]
            if isinstance(slot, definition.BoundedSequence) and count > slot.maximum_size:
                raise UnsupportedLayoutError(f"{path}: more than {slot.maximum_size} elements")
            leaves.append(_Leaf(path, "sequence", _UINT32, 1, count))
            element = slot.value_type
            for index in range(count):
                at = f"{path}[{index}]"
                if isinstance(element, definition.NamespacedType):
                    nested = _message_class(element)
                    leaves.extend(_leaves(nested, f"{at}.", nested(), sequences, blob))
                elif isinstance(element, definition.BasicType) and element.typename in _BASIC_TYPES:
                    leaves.append(_Leaf(at, "number", _BASIC_TYPES[element.typename], 1, 0))
                else:
                    raise UnsupportedLayoutError(f"{path}: elements {type(element).__name__}")
        elif isinstance(slot, definition.AbstractSequence) and len(value) == 0:
            leaves.append(_Leaf(path, "sequence", _UINT32, 1, 0))
        elif (
            isinstance(slot, definition.Array)
            and isinstance(slot.value_type, definition.BasicType)
            and slot.value_type.typename in _BASIC_TYPES
        ):
            dtype = _BASIC_TYPES[slot.value_type.typename]
            leaves.append(_Leaf(path, "number", dtype, slot.size, np.asarray(value, dtype)))
        else:
            raise UnsupportedLayoutError(f"{message_class.__name__}.{name}: {type(slot).__name__}")
    return leaves


def _message_class(slot: definition.NamespacedType) -> type:
    """The generated Python class of a nested message type."""
    return getattr(importlib.import_module(".".join(slot.namespaces)), slot.name)


def _string_lengths(value: bytes | np.ndarray) -> int | np.ndarray:
    """Encoded sizes (bytes plus the NUL) of one string or an ``S`` array of them."""
    if isinstance(value, bytes):
        return len(value) + 1
    return np.char.str_len(value).astype(np.int64) + 1


def _nonzero(value: Any) -> bool:
    """Whether a column value (a number, a NumPy scalar or array, or bytes) has a byte to write:
    ``np.any`` without its overhead for the common Python scalars."""
    if isinstance(value, (bool, int, float)):
        return value != 0
    if isinstance(value, np.ndarray):
        return bool(value.any())
    return bool(np.any(value))


def _scatter_numbers(stream: np.ndarray, position: np.ndarray, leaf: _Leaf, value: Any) -> None:
    """Write ``value`` (one or one per row) as ``leaf`` at the aligned ``position`` of each row."""
    index = position >> _SHIFTS[leaf.dtype.itemsize]
    if leaf.count > 1:
        index = index[:, None] + np.arange(leaf.count)
    stream.view(leaf.dtype)[index] = value


def _scatter_string(
    stream: np.ndarray, position: np.ndarray, value: bytes | np.ndarray, lengths: int | np.ndarray
) -> None:
    """Write each row's string bytes at ``position`` (the NUL and padding are zero already).

    A string's bytes start 4-aligned, after its length, so they are written as uint32 words;
    the last word may also zero the NUL and up to 2 bytes after it: padding, or members of the
    same message, written later, or (for a message that starts with a member of fewer than 4
    bytes, which :class:`RowCodec` refuses) the start of the next message, written before.
    """
    if isinstance(value, bytes):
        if value:
            words = np.frombuffer(value.ljust(-(-len(value) // 4) * 4, b"\0"), _UINT32)
            stream.view(_UINT32)[(position >> 2)[:, None] + np.arange(len(words))] = words
        return
    rows = np.flatnonzero(lengths > 1)  # empty strings are a NUL, zero already
    width = -(-value.dtype.itemsize // 4)
    words = value[rows].astype(f"S{4 * width}").view(_UINT32).reshape(-1, width)
    used = np.arange(width) < (lengths[rows] + 2)[:, None] // 4
    stream.view(_UINT32)[((position[rows] >> 2)[:, None] + np.arange(width))[used]] = words[used]


def marker_array_cdr(
    codec: RowCodec,
    table: np.ndarray,
    header: HeaderLike,
    previous: int,
    boxes: np.ndarray | None = None,
) -> bytes:
    """The serialized MarkerArray of ``MarkerBuilder.build(table, header, boxes)`` after a frame
    of ``previous`` clusters, with ``codec`` a :class:`RowCodec` of Marker (unchecked here: use
    :class:`MarkerEncoder`). Cluster ids are those of ``cluster_table``: non-negative."""
    count = len(table)
    if boxes is not None and len(boxes) != count:
        raise ValueError(f"{len(boxes)} boxes for {count} clusters")
    stale = max(previous - count, 0)
    rows = 2 * (count + stale)
    ids = np.concatenate(
        (table["cluster_id"].astype(np.int32), np.arange(count, count + stale, dtype=np.int32))
    )

    def pairs(box: Any, label: Any, dtype: Any = np.float64) -> np.ndarray:
        """Per row: ``box`` on even rows, ``label`` on odd rows, 0 on DELETE rows."""
        values = np.zeros(rows, dtype=dtype)
        values[0 : 2 * count : 2] = box
        values[1 : 2 * count : 2] = label
        return values

    low = {axis: table[f"min_{axis}"].astype(np.float64) for axis in "xyz"}
    high = {axis: table[f"max_{axis}"].astype(np.float64) for axis in "xyz"}
    colours = _box_colours(1 << int(ids.max(initial=0)).bit_length())[table["cluster_id"]]
    labels = np.array(
        [
            b"%d (%d)" % pair
            for pair in zip(table["cluster_id"].tolist(), table["num_points"].tolist(), strict=True)
        ],
        dtype=bytes,
    )
    texts = np.zeros(rows, dtype=labels.dtype)
    texts[1 : 2 * count : 2] = labels
    columns: dict[str, Any] = {
        "header.stamp.sec": header.stamp.sec,
        "header.stamp.nanosec": header.stamp.nanosec,
        "header.frame_id": header.frame_id.encode(),
        "ns": np.tile(np.array([BOX_NAMESPACE.encode(), LABEL_NAMESPACE.encode()]), count + stale),
        "id": np.repeat(ids, 2),
        "type": pairs(Marker.CUBE, Marker.TEXT_VIEW_FACING, np.int32),
        "action": np.where(np.arange(rows) < 2 * count, Marker.ADD, Marker.DELETE),
        "pose.position.x": pairs((low["x"] + high["x"]) / 2.0, table["x"]),
        "pose.position.y": pairs((low["y"] + high["y"]) / 2.0, table["y"]),
        "pose.position.z": pairs((low["z"] + high["z"]) / 2.0, high["z"] + LABEL_HEIGHT),
        "scale.x": pairs(np.maximum(high["x"] - low["x"], MIN_BOX_SIDE), 0.0),
        "scale.y": pairs(np.maximum(high["y"] - low["y"], MIN_BOX_SIDE), 0.0),
        "scale.z": pairs(np.maximum(high["z"] - low["z"], MIN_BOX_SIDE), LABEL_HEIGHT),
        "color.r": pairs(colours[:, 0], 1.0, np.float32),
        "color.g": pairs(colours[:, 1], 1.0, np.float32),
        "color.b": pairs(colours[:, 2], 1.0, np.float32),
        "color.a": pairs(BOX_ALPHA, 1.0, np.float32),
        "text": texts,
    }
    if boxes is not None:
        z_low, z_high = boxes["min_z"].astype(np.float64), boxes["max_z"].astype(np.float64)
        turn_z, turn_w = yaw_quaternion(boxes["yaw"])
        columns.update(
            {
                "pose.position.x": pairs(boxes["center_x"], table["x"]),
                "pose.position.y": pairs(boxes["center_y"], table["y"]),
                "pose.position.z": pairs((z_low + z_high) / 2.0, high["z"] + LABEL_HEIGHT),
                "pose.orientation.z": pairs(turn_z, 0.0),
                "pose.orientation.w": _unit_w(pairs(turn_w, 1.0), count),
                "scale.x": pairs(np.maximum(boxes["length"], MIN_BOX_SIDE), 0.0),
                "scale.y": pairs(np.maximum(boxes["width"], MIN_BOX_SIDE), 0.0),
                "scale.z": pairs(np.maximum(z_high - z_low, MIN_BOX_SIDE), LABEL_HEIGHT),
            }
        )
    writer = CdrWriter()
    writer.pack("I", rows)
    return b"".join((writer.value(), codec.encode(rows, columns, writer.position)))


def _unit_w(values: np.ndarray, count: int) -> np.ndarray:
    """``values`` with the DELETE rows' quaternion w (after the first ``2 * count``) at 1.0, a
    default Marker's."""
    values[2 * count :] = 1.0
    return values


@functools.lru_cache(maxsize=2)
def _box_colours(size: int) -> np.ndarray:
    """Box colours of cluster ids ``0..size-1`` as MarkerBuilder computes them (read-only)."""
    colours = cluster_rgb(np.arange(size)) / 255.0
    colours.flags.writeable = False
    return colours


def same_serialization(data: bytes, message: Any) -> bool:
    """Whether ``data`` is ``serialize_message(message)`` but for zero padding bytes: the check of
    every encoder (here and in :mod:`.object_messages`) against this ROS 2 installation."""
    return _same_serialization(data, message)


def _same_serialization(data: bytes, message: Any) -> bool:
    """Whether ``data`` is ``serialize_message(message)`` but for zero padding bytes.

    Fast CDR leaves padding bytes as it finds them, so those may differ; the rest must be equal,
    and ``data`` must deserialize to what ``message`` does (floats rounded to the member types).
    """
    serialized = serialize_message(message)
    reference = np.frombuffer(serialized, dtype=np.uint8)
    ours = np.frombuffer(data, dtype=np.uint8)
    if ours.shape != reference.shape or ours[ours != reference].any():
        return False
    return deserialize_message(data, type(message)) == deserialize_message(
        serialized, type(message)
    )


@functools.cache
def _cloud_encoding_verified() -> bool:
    """Whether :func:`point_cloud_cdr` matches rclpy's serialization of a sample cloud."""
    sample = RawCloud(
        fields=(Field("x", 0, FLOAT32), Field("flags", 4, UINT8, 3)),
        height=2,
        width=1,
        point_step=8,
        row_step=8,
        data=bytes(range(1, 17)),
        is_bigendian=True,
        is_dense=True,
    )
    header = Header(frame_id="lidar")
    header.stamp.sec, header.stamp.nanosec = 7, 9
    verified = _same_serialization(
        point_cloud_cdr(sample, header), cloud_to_message(sample, header)
    )
    if not verified:
        log.warning("PointCloud2 CDR encoding does not match this ROS 2: publishing messages")
    return verified


@functools.cache
def _verified_marker_codec() -> RowCodec | None:
    """A Marker :class:`RowCodec` that reproduces MarkerBuilder on a sample, or None."""
    members = MarkerArray.get_fields_and_field_types()
    if members != {"markers": "sequence<visualization_msgs/Marker>"}:
        log.warning("unexpected MarkerArray definition: publishing marker messages")
        return None
    try:
        codec = RowCodec(Marker)
    except UnsupportedLayoutError as error:
        log.warning("Marker cannot be encoded column-wise (%s): publishing messages", error)
        return None
    header = Header(frame_id="lidar")
    header.stamp.sec, header.stamp.nanosec = 12, 345
    builder = MarkerBuilder()
    previous = 0
    for clusters, oriented in ((14, False), (11, True), (0, False), (3, True)):
        # labels of 5 to 13 bytes; deletes after and alone; oriented boxes
        table = _sample_table(clusters)
        boxes = _sample_boxes(table) if oriented else None
        expected = builder.build(table, header, boxes)
        ours = marker_array_cdr(codec, table, header, previous, boxes)
        if not _same_serialization(ours, expected):
            log.warning("Marker CDR encoding does not match this ROS 2: publishing messages")
            return None
        previous = clusters
    return codec


def _sample_table(clusters: int) -> np.ndarray:
    """A cluster table with varied sizes, positions and point counts (1 to 10**6 points)."""
    table = np.zeros(clusters, dtype=CLUSTER_DTYPE)
    table["cluster_id"] = np.arange(clusters)
    table["num_points"] = 10 ** (np.arange(clusters) % 7)
    for offset, axis in enumerate("xyz"):
        centre = np.linspace(-20.0, 30.0, clusters) + offset
        half = np.arange(clusters) * 0.25
        table[axis] = centre
        table[f"min_{axis}"] = centre - half
        table[f"max_{axis}"] = centre + half
    return table


def _sample_boxes(table: np.ndarray) -> np.ndarray:
    """Oriented boxes for the rows of :func:`_sample_table`: yaws across (-pi/2, pi/2]."""
    boxes = np.zeros(len(table), dtype=BOX_DTYPE)
    boxes["cluster_id"] = table["cluster_id"]
    boxes["center_x"], boxes["center_y"] = table["x"] + 0.125, table["y"] - 0.25
    boxes["yaw"] = np.linspace(np.pi / 2, -1.5, len(table))
    boxes["length"] = np.arange(len(table)) * 0.5
    boxes["width"] = np.arange(len(table)) * 0.01  # the first ones below MIN_BOX_SIDE
    boxes["min_z"], boxes["max_z"] = table["min_z"], table["max_z"]
    return boxes
