"""Replay tool: bags written by rosbags itself, replayed into a subscriber; bad-input errors."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.commands import cli

from ..._replay_helpers import (
    NS,
    Recorder,
    decode_cdr,
    make_frames,
    write_bag,
    write_string_bag,
)

rclpy = pytest.importorskip("rclpy")
replay = pytest.importorskip("gpu_euclidean_cluster.ros.replay.replay")
bag_player = pytest.importorskip("gpu_euclidean_cluster.ros.replay.bag_player")

pytestmark = pytest.mark.ros

GAPS_S = [0.2, 0.5, 0.3, 0.4]
TIMING_TOLERANCE_S = 0.08
STORAGES = ["ros1", "sqlite3", "mcap"]


def bag_path(tmp_path: Path, storage: str) -> Path:
    return tmp_path / ("in.bag" if storage == "ros1" else f"in_{storage}")


def start_replay(options, stop: threading.Event) -> tuple[threading.Thread, dict]:
    """Run replay_bag in a thread; the returned dict gets ``stats`` or ``error``."""
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["stats"] = bag_player.replay_bag(options, stop)
        except Exception as error:  # reported by the test through the outcome
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


def play_into(recorder: Recorder, options, expected: int, timeout_s: float = 15.0):
    stop = threading.Event()
    thread, outcome = start_replay(options, stop)
    thread.join(timeout_s)
    stop.set()
    assert "error" not in outcome, outcome.get("error")
    assert not thread.is_alive(), "replay did not finish"
    return outcome["stats"]


def gaps(times: list[float]) -> np.ndarray:
    return np.diff(np.asarray(times))


@pytest.mark.parametrize("storage", STORAGES)
def test_every_message_arrives_with_identical_payload_and_timing(tmp_path, storage):
    frames = make_frames(GAPS_S)
    path = bag_path(tmp_path, storage)
    stored = write_bag(path, storage, {"/points_raw": frames})["/points_raw"]
    recorder = Recorder(["/points_raw"])
    try:
        options = replay.ReplayOptions(bag=path, wait_for_subscribers_s=5.0, progress=False)
        stats = play_into(recorder, options, len(frames))
        assert recorder.wait_for("/points_raw", len(frames), 5.0)
        received = recorder.received["/points_raw"]
    finally:
        recorder.close()
    assert stats.frames == len(frames)
    assert len(received.raw) == len(frames)
    for frame, raw, original in zip(frames, received.raw, stored, strict=True):
        message = decode_cdr(raw)
        assert bytes(message.data) == frame.payload
        assert message.header.stamp.sec * NS + message.header.stamp.nanosec == frame.stamp_ns
        assert message.header.frame_id == "lidar"
        if storage != "ros1":
            assert raw == original  # the stored CDR is republished byte for byte
    np.testing.assert_allclose(gaps(received.times), GAPS_S, atol=TIMING_TOLERANCE_S)


def test_rate_scales_the_recorded_gaps(tmp_path):
    frames = make_frames(GAPS_S)
    path = bag_path(tmp_path, "mcap")
    write_bag(path, "mcap", {"/points_raw": frames})
    recorder = Recorder(["/points_raw"])
    try:
        options = replay.ReplayOptions(
            bag=path, rate=4.0, wait_for_subscribers_s=5.0, progress=False
        )
        play_into(recorder, options, len(frames))
        assert recorder.wait_for("/points_raw", len(frames), 5.0)
        times = recorder.received["/points_raw"].times
    finally:
        recorder.close()
    np.testing.assert_allclose(gaps(times), np.asarray(GAPS_S) / 4, atol=TIMING_TOLERANCE_S / 2)
    assert times[-1] - times[0] < sum(GAPS_S) / 2


def test_loop_repeats_and_remap_renames(tmp_path):
    frames = make_frames([0.1, 0.1])
    path = bag_path(tmp_path, "sqlite3")
    write_bag(path, "sqlite3", {"/points_raw": frames})
    recorder = Recorder(["/renamed"])
    stop = threading.Event()
    options = replay.ReplayOptions(
        bag=path,
        loop=True,
        remap={"/points_raw": "/renamed"},
        wait_for_subscribers_s=5.0,
        progress=False,
    )
    thread, outcome = start_replay(options, stop)
    try:
        assert recorder.wait_for("/renamed", 3 * len(frames), 10.0)
    finally:
        stop.set()
        thread.join(5)
        recorder.close()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["stats"].passes >= 3
    assert outcome["stats"].interrupted
    payloads = [bytes(decode_cdr(raw).data) for raw in recorder.received["/renamed"].raw]
    expected = [frame.payload for frame in frames]
    assert payloads[: 3 * len(frames)] == expected * 3
    # passes follow each other at the bag's message period, not back to back
    times = recorder.received["/renamed"].times[: 3 * len(frames)]
    np.testing.assert_allclose(np.diff(times), 0.1, atol=0.05)


def test_clock_advances_through_the_bag_time(tmp_path):
    frames = make_frames([0.3, 0.3])
    path = bag_path(tmp_path, "mcap")
    write_bag(path, "mcap", {"/points_raw": frames})
    recorder = Recorder(["/points_raw"], clock=True)
    try:
        options = replay.ReplayOptions(
            bag=path, clock_hz=50.0, wait_for_subscribers_s=5.0, progress=False
        )
        play_into(recorder, options, len(frames))
        assert recorder.wait_for("/points_raw", len(frames), 5.0)
        clock = np.asarray(recorder.clock_ns)
    finally:
        recorder.close()
    assert clock.size >= 10
    assert np.all(np.diff(clock) >= 0)
    assert clock[0] >= frames[0].stamp_ns
    assert clock[-1] >= frames[-1].stamp_ns - 0.1 * NS
    assert clock[-1] <= frames[-1].stamp_ns + 0.2 * NS


def test_start_duration_and_topic_filter(tmp_path):
    first = make_frames([0.1] * 9, seed=1)
    second = make_frames([0.1] * 9, seed=2)
    path = bag_path(tmp_path, "ros1")
    write_bag(path, "ros1", {"/a": first, "/b": second})
    recorder = Recorder(["/a", "/b"])
    try:
        options = replay.ReplayOptions(
            bag=path,
            start_s=0.25,
            duration_s=0.5,
            topics=("/b",),
            wait_for_subscribers_s=5.0,
            progress=False,
        )
        stats = play_into(recorder, options, 5)
        assert recorder.wait_for("/b", 5, 5.0)
    finally:
        recorder.close()
    assert stats.frames == 5  # bag times 0.3 .. 0.7 s
    assert recorder.received["/a"].raw == []
    payloads = [bytes(decode_cdr(raw).data) for raw in recorder.received["/b"].raw]
    assert payloads == [frame.payload for frame in second[3:8]]


# --- bad input: one line on stderr, exit status 2 -------------------------------------------


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    status = cli.main(["replay", "--quiet", *argv])
    err = capsys.readouterr().err.strip()
    return status, err


def test_missing_bag(tmp_path, capsys):
    status, err = run_cli([str(tmp_path / "absent.bag")], capsys)
    assert status == 2
    assert err == f"gpu-euclidean-cluster: error: bag not found: {tmp_path / 'absent.bag'}"


def test_unknown_format(tmp_path, capsys):
    path = tmp_path / "cloud.txt"
    path.write_text("1 2 3\n")
    status, err = run_cli([str(path)], capsys)
    assert status == 2
    assert "unknown bag format" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("storage", STORAGES)
def test_truncated_bag(tmp_path, capsys, storage):
    path = bag_path(tmp_path, storage)
    write_bag(path, storage, {"/points_raw": make_frames([0.1] * 3)})
    data_file = (
        path if storage == "ros1" else next(p for p in path.iterdir() if p.suffix != ".yaml")
    )
    data_file.write_bytes(data_file.read_bytes()[: data_file.stat().st_size // 2])
    status, err = run_cli([str(path)], capsys)
    assert status == 2
    assert "corrupt or truncated bag" in err and len(err.splitlines()) == 1


def test_garbage_bag(tmp_path, capsys):
    path = tmp_path / "garbage.bag"
    path.write_bytes(b"this is not a bag" * 100)
    status, err = run_cli([str(path)], capsys)
    assert status == 2
    assert "corrupt or truncated bag" in err and len(err.splitlines()) == 1


def test_topic_not_in_bag_lists_the_topics(tmp_path, capsys):
    path = bag_path(tmp_path, "ros1")
    write_bag(path, "ros1", {"/points_raw": make_frames([0.1])})
    status, err = run_cli([str(path), "--topics", "/lidar"], capsys)
    assert status == 2
    assert "topic /lidar is not in" in err
    assert "/points_raw (sensor_msgs/msg/PointCloud2)" in err


def test_non_pointcloud2_topic(tmp_path, capsys):
    path = tmp_path / "strings"
    write_string_bag(path)
    status, err = run_cli([str(path), "--topics", "/chatter"], capsys)
    assert status == 2
    assert "has type std_msgs/msg/String, not sensor_msgs/msg/PointCloud2" in err
    status, err = run_cli([str(path)], capsys)
    assert status == 2
    assert "no sensor_msgs/msg/PointCloud2 topic" in err


def test_bad_remap_and_rate(tmp_path, capsys):
    path = bag_path(tmp_path, "ros1")
    write_bag(path, "ros1", {"/points_raw": make_frames([0.1])})
    status, err = run_cli([str(path), "--remap", "/points_raw"], capsys)
    assert status == 2 and "expected OLD:=NEW" in err
    status, err = run_cli([str(path), "--rate", "0"], capsys)
    assert status == 2 and "argument -r/--rate: the rate must be a number in [1e-06" in err
    status, err = run_cli([str(path), "--remap", "/other:=/x"], capsys)
    assert status == 2 and "cannot remap /other" in err


def test_start_past_the_end(tmp_path, capsys):
    path = bag_path(tmp_path, "ros1")
    write_bag(path, "ros1", {"/points_raw": make_frames([])})  # a single message
    status, err = run_cli([str(path), "--start", "5"], capsys)
    assert status == 2 and "--start 5.0 s is past the end of the bag" in err
    status, err = run_cli([str(path), "--repeat", "0"], capsys)
    assert status == 2 and "argument --repeat: must be a whole number >= 1, got 0" in err
    status, err = run_cli([str(path), "--rate-hz", "-1"], capsys)
    assert status == 2 and "argument --rate-hz: the rate in Hz must be a number in [1e-06" in err


@pytest.mark.parametrize(("rate_hz", "period_s"), [(None, 0.1), (20.0, 0.05)])
def test_one_frame_bag_repeats_at_a_fixed_rate(tmp_path, rate_hz, period_s):
    frames = make_frames([])  # a single message: no timing of its own
    path = bag_path(tmp_path, "mcap")
    write_bag(path, "mcap", {"/points_raw": frames})
    recorder = Recorder(["/points_raw"])
    try:
        options = replay.ReplayOptions(
            bag=path, repeat=6, rate_hz=rate_hz, wait_for_subscribers_s=5.0, progress=False
        )
        stats = play_into(recorder, options, 6)
        assert recorder.wait_for("/points_raw", 6, 5.0)
        times = recorder.received["/points_raw"].times
        payloads = [bytes(decode_cdr(raw).data) for raw in recorder.received["/points_raw"].raw]
    finally:
        recorder.close()
    assert stats.passes == 6 and stats.frames == 6 and not stats.interrupted
    assert payloads == [frames[0].payload] * 6
    np.testing.assert_allclose(np.diff(times), period_s, atol=TIMING_TOLERANCE_S / 2)


def test_one_frame_bag_loops_until_stopped(tmp_path):
    path = bag_path(tmp_path, "ros1")
    write_bag(path, "ros1", {"/points_raw": make_frames([])})
    recorder = Recorder(["/points_raw"])
    stop = threading.Event()
    options = replay.ReplayOptions(
        bag=path, loop=True, rate_hz=50.0, wait_for_subscribers_s=5.0, progress=False
    )
    thread, outcome = start_replay(options, stop)
    try:
        assert recorder.wait_for("/points_raw", 10, 10.0)
    finally:
        stop.set()
        thread.join(5)
        recorder.close()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["stats"].passes >= 10 and outcome["stats"].interrupted


def test_replay_console_script_reports_errors(tmp_path, capsys):
    status = replay.main([str(tmp_path / "absent")])
    assert status == 2
    assert capsys.readouterr().err.strip().startswith("replay: error: bag not found")


def test_console_script_applies_ros_args(tmp_path):
    frames = make_frames([0.05])
    path = bag_path(tmp_path, "mcap")
    write_bag(path, "mcap", {"/points_raw": frames})
    recorder = Recorder(["/via_ros_args"])
    try:
        argv = [str(path), "--quiet", "--wait-for-subscribers", "5"]
        assert replay.main([*argv, "--ros-args", "-r", "/points_raw:=/via_ros_args"]) == 0
        assert recorder.wait_for("/via_ros_args", len(frames), 5.0)
    finally:
        recorder.close()


@pytest.mark.parametrize("new_topic", ["/remapped", "/points_raw"])
def test_console_script_remap_option(tmp_path, new_topic):
    """``--remap OLD:=NEW`` is the tool's own option, not a ROS argument (also OLD == NEW)."""
    frames = make_frames([0.05])
    path = bag_path(tmp_path, "ros1")
    write_bag(path, "ros1", {"/points_raw": frames})
    recorder = Recorder([new_topic])
    try:
        argv = [str(path), "--quiet", "--wait-for-subscribers", "5"]
        assert replay.main([*argv, "--remap", f"/points_raw:={new_topic}"]) == 0
        assert recorder.wait_for(new_topic, len(frames), 5.0)
    finally:
        recorder.close()


def test_split_ros_args():
    own, ros = replay.split_ros_args(
        ["bag", "--remap", "/a:=/b", "--ros-args", "-r", "/c:=/d", "--", "--quiet"]
    )
    assert own == ["bag", "--remap", "/a:=/b", "--quiet"]
    assert ros == ["--ros-args", "-r", "/c:=/d"]
