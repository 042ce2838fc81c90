"""Bag writer and reader (ROS-free) and the make-bag command, round-tripped through replay."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.commands.cli import main as cli_main
from gpu_euclidean_cluster.pointcloud_io.bags import (
    AUTOWARE_DTYPE,
    POINTCLOUD2,
    BagError,
    PointCloudBag,
    autoware_points,
    ring_from_elevation,
    write_pointcloud_bag,
)
from gpu_euclidean_cluster.tools.simulation import HDL64E, VLP16

from .._replay_helpers import NS, decode_cdr
from ..conftest import LIDAR_DATA_DIR

STORAGES = {"ros1": "out.bag", "sqlite3": "out_sqlite", "mcap": "out_mcap"}


def random_points(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return autoware_points(
        rng.uniform(-50, 50, (n, 3)).astype(np.float32),
        rng.uniform(0, 255, n).astype(np.float32),
        rng.integers(0, 64, n).astype(np.uint16),
    )


def read_back(path: Path) -> list[tuple[int, object]]:
    with PointCloudBag(path) as bag:
        topics = bag.select_topics()
        return [(m.timestamp_ns, decode_cdr(m.cdr)) for m in bag.messages(topics)]


@pytest.mark.parametrize("storage", sorted(STORAGES))
def test_written_bag_reads_back_identically(tmp_path, storage):
    frames = [(5 * NS + i * NS // 10, random_points(300 + i, seed=i)) for i in range(4)]
    path = tmp_path / STORAGES[storage]
    assert write_pointcloud_bag(path, frames, storage=storage) == 4
    messages = read_back(path)
    assert len(messages) == 4
    for (stamp, points), (timestamp, msg) in zip(frames, messages, strict=True):
        assert timestamp == stamp
        assert msg.header.stamp.sec * NS + msg.header.stamp.nanosec == stamp
        assert msg.header.frame_id == "velodyne"
        assert [(f.name, f.offset, f.datatype) for f in msg.fields] == [
            ("x", 0, 7),
            ("y", 4, 7),
            ("z", 8, 7),
            ("intensity", 12, 7),
            ("ring", 16, 4),
        ]
        assert (msg.width, msg.height, msg.point_step) == (len(points), 1, AUTOWARE_DTYPE.itemsize)
        decoded = np.frombuffer(bytes(msg.data), dtype=AUTOWARE_DTYPE)
        np.testing.assert_array_equal(decoded, points)


def test_make_bag_defaults_agree_with_the_bags_module():
    from gpu_euclidean_cluster.commands import make_bag
    from gpu_euclidean_cluster.pointcloud_io import bags

    assert make_bag.STORAGES == bags.STORAGES
    assert make_bag.STORAGE_OF_SUFFIX == bags.STORAGE_OF_SUFFIX
    assert make_bag.DEFAULT_TOPIC == bags.DEFAULT_TOPIC
    assert make_bag.DEFAULT_FRAME_ID == bags.DEFAULT_FRAME_ID


def test_writer_refuses_existing_path_and_unknown_storage(tmp_path):
    path = tmp_path / "x.bag"
    path.write_bytes(b"")
    with pytest.raises(BagError, match="exists already"):
        write_pointcloud_bag(path, [], storage="ros1")
    with pytest.raises(BagError, match="unknown bag storage 'rosbag3'"):
        write_pointcloud_bag(tmp_path / "y", [], storage="rosbag3")


def test_ring_from_elevation_picks_the_nearest_beam():
    elevations = np.array(VLP16.elevations_deg, dtype=np.float64)
    angles = np.radians(np.sort(elevations) + 0.4)  # a little above each beam
    xyz = np.stack([10 * np.cos(angles), np.zeros_like(angles), 10 * np.sin(angles)], axis=1)
    np.testing.assert_array_equal(ring_from_elevation(xyz, elevations), np.arange(16))
    far_above = np.array([[1.0, 0.0, 5.0]])
    assert ring_from_elevation(far_above, elevations).tolist() == [15]


def test_autoware_points_checks_shapes():
    with pytest.raises(ValueError, match=r"shape \(N, 3\)"):
        autoware_points(np.zeros((4, 2)), np.zeros(4), np.zeros(4))
    with pytest.raises(ValueError, match="must both have shape"):
        autoware_points(np.zeros((4, 3)), np.zeros(3), np.zeros(4))


def test_make_bag_from_npy_derives_rings(tmp_path, capsys):
    elevations = np.radians(np.array(HDL64E.elevations_deg))
    ranges = np.linspace(5, 40, elevations.size)
    cloud = np.stack(
        [
            ranges * np.cos(elevations),
            np.zeros_like(ranges),
            ranges * np.sin(elevations),
            np.linspace(0, 1, elevations.size),
        ],
        axis=1,
    ).astype(np.float32)
    np.save(tmp_path / "a.npy", cloud)
    np.save(tmp_path / "b.npy", cloud[::-1].copy())
    out = tmp_path / "clouds.mcap"
    argv = ["make-bag", str(out), str(tmp_path / "a.npy"), str(tmp_path / "b.npy")]
    assert cli_main([*argv, "--start-time", "100", "--rate-hz", "5"]) == 0
    assert "wrote 2 frames" in capsys.readouterr().out
    messages = read_back(out)
    assert [t for t, _ in messages] == [100 * NS, 100 * NS + NS // 5]
    first = np.frombuffer(bytes(messages[0][1].data), dtype=AUTOWARE_DTYPE)
    np.testing.assert_array_equal(first["ring"], HDL64E.rings)
    np.testing.assert_allclose(first["intensity"], cloud[:, 3])
    repeated = tmp_path / "repeated.mcap"
    argv = ["make-bag", str(repeated), str(tmp_path / "a.npy"), str(tmp_path / "b.npy")]
    assert cli_main([*argv, "--repeat", "3", "--start-time", "100", "--rate-hz", "10"]) == 0
    assert "wrote 6 frames" in capsys.readouterr().out
    messages = read_back(repeated)
    assert [t for t, _ in messages] == [100 * NS + k * NS // 10 for k in range(6)]
    payloads = [bytes(m.data) for _, m in messages]
    assert payloads[0::2] == [payloads[0]] * 3 and payloads[1::2] == [payloads[1]] * 3
    assert payloads[0] != payloads[1]


def test_make_bag_bad_inputs(tmp_path, capsys):
    np.save(tmp_path / "xyz.npy", np.zeros((5, 3), dtype=np.float32))
    cases = [
        (["make-bag", str(tmp_path / "a.bag")], "give either input files or --simulate"),
        (
            ["make-bag", str(tmp_path / "b"), "--storage", "ros1", "--simulate"],
            "a ROS 1 bag is a file whose name ends in .bag",
        ),
        (
            ["make-bag", str(tmp_path / "e.mcap"), "--storage", "sqlite3", "--simulate"],
            "a .mcap name holds a mcap bag, not sqlite3",
        ),
        (["make-bag", str(tmp_path / "c"), str(tmp_path / "missing.bin")], "missing.bin"),
        (["make-bag", str(tmp_path / "d"), str(tmp_path / "xyz.npy")], "no intensity field"),
        (
            ["make-bag", str(tmp_path / "f"), str(tmp_path / "xyz.npy"), "--repeat", "0"],
            "argument --repeat: must be a whole number >= 1, got 0",
        ),
        (
            ["make-bag", str(tmp_path / "g"), "--simulate", "--repeat", "2"],
            "--simulate takes --frames instead",
        ),
    ]
    for argv, message in cases:
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err


def test_make_bag_from_kitti_file(tmp_path):
    source = LIDAR_DATA_DIR / "kitti_000008.bin"
    if not source.is_file():
        pytest.skip(f"real LiDAR frame not found: {source} (set LIDAR_DATA_DIR)")
    out = tmp_path / "kitti.bag"
    assert cli_main(["make-bag", str(out), str(source)]) == 0
    [(_, msg)] = read_back(out)
    points = np.frombuffer(bytes(msg.data), dtype=AUTOWARE_DTYPE)
    raw = np.fromfile(source, dtype=np.float32).reshape(-1, 4)
    np.testing.assert_array_equal(points["x"], raw[:, 0])
    np.testing.assert_array_equal(points["intensity"], raw[:, 3])
    assert points["ring"].max() <= 63 and np.unique(points["ring"]).size > 40


def test_simulated_bag_round_trips_through_replay(tmp_path, monkeypatch):
    pytest.importorskip("rclpy")
    from gpu_euclidean_cluster.ros.replay.bag_player import replay_bag
    from gpu_euclidean_cluster.ros.replay.replay import ReplayOptions

    from .._replay_helpers import Recorder

    out = tmp_path / "sim"
    assert cli_main(["make-bag", str(out), "--simulate", "--sensor", "vlp16", "--frames", "3"]) == 0
    with PointCloudBag(out) as bag:
        stored = [m.cdr for m in bag.messages(bag.select_topics())]
        assert bag.topics["/points_raw"].msgtype == POINTCLOUD2
    recorder = Recorder(["/points_raw"])
    try:
        stats = replay_bag(
            ReplayOptions(bag=out, rate=2.0, wait_for_subscribers_s=5.0, progress=False),
            threading.Event(),
        )
        assert recorder.wait_for("/points_raw", 3, 5.0)
        received = recorder.received["/points_raw"].raw
    finally:
        recorder.close()
    assert stats.frames == 3
    assert received == stored


def _bag_files(path: Path) -> list[Path]:
    """The files holding a bag's data: the file itself, or a ROS 2 directory's storage file."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.suffix in {".db3", ".mcap"})


@pytest.mark.parametrize("storage", sorted(STORAGES))
@pytest.mark.parametrize("where", [0.02, 0.2, 0.5, 0.8, 0.98])
@pytest.mark.parametrize("damage", ["garbage", "zeros", "truncate"])
def test_damaged_bag_reads_or_fails_with_one_reason(tmp_path, storage, where, damage):
    """A bag damaged anywhere either still reads or raises BagError: never another exception."""
    frames = [(5 * NS + i * NS // 10, random_points(2000, seed=i)) for i in range(6)]
    path = tmp_path / STORAGES[storage]
    write_pointcloud_bag(path, frames, storage=storage)
    [data_file] = _bag_files(path)
    content = bytearray(data_file.read_bytes())
    at = int(len(content) * where)
    if damage == "truncate":
        del content[at:]
    else:
        rng = np.random.default_rng(at)
        patch = rng.integers(0, 256, 512, dtype=np.uint8) if damage == "garbage" else bytes(512)
        content[at : at + 512] = bytes(patch)[: len(content) - at]
    data_file.write_bytes(bytes(content))
    try:
        messages = read_back(path)
    except BagError as error:
        assert "bag" in str(error) and "\n" not in str(error)
        return
    assert len(messages) <= len(frames)


@pytest.mark.parametrize(
    ("name", "storage", "expected"),
    [
        ("out.bag", "ros1", "out.bag"),
        ("out.mcap", "mcap", "out.mcap"),
        ("out.db3", "sqlite3", "out.db3"),
        ("out_dir", "mcap", "out_dir"),
        ("out_dir", "sqlite3", "out_dir"),
    ],
)
def test_make_bag_writes_what_the_name_says(tmp_path, name, storage, expected):
    out = tmp_path / name
    source = tmp_path / "cloud.npy"
    np.save(source, random_points(500))
    argv = ["make-bag", str(out), str(source)]
    assert cli_main([*argv, "--storage", storage] if name == "out_dir" else argv) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["cloud.npy", expected])
    assert out.is_file() == (name != "out_dir")
    assert len(read_back(out)) == 1
