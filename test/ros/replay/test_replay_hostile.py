"""``replay`` on hostile bags, run as the user runs it: its own process.

- Decompression bombs (a ROS 1 bag's bz2 and lz4 chunks, an MCAP's zstd chunks, a zstd-compressed
  message; GBs from kBs, declaring the truth or less; MCAP chunks overlapping in time) end in one
  line naming the chunk, its size and the bound, exit 2, the process's memory small; each under
  an address-space limit of :data:`MEMORY_CAP`, so that a regression ends in a MemoryError and
  not in the machine's memory. Valid compressed bags of every kind still play.
- Time ranges come from the messages: a ``metadata.yaml`` starting at -1 (replay waited 53
  years) or after every message (it played none) plays its messages; a message stamped -5 is
  skipped with a note; a long gap between stamps is announced.
- A topic whose bytes are not its declared type is refused before anything is published.

The bags are :mod:`test.robustness.bag_attack`'s, judged as the robustness suite judges them
(:func:`test.robustness.attack.judge`).
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from test.robustness.attack import AttackCase, hostile_bag_cases, judge, run_process
from test.robustness.bag_attack import (
    pointcloud_messages,
    ros2_bag,
    with_metadata_start,
    with_stamp,
)

from ..._replay_helpers import make_frames, write_bag

rclpy = pytest.importorskip("rclpy")
replay = pytest.importorskip("gpu_euclidean_cluster.ros.replay.replay")

pytestmark = pytest.mark.ros

#: Address space of every replay process here.
MEMORY_CAP = 3 << 29  # 1.5 GiB
#: Peak RSS a refused bomb may reach: replay's Python, rclpy and NumPy, nothing decompressed.
SMALL_RSS_MB = 300.0
REPLAY = [sys.executable, "-m", "gpu_euclidean_cluster.ros.replay.replay", "-q"]
#: Every case of ``hostile_bags``, by bag name (the fixture checks none is missing).
CASES = [
    "r3_bz2_bomb.bag",
    "r3_bz2_liar.bag",
    "r3_lz4_liar.bag",
    "r3_bz2_valid.bag",
    "r3_lz4_valid.bag",
    "r3_zstd_bomb.mcap",
    "r3_zstd_bomb_scan.mcap",
    "r3_zstd_liar.mcap",
    "r3_overlapping.mcap",
    "r3_lz4_valid.mcap",
    "r3_valid_zstd_chunks",
    "r3_valid_zstd_message",
    "r3_valid_zstd_file",
    "r3_zstd_message_bomb",
    "r3_start_minus_1",
    "r3_outside_range",
    "r3_stamp_minus_5",
    "r3_gap.db3",
    "r3_mislabelled",
]
#: The bombs: refused before anything is decompressed, or where the output passes what it
#: declares (the reason in the line is the judge's ``refusal``).
BOMBS = {name for name in CASES if any(k in name for k in ("bomb", "liar", "overlapping"))}


@pytest.fixture(scope="module")
def cases(tmp_path_factory) -> dict[str, AttackCase]:
    folder = tmp_path_factory.mktemp("hostile_bags")
    frame = np.random.default_rng(34).uniform(-20, 20, (2000, 3)).astype(np.float32)
    built = hostile_bag_cases(folder, frame, REPLAY, ["--remap", "/points_raw:=/hostile/points"])
    by_name = {case.name.removeprefix("replay "): case for case in built}
    assert sorted(by_name) == sorted(CASES)
    return by_name


@pytest.mark.parametrize("name", CASES)
def test_replay_as_a_process_refuses_bombs_and_plays_bags_that_lie_from_their_messages(cases, name):
    case = replace(cases[name], address_space=MEMORY_CAP)
    environment = dict(os.environ)
    run = run_process(
        case.command, environment, 120.0, case.stop_when, address_space=case.address_space
    )
    result = judge(case, run)
    assert result.outcome == ("accepted" if case.valid else "refused"), run.output
    assert result.wrong is None, (result.wrong, run.output)
    assert not result.traceback and result.within_memory, run.output
    if name in BOMBS:
        assert run.peak_rss_mb < SMALL_RSS_MB, run.output


def test_a_bomb_line_names_the_chunk_its_claim_and_the_bound(cases):
    case = replace(cases["r3_bz2_bomb.bag"], address_space=MEMORY_CAP)
    run = run_process(case.command, dict(os.environ), timeout_s=120.0, address_space=MEMORY_CAP)
    [line] = run.output.strip().splitlines()
    assert line.startswith(
        f"replay: error: refused bag {case.inputs[0]}: chunk at byte 4109 (bz2, "
    )
    assert line.endswith(
        "bytes) declares 4294967295 bytes uncompressed, over the 268435456 bytes (256 MiB) a "
        "chunk may expand to"
    )


# --- time ranges and types, before anything is published --------------------------------------


def run_main(argv: list[str], capsys) -> tuple[int, list[str]]:
    status = replay.main(["--quiet", *argv])
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.fixture
def frames_bag(tmp_path) -> Path:
    messages = pointcloud_messages(np.zeros((100, 3), np.float32))
    path = tmp_path / "bag"
    ros2_bag(path, messages)
    return path


def test_start_counts_from_the_first_message_not_the_metadata(frames_bag):
    """In a process of its own: before, it waited 53 years for the first message."""
    with_metadata_start(frames_bag, -1)
    command = (*REPLAY, str(frames_bag), "--start", "0.15")
    run = run_process(command, dict(os.environ), timeout_s=120.0)
    assert run.status == 0, run.output
    assert "replay done: 1 frames" in run.output  # the message at 0.2 s


def test_start_past_the_last_message_of_the_topics_played_is_refused(tmp_path, capsys):
    path = tmp_path / "two.bag"
    write_bag(path, "ros1", {"/a": make_frames([0.1] * 9), "/b": make_frames([0.1])})
    status, lines = run_main([str(path), "--topics", "/b", "--start", "0.5"], capsys)
    assert status == 2
    assert lines == [
        f"replay: error: --start 0.5 s is past the end of the bag: no message of /b at or after "
        f"bag time {1_700_000_000_500_000_000}"
    ]


def test_a_bag_stamped_before_time_zero_alone_has_nothing_to_play(frames_bag, capsys):
    database = next(frames_bag.glob("*.db3"))
    for index in range(3):
        with_stamp(database, index, -5 - index)
    status, lines = run_main([str(frames_bag)], capsys)
    assert status == 2
    assert lines == [f"replay: error: no message in {frames_bag} is stamped at or after bag time 0"]


def test_a_packets_topic_holding_pointclouds_is_refused(tmp_path, capsys):
    from rosbags.rosbag2 import Writer

    from gpu_euclidean_cluster.pointcloud_io.velodyne import velodyne_typestore

    path = tmp_path / "packets"
    with Writer(path, version=9) as writer:
        connection = writer.add_connection(
            "/packets", "velodyne_msgs/msg/VelodyneScan", typestore=velodyne_typestore()
        )
        for stamp, data in pointcloud_messages(np.zeros((100, 3), np.float32)):
            writer.write(connection, stamp, data)
    status, lines = run_main([str(path), "--packets", "decoded", "--sensor-model", "VLP16"], capsys)
    assert status == 2
    [line] = lines
    assert line.startswith(
        "replay: error: topic /packets declares velodyne_msgs/msg/VelodyneScan, but its first "
        "message (bag time 1000000000000 ns) is not one: "
    )
