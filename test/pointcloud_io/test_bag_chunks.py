"""Decompression bombs: what a bag's compressed chunks declare is checked against the budget
before anything is decompressed (``bag_records``), and what rosbags decompresses is bounded
while it is produced (``bag_chunks``).

Whatever would decompress a bomb runs in a process of its own under an address-space limit of
:data:`MEMORY_CAP` (a regression ends there in a MemoryError, not in the machine's memory); the
record walk alone decompresses nothing and runs here.
"""

from __future__ import annotations

import bz2
import os
import re
import struct
import sys
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import lz4.frame
import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io import bag_chunks
from gpu_euclidean_cluster.pointcloud_io.bag_chunks import (
    FREE_SPACE_KEPT,
    bound_ros1_chunks,
    declared_size,
    decompress_within,
)
from gpu_euclidean_cluster.pointcloud_io.bag_records import (
    MAX_CHUNK_BYTES,
    ChunkClaim,
    ChunkError,
    RecordError,
    check_records,
)
from gpu_euclidean_cluster.pointcloud_io.bags import BagError, PointCloudBag, write_pointcloud_bag
from test.robustness.attack import run_process
from test.robustness.bag_attack import (
    BOMB_BYTES,
    ZSTD_ZEROS,
    McapChunk,
    compressed,
    mcap_file,
    pointcloud_messages,
    ros1_bytes,
    ros1_compressed,
    ros1_records,
    ros2_bag,
    with_message_data,
)

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

#: Address space of the processes that read a bomb.
MEMORY_CAP = 3 << 29  # 1.5 GiB
TIMEOUT_S = 120.0
BUDGET = "268435456 bytes (256 MiB)"
BUDGET_RE = re.escape(BUDGET)


@pytest.fixture(scope="module")
def frame() -> np.ndarray:
    return np.random.default_rng(34).uniform(-20, 20, (500, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def messages(frame) -> list[tuple[int, bytes]]:
    return pointcloud_messages(frame)


@pytest.fixture(scope="module")
def plain_bag(tmp_path_factory, frame) -> Path:
    """A valid ROS 1 bag of 3 frames, one uncompressed chunk."""
    from gpu_euclidean_cluster.pointcloud_io.bags import autoware_points

    points = autoware_points(frame, np.zeros(len(frame), np.float32), np.zeros(len(frame), "u2"))
    path = tmp_path_factory.mktemp("plain") / "plain.bag"
    write_pointcloud_bag(path, [(10**12 + i * 10**8, points) for i in range(3)], storage="ros1")
    return path


def read_capped(path: Path) -> tuple[int | None, str, float]:
    """Read every message of ``path`` through PointCloudBag in a process of its own under
    :data:`MEMORY_CAP`: its status, the line it printed (the count, or the BagError), its peak
    RSS (MB)."""
    code = (
        "import sys\n"
        "from gpu_euclidean_cluster.pointcloud_io.bags import BagError, PointCloudBag\n"
        "try:\n"
        f"    with PointCloudBag({str(path)!r}) as bag:\n"
        "        print(sum(1 for _ in bag.messages(bag.select_topics())), 'messages')\n"
        "except BagError as error:\n"
        "    print(error)\n"
        "    sys.exit(2)\n"
    )
    run = run_process(
        (sys.executable, "-c", code), dict(os.environ), TIMEOUT_S, address_space=MEMORY_CAP
    )
    return run.status, run.output.strip(), run.peak_rss_mb


# --- the bounded decompressors ---------------------------------------------------------------


@pytest.mark.parametrize("compression", ["bz2", "zstd"])
def test_streams_one_after_the_other_decompress_as_the_one_call_functions_do(compression):
    module = bz2 if compression == "bz2" else zstd
    data = module.compress(b"first " * 100) + module.compress(b"second")
    expected = module.decompress(data)
    assert decompress_within(data, compression, len(expected), "x", "y") == expected


def test_lz4_reads_the_first_frame_as_rosbags_does():
    data = lz4.frame.compress(b"a" * 10) + lz4.frame.compress(b"b" * 10)
    assert decompress_within(data, "lz4", 10, "x", "y") == lz4.frame.decompress(data) == b"a" * 10


def _streamed(compression: str, data: bytes) -> bytes:
    """``data`` compressed as a stream is: the frame header does not state its size."""
    if compression == "bz2":
        return bz2.compress(data)
    if compression == "lz4":
        compressor = lz4.frame.LZ4FrameCompressor()
        return compressor.begin() + compressor.compress(data) + compressor.flush()
    compressor = zstd.ZstdCompressor()
    return compressor.compress(data) + compressor.flush()


@pytest.mark.parametrize("compression", ["bz2", "lz4", "zstd"])
def test_output_past_the_limit_is_cut_there_and_the_limit_itself_is_not(compression):
    data = _streamed(compression, bytes(1001))
    assert declared_size(data, compression) is None
    assert decompress_within(data, compression, 1001, "x", "y") == bytes(1001)
    with pytest.raises(ChunkError, match=r"^the chunk expands past the 1000 bytes it declares$"):
        decompress_within(data, compression, 1000, "the chunk", "the 1000 bytes it declares")


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_frames_declaring_more_than_the_limit_are_refused_before_decompressing(compression):
    module = lz4.frame if compression == "lz4" else zstd
    data = module.compress(bytes(1001))
    assert declared_size(data, compression) == 1001
    with pytest.raises(
        ChunkError, match=rf"^the chunk: its {compression} frames declare 1001 bytes, past the 1000"
    ):
        decompress_within(data, compression, 1000, "the chunk", "the 1000 bytes it declares")
    frames = zstd.compress(bytes(600)) + zstd.compress(bytes(401))
    assert declared_size(frames, "zstd") == 1001  # every frame's size, summed


def test_data_that_ends_inside_a_stream_is_refused():
    data = bz2.compress(bytes(range(256)) * 100)
    with pytest.raises(ValueError, match="its bz2 data ends inside a stream"):
        decompress_within(data[:-10], "bz2", 1 << 20, "chunk at byte 1", "y")


def test_a_ros1_chunk_the_index_names_where_no_chunk_record_starts_is_refused():
    from rosbags.rosbag1 import reader

    chunk = reader.Chunk(10, 100, reader.decompressors["bz2"])
    plain = reader.Chunk(10, 200, reader.decompressors["none"])
    fake = SimpleNamespace(chunks={4109: chunk, 5000: plain})
    with pytest.raises(RecordError, match="names a compressed chunk at byte 4109, where no chunk"):
        bound_ros1_chunks(fake, {})
    bound_ros1_chunks(fake, {4109: ChunkClaim(4109, "bz2", 10, 1000)})
    assert fake.chunks[5000] is plain  # nothing to bound in an uncompressed chunk
    payload = bz2.compress(bytes(1001))
    with pytest.raises(ChunkError, match=r"chunk at byte 4109 \(bz2, 10 bytes\) expands past"):
        fake.chunks[4109].decompressor(payload)


# --- declared sizes, before anything is decompressed -------------------------------------------


def test_a_ros1_bz2_bomb_is_refused_by_what_its_chunk_declares(tmp_path, plain_bag):
    bomb = tmp_path / "bomb.bag"
    expanded = ros1_compressed(plain_bag, bomb, "bz2", BOMB_BYTES)
    assert expanded > 4 << 30 and bomb.stat().st_size < 64 << 10  # GBs from tens of kB
    with pytest.raises(ChunkError) as raised:
        check_records(bomb)
    message = str(raised.value)
    assert message.startswith("chunk at byte 4109 (bz2, ")
    assert message.endswith(
        f"bytes) declares 4294967295 bytes uncompressed, over the {BUDGET} a chunk may expand to"
    )


def test_the_walk_returns_the_compressed_chunks_it_checked(tmp_path, plain_bag):
    valid = tmp_path / "valid.bag"
    expanded = ros1_compressed(plain_bag, valid, "lz4", 0)
    [(offset, claim)] = check_records(valid).items()
    assert (offset, claim.compression, claim.declared_bytes) == (4109, "lz4", expanded)
    assert check_records(plain_bag) == {}  # an uncompressed chunk holds what the file holds


def test_a_ros1_compressed_chunk_must_declare_its_size(tmp_path, plain_bag):
    valid = tmp_path / "valid.bag"
    ros1_compressed(plain_bag, valid, "bz2", 0)
    records = ros1_records(valid.read_bytes())
    [chunk] = [record for record in records if record.op == 0x05]
    del chunk.fields["size"]
    damaged = tmp_path / "no_size.bag"
    damaged.write_bytes(ros1_bytes(records))
    with pytest.raises(RecordError, match=r"^chunk at byte 4109 \(bz2, \d+ bytes\) declares no "):
        check_records(damaged)


def test_an_mcap_zstd_bomb_is_refused_by_what_its_chunk_declares(tmp_path, messages):
    for indexed in (True, False):
        path = tmp_path / f"bomb_{indexed}.mcap"
        path.write_bytes(mcap_file([McapChunk(messages, zeros=BOMB_BYTES)], indexed=indexed))
        assert path.stat().st_size < 512 << 10
        expected = r"^chunk at byte \d+ \(zstd, \d+ bytes\) declares \d{10} bytes uncompressed, "
        with pytest.raises(ChunkError, match=expected + f"over the {BUDGET_RE}"):
            check_records(path)


def _records(content: bytes) -> list[tuple[int, int, int]]:
    """``(offset, opcode, length)`` of an MCAP file's top-level records."""
    records, at = [], 8
    while at < len(content) - 8:
        opcode, length = struct.unpack_from("<BQ", content, at)
        records.append((at, opcode, length))
        at += 9 + length
    return records


def test_an_mcap_chunk_index_must_describe_a_chunk_record_once_as_the_record_does(
    tmp_path, messages
):
    content = mcap_file([McapChunk(messages[:2]), McapChunk(messages[2:])])
    chunks = [at for at, opcode, _ in _records(content) if opcode == 0x06]
    indexes = [at for at, opcode, _ in _records(content) if opcode == 0x08]
    path = tmp_path / "index.mcap"
    path.write_bytes(content)
    assert sorted(check_records(path)) == chunks
    for target, message in (
        (chunks[0] + 1, f"names a chunk at byte {chunks[0] + 1}, where no chunk record starts"),
        (chunks[0], f"indexes the chunk at byte {chunks[0]} a second time"),
    ):
        damaged = bytearray(content)
        struct.pack_into("<Q", damaged, indexes[1] + 9 + 16, target)  # chunk_start_offset
        path.write_bytes(bytes(damaged))
        with pytest.raises(RecordError, match=message):
            check_records(path)
    damaged = bytearray(content)
    at = indexes[0] + 9 + len(_index_body(content, indexes[0])) - 8  # its uncompressed_size
    struct.pack_into("<Q", damaged, at, 10**6)
    path.write_bytes(bytes(damaged))
    with pytest.raises(RecordError, match="expanding to 1000000, otherwise than its record does"):
        check_records(path)


def _index_body(content: bytes, offset: int) -> bytes:
    (length,) = struct.unpack_from("<Q", content, offset + 1)
    return content[offset + 9 : offset + 9 + length]


def test_chunks_overlapping_in_time_are_bounded_together(tmp_path, messages):
    """rosbags holds every chunk whose time range holds the time it reads at: three of 128 MiB
    at once are refused (the second takes them past the budget), the same three one after the
    other are not."""
    times = (messages[0][0], messages[2][0])
    overlapping = [McapChunk([m], zeros=ZSTD_ZEROS, times=times) for m in messages]
    apart = [McapChunk([m], zeros=ZSTD_ZEROS) for m in messages]
    path = tmp_path / "chunks.mcap"
    path.write_bytes(mcap_file(overlapping))
    expected = (
        r"^2 chunks overlap in time at bag time \d+ ns, the last the chunk at byte \d+ \(zstd, "
        rf"\d+ bytes\): read together they declare \d+ bytes uncompressed, over the {BUDGET_RE} "
        "chunks may take at once$"
    )
    with pytest.raises(ChunkError, match=expected):
        check_records(path)
    path.write_bytes(mcap_file(apart))
    assert len(check_records(path)) == 3
    assert 3 * ZSTD_ZEROS > MAX_CHUNK_BYTES  # together they would not fit


# --- what rosbags decompresses, bounded (each in a process of its own) ------------------------


EXPANDS_PAST_1000 = r"bytes\) expands past the 1000 bytes it declares$"


@pytest.mark.parametrize(
    ("compression", "zeros", "declared", "refusal"),
    [
        ("bz2", BOMB_BYTES, False, EXPANDS_PAST_1000),
        ("lz4", 300 << 20, False, EXPANDS_PAST_1000),
        ("lz4", 300 << 20, True, r": its lz4 frames declare \d{9} bytes, past the 1000 bytes it"),
    ],
    ids=["bz2", "lz4", "lz4 frame stating its size"],
)
def test_a_ros1_chunk_expanding_past_what_it_declares_is_cut_there(
    tmp_path, plain_bag, compression, zeros, declared, refusal
):
    liar = tmp_path / "liar.bag"
    ros1_compressed(plain_bag, liar, compression, zeros, claimed=1000, declared=declared)
    status, line, peak_mb = read_capped(liar)
    assert status == 2, line
    assert line.startswith(f"refused bag {liar}: chunk at byte 4109 ({compression}, "), line
    assert re.search(refusal, line), line
    assert peak_mb < 512


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "scanned"])
@pytest.mark.parametrize("declared", [False, True], ids=["streamed", "frames stating sizes"])
def test_an_mcap_chunk_expanding_past_what_it_declares_is_cut_there(
    tmp_path, messages, indexed, declared
):
    liar = tmp_path / "liar.mcap"
    chunk = McapChunk(messages, zeros=BOMB_BYTES, claimed=100_000, declared=declared)
    liar.write_bytes(mcap_file([chunk], indexed=indexed))
    status, line, peak_mb = read_capped(liar)
    assert status == 2, line
    assert line.startswith(f"refused bag {liar}: an MCAP zstd chunk of ")
    if declared:
        assert re.search(r"bytes: its zstd frames declare \d{10} bytes, past the 100000", line)
    else:
        assert line.endswith("bytes expands past the 100000 bytes it declares"), line
    assert peak_mb < 512


@pytest.mark.parametrize("declared", [True, False], ids=["frames stating sizes", "streamed"])
def test_a_zstd_compressed_message_is_bounded_at_the_budget(tmp_path, messages, declared):
    """Frames stating 5 GiB are refused before they are decompressed; a stream is cut at the
    budget (256 MiB are decompressed then)."""
    bag = tmp_path / "message_bomb"
    ros2_bag(bag, messages, compress="message")
    bomb, _ = compressed("zstd", messages[0][1], BOMB_BYTES, declared)
    with_message_data(next(bag.glob("*.db3")), 0, bomb)
    status, line, peak_mb = read_capped(bag)
    assert status == 2, line
    assert line.startswith(f"refused bag {bag}: a zstd-compressed message of ")
    if declared:
        assert re.search(rf"its zstd frames declare \d{{10}} bytes, past the {BUDGET_RE}", line)
        assert peak_mb < 512
    else:
        assert line.endswith(f"bytes expands past the {BUDGET} a message may expand to"), line
        assert peak_mb < 1024


def test_velodyne_scans_are_read_within_the_bounds_too(tmp_path):
    from test._velodyne_helpers import rotating_packets, scan_message

    bag = tmp_path / "scans"
    bag.mkdir()
    scans = [(10**12, scan_message(rotating_packets(20), 100.0))]
    content = mcap_file(
        [McapChunk(scans, zeros=BOMB_BYTES)],
        topic="/packets",
        msgtype="velodyne_msgs/msg/VelodyneScan",
    )
    (bag / "scans_0.mcap").write_bytes(content)
    (bag / "metadata.yaml").write_text(_metadata("scans_0.mcap"))
    code = (
        "from gpu_euclidean_cluster.pointcloud_io.velodyne import read_velodyne_scans\n"
        "from gpu_euclidean_cluster.pointcloud_io.velodyne.bags import VelodyneBagError\n"
        "try:\n"
        f"    print(sum(1 for _ in read_velodyne_scans({str(bag)!r})))\n"
        "except VelodyneBagError as error:\n"
        "    print(error)\n"
    )
    run = run_process(
        (sys.executable, "-c", code), dict(os.environ), TIMEOUT_S, address_space=MEMORY_CAP
    )
    assert run.status == 0, run.output
    assert run.output.strip().startswith(f"refused bag {bag}: chunk at byte ")
    assert f"over the {BUDGET} a chunk may expand to" in run.output


def _metadata(storage_file: str) -> str:
    """A ROS 2 bag's metadata.yaml for one MCAP file of one VelodyneScan message."""
    return f"""rosbag2_bagfile_information:
  version: 9
  storage_identifier: mcap
  relative_file_paths: [{storage_file}]
  duration: {{nanoseconds: 0}}
  starting_time: {{nanoseconds_since_epoch: 1000000000000}}
  message_count: 1
  topics_with_message_count:
  - topic_metadata: {{name: /packets, type: velodyne_msgs/msg/VelodyneScan,
      serialization_format: cdr, offered_qos_profiles: ''}}
    message_count: 1
  compression_format: ''
  compression_mode: ''
  files: []
  custom_data: {{}}
  ros_distro: humble
"""


# --- valid compressed bags read as before ----------------------------------------------------


@pytest.mark.parametrize("kind", ["bz2.bag", "lz4.bag", "chunks", "message", "file"])
def test_valid_compressed_bags_read_every_message(tmp_path, plain_bag, messages, kind):
    path = tmp_path / kind
    if kind.endswith(".bag"):
        ros1_compressed(plain_bag, path, kind.removesuffix(".bag"), 0)
    else:
        storage, mode = ("mcap", "storage") if kind == "chunks" else ("sqlite3", kind)
        ros2_bag(path, messages, storage, mode)
    with PointCloudBag(path) as bag:
        assert sum(1 for _ in bag.messages(bag.select_topics())) == 3


def test_a_file_compressed_bag_expands_within_the_free_space_less_what_is_kept(
    tmp_path, messages, monkeypatch
):
    path = tmp_path / "file"
    ros2_bag(path, messages, compress="file")
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(
        bag_chunks.shutil, "disk_usage", lambda _: usage(0, 0, FREE_SPACE_KEPT + 1000)
    )
    expected = r"storage file \(.*\) expands past the 1000 bytes free in .* \(less 1 GiB kept free"
    with pytest.raises(BagError, match=expected), PointCloudBag(path):
        pass
