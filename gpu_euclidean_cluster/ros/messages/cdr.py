"""Little-endian CDR (plain CDR, XCDR1) of messages, for ``Publisher.publish(bytes)``, which
skips rclpy's conversion to a C message and rmw's serialization: :class:`CdrWriter` writes a few
scalars and strings, :class:`RowCodec` consecutive messages of one type column-wise with NumPy
(:mod:`.columns`), :func:`same_serialization` checks them against rclpy's own bytes.

Encoding: the encapsulation header ``00 01 00 00`` (little-endian), then every primitive aligned
to its size relative to the first byte after that header; a string is a uint32 length (its UTF-8
bytes plus the NUL terminator), the bytes and the NUL; a sequence is a uint32 count and its
elements. Padding bytes are zero (Fast CDR leaves them as they were in its buffer, so
``serialize_message`` output can differ from ours in padding bytes only).
"""

from __future__ import annotations

import functools
import gc
import importlib
import itertools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from rosidl_parser import definition

#: CDR encapsulation header: plain CDR, little-endian, no options.
ENCAPSULATION = b"\x00\x01\x00\x00"

# fmt: off
#: rosidl basic type name -> its little-endian CDR representation (booleans as one byte 0 or 1).
_BASIC_TYPES: dict[str, np.dtype] = {
    name: np.dtype(code)
    for code, names in (
        ("u1", "boolean|octet|char|uint8"), ("i1", "int8"), ("<f4", "float"), ("<f8", "double"),
        ("<i2", "int16|short"), ("<u2", "uint16|unsigned short"), ("<i4", "int32|long"),
        ("<u4", "uint32|unsigned long"), ("<i8", "int64|long long"),
        ("<u8", "uint64|unsigned long long"),
    )
    for name in names.split("|")
}
# fmt: on
_UINT32 = np.dtype("<u4")
#: The kinds of member whose size varies per message.
_SIZED = ("string", "blob")


class HeaderLike(Protocol):
    """std_msgs/Header, as far as the encoders read it: ``stamp.sec``, ``stamp.nanosec``."""

    stamp: Any
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


class RowCodec:
    """CDR of consecutive messages of one type, built member by member for all of them at once.

    The member layout comes from the installed message class (``SLOT_TYPES`` and
    ``get_fields_and_field_types``, nested messages included): numbers, fixed-size arrays of
    numbers and strings can be set per message through dotted paths such as
    ``"pose.position.x"``; every member not set keeps the value of a default-constructed message.
    Sequences stay empty, but for those named in ``sequences``, which hold the same number of
    elements in every message (members ``"classification[0].probability"``, ...), and the one
    ``blob``, a sequence of bytes whose length varies per message (see :meth:`encode`). Strings
    have per-message lengths, so each message has its own start and alignment padding.
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
        """For messages of the generated class ``message_class``; ``sequences``: dotted path of a
        sequence member -> its element count in every message; ``blob``: the dotted path of a
        ``sequence<uint8>`` member whose bytes are given per message to :meth:`encode`.

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
        strings = any(leaf.kind in _SIZED for leaf in self._leaves)
        if strings and self._leaves[0].dtype.itemsize < 4:
            raise UnsupportedLayoutError(f"{message_class.__name__} starts unaligned")
        self._settable = {leaf.path for leaf in self._leaves if leaf.kind != "sequence"}
        self._blob = blob
        self._first_align = self._leaves[0].dtype.itemsize
        self._max_align = max(leaf.dtype.itemsize for leaf in self._leaves)
        self._steps: list[_Run | _Leaf] = []  # the strings and blob, and runs between them
        for run, group in itertools.groupby(self._leaves, lambda leaf: leaf.kind not in _SIZED):
            leaves = tuple(group)
            self._steps += [_Run.of(leaves, self._max_align)] if run else leaves

    def encode(
        self,
        prefix: bytes,
        rows: int,
        columns: Mapping[str, Any],
        blob: np.ndarray | None = None,
        scratch: Scratch | None = None,
    ) -> bytes:
        """``prefix`` (the encapsulation header and whatever precedes the messages), then the
        bytes of ``rows`` messages, the first one at ``len(prefix) - 4`` after the header.

        Args:
            prefix, rows: the bytes before the messages; how many messages.
            columns: dotted member path -> one value for every message or a (rows,) array;
                strings as ``bytes`` or a NumPy ``S`` array; the blob's path: each blob's size.
            blob: the blob bytes of every message, one after the other (C-contiguous uint8),
                copied once, into the result: the stream holds ``L % M`` bytes for a blob of
                ``L`` (``M`` the largest alignment: every later member keeps its alignment),
                cut out for the blob's bytes.
            scratch: the buffer to build the messages in, or None for a new one.

        Raises:
            ValueError: a member in ``columns`` cannot be set, or the blob sizes do not add up
                to ``blob``'s bytes.
        """
        start = len(prefix) - len(ENCAPSULATION)
        if self._blob is None:
            return b"".join((prefix, self._encode(rows, columns, start, scratch)[0]))
        sizes = np.broadcast_to(np.asarray(columns.get(self._blob, 0), dtype=np.int64), rows)
        if blob is None or int(sizes.sum()) != blob.nbytes:
            raise ValueError(f"blob sizes add up to {int(sizes.sum())}, not the blob's bytes")
        stream, holes = self._encode(rows, columns, start, scratch)
        source, bytes_ = memoryview(stream), memoryview(blob).cast("B")
        blob_ends = np.cumsum(sizes).tolist()
        blob_starts = (np.cumsum(sizes) - sizes).tolist()
        stream_starts = np.concatenate(([0], holes + sizes % self._max_align)).tolist()
        stream_ends = [*holes.tolist(), len(stream)]
        collecting = gc.isenabled()  # no collection for the thousands of memoryviews (a full
        gc.disable()  # one of the process takes over 10 ms in a node)
        try:
            pieces: list[memoryview] = [source] * (2 * rows + 1)
            pieces[0::2] = [source[a:b] for a, b in zip(stream_starts, stream_ends, strict=True)]
            pieces[1::2] = [bytes_[a:b] for a, b in zip(blob_starts, blob_ends, strict=True)]
            return b"".join((prefix, *pieces))
        finally:
            if collecting:
                gc.enable()

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
        stream = scratch.zeros(end) if scratch else np.zeros(-(-end // 8), np.uint64).view(np.uint8)
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
            else:  # a uint32 length (a blob's: its size), then the bytes
                position = position + (-position & 3)
                blob = step.kind == "blob"
                _scatter_numbers(stream, position, step, (values if blob else lengths)[step.path])
                position = position + _UINT32.itemsize
                if blob:
                    holes = np.broadcast_to(position - start, rows)
                else:
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
                if leaf.count == 1 and np.ndim(value) == 1:
                    value = np.asarray(value)[:, None]  # one per row
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
    names = message_class.get_fields_and_field_types()  # type: ignore[attr-defined]
    slots = zip(names, message_class.SLOT_TYPES, strict=True)  # type: ignore[attr-defined]
    return [
        leaf
        for name, slot in slots
        for leaf in _member_leaves(
            prefix + name, slot, getattr(instance, name), sequences or {}, blob
        )
    ]


def _member_leaves(
    path: str, slot: Any, value: Any, sequences: Mapping[str, int], blob: str | None
) -> list[_Leaf]:
    """The primitive members of the member ``path`` of type ``slot`` and default ``value``."""
    if isinstance(slot, definition.BasicType) and slot.typename in _BASIC_TYPES:
        return [_Leaf(path, "number", _BASIC_TYPES[slot.typename], 1, value)]
    if isinstance(slot, definition.AbstractString):
        return [_Leaf(path, "string", _UINT32, 1, value.encode())]
    if isinstance(slot, definition.NamespacedType):
        return _leaves(_message_class(slot), f"{path}.", value, sequences, blob)
    element = getattr(slot, "value_type", None)
    numbers = isinstance(element, definition.BasicType) and element.typename in _BASIC_TYPES
    if isinstance(slot, definition.Array) and numbers:
        dtype = _BASIC_TYPES[element.typename]  # type: ignore[union-attr]
        return [_Leaf(path, "number", dtype, slot.size, np.asarray(value, dtype))]
    if not isinstance(slot, definition.AbstractSequence):
        raise UnsupportedLayoutError(f"{path}: {type(slot).__name__}")
    if path == blob and numbers and element.typename in ("uint8", "octet"):  # type: ignore[union-attr]
        return [_Leaf(path, "blob", _UINT32, 1, 0)]
    count = sequences.get(path, 0)
    if (len(value) and not count) or count > getattr(slot, "maximum_size", count):
        raise UnsupportedLayoutError(f"{path}: {count} elements ({len(value)} by default)")
    if count and not (numbers or isinstance(element, definition.NamespacedType)):
        raise UnsupportedLayoutError(f"{path}: elements {type(element).__name__}")
    leaves = [_Leaf(path, "sequence", _UINT32, 1, count)]
    for index in range(count):
        default = _message_class(element)() if not numbers else 0  # type: ignore[arg-type]
        leaves += _member_leaves(f"{path}[{index}]", element, default, sequences, blob)
    return leaves


def _message_class(slot: definition.NamespacedType) -> type:
    """The generated Python class of a nested message type."""
    return getattr(importlib.import_module(".".join(slot.namespaces)), slot.name)


@functools.cache
def element_class(message_class: type, member: str) -> type:
    """The generated Python class of the elements of the sequence ``member`` (of messages)."""
    names = list(message_class.get_fields_and_field_types())  # type: ignore[attr-defined]
    return _message_class(message_class.SLOT_TYPES[names.index(member)].value_type)  # type: ignore[attr-defined]


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
    index = position // leaf.dtype.itemsize
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


def same_serialization(data: bytes, message: Any) -> bool:
    """Whether ``data`` is ``serialize_message(message)`` but for zero padding bytes.

    Fast CDR leaves padding bytes as it finds them, so those may differ; the rest must be equal,
    and ``data`` must deserialize to what ``message`` does (floats rounded to the member types).
    """
    from rclpy.serialization import deserialize_message, serialize_message  # only for the checks

    serialized = serialize_message(message)
    reference = np.frombuffer(serialized, dtype=np.uint8)
    ours = np.frombuffer(data, dtype=np.uint8)
    if ours.shape != reference.shape or ours[ours != reference].any():
        return False
    kind = type(message)
    return deserialize_message(data, kind) == deserialize_message(serialized, kind)
