"""Decompression within a bound for everything rosbags decompresses when it reads a bag.

rosbags expands compressed data whole, in one call (``bz2.decompress``,
``lz4.frame.decompress``, ``zstd.decompress``), whatever it declares: 17 kB of bz2 became 4 GB.
What a chunk declares is checked against :data:`~.bag_records.MAX_CHUNK_BYTES` before it is read
(:func:`~.bag_records.check_records`); here the output itself is bounded
(:func:`decompress_within`): first by what the data's own frame headers declare (zstd and lz4
frames may state their content size: :func:`declared_size`), then while it is produced (the
decompressor's ``max_length``), since a declared size can lie or be missing:

- ROS 1 chunks (``bz2``, ``lz4``): rosbags' reader keeps a decompressor per chunk (its
  ``chunks``); :func:`bound_ros1_chunks` gives each one that stops past the size the chunk's
  record declares (at most the budget), and refuses a chunk its index names where the record
  walk found none.
- MCAP chunks (``lz4``, ``zstd``): rosbags' MCAP reader decompresses through its module's table
  of decompressors, handing them the size the chunk (or its chunk index) declares;
  :func:`bound_decompression` puts bounded ones there: at most that size, and the budget.
- ROS 2 bags compressed by ``ros2 bag record --compression-mode``: ``message``, each message at
  most the budget; ``file``, each storage file rosbags expands into a temporary folder at most
  that folder's free space less :data:`FREE_SPACE_KEPT` (a disk is never filled).

Output past its bound raises :class:`~.bag_records.ChunkError`, which names the chunk, the size
it declares and the bound. rosbags' own checks (a chunk shorter than it declares, a bad CRC)
stay as they are.
"""

from __future__ import annotations

import bz2
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from functools import partial
from types import ModuleType
from typing import Any, BinaryIO

import lz4.frame

from .bag_records import MAX_CHUNK_BYTES, ChunkClaim, ChunkError, RecordError, budget_text

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the backport rosbags itself depends on
    from backports import zstd

#: Free bytes a compressed ROS 2 bag's storage file leaves in the temporary folder it is
#: expanded into.
FREE_SPACE_KEPT = 1 << 30

#: A decompressor object of each format, and whether data may hold several streams (frames) one
#: after the other, as the one-call function rosbags uses reads them (``lz4.frame.decompress``
#: reads the first frame alone).
_DECOMPRESSORS: dict[str, tuple[Callable[[], Any], bool]] = {
    "bz2": (bz2.BZ2Decompressor, True),
    "lz4": (lz4.frame.LZ4FrameDecompressor, False),
    "zstd": (zstd.ZstdDecompressor, True),
}


def decompress_within(data: bytes, compression: str, limit: int, what: str, bound: str) -> bytes:
    """``data`` decompressed as ``compression`` (``bz2``, ``lz4`` frame or ``zstd``), never more
    than ``limit`` + 1 bytes of it in memory.

    Args:
        data: the compressed bytes.
        compression: their format.
        limit: bytes the output may take.
        what: what the data is, for the error (``chunk at byte 4109 (bz2, 4500 bytes)``).
        bound: what ``limit`` is, for the error (``the 1000 bytes it declares``).

    Raises:
        ChunkError: its frame headers declare more than ``limit`` (before anything is
            decompressed), or the output runs past it.
        ValueError: the data ends inside a stream (and the decompressors' own errors on damaged
            data).
    """
    new_decompressor, several_streams = _DECOMPRESSORS[compression]
    declared = declared_size(data, compression)
    if declared is not None and declared > limit:
        raise ChunkError(f"{what}: its {compression} frames declare {declared} bytes, past {bound}")
    parts: list[bytes] = []
    size = 0
    while True:
        decompressor = new_decompressor()
        part = decompressor.decompress(data, max_length=limit - size + 1)
        size += len(part)
        if size > limit:
            raise ChunkError(f"{what} expands past {bound}")
        if not decompressor.eof:
            raise ValueError(f"{what}: its {compression} data ends inside a stream")
        parts.append(part)
        data = decompressor.unused_data
        if not (data and several_streams):
            return b"".join(parts)


def declared_size(data: bytes, compression: str) -> int | None:
    """The uncompressed size ``data``'s frame headers declare: the sum over its zstd frames, its
    (first) lz4 frame's content size; None where they do not say (bz2 never does, a frame may
    leave it out) or cannot be read (the decompressor then says what is wrong)."""
    view = memoryview(data)
    if compression == "lz4":
        try:
            size = lz4.frame.get_frame_info(view)["content_size"]
        except RuntimeError:  # not an lz4 frame header
            return None
        return size or None  # 0: not stated
    if compression != "zstd":
        return None
    total = at = 0
    while at < len(view):
        try:
            size = zstd.get_frame_info(view[at:]).decompressed_size
            at += zstd.get_frame_size(view[at:])
        except zstd.ZstdError:
            return None
        if size is None:
            return None
        total += size
    return total


def bound_ros1_chunks(reader: Any, claims: Mapping[int, ChunkClaim]) -> None:
    """Give every compressed chunk of an open ``rosbags.rosbag1.Reader`` a decompressor bounded
    at the size its record declares (``claims``: :func:`~.bag_records.check_records`' of the
    file, each checked against the budget).

    Raises:
        RecordError: the bag's index names a compressed chunk where no chunk record starts.
    """
    from rosbags.rosbag1 import reader as rosbag1_reader

    uncompressed = rosbag1_reader.decompressors["none"]
    for offset, chunk in list(reader.chunks.items()):
        if chunk.decompressor is uncompressed:
            continue
        claim = claims.get(offset)
        if claim is None:
            raise RecordError(
                f"the bag's index names a compressed chunk at byte {offset}, where no chunk "
                "record starts"
            )
        bounded = partial(
            decompress_within,
            compression=claim.compression,
            limit=claim.declared_bytes,
            what=claim.describe(),
            bound=f"the {claim.declared_bytes} bytes it declares",
        )
        reader.chunks[offset] = chunk._replace(decompressor=bounded)


def _mcap_chunk(compression: str, data: bytes, declared: int) -> bytes:
    """rosbags' MCAP decompressor of ``compression``, bounded at the ``declared`` size."""
    what = f"an MCAP {compression} chunk of {len(data)} bytes"
    if declared > MAX_CHUNK_BYTES:
        raise ChunkError(
            f"{what} declares {declared} bytes uncompressed, over the {budget_text()} a chunk "
            "may expand to"
        )
    return decompress_within(data, compression, declared, what, f"the {declared} bytes it declares")


class BoundedZstd:
    """What rosbags' ROS 2 reader calls ``zstd`` (for bags compressed by message or by file),
    bounded: :meth:`decompress` (a message) at the budget, :meth:`open` (a storage file being
    expanded) at the free space of the temporary folder less :data:`FREE_SPACE_KEPT`."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module

    def decompress(self, data: bytes) -> bytes:
        return decompress_within(
            data,
            "zstd",
            MAX_CHUNK_BYTES,
            f"a zstd-compressed message of {len(data)} bytes",
            f"the {budget_text()} a message may expand to",
        )

    def open(self, file: BinaryIO, mode: str = "rb") -> BoundedReader:
        folder = tempfile.gettempdir()
        limit = max(0, shutil.disk_usage(folder).free - FREE_SPACE_KEPT)
        return BoundedReader(
            self.module.open(file, mode),
            limit,
            f"a zstd-compressed storage file ({getattr(file, 'name', 'the bag')})",
            f"the {limit} bytes free in {folder} (less {FREE_SPACE_KEPT >> 30} GiB kept free)",
        )


class BoundedReader:
    """A readable (decompressing) stream that raises :class:`~.bag_records.ChunkError` once more
    than ``limit`` bytes have been read from it."""

    def __init__(self, stream: Any, limit: int, what: str, bound: str) -> None:
        self.stream = stream
        self.limit = limit
        self.what = what
        self.bound = bound
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        left = self.limit - self.read_bytes + 1
        data = self.stream.read(left if size < 0 else min(size, left))
        self.read_bytes += len(data)
        if self.read_bytes > self.limit:
            raise ChunkError(f"{self.what} expands past {self.bound}")
        return data

    def close(self) -> None:
        self.stream.close()

    def __enter__(self) -> BoundedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bound_decompression() -> None:
    """Put the bounded decompressors into rosbags' MCAP and ROS 2 readers (see the module
    docstring); called before a bag is opened, again at no cost."""
    from rosbags.rosbag2 import reader as rosbag2_reader
    from rosbags.rosbag2 import storage_mcap

    for compression in ("lz4", "zstd"):
        storage_mcap.DECOMPRESSORS[compression] = partial(_mcap_chunk, compression)
    if not isinstance(rosbag2_reader.zstd, BoundedZstd):
        rosbag2_reader.zstd = BoundedZstd(rosbag2_reader.zstd)
