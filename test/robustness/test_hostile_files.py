"""Hostile files, bags and command lines.

Readers check what a file declares against what it holds before they allocate; bags are refused
before rosbags allocates what their records declare, and whatever rosbags raises on damaged bytes
becomes one BagError; ``make-bag`` writes under a temporary name; option values are checked when
the command line is parsed; a MemoryError anywhere in the CLI and ``replay`` is one line and exit
status 2. Memory is measured with tracemalloc (NumPy's buffers are traced too).
"""

from __future__ import annotations

import random
import struct
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_euclidean_cluster.commands import cluster as cluster_command
from gpu_euclidean_cluster.commands.cli import main as cli_main
from gpu_euclidean_cluster.pointcloud_io import PointCloudFileError, load_points, raw_bin, read_pcd
from gpu_euclidean_cluster.pointcloud_io import pcd as pcd_module
from gpu_euclidean_cluster.pointcloud_io.bags import (
    BagError,
    PointCloudBag,
    autoware_points,
    write_pointcloud_bag,
)
from gpu_euclidean_cluster.ros.parameters.option_values import MAX_TOPIC_LENGTH, topic_name_problem
from gpu_euclidean_cluster.ros.replay import replay as replay_tool
from test.robustness.attack import npy_claiming, pcd_header

MIB = 1 << 20
NS = 1_000_000_000


def peak_bytes(action: Callable[[], Any]) -> tuple[Any, int]:
    """``action()``'s result (or the exception it raised) and the peak memory it traced."""
    tracemalloc.start()
    try:
        try:
            result: Any = action()
        except Exception as error:  # the caller checks which
            result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# --- readers: declared sizes against the file ---------------------------------------------------


def test_npy_header_cannot_ask_for_more_than_the_file_holds(tmp_path):
    path = tmp_path / "huge.npy"
    path.write_bytes(npy_claiming((10**12, 3), 1200))  # 10.9 TiB declared in a 1.3 kB file
    error, peak = peak_bytes(lambda: load_points(path))
    assert isinstance(error, PointCloudFileError), error
    assert str(error) == (
        f"{path}: truncated .npy data: the header declares shape (1000000000000, 3) of float32 "
        "(12000000000000 bytes), the file holds 1200 after its header"
    )
    assert peak < MIB


def test_every_reader_refuses_points_over_the_memory_budget(tmp_path):
    xyz = np.zeros((1000, 4), np.float32)
    xyz.tofile(tmp_path / "a.bin")
    np.save(tmp_path / "a.npy", xyz)
    pcd = tmp_path / "a.pcd"
    pcd.write_bytes(pcd_header("x y z", 1000, "binary") + xyz[:, :3].tobytes())
    for name in ("a.bin", "a.npy", "a.pcd"):
        over = r"over the budget of 0\.00 GiB \(1000 bytes\)"
        with pytest.raises(PointCloudFileError, match=over) as caught:
            load_points(tmp_path / name, max_bytes=1000)
        assert str(caught.value).startswith(f"{tmp_path / name}: ")
        assert len(load_points(tmp_path / name, max_bytes=10 * MIB)) == 1000


def test_sparse_bin_is_refused_with_its_size_before_anything_is_read(tmp_path, capsys):
    path = tmp_path / "sparse.bin"
    with open(path, "wb") as file:
        file.truncate(1 << 40)  # 1 TiB that the disk does not hold: more than any budget
    error, peak = peak_bytes(lambda: load_points(path, max_bytes=1 << 30))
    assert isinstance(error, PointCloudFileError), error
    assert "reading 68719476736 KITTI points needs 1024.00 GiB" in str(error)
    assert peak < MIB
    assert cli_main(["cluster", str(path)]) == 2
    assert "over the budget" in one_line_error(capsys)


def test_bin_files_are_read_block_by_block(tmp_path, monkeypatch):
    monkeypatch.setattr(raw_bin, "BLOCK_POINTS", 7)
    table = np.random.default_rng(0).normal(size=(50, 5)).astype(np.float32)
    table[:, 4] = np.arange(50) % 32
    table.tofile(tmp_path / "n.pcd.bin")
    cloud = load_points(tmp_path / "n.pcd.bin")
    np.testing.assert_array_equal(cloud.xyz, table[:, :3])
    np.testing.assert_array_equal(cloud.fields["intensity"], table[:, 3])
    np.testing.assert_array_equal(cloud.fields["ring"], table[:, 4].astype(np.uint16))


def test_pcd_header_line_over_64_kib_is_named_as_such(tmp_path):
    path = tmp_path / "long.pcd"
    path.write_bytes(b"# " + b"a" * 70_000 + b"\n" + pcd_header("x y z", 1, "ascii") + b"1 2 3\n")
    with pytest.raises(PointCloudFileError) as caught:
        load_points(path)
    assert str(caught.value) == (
        f"{path}: bad PCD header: line 1 is longer than 65536 bytes (not a PCD file?)"
    )


def test_pcd_width_of_5000_digits_names_the_file(tmp_path):
    path = tmp_path / "digits.pcd"
    path.write_bytes(pcd_header("x y z", 1, "ascii", width="9" * 5000) + b"1 2 3\n")
    with pytest.raises(PointCloudFileError) as caught:
        load_points(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: bad PCD header: WIDTH must be one non-negative integer")
    assert "(5000 characters)" in message and len(message) < len(str(path)) + 150


def _compressed_pcd(path: Path, points: int, stream: bytes) -> None:
    header = pcd_header("x y z", points, "binary_compressed")
    sizes = struct.pack("<II", len(stream), 12 * points)
    path.write_bytes(header + sizes + stream)


def test_lzf_data_that_cannot_expand_to_the_declared_points_is_refused_first(tmp_path):
    path = tmp_path / "bomb.pcd"
    _compressed_pcd(path, 10**7, bytes([0, 0]) + bytes([0b111_00000, 255, 0]) * 1000)
    error, peak = peak_bytes(lambda: read_pcd(path))
    assert isinstance(error, PointCloudFileError), error
    assert "3002 LZF bytes cannot expand to the 120000000 bytes of 10000000 points" in str(error)
    assert peak < MIB  # nothing of the 120 MB was allocated


def _zero_stream(size: int) -> bytes:
    """An LZF stream of ``size`` zero bytes: a 1-byte literal, then 264-byte matches."""
    stream = bytearray([0, 0])
    full, rest = divmod(size - 1, 264)
    stream += bytes([0b111_00000, 255, 0]) * full
    if rest:
        assert rest >= 9
        stream += bytes([0b111_00000, rest - 9, 0])
    return bytes(stream)


def test_lzf_data_at_the_largest_expansion_is_read(tmp_path):
    points = 88_000  # 3 x 4 zero bytes each, 88 times the stream's size: valid, and accepted
    stream = _zero_stream(12 * points)
    assert 12 * points / len(stream) > 87.9
    _compressed_pcd(tmp_path / "zeros.pcd", points, stream)
    cloud = read_pcd(tmp_path / "zeros.pcd")
    assert len(cloud) == points and not cloud.xyz.any()


def test_pcd_ascii_with_one_enormous_value_costs_memory_in_proportion(tmp_path):
    # Before: every value was copied into a table as wide as the longest one (60 001 x 800 kB).
    points = 20_000
    body = b"1" * 200_000 + b" 2 3\n" + b"1 2 3\n" * (points - 1)
    path = tmp_path / "wide.pcd"
    path.write_bytes(pcd_header("x y z", points, "ascii") + body)
    cloud, peak = peak_bytes(lambda: read_pcd(path))
    assert not isinstance(cloud, Exception), cloud
    assert cloud.xyz[0, 0] == np.inf and (cloud.xyz[1:] == [1, 2, 3]).all()
    assert peak < 40 * MIB


def test_pcd_ascii_value_longer_than_a_block_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(pcd_module, "ASCII_BLOCK_BYTES", 64)
    path = tmp_path / "long_value.pcd"
    path.write_bytes(pcd_header("x y z", 2, "ascii") + b"1 2 3\n" + b"4" * 100 + b" 5 6\n")
    with pytest.raises(PointCloudFileError, match="a value longer than 64 bytes at byte 6"):
        read_pcd(path)


def test_pcd_ascii_blocks_give_the_same_cloud_as_one_block(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    values = rng.normal(size=(500, 4)).astype(np.float32)
    lines = "\n".join(" ".join(f"{v:.9g}" for v in row) for row in values) + "\n"
    path = tmp_path / "ascii.pcd"
    path.write_bytes(pcd_header("x y z intensity", 500, "ascii") + lines.encode())
    whole = read_pcd(path)
    monkeypatch.setattr(pcd_module, "ASCII_BLOCK_BYTES", 97)  # blocks end mid-line
    blocks = read_pcd(path)
    np.testing.assert_array_equal(blocks.xyz, values[:, :3])
    np.testing.assert_array_equal(blocks.xyz, whole.xyz)
    np.testing.assert_array_equal(blocks.fields["intensity"], values[:, 3])


# --- the CLI and replay: MemoryError is one line --------------------------------------------------


def test_memory_error_anywhere_in_the_cli_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    def exhausted(args: Any) -> int:
        raise MemoryError("Unable to allocate 4.3 GiB for an array")

    monkeypatch.setattr(cluster_command, "run", exhausted)
    (tmp_path / "a.bin").write_bytes(b"")
    assert cli_main(["cluster", str(tmp_path / "a.bin")]) == 2
    assert one_line_error(capsys) == (
        "gpu-euclidean-cluster: error: out of memory: Unable to allocate 4.3 GiB for an array"
    )


def test_memory_error_in_the_replay_tool_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    def exhausted(options: Any) -> int:
        raise MemoryError

    monkeypatch.setattr(replay_tool, "run", exhausted)
    assert replay_tool.main([str(tmp_path / "any.bag")]) == 2
    assert one_line_error(capsys) == "replay: error: out of memory: MemoryError"


# --- bags: record lengths and damaged bytes -------------------------------------------------


def _frames(count: int = 3) -> Iterator[tuple[int, np.ndarray]]:
    rng = np.random.default_rng(0)
    for index in range(count):
        xyz = rng.uniform(-20, 20, (200, 3)).astype(np.float32)
        points = autoware_points(xyz, np.ones(200, np.float32), np.zeros(200, np.uint16))
        yield 100 * NS + index * NS // 10, points


def _read_all(path: Path) -> int:
    with PointCloudBag(path) as bag:
        return sum(1 for _ in bag.messages(bag.select_topics()))


def test_an_8_byte_mcap_is_a_bag_error(tmp_path, capsys):
    path = tmp_path / "tiny.mcap"
    path.write_bytes(b"\x89MCAP0\r\n")
    with pytest.raises(BagError, match="8 bytes is too short for an MCAP file"):
        _read_all(path)
    assert cli_main(["replay", str(path)]) == 2
    assert "corrupt or truncated bag" in one_line_error(capsys)


def test_an_mcap_record_length_of_2_to_the_63_is_a_bag_error(tmp_path):
    path = tmp_path / "long.mcap"
    write_pointcloud_bag(path, _frames(), storage="mcap")
    content = bytearray(path.read_bytes())
    content[9:17] = struct.pack("<Q", 2**63 - 1)  # the header record's length
    path.write_bytes(bytes(content))
    with pytest.raises(BagError, match="record 0x01 at byte 8 declares 9223372036854775807 bytes"):
        _read_all(path)


@pytest.mark.parametrize("part", ["header", "data"])
def test_a_ros1_length_of_0xffffffff_is_refused_before_it_is_allocated(tmp_path, part):
    path = tmp_path / "long.bag"
    write_pointcloud_bag(path, _frames(), storage="ros1")
    content = bytearray(path.read_bytes())
    offset = 13  # the bag header record, after "#ROSBAG V2.0\n"
    if part == "data":
        offset += 4 + struct.unpack_from("<I", content, offset)[0]
    content[offset : offset + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(content))
    error, peak = peak_bytes(lambda: _read_all(path))
    assert isinstance(error, BagError), error
    assert f"record at byte {offset} declares a {part} of 4294967295 bytes" in str(error)
    assert peak < 16 * MIB  # not the 4 GiB declared


def _damaged_copies(path: Path, copies: int, seed: int) -> Iterator[bytes]:
    """``path``'s bytes truncated, overwritten with random bytes, or with a huge length."""
    content = path.read_bytes()
    rng = random.Random(seed)
    for _ in range(copies):
        damaged = bytearray(content)
        at = rng.randrange(len(content) - 8)
        kind = rng.randrange(3)
        if kind == 0:
            del damaged[rng.randrange(8, len(content)) :]
        elif kind == 1:
            damaged[at : at + 8] = rng.randbytes(8)
        else:
            damaged[at : at + 8] = struct.pack("<Q", rng.choice([2**32 - 1, 2**62, 2**64 - 1]))
        yield bytes(damaged)


@pytest.mark.parametrize(
    ("name", "storage"), [("b.bag", "ros1"), ("b.mcap", "mcap"), ("b.db3", "sqlite3")]
)
def test_damaged_bags_raise_bag_error_and_nothing_else(tmp_path, name, storage):
    good = tmp_path / name
    write_pointcloud_bag(good, _frames(), storage=storage)
    assert _read_all(good) == 3
    damaged_path = tmp_path / f"damaged_{name}"
    outcomes: dict[str, int] = {}
    for content in _damaged_copies(good, 600, seed=21):
        damaged_path.write_bytes(content)
        try:
            _read_all(damaged_path)
            outcome = "read"
        except BagError as error:
            assert "\n" not in str(error)
            outcome = "BagError"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("BagError", 0) > 0, outcomes  # damage was found, as a BagError


# --- make-bag: a temporary name, renamed when complete --------------------------------------------


@pytest.mark.parametrize("name", ["run.bag", "run.mcap", "run.db3", "run_dir"])
def test_an_interrupted_make_bag_leaves_nothing_behind(tmp_path, name):
    def failing() -> Iterator[tuple[int, np.ndarray]]:
        frames = _frames()
        yield next(frames)
        yield next(frames)
        raise KeyboardInterrupt  # Ctrl-C in the middle of the bag

    path = tmp_path / name
    storage = {"run.bag": "ros1", "run.mcap": "mcap"}.get(name, "sqlite3")
    with pytest.raises(KeyboardInterrupt):
        write_pointcloud_bag(path, failing(), storage=storage)
    assert list(tmp_path.iterdir()) == []
    assert write_pointcloud_bag(path, _frames(), storage=storage) == 3  # the re-run works
    assert _read_all(path) == 3
    assert [p.name for p in tmp_path.iterdir()] == [name]


# --- option values, checked when the command line is parsed ------------------------------------


@pytest.fixture
def small_bag(tmp_path: Path) -> Path:
    path = tmp_path / "small.bag"
    write_pointcloud_bag(path, _frames(1), storage="ros1")
    return path


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rate", "1e-300"], "argument -r/--rate: the rate must be a number in [1e-06, 1000000]"),
        (["--rate", "nan"], "argument -r/--rate: the rate must be a number"),
        (["--remap", "/points_raw:=bad!!"], "NEW is not a valid topic name: it has characters"),
        (["--remap", "/points_raw:=/9lives"], "has a token starting with a digit ('9lives')"),
        (["--topics", "bad topic"], "argument --topics: 'bad topic' is not a valid ROS topic"),
        (["--qos-depth", "3000000000"], "argument --qos-depth: must be in [1, 2147483647]"),
        (["--duration", "1e300"], "argument --duration: the duration in seconds must be"),
        (["--start", "-1"], "argument --start: the time in seconds must be a number in [0,"),
        (["--clock", "1e-300"], "argument --clock: the /clock rate in Hz must be 0 or at least"),
        (["--wait-for-subscribers", "inf"], "argument --wait-for-subscribers: the time"),
    ],
)
def test_replay_options_are_checked_when_parsed(small_bag, capsys, arguments, message):
    assert cli_main(["replay", "--quiet", str(small_bag), *arguments]) == 2
    err = one_line_error(capsys)
    assert message in err and err.endswith("(see gpu-euclidean-cluster replay --help)"), err


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--start-time", "-5"], "argument --start-time: the stamp in seconds since the epoch"),
        (["--start-time", "5e9"], "must be a number in [0, 2147483647], got 5e9"),
        (["--rate-hz", "1e-300"], "argument --rate-hz: the rate in Hz must be a number"),
        (["--topic", "bad topic!!"], "argument --topic: 'bad topic!!' is not a valid ROS topic"),
        (["--topic", "/points/"], "it ends with /"),
        (
            ["--start-time", "2147483640", "--repeat", "100"],
            "the last of 100 frames at 10 Hz would be stamped 2147483650 s after the epoch",
        ),
    ],
)
def test_make_bag_options_are_checked_before_anything_is_written(
    tmp_path, capsys, arguments, message
):
    source = tmp_path / "source.bin"
    np.zeros((10, 4), np.float32).tofile(source)
    assert cli_main(["make-bag", str(tmp_path / "out.bag"), str(source), *arguments]) == 2
    assert message in one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source.bin"]


def test_the_replay_tool_checks_its_options_in_one_line(small_bag, capsys):
    assert replay_tool.main([str(small_bag), "--rate", "0"]) == 2
    assert one_line_error(capsys).startswith("replay: error: argument -r/--rate: the rate must")


NAMES = [
    "/points_raw", "points", "/a_b/C9", "/_a", "/a__b", "/a/", "/", "", "a b", "bad!!", "/9a",
    "/a/9b", "/a//b", "//a", "~/points", "/a{x}", "/" + "a" * (MAX_TOPIC_LENGTH - 1),
    "/" + "a" * MAX_TOPIC_LENGTH, "a" * (MAX_TOPIC_LENGTH - 1),
]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_topic_names_follow_ros_2_rules(name):
    """Our verdict is rclpy's for the name made absolute (~ and {} are refused outright)."""
    validators = pytest.importorskip("rclpy.validate_full_topic_name")
    if name.startswith("~") or "{" in name:
        assert topic_name_problem(name) is not None
        return
    try:
        validators.validate_full_topic_name(name if name.startswith("/") else f"/{name}")
        valid = bool(name)
    except Exception:  # rclpy's InvalidTopicNameException
        valid = False
    assert (topic_name_problem(name) is None) == valid, topic_name_problem(name)


def test_a_damaged_velodyne_packet_bag_is_a_velodyne_bag_error(tmp_path):
    from rosbags.rosbag2 import StoragePlugin
    from rosbags.rosbag2 import Writer as Ros2Writer

    from gpu_euclidean_cluster.pointcloud_io.velodyne import (
        VelodyneBagError,
        read_velodyne_scans,
        velodyne_typestore,
    )
    from gpu_euclidean_cluster.pointcloud_io.velodyne.bags import VELODYNE_SCAN

    bag = tmp_path / "packets"
    with Ros2Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        writer.add_connection("/velodyne_packets", VELODYNE_SCAN, typestore=velodyne_typestore())
    [storage] = bag.glob("*.mcap")
    storage.write_bytes(b"\x89MCAP0\r\n")  # 8 bytes: rosbags raised a TypeError on it
    with pytest.raises(VelodyneBagError, match="8 bytes is too short for an MCAP file"):
        list(read_velodyne_scans(bag))
