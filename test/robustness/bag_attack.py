"""The hostile-input suite's bags of its third round: decompression bombs, and bags whose time
range or message types lie.

Builders, each writing one small bag from a valid one (or from scratch):

- :func:`ros1_compressed`: a ROS 1 bag whose chunk is bz2 or lz4 data expanding to GBs from a
  few kB (bz2 streams of 45 MB of zeros, 50 bytes each), its header declaring the truth or less;
- :func:`mcap_file`: an MCAP file written record by record: chunks of any compression, with
  zeros after their messages, declared sizes and time ranges as given, with or without a
  summary (chunk indexes, message indexes);
- :func:`with_metadata_start`, :func:`with_stamp`: a ROS 2 bag whose ``metadata.yaml`` claims
  another start, or one of whose messages is stamped otherwise in its database;
- :func:`mislabelled_bag`: a topic declaring ``sensor_msgs/msg/PointCloud2`` whose messages
  are ``VelodyneScan`` bytes;
- :func:`ros2_bag`, :func:`with_message_data`: a ROS 2 bag written by rosbags (compressed by
  file, by message or in MCAP chunks), one of its stored messages replaced.

:func:`hostile_bags` makes the suite's cases of them (:mod:`.attack` turns them into its
``bags`` group): each bomb refused with one line naming the chunk and the bound, under an
address-space limit; each bag that lies about its time range played from its messages; the
mislabelled topic refused.
"""

from __future__ import annotations

import bz2
import sqlite3
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import lz4.frame
import numpy as np

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

ROS1_MAGIC = b"#ROSBAG V2.0\n"
MCAP_MAGIC = b"\x89MCAP0\r\n"
POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
#: Zeros one bz2 stream of :func:`_zero_stream` holds (it takes 50 bytes).
BZ2_ZEROS = 45_000_000
#: Zeros one zstd frame of :func:`_zero_stream` holds (about 8 kB).
ZSTD_ZEROS = 128 << 20
#: Zeros fed to the lz4 frame compressor at a time (about 260 kB each).
LZ4_ZEROS = 64 << 20
#: The expansion of the suite's bombs: what the attack's reached (4.2 and 5.2 GB).
BOMB_BYTES = 5 << 30


# --- compressed data that expands to zeros ---------------------------------------------------


@cache
def _zero_stream(compression: str, declared: bool) -> bytes:
    """One bz2 stream or zstd frame of zeros (:data:`BZ2_ZEROS`, :data:`ZSTD_ZEROS`); the zstd
    frame's header states its size where ``declared``."""
    if compression == "bz2":
        return bz2.compress(bytes(BZ2_ZEROS), 9)
    if declared:
        return zstd.compress(bytes(ZSTD_ZEROS))
    compressor = zstd.ZstdCompressor()  # a stream: its size unknown when the header is written
    return compressor.compress(bytes(ZSTD_ZEROS)) + compressor.flush()


def compressed(
    compression: str, content: bytes, zeros: int, declared: bool = True
) -> tuple[bytes, int]:
    """``content`` then about ``zeros`` zero bytes, compressed as ``compression`` (``bz2``,
    ``lz4`` or ``zstd``) so that rosbags' decompressor expands it whole: concatenated bz2
    streams or zstd frames, one lz4 frame (rosbags reads only the first). The zstd and lz4
    frame headers state their true sizes where ``declared`` (as one-call compression writes
    them), else leave them out (as a stream's compressor does). Returns the data and the size it
    expands to (``zeros`` rounded down to whole streams or blocks)."""
    if compression == "lz4":
        expanded = len(content) + zeros // LZ4_ZEROS * LZ4_ZEROS
        compressor = lz4.frame.LZ4FrameCompressor()
        parts = [compressor.begin(expanded if declared else 0), compressor.compress(content)]
        block = bytes(LZ4_ZEROS)
        parts += [compressor.compress(block) for _ in range(zeros // LZ4_ZEROS)]
        parts.append(compressor.flush())
        return b"".join(parts), expanded
    per_stream = BZ2_ZEROS if compression == "bz2" else ZSTD_ZEROS
    head = bz2.compress(content, 9) if compression == "bz2" else zstd.compress(content)
    streams = zeros // per_stream
    tail = _zero_stream(compression, declared) * streams
    return head + tail, len(content) + streams * per_stream


# --- ROS 1 bags ------------------------------------------------------------------------------


@dataclass
class Ros1Record:
    """One top-level record of a ROS 1 bag: its offset, header fields in order, data."""

    offset: int
    fields: dict[str, bytes]
    data: bytes

    @property
    def op(self) -> int:
        return self.fields["op"][0]


def ros1_records(content: bytes) -> list[Ros1Record]:
    """The top-level records of a (valid) ROS 1 bag."""
    records = []
    offset = len(ROS1_MAGIC)
    while offset < len(content):
        (header_len,) = struct.unpack_from("<I", content, offset)
        header = content[offset + 4 : offset + 4 + header_len]
        (data_len,) = struct.unpack_from("<I", content, offset + 4 + header_len)
        data_at = offset + 8 + header_len
        fields, at = {}, 0
        while at < len(header):
            (length,) = struct.unpack_from("<I", header, at)
            name, _, value = header[at + 4 : at + 4 + length].partition(b"=")
            fields[name.decode()] = value
            at += 4 + length
        records.append(Ros1Record(offset, fields, content[data_at : data_at + data_len]))
        offset = data_at + data_len
    return records


def ros1_bytes(records: Sequence[Ros1Record]) -> bytes:
    """The bag of ``records``, with the bag header's ``index_pos`` and the chunk infos'
    ``chunk_pos`` moved to where their records now start."""

    def record_bytes(record: Ros1Record) -> bytes:
        header = b"".join(
            struct.pack("<I", len(name) + 1 + len(value)) + name.encode() + b"=" + value
            for name, value in record.fields.items()
        )
        return struct.pack("<I", len(header)) + header + struct.pack("<I", len(record.data))

    moved, offset = {}, len(ROS1_MAGIC)
    for record in records:
        moved[record.offset] = offset
        offset += len(record_bytes(record)) + len(record.data)
    for record in records:
        for name in ("index_pos", "chunk_pos"):
            if name in record.fields:
                (old,) = struct.unpack("<Q", record.fields[name])
                record.fields[name] = struct.pack("<Q", moved[old])
    return ROS1_MAGIC + b"".join(record_bytes(r) + r.data for r in records)


def ros1_compressed(
    valid: Path,
    out: Path,
    compression: str,
    zeros: int,
    claimed: int | None = None,
    declared: bool = True,
) -> int:
    """``valid`` (one uncompressed chunk, as ``write_pointcloud_bag`` writes it) with its chunk
    compressed as ``compression`` (``bz2`` or ``lz4``) and followed by about ``zeros`` zero
    bytes, its header's ``size`` ``claimed`` (default: the truth), its lz4 frame's header the
    truth where ``declared`` (:func:`compressed`); written to ``out``. Returns the size the
    chunk expands to."""
    records = ros1_records(valid.read_bytes())
    [chunk] = [r for r in records if r.op == 0x05]
    chunk.data, expanded = compressed(compression, chunk.data, zeros, declared)
    chunk.fields["compression"] = compression.encode()
    chunk.fields["size"] = struct.pack(
        "<I", min(expanded if claimed is None else claimed, 2**32 - 1)
    )
    out.write_bytes(ros1_bytes(records))
    return expanded


# --- MCAP files ------------------------------------------------------------------------------


@dataclass(frozen=True)
class McapChunk:
    """One chunk of :func:`mcap_file`.

    Attributes:
        messages: ``(log_time, serialized message)`` pairs.
        compression: ``""``, ``lz4`` or ``zstd``.
        zeros: zero bytes after the message records (the bomb).
        claimed: the uncompressed size the chunk (and its index) declares; None: the truth.
        times: the ``(start, end)`` log times it declares; None: its messages'.
        declared: its compressed frames state their sizes (:func:`compressed`).
    """

    messages: Sequence[tuple[int, bytes]]
    compression: str = "zstd"
    zeros: int = 0
    claimed: int | None = None
    times: tuple[int, int] | None = None
    declared: bool = True


def _record(opcode: int, body: bytes) -> bytes:
    return struct.pack("<BQ", opcode, len(body)) + body


def _string(text: str) -> bytes:
    return struct.pack("<I", len(text.encode())) + text.encode()


@cache
def _msgdef(msgtype: str) -> str:
    from gpu_euclidean_cluster.pointcloud_io.velodyne import velodyne_typestore

    return velodyne_typestore().generate_msgdef(msgtype, ros_version=2)[0]


def mcap_file(
    chunks: Sequence[McapChunk],
    topic: str = "/points_raw",
    msgtype: str = POINTCLOUD2,
    indexed: bool = True,
) -> bytes:
    """An MCAP file (profile ``ros2``) of one channel and ``chunks``; with a summary (schema,
    channel, a chunk index per chunk) and a message index after each chunk where ``indexed``,
    else none (rosbags then scans the file, decompressing every chunk as it opens it)."""
    schema = _record(
        0x03,
        struct.pack("<H", 1) + _string(msgtype) + _string("ros2msg") + _string(_msgdef(msgtype)),
    )
    channel = _record(
        0x04, struct.pack("<HH", 1, 1) + _string(topic) + _string("cdr") + struct.pack("<I", 0)
    )
    out = bytearray(MCAP_MAGIC + _record(0x01, _string("ros2") + _string("bag_attack")))
    out += schema + channel
    indexes = []
    for chunk in chunks:
        records, entries = b"", []
        for sequence, (log_time, data) in enumerate(chunk.messages):
            entries.append(struct.pack("<QQ", log_time, len(records)))
            body = struct.pack("<HIQQ", 1, sequence, log_time, log_time) + data
            records += _record(0x05, body)
        if chunk.compression:
            data, expanded = compressed(chunk.compression, records, chunk.zeros, chunk.declared)
        else:
            data, expanded = records + bytes(chunk.zeros), len(records) + chunk.zeros
        times = [t for t, _ in chunk.messages]
        start, end = chunk.times or (min(times), max(times))
        size = expanded if chunk.claimed is None else chunk.claimed
        chunk_at = len(out)
        out += _record(
            0x06,
            struct.pack("<QQQI", start, end, size, 0)
            + _string(chunk.compression)
            + struct.pack("<Q", len(data))
            + data,
        )
        chunk_length = len(out) - chunk_at
        index_at = len(out)
        if indexed:
            entry_bytes = b"".join(entries)
            out += _record(0x07, struct.pack("<HI", 1, len(entry_bytes)) + entry_bytes)
        offsets = struct.pack("<HQ", 1, index_at) if indexed else b""
        indexes.append(
            _record(
                0x08,
                struct.pack("<QQQQ", start, end, chunk_at, chunk_length)
                + struct.pack("<I", len(offsets))
                + offsets
                + struct.pack("<Q", len(out) - index_at)
                + _string(chunk.compression)
                + struct.pack("<QQ", len(data), size),
            )
        )
    out += _record(0x0F, struct.pack("<I", 0))  # data end
    summary_at = len(out) if indexed else 0
    if indexed:
        out += schema + channel + b"".join(indexes)
    out += _record(0x02, struct.pack("<QQI", summary_at, 0, 0)) + MCAP_MAGIC
    return bytes(out)


# --- ROS 2 bags whose metadata or stamps lie -----------------------------------------------


def with_metadata_start(bag: Path, start_ns: int, duration_ns: int | None = None) -> None:
    """Make the ROS 2 bag directory ``bag``'s ``metadata.yaml`` claim ``start_ns`` (and
    ``duration_ns``) as its ``starting_time``; its messages stay as they are."""
    import yaml

    path = bag / "metadata.yaml"
    metadata = yaml.safe_load(path.read_text())
    info = metadata["rosbag2_bagfile_information"]
    info["starting_time"]["nanoseconds_since_epoch"] = start_ns
    if duration_ns is not None:
        info["duration"]["nanoseconds"] = duration_ns
    path.write_text(yaml.safe_dump(metadata))


def with_stamp(database: Path, index: int, stamp_ns: int) -> None:
    """Set the bag time of message ``index`` (0: the first written) of a sqlite3 bag file."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT id FROM messages ORDER BY id").fetchall()
        connection.execute(
            "UPDATE messages SET timestamp = ? WHERE id = ?", (stamp_ns, rows[index][0])
        )
    connection.close()


def mislabelled_bag(path: Path, scans: Sequence[tuple[int, bytes]], topic: str) -> None:
    """A ROS 2 bag directory (sqlite3) whose ``topic`` declares ``sensor_msgs/msg/PointCloud2``
    and holds ``scans``: ``(bag time, VelodyneScan CDR bytes)``."""
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    with Writer(path, version=9) as writer:
        store = get_typestore(Stores.ROS2_HUMBLE)
        connection = writer.add_connection(topic, POINTCLOUD2, typestore=store)
        for stamp, data in scans:
            writer.write(connection, stamp, data)


def ros2_bag(
    path: Path, messages: Sequence[tuple[int, bytes]], storage: str = "sqlite3", compress: str = ""
) -> None:
    """A ROS 2 bag directory of PointCloud2 ``messages`` (``(bag time, CDR bytes)``) on
    ``/points_raw``, written by rosbags; ``compress``: ``ros2 bag record``'s compression mode
    (``file``, ``message``; ``storage``: MCAP chunks) with zstd, or none."""
    from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    writer = Writer(path, version=9, storage_plugin=plugin)
    if compress:
        writer.set_compression(CompressionMode[compress.upper()], CompressionFormat.ZSTD)
    with writer:
        store = get_typestore(Stores.ROS2_HUMBLE)
        connection = writer.add_connection("/points_raw", POINTCLOUD2, typestore=store)
        for stamp, data in messages:
            writer.write(connection, stamp, data)


def with_message_data(database: Path, index: int, data: bytes) -> None:
    """Replace the stored bytes of message ``index`` (0: the first written) of a sqlite3 file."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT id FROM messages ORDER BY id").fetchall()
        connection.execute("UPDATE messages SET data = ? WHERE id = ?", (data, rows[index][0]))
    connection.close()


# --- the suite's cases -------------------------------------------------------------------------


@dataclass(frozen=True)
class HostileBag:
    """One ``replay`` case of :func:`hostile_bags`.

    Attributes:
        name: the bag's file name.
        what: what it holds.
        path: the bag.
        inputs: its files (their bytes on disk are the case's input size).
        valid: whether it must play (else be refused with ``refusal``, one line, exit 2).
        refusal: text the refusal's line holds.
        frames: the frames it plays (valid bags).
        note: text a note of the run holds ("" none).
        stop_at: text in the output once which the run is stopped by SIGINT ("" not stopped).
    """

    name: str
    what: str
    path: Path
    inputs: tuple[Path, ...]
    valid: bool
    refusal: str = ""
    frames: int = 0
    note: str = ""
    stop_at: str = ""


#: The refusals' texts: a chunk declaring more than the budget, one expanding past what it
#: declares, chunks overlapping past it together, a topic whose bytes are of another type.
DECLARES_TOO_MUCH = "a chunk may expand to"
EXPANDS_PAST = "bytes it declares"
OVERLAP = "chunks may take at once"
MESSAGE_TOO_LARGE = "a message may expand to"
NOT_ITS_TYPE = "declares sensor_msgs/msg/PointCloud2, but its first message"


def pointcloud_messages(frame: np.ndarray, count: int = 3) -> list[tuple[int, bytes]]:
    """``count`` PointCloud2 messages (CDR) of the (N, 3) ``frame``, 0.1 s apart from 1000 s."""
    from rosbags.typesys import Stores, get_typestore

    from gpu_euclidean_cluster.pointcloud_io.bags import pointcloud2_message

    store = get_typestore(Stores.ROS2_HUMBLE)
    points = _points(frame)
    stamps = [1000 * 10**9 + i * 10**8 for i in range(count)]
    return [
        (
            t,
            bytes(
                store.serialize_cdr(pointcloud2_message(store, points, t, "velodyne"), POINTCLOUD2)
            ),
        )
        for t in stamps
    ]


def _points(frame: np.ndarray) -> np.ndarray:
    from gpu_euclidean_cluster.pointcloud_io.bags import autoware_points

    n = len(frame)
    return autoware_points(frame, np.zeros(n, np.float32), np.zeros(n, np.uint16))


def _files(path: Path) -> tuple[Path, ...]:
    return tuple(sorted(path.iterdir())) if path.is_dir() else (path,)


def hostile_bags(folder: Path, frame: np.ndarray) -> list[HostileBag]:
    """The bags of the third round, written into ``folder`` from the (N, 3) points ``frame``: bombs
    and liars, and valid compressed bags of every kind (which must play)."""
    import shutil

    from gpu_euclidean_cluster.pointcloud_io.bags import write_pointcloud_bag

    from .._velodyne_helpers import rotating_packets, scan_message

    messages = pointcloud_messages(frame)
    plain = folder / "r3_plain.bag"
    write_pointcloud_bag(plain, [(t, _points(frame)) for t, _ in messages], storage="ros1")
    cases: list[HostileBag] = []

    def add(name: str, what: str, valid: bool, **details) -> Path:
        path = folder / name
        cases.append(HostileBag(name, what, path, (), valid, **details))
        return path

    # decompression bombs (item 3)
    for compression, zeros, claimed, refusal in (
        ("bz2", BOMB_BYTES, None, DECLARES_TOO_MUCH),
        ("bz2", BOMB_BYTES, 1000, EXPANDS_PAST),
        ("lz4", 300 << 20, 1000, EXPANDS_PAST),  # its frame does not say its size
        ("bz2", 0, None, ""),
        ("lz4", 0, None, ""),
    ):
        kind = "valid" if not zeros else "liar" if claimed else "bomb"
        what = f"a ROS 1 {compression} chunk" + (
            f", {zeros >> 20} MiB of zeros after its messages, declaring "
            f"{'the truth' if claimed is None else claimed}"
            if zeros
            else ""
        )
        path = add(
            f"r3_{compression}_{kind}.bag",
            what,
            valid=not zeros,
            refusal=refusal,
            frames=3,
        )
        ros1_compressed(plain, path, compression, zeros, claimed, declared=not claimed)
    mcaps = (
        ("r3_zstd_bomb.mcap", [McapChunk(messages, zeros=BOMB_BYTES)], True, DECLARES_TOO_MUCH),
        ("r3_zstd_bomb_scan.mcap", [McapChunk(messages, zeros=BOMB_BYTES)], False,
         DECLARES_TOO_MUCH),
        ("r3_zstd_liar.mcap", [McapChunk(messages, zeros=BOMB_BYTES, claimed=100_000,
                                         declared=False)], True, EXPANDS_PAST),
        ("r3_overlapping.mcap",
         [McapChunk(messages[i : i + 1], zeros=ZSTD_ZEROS, times=(messages[0][0], messages[2][0]))
          for i in range(3)], True, OVERLAP),
        ("r3_lz4_valid.mcap", [McapChunk(messages[:2], "lz4"), McapChunk(messages[2:], "")], True,
         ""),
    )  # fmt: skip
    for name, chunks, indexed, refusal in mcaps:
        what = ", ".join(
            f"{c.compression or 'uncompressed'} {c.zeros >> 20} MiB of zeros"
            + (f" declaring {c.claimed}" if c.claimed is not None else "")
            for c in chunks
        )
        path = add(
            name,
            f"MCAP chunks ({'indexed' if indexed else 'no summary'}): {what}",
            valid=not refusal,
            refusal=refusal,
            frames=3,
        )
        path.write_bytes(mcap_file(chunks, indexed=indexed))
    path = add(
        "r3_valid_zstd_chunks", "a ROS 2 MCAP bag, zstd chunks (rosbags' writer)", True, frames=3
    )
    ros2_bag(path, messages, "mcap", "storage")
    for mode in ("message", "file"):
        path = add(
            f"r3_valid_zstd_{mode}", f"a ROS 2 bag compressed by {mode} (zstd)", True, frames=3
        )
        ros2_bag(path, messages, compress=mode)
    path = add(
        "r3_zstd_message_bomb",
        f"a ROS 2 bag compressed by message, the first a zstd bomb of {BOMB_BYTES >> 20} MiB",
        False,
        refusal=MESSAGE_TOO_LARGE,
    )
    ros2_bag(path, messages, compress="message")
    with_message_data(
        next(path.glob("*.db3")), 0, compressed("zstd", messages[0][1], BOMB_BYTES)[0]
    )
    # time ranges and types (item 6)
    base = folder / "r3_base"
    ros2_bag(base, messages)
    for name, what, edit, frames, note in (
        ("r3_start_minus_1", "metadata.yaml's starting_time -1 (replay waited 53 years)",
         lambda p: with_metadata_start(p, -1), 3, ""),
        ("r3_outside_range", "metadata.yaml's range 4000 s after every message (0 frames)",
         lambda p: with_metadata_start(p, 5000 * 10**9, 10**9), 3, ""),
        ("r3_stamp_minus_5", "the first message stamped -5 in the database (skipped silently)",
         lambda p: with_stamp(next(p.glob("*.db3")), 0, -5), 2, "skipping 1 message(s)"),
    ):  # fmt: skip
        path = add(name, what, True, frames=frames, note=note)
        shutil.copytree(base, path)
        edit(path)
    gap = add(
        "r3_gap.db3",
        "a message at 1 s, the next at 1000 s (a silent 17-minute wait)",
        True,
        frames=1,
        note="is due in",
        stop_at="is due in",
    )
    shutil.copy(next(base.glob("*.db3")), gap)
    with_stamp(gap, 0, 10**9)
    scans = [
        (t, scan_message(rotating_packets(30), 100.0 + i)) for i, (t, _) in enumerate(messages)
    ]
    path = add(
        "r3_mislabelled",
        "VelodyneScan messages on a topic declaring PointCloud2",
        False,
        refusal=NOT_ITS_TYPE,
    )
    mislabelled_bag(path, scans, "/points_raw")
    return [replace(case, inputs=_files(case.path)) for case in cases]
