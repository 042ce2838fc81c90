"""The record lengths of a ROS 1 bag or an MCAP file, checked against the file's size.

rosbags reads a record by asking the file for the length its header declares: a damaged ROS 1
``header_len`` of 0xFFFFFFFF allocates 4 GiB, an MCAP length of 2^63 - 1 raises OverflowError, an
8-byte MCAP a TypeError. Before a bag is opened, :func:`check_records` walks its top-level records
(reading only their lengths and seeking past their bodies, so a walk costs a few bytes per record)
and refuses the first one that runs past the end of the file, naming its offset.

- ROS 1 (``#ROSBAG V2.0``): every record is ``uint32 header_len``, the header, ``uint32
  data_len``, the data; the bag header, chunks, index data, connections and chunk infos alike.
- MCAP: the magic, then records ``uint8 opcode``, ``uint64 length``, the body, up to the footer
  record and the closing magic.

Chunk contents are not walked: rosbags reads them from the decompressed chunk in memory, where a
wrong length can only come up short.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

ROS1_MAGIC = b"#ROSBAG V2.0\n"
MCAP_MAGIC = b"\x89MCAP0\r\n"
#: opcode (1) and length (8) of an MCAP record
_MCAP_RECORD_HEAD = 9
#: the MCAP footer record: opcode 0x02, length 20, its 20 bytes
_MCAP_FOOTER = 1 + 8 + 20
_UINT32 = struct.Struct("<I")
_MCAP_HEAD = struct.Struct("<BQ")


class RecordError(ValueError):
    """A record declares more bytes than the file holds; the message says which and where."""


def check_records(path: Path) -> None:
    """Walk the top-level records of a ROS 1 ``.bag`` or an ``.mcap`` file; other files (sqlite3
    ``.db3``, a bag directory's ``metadata.yaml``) are left to their readers.

    Raises:
        RecordError: a record runs past the end of the file, or the file is too short to hold
            the format's fixed parts.
        OSError: the file cannot be read.
    """
    if path.suffix == ".bag":
        check = _check_ros1
    elif path.suffix == ".mcap":
        check = _check_mcap
    else:
        return
    size = os.path.getsize(path)
    with open(path, "rb") as stream:
        check(stream, size)


def _check_ros1(stream: BinaryIO, size: int) -> None:
    if stream.read(len(ROS1_MAGIC)) != ROS1_MAGIC:
        return  # not version 2.0: rosbags says so itself
    offset = len(ROS1_MAGIC)
    while offset < size:
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
            offset += length


def _check_mcap(stream: BinaryIO, size: int) -> None:
    smallest = 2 * len(MCAP_MAGIC) + _MCAP_FOOTER
    if size < smallest:
        raise RecordError(
            f"{size} bytes is too short for an MCAP file (its magic bytes and footer take "
            f"{smallest})"
        )
    if stream.read(len(MCAP_MAGIC)) != MCAP_MAGIC:
        return  # rosbags names the bad magic itself
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
        offset += _MCAP_RECORD_HEAD
        if length > end - offset:
            raise RecordError(
                f"record 0x{opcode:02x} at byte {offset - _MCAP_RECORD_HEAD} declares "
                f"{length} bytes, {end - offset} remain before the closing magic"
            )
        offset += length
