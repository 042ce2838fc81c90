"""The records of a ROS 1 bag or an MCAP file, checked before rosbags reads them: their lengths
against the file's size, and what their compressed chunks declare against a memory budget.

Lengths. rosbags reads a record by asking the file for the length its header declares: a damaged
ROS 1 ``header_len`` of 0xFFFFFFFF allocates 4 GiB, an MCAP length of 2^63 - 1 raises
OverflowError, an 8-byte MCAP a TypeError. Before a bag is opened, :func:`check_records` walks
its top-level records (reading their lengths, and the headers of ROS 1 records and the fixed
fields of MCAP chunks and chunk indexes, seeking past the rest) and refuses the first one that
runs past the end of the file, naming its offset.

- ROS 1 (``#ROSBAG V2.0``): every record is ``uint32 header_len``, the header, ``uint32
  data_len``, the data; the bag header, chunks, index data, connections and chunk infos alike.
- MCAP: the magic, then records ``uint8 opcode``, ``uint64 length``, the body, up to the footer
  record and the closing magic.

Chunks. rosbags decompresses a compressed chunk whole, into memory: 17 kB of bz2 expand to
4 GB. A chunk (ROS 1: ``bz2`` or ``lz4``; MCAP: ``lz4`` or ``zstd``) whose record declares more
than :data:`MAX_CHUNK_BYTES` uncompressed (ROS 1: its header's ``size``; MCAP: the chunk's
``uncompressed_size``, and its chunk index's, which rosbags reads it by) is refused with
:class:`ChunkError` before anything is decompressed. rosbags' MCAP reader holds every chunk
whose message time range overlaps the one it reads (it merges them by time), so the chunks an
MCAP's summary indexes may declare :data:`MAX_CHUNK_BYTES` together at any instant; each chunk
index must describe a chunk record of the file as that record does, and no chunk twice. What a
chunk really expands to is bounded as it is decompressed (:mod:`.bag_chunks`), at the size it
declares: a declared size can lie.

Chunk contents are not walked: rosbags reads them from the decompressed chunk in memory, where a
wrong length can only come up short.
"""

from __future__ import annotations

import heapq
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

ROS1_MAGIC = b"#ROSBAG V2.0\n"
MCAP_MAGIC = b"\x89MCAP0\r\n"
#: opcode (1) and length (8) of an MCAP record
_MCAP_RECORD_HEAD = 9
#: the MCAP footer record: opcode 0x02, length 20, its 20 bytes
_MCAP_FOOTER = 1 + 8 + 20
_UINT32 = struct.Struct("<I")
_UINT64 = struct.Struct("<Q")
_MCAP_HEAD = struct.Struct("<BQ")
#: an MCAP chunk's fields before its compression: start and end time, uncompressed size, crc
_MCAP_CHUNK_HEAD = struct.Struct("<QQQI")
#: an MCAP chunk index's fields before its message index offsets: start and end time, the
#: chunk's offset and length
_MCAP_INDEX_HEAD = struct.Struct("<QQQQ")
_ROS1_CHUNK_OP = 0x05
_MCAP_CHUNK, _MCAP_CHUNK_INDEX = 0x06, 0x08

MAX_CHUNK_BYTES = 256 << 20
"""Bytes a compressed chunk may declare (and expand to) uncompressed: 256 MiB, also the most the
chunks an MCAP reader holds at once may declare together. Recorders close a chunk past a
threshold (``rosbag record``: 768 KiB; MCAP's writers, ``ros2 bag record``: 768 KiB, rosbags:
1 MiB), so a chunk outgrows it only to hold one message that does: the largest a LiDAR bag
holds is a sweep's PointCloud2 (a 128-beam sensor, 32 bytes a point: about 10 MB) or a
VelodyneScan (a VLS-128 sweep: 2 MB), and camera images stay under 30 MB. 256 MiB is eight
times the largest of those; what rosbags holds for a chunk (the chunk, then copies of its
messages) stays within twice it."""


class RecordError(ValueError):
    """A record declares more bytes than the file holds; the message says which and where."""


class ChunkError(RecordError):
    """A compressed chunk declares or expands to more than its budget; the message names the
    chunk, the size it claims or reached, and the bound."""


@dataclass(frozen=True)
class ChunkClaim:
    """A compressed chunk as its record declares it.

    Attributes:
        offset: where its record starts in the file.
        compression: ``bz2``, ``lz4`` or ``zstd``.
        compressed_bytes: its compressed data's length.
        declared_bytes: the uncompressed size it declares.
    """

    offset: int
    compression: str
    compressed_bytes: int
    declared_bytes: int

    def describe(self) -> str:
        """``chunk at byte N (zstd, M bytes)``."""
        return f"chunk at byte {self.offset} ({self.compression}, {self.compressed_bytes} bytes)"

    def check_budget(self) -> None:
        """Raise :class:`ChunkError` when it declares more than :data:`MAX_CHUNK_BYTES`."""
        if self.declared_bytes > MAX_CHUNK_BYTES:
            raise ChunkError(
                f"{self.describe()} declares {self.declared_bytes} bytes uncompressed, over the "
                f"{budget_text()} a chunk may expand to"
            )


def budget_text() -> str:
    """``268435456 bytes (256 MiB)``: :data:`MAX_CHUNK_BYTES` as the error messages say it."""
    return f"{MAX_CHUNK_BYTES} bytes ({MAX_CHUNK_BYTES >> 20} MiB)"


def check_records(path: Path) -> dict[int, ChunkClaim]:
    """Walk the top-level records of a ROS 1 ``.bag`` or an ``.mcap`` file; other files (sqlite3
    ``.db3``, a bag directory's ``metadata.yaml``) are left to their readers. Returns the
    compressed chunks by the offset of their records.

    Raises:
        ChunkError: a compressed chunk declares more than :data:`MAX_CHUNK_BYTES` uncompressed,
            or an MCAP's chunks overlapping in time more together.
        RecordError: a record runs past the end of the file, the file is too short to hold
            the format's fixed parts, or an MCAP chunk index does not describe a chunk record.
        OSError: the file cannot be read.
    """
    if path.suffix == ".bag":
        check = _check_ros1
    elif path.suffix == ".mcap":
        check = _check_mcap
    else:
        return {}
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        return check(stream, size)


def _check_ros1(stream: BinaryIO, size: int) -> dict[int, ChunkClaim]:
    chunks: dict[int, ChunkClaim] = {}
    if stream.read(len(ROS1_MAGIC)) != ROS1_MAGIC:
        return chunks  # not version 2.0: rosbags says so itself
    offset = len(ROS1_MAGIC)
    while offset < size:
        start = offset
        header = b""
        for part in ("header", "data"):
            if size - offset < 4:
                raise RecordError(
                    f"record at byte {offset} is cut off: its {part} length needs 4 bytes, "
                    f"{size - offset} remain"
                )
            stream.seek(offset)
            (length,) = _UINT32.unpack(stream.read(4))
            offset += 4
            if length > size - offset:
                raise RecordError(
                    f"record at byte {offset - 4} declares a {part} of {length} bytes, "
                    f"{size - offset} remain in the file"
                )
            if part == "header":
                header = stream.read(length)
            else:
                claim = _ros1_chunk(start, header, length)
                if claim is not None:
                    claim.check_budget()
                    chunks[start] = claim
            offset += length
    return chunks


def _ros1_fields(header: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The ``name=value`` fields of a ROS 1 record header, up to the first malformed one."""
    at = 0
    while at + 4 <= len(header):
        (length,) = _UINT32.unpack_from(header, at)
        if length > len(header) - at - 4:
            return
        name, _, value = header[at + 4 : at + 4 + length].partition(b"=")
        yield name, value
        at += 4 + length


def _ros1_chunk(offset: int, header: bytes, data_length: int) -> ChunkClaim | None:
    """The compressed chunk of a ROS 1 record, None for other records and uncompressed chunks
    (a malformed header is left to rosbags, which refuses it).

    Raises:
        RecordError: a compressed chunk without its uncompressed ``size`` (a uint32).
    """
    fields = dict(_ros1_fields(header))
    if fields.get(b"op") != bytes([_ROS1_CHUNK_OP]):
        return None
    compression = fields.get(b"compression", b"").decode("ascii", "replace")
    if compression in ("", "none"):
        return None
    size = fields.get(b"size", b"")
    if len(size) != 4:
        raise RecordError(
            f"chunk at byte {offset} ({compression}, {data_length} bytes) declares no "
            "uncompressed size"
        )
    (declared,) = _UINT32.unpack(size)
    return ChunkClaim(offset, compression, data_length, declared)


@dataclass(frozen=True)
class _IndexedChunk:
    """A chunk as an MCAP chunk index describes it: the times rosbags merges it by."""

    start: int
    end: int
    claim: ChunkClaim


def _check_mcap(stream: BinaryIO, size: int) -> dict[int, ChunkClaim]:
    smallest = 2 * len(MCAP_MAGIC) + _MCAP_FOOTER
    if size < smallest:
        raise RecordError(
            f"{size} bytes is too short for an MCAP file (its magic bytes and footer take "
            f"{smallest})"
        )
    if stream.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
        return {}  # rosbags names the bad magic itself
    chunks: dict[int, ChunkClaim | None] = {}  # None: an uncompressed chunk
    indexed: dict[int, _IndexedChunk | None] = {}  # by the chunk's offset
    end = size - len(MCAP_MAGIC)
    offset = len(MCAP_MAGIC)
    while offset < end:
        if end - offset < _MCAP_RECORD_HEAD:
            raise RecordError(
                f"record at byte {offset} is cut off: its opcode and length need "
                f"{_MCAP_RECORD_HEAD} bytes, {end - offset} remain before the closing magic"
            )
        stream.seek(offset)
        opcode, length = _MCAP_HEAD.unpack(stream.read(_MCAP_RECORD_HEAD))
        if length > end - offset - _MCAP_RECORD_HEAD:
            raise RecordError(
                f"record 0x{opcode:02x} at byte {offset} declares {length} bytes, "
                f"{end - offset - _MCAP_RECORD_HEAD} remain before the closing magic"
            )
        if opcode == _MCAP_CHUNK:
            claim = _mcap_chunk(stream, offset, length)
            if claim is not None:
                claim.check_budget()
            chunks[offset] = claim
        elif opcode == _MCAP_CHUNK_INDEX:
            _mcap_chunk_index(stream.read(length), offset, chunks, indexed)
        offset += _MCAP_RECORD_HEAD + length
    _check_overlaps([chunk for chunk in indexed.values() if chunk is not None])
    return {at: claim for at, claim in chunks.items() if claim is not None}


def _mcap_string(body: bytes, at: int) -> tuple[str, int] | None:
    """The string at ``at`` of a record's body and the offset after it; None: it runs out."""
    if at + 4 > len(body):
        return None
    (length,) = _UINT32.unpack_from(body, at)
    if at + 4 + length > len(body):
        return None
    return body[at + 4 : at + 4 + length].decode("utf-8", "replace"), at + 4 + length


def _mcap_chunk(stream: BinaryIO, offset: int, length: int) -> ChunkClaim | None:
    """A chunk record's claim; None for an uncompressed (or malformed: rosbags refuses it)
    chunk. The stream stands at the record's body."""
    fixed = _MCAP_CHUNK_HEAD.size + 4
    head = stream.read(min(length, fixed))
    if len(head) < fixed:
        return None
    (name_length,) = _UINT32.unpack_from(head, _MCAP_CHUNK_HEAD.size)
    if fixed + name_length + 8 > length:
        return None
    rest = stream.read(name_length + 8)
    compression = rest[:name_length].decode("utf-8", "replace")
    if not compression:
        return None
    declared = _MCAP_CHUNK_HEAD.unpack_from(head)[2]
    (compressed,) = _UINT64.unpack_from(rest, name_length)
    return ChunkClaim(offset, compression, compressed, declared)


def _mcap_chunk_index(
    body: bytes,
    offset: int,
    chunks: dict[int, ChunkClaim | None],
    indexed: dict[int, _IndexedChunk | None],
) -> None:
    """Add the chunk a chunk index record describes to ``indexed`` (None for an uncompressed
    chunk), checked against the chunk's record; a malformed index is left to rosbags.

    Raises:
        RecordError: the index names no chunk record, one indexed before, or describes its
            chunk otherwise than the chunk's record does.
    """
    if len(body) < _MCAP_INDEX_HEAD.size + 4:
        return
    start, end, chunk_at, _ = _MCAP_INDEX_HEAD.unpack_from(body)
    (offsets_length,) = _UINT32.unpack_from(body, _MCAP_INDEX_HEAD.size)
    at = _MCAP_INDEX_HEAD.size + 4 + offsets_length + 8  # the offsets, the index length
    name = _mcap_string(body, at)
    if name is None or name[1] + 16 > len(body):
        return
    compression, at = name
    compressed, declared = struct.unpack_from("<QQ", body, at)
    where = f"chunk index at byte {offset}"
    if chunk_at not in chunks:
        raise RecordError(f"{where} names a chunk at byte {chunk_at}, where no chunk record starts")
    if chunk_at in indexed:
        raise RecordError(f"{where} indexes the chunk at byte {chunk_at} a second time")
    record = chunks[chunk_at]
    described = ChunkClaim(chunk_at, compression, compressed, declared)
    if (record is None and compression) or (record is not None and record != described):
        raise RecordError(
            f"{where} describes the chunk at byte {chunk_at} as {compression or 'uncompressed'}, "
            f"{compressed} bytes expanding to {declared}, otherwise than its record does"
        )
    indexed[chunk_at] = None if record is None else _IndexedChunk(start, end, record)


def _check_overlaps(indexed: list[_IndexedChunk]) -> None:
    """rosbags' MCAP reader holds every indexed chunk whose time range (ends included) holds the
    time it reads at; refuse chunks that would be held together past :data:`MAX_CHUNK_BYTES`.

    Raises:
        ChunkError: naming the chunk that takes the total past the budget.
    """
    held: list[tuple[int, int]] = []  # (end, declared) of the chunks held, earliest end first
    total = 0
    for chunk in sorted(indexed, key=lambda chunk: chunk.start):
        while held and held[0][0] < chunk.start:
            total -= heapq.heappop(held)[1]
        heapq.heappush(held, (chunk.end, chunk.claim.declared_bytes))
        total += chunk.claim.declared_bytes
        if total > MAX_CHUNK_BYTES:
            raise ChunkError(
                f"{len(held)} chunks overlap in time at bag time {chunk.start} ns, the last the "
                f"{chunk.claim.describe()}: read together they declare {total} bytes "
                f"uncompressed, over the {budget_text()} chunks may take at once"
            )
