"""Replay of Velodyne packet bags (nebula's three real bags): the recorded ``VelodyneScan``
messages published as they are (``--packets raw``), the sweeps decoded and published as Autoware's
``pointcloud_raw_ex`` (``--packets decoded``), or both (the default).

Decoded: each published cloud must be the ``PointXYZIRCAEDT`` PointCloud2 of the sweep the CPU
decoder gives for the same packets (fed as nebula's ROS driver feeds its decoder: the packet
stamps in whole nanoseconds), byte for byte, with nebula's header stamp; and the sweep completed by
the message that names nebula's PCD must carry that PCD's points. (nebula's decoder test fed
``stamp.sec`` only, so its PCD's ``time_stamp`` column differs from the driver's; every other
field is compared.) These run the player in this process, into a subscriber in this process.

Raw: publishing a ``VelodyneScan`` needs the ``velodyne_msgs`` package, built from
``../shared/msgs`` and usable only by a process started with its ``setup.bash`` environment
(``_perception_msgs``; the tests skip with the reason without it). So ``replay`` runs as its own
process, as a user runs it, into a subscriber process (``test._packet_recorder``) that must get
the bag's stored bytes (read here straight from the bag's SQLite file), in order; and into the
clustering node on ``input/packets``, whose labelled clouds must be the library's sweeps with the
library's cluster labels (the checks of ``test/ros/node/test_packet_input.py``).

Nothing here asserts wall-clock gaps (this machine may be loaded): the schedule is checked by
what cannot depend on load, the bag times of the stream and a lower bound on the playing time.
"""

from __future__ import annotations

import io
import math
import os
import pickle
import sqlite3
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.commands import cli
from gpu_euclidean_cluster.pointcloud_io.pcd import read_pcd
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    POINT_DTYPE,
    DecoderSettings,
    Sweep,
    SweepDecoder,
    load_calibration,
    read_velodyne_scans,
    velodyne_typestore,
)
from gpu_euclidean_cluster.ros.parameters.settings import range_problems
from gpu_euclidean_cluster.ros.parameters.specs import SPECS
from gpu_euclidean_cluster.ros.parameters.velodyne_options import (
    SETTING_OPTIONS,
    SETTING_PARAMETERS,
    VelodyneOptions,
)

from ..._perception_msgs import perception_msgs_env
from ..._replay_helpers import NS, Recorder, decode_cdr, make_frames, write_bag
from ..._ros2_tools import (
    BIN,
    REPO_ROOT,
    Background,
    own_namespace,
    private_domain,
    run,
    user_env,
)
from ...pointcloud_io.test_velodyne_decoder import CALIBRATION, CASES, NEBULA

rclpy = pytest.importorskip("rclpy")
replay = pytest.importorskip("gpu_euclidean_cluster.ros.replay.replay")
bag_player = pytest.importorskip("gpu_euclidean_cluster.ros.replay.bag_player")
packet_player = pytest.importorskip("gpu_euclidean_cluster.ros.replay.packet_player")

from ..node import test_packet_input as packet_node  # noqa: E402  (needs rclpy)

pytestmark = [
    pytest.mark.ros,
    pytest.mark.skipif(
        not NEBULA.is_dir(), reason=f"nebula packet bags not found at {NEBULA} (set LIDAR_DATA_DIR)"
    ),
]

#: folder -> the packets topic and Autoware's decoded topic
TOPICS = {
    "vlp16": ("/velodyne_packets", "/pointcloud_raw_ex"),
    "vlp32": ("/sensing/lidar/front/velodyne_packets", "/sensing/lidar/front/pointcloud_raw_ex"),
    "vls128": ("/velodyne_packets", "/pointcloud_raw_ex"),
}
#: PointField datatypes of POINT_DTYPE's fields (FLOAT32 7, UINT8 2, UINT16 4, UINT32 6)
DATATYPES = {"<f4": 7, "|u1": 2, "<u2": 4, "<u4": 6}
#: Generous deadlines: discovery, a replay and its subscriber on 2 loaded cores. Each is a bound
#: of a wait for a condition, which ends as soon as the condition holds.
DEADLINE_S = 120.0
#: ``--wait-for-subscribers``: returns once they are there
WAIT_FOR_SUBSCRIBERS_S = 60.0
#: where the processes' topics go (``--remap``): a namespace of this test's own, so that nothing
#: it did not start hears them (the processes run in a user's environment: see ``user_env``)
NAMESPACE = own_namespace("replay_packets")


@pytest.fixture(scope="module")
def msgs_env() -> dict[str, str]:
    """The environment of a process that uses ``velodyne_msgs``, in this test's ROS domain
    (skips with the reason where the message packages cannot be built)."""
    env, reason = perception_msgs_env()
    if env is None:
        pytest.skip(reason)
    with private_domain() as domain:
        process_env = user_env(domain)
    process_env.update({k: env[k] for k in packet_node.MSGS_VARIABLES if k in env})
    return process_env


@pytest.fixture
def without_velodyne_msgs(monkeypatch) -> None:
    """This process as one without the ``velodyne_msgs`` package (importing it fails)."""
    for name in ("velodyne_msgs", "velodyne_msgs.msg"):
        monkeypatch.setitem(sys.modules, name, None)


def bag_of(folder: str) -> Path:
    return NEBULA / folder / CASES[folder][0]


def stored_scans(folder: str) -> list[bytes]:
    """The bag's messages as stored, in time order, read with SQLite alone (not the library)."""
    (database,) = bag_of(folder).glob("*.db3")
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as connection:
        rows = connection.execute("SELECT data FROM messages ORDER BY timestamp, id").fetchall()
    return [bytes(data) for (data,) in rows]


def velodyne_options(folder: str, **changes) -> VelodyneOptions:
    """The options that give nebula's decoder-test settings of ``folder``."""
    _, _, settings, calibration = CASES[folder]
    return VelodyneOptions(
        sensor_model=settings.model,
        calibration=CALIBRATION / calibration,
        return_mode=settings.return_mode,
        frame_id=settings.frame_id,
        min_range=settings.min_range,
        max_range=settings.max_range,
        scan_phase=settings.scan_phase,
        cloud_min_angle=settings.cloud_min_angle,
        cloud_max_angle=settings.cloud_max_angle,
        **changes,
    )


def sensor_argv(folder: str) -> list[str]:
    """:func:`velodyne_options` as ``replay``'s command-line options."""
    _, _, s, calibration = CASES[folder]
    return [
        "--sensor-model", s.model, "--calibration", str(CALIBRATION / calibration),
        "--return-mode", s.return_mode, "--frame-id", s.frame_id,
        "--min-range", str(s.min_range), "--max-range", str(s.max_range),
        "--scan-phase", str(s.scan_phase), "--cloud-min-angle", str(s.cloud_min_angle),
        "--cloud-max-angle", str(s.cloud_max_angle),
    ]  # fmt: skip


def expected_sweeps(folder: str, start_ns: int = 0) -> list[tuple[int, Sweep]]:
    """(bag time of the completing message, sweep) as nebula's driver decodes the bag from
    ``start_ns`` on, packets stamped in seconds from their whole nanoseconds."""
    _, _, settings, calibration = CASES[folder]
    decoder = SweepDecoder(load_calibration(CALIBRATION / calibration), settings)
    return [
        (scan.bag_time_ns, sweep)
        for scan in read_velodyne_scans(bag_of(folder))
        if scan.bag_time_ns >= start_ns
        for sweep in decoder.feed(scan.packets, scan.packet_seconds)
    ]


def play(options, topics: list[str], expected: int) -> tuple[dict, str, object]:
    """Replay ``options`` in this process into a recorder of ``topics``; return what arrived,
    the log and the statistics."""
    recorder = Recorder(topics)
    stream = io.StringIO()
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["stats"] = bag_player.replay_bag(options, threading.Event(), stream=stream)
        except Exception as error:  # reported through the outcome
            outcome["error"] = error

    try:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(DEADLINE_S)
        assert "error" not in outcome, outcome.get("error")
        assert not thread.is_alive(), f"replay did not finish in {DEADLINE_S:g} s"
        for topic in topics:
            recorder.wait_for(topic, expected, DEADLINE_S)
        received = dict(recorder.received)
    finally:
        recorder.close()
    return received, stream.getvalue(), outcome["stats"]


def stamp_ns(message) -> int:
    return message.header.stamp.sec * NS + message.header.stamp.nanosec


def check_cloud(raw: bytes, sweep: Sweep, frame_id: str) -> None:
    """``raw`` is the PointXYZIRCAEDT PointCloud2 of ``sweep``, stamped as nebula stamps it."""
    message = decode_cdr(raw)
    layout = [(f.name, f.offset, f.datatype, f.count) for f in message.fields]
    assert layout == [
        (name, POINT_DTYPE.fields[name][1], DATATYPES[POINT_DTYPE.fields[name][0].str], 1)
        for name in POINT_DTYPE.names
    ]
    assert (message.point_step, message.height, message.width) == (32, 1, len(sweep.points))
    assert message.row_step == 32 * len(sweep.points)
    assert not message.is_bigendian and message.is_dense
    assert message.header.frame_id == frame_id
    assert stamp_ns(message) == int(sweep.stamp * 1e9)  # duration_cast: truncated
    assert bytes(message.data) == sweep.points.tobytes()


# --- decoded sweeps, the player in this process ---------------------------------------------


@pytest.mark.parametrize("folder", sorted(CASES))
def test_packet_bag_plays_nebulas_sweeps(folder: str):
    stem, settings = CASES[folder][1], CASES[folder][2]
    packets_topic, cloud_topic = TOPICS[folder]
    sweeps = expected_sweeps(folder)
    options = replay.ReplayOptions(
        bag=bag_of(folder),
        velodyne=velodyne_options(folder),
        packets="decoded",
        wait_for_subscribers_s=WAIT_FOR_SUBSCRIBERS_S,
        progress=False,
    )
    received, log, stats = play(options, [cloud_topic], len(sweeps))
    clouds = received[cloud_topic]
    assert f"replaying {packets_topic} -> {cloud_topic}" in log
    assert len(clouds.raw) == len(sweeps) > 0
    for raw, (_, sweep) in zip(clouds.raw, sweeps, strict=True):
        check_cloud(raw, sweep, settings.frame_id)
    # the sweep nebula wrote: completed by the message whose record time names the PCD
    [nebula_sweep] = [sweep for time_ns, sweep in sweeps if time_ns == int(stem)]
    [raw] = [r for r in clouds.raw if stamp_ns(decode_cdr(r)) == int(nebula_sweep.stamp * 1e9)]
    points = np.frombuffer(bytes(decode_cdr(raw).data), POINT_DTYPE)
    reference = read_pcd(NEBULA / folder / f"{stem}.pcd")
    xyz = np.stack([points["x"], points["y"], points["z"]], axis=1)
    np.testing.assert_array_equal(xyz.view(np.uint32), reference.xyz.view(np.uint32))
    for name, values in reference.fields.items():
        if name != "time_stamp":
            np.testing.assert_array_equal(points[name], values, err_msg=name)
    # on the recorded schedule: the last sweep is not published before its completing message's
    # bag time (load can only make playing longer)
    bag_start = min(scan.bag_time_ns for scan in read_velodyne_scans(bag_of(folder)))
    assert stats.frames == stats.sweeps == len(sweeps) and stats.packet_messages == 0
    assert stats.elapsed_s >= (sweeps[-1][0] - bag_start) / NS - 1e-3
    assert f"replay done: {len(sweeps)} frames ({len(sweeps)} decoded sweeps) in" in stats.summary()
    if folder == "vls128":  # its metadata.yaml leaves serialization_format empty
        notes = [line for line in log.splitlines() if line.startswith("note:")]
        assert len(notes) == 1 and "metadata.yaml is damaged or incomplete" in notes[0]


@pytest.mark.parametrize("folder", sorted(CASES))
def test_stream_puts_each_message_before_the_sweeps_it_completes(folder: str):
    """``both``: every recorded message (its stored bytes), then the sweeps it completes, each at
    its bag time; the sweeps as the decoder cuts them from the whole bag."""
    decoding = velodyne_options(folder).resolve()
    stream = packet_player.PacketStream(bag_of(folder), [TOPICS[folder][0]], True, decoding)
    messages = list(stream.messages(None, None))
    scans = [m for m in messages if isinstance(m, packet_player.PacketMessage)]
    sweeps = [m for m in messages if isinstance(m, packet_player.SweepMessage)]
    assert [m.cdr for m in scans] == stored_scans(folder)
    assert {m.topic for m in messages} == {TOPICS[folder][0]}
    expected = expected_sweeps(folder)
    assert [(m.timestamp_ns, m.sweep.stamp) for m in sweeps] == [
        (t, sweep.stamp) for t, sweep in expected
    ]
    for message, (_, sweep) in zip(sweeps, expected, strict=True):
        assert message.sweep.points.tobytes() == sweep.points.tobytes()
    # each sweep right after the message that completed it (same bag time), none before
    latest = None
    for message in messages:
        if isinstance(message, packet_player.PacketMessage):
            assert latest is None or message.timestamp_ns > latest.timestamp_ns
            latest = message
        else:
            assert latest is not None and message.timestamp_ns == latest.timestamp_ns
    # raw alone: the messages without decoding; decoded alone: the same sweeps
    raw_only = packet_player.PacketStream(bag_of(folder), [TOPICS[folder][0]], True, None)
    assert [m.cdr for m in raw_only.messages(None, None)] == stored_scans(folder)
    decoded = packet_player.PacketStream(bag_of(folder), [TOPICS[folder][0]], False, decoding)
    assert [m.cdr for m in decoded.messages(None, None)] == [m.cdr for m in sweeps]


def test_sensor_params_file_remap_and_start(tmp_path: Path):
    """nebula's parameter-file format (its calibration_file through find-pkg-share, resolved to
    the shipped copy), ``--remap`` by the decoded name, ``--start`` skipping the first message
    (decoding starts there), through the console script."""
    params = tmp_path / "VLP32.param.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    host_ip: 192.168.1.10\n    frame_id: velodyne_front\n"
        "    calibration_file: $(find-pkg-share nebula_velodyne_decoders)/calibration/VLP32.yaml\n"
        "    min_range: 0.4\n    max_range: 50.0\n    cloud_min_angle: 270\n"
        "    cloud_max_angle: 90\n    scan_phase: 0.0\n    sensor_model: VLP32\n"
        "    return_mode: Dual\n"
    )
    start_ns = int(CASES["vlp32"][1]) + NS // 20  # skips the first message (0.08 s later)
    sweeps = expected_sweeps("vlp32", start_ns)
    recorder = Recorder(["/decoded"])
    try:
        argv = [
            str(bag_of("vlp32")),
            "--quiet",
            "--packets",
            "decoded",
            "--wait-for-subscribers",
            str(WAIT_FOR_SUBSCRIBERS_S),
            "--sensor-params",
            str(params),
            "--return-mode",
            "SingleStrongest",
            "--scan-phase",
            "180",
            "--start",
            "0.05",
            "--remap",
            "/sensing/lidar/front/pointcloud_raw_ex:=/decoded",
        ]
        assert replay.main(argv) == 0
        recorder.wait_for("/decoded", len(sweeps), DEADLINE_S)
        clouds = recorder.received["/decoded"].raw
    finally:
        recorder.close()
    assert len(clouds) == len(sweeps) == 4
    for raw, (_, sweep) in zip(clouds, sweeps, strict=True):
        check_cloud(raw, sweep, "velodyne_front")


def test_bag_with_clouds_and_packets_plays_both(tmp_path: Path):
    """The VLP-16 packets copied into a bag beside a PointCloud2 topic; with the sweeps alone,
    ``--remap`` by the packets topic's name renames them; ``--rate-hz`` puts every message, cloud
    or sweep, on one schedule."""
    from rosbags.rosbag2 import Reader, Writer

    source = bag_of("vlp16")
    frames = make_frames([0.1] * 3)
    path = tmp_path / "mixed"
    write_bag(path, "sqlite3", {"/points_raw": frames})
    store = velodyne_typestore()
    merged = tmp_path / "merged"
    with Reader(source) as reader, Reader(path) as clouds, Writer(merged, version=9) as writer:
        packets = writer.add_connection(
            "/velodyne_packets", "velodyne_msgs/msg/VelodyneScan", typestore=store
        )
        points = writer.add_connection(
            "/points_raw", "sensor_msgs/msg/PointCloud2", typestore=store
        )
        for _, timestamp, raw in reader.messages():
            writer.write(packets, timestamp, raw)
        offset = reader.start_time - clouds.start_time
        for _, timestamp, raw in clouds.messages():
            writer.write(points, timestamp + offset, raw)
    sweeps = expected_sweeps("vlp16")
    options = replay.ReplayOptions(
        bag=merged,
        velodyne=velodyne_options("vlp16"),
        packets="decoded",
        remap={"/velodyne_packets": "/vlp16/points"},
        rate_hz=20.0,
        wait_for_subscribers_s=WAIT_FOR_SUBSCRIBERS_S,
        progress=False,
    )
    received, _, stats = play(options, ["/points_raw", "/vlp16/points"], len(frames))
    assert [bytes(decode_cdr(r).data) for r in received["/points_raw"].raw] == [
        f.payload for f in frames
    ]
    assert len(received["/vlp16/points"].raw) == len(sweeps)
    for raw, (_, sweep) in zip(received["/vlp16/points"].raw, sweeps, strict=True):
        check_cloud(raw, sweep, "velodyne")
    # one message every 1/20 s: the last one is not published before its slot
    assert stats.frames == len(frames) + len(sweeps)
    assert stats.elapsed_s >= (stats.frames - 1) / 20.0 - 1e-3


def test_default_without_velodyne_msgs_plays_the_sweeps_with_a_note(without_velodyne_msgs):
    """No ``--packets`` and no ``velodyne_msgs``: the decoded sweeps, and a note that says how to
    get the packets too."""
    sweeps = expected_sweeps("vlp16")
    options = replay.ReplayOptions(
        bag=bag_of("vlp16"),
        velodyne=velodyne_options("vlp16"),
        wait_for_subscribers_s=WAIT_FOR_SUBSCRIBERS_S,
        progress=False,
    )
    received, log, stats = play(options, ["/pointcloud_raw_ex"], len(sweeps))
    assert len(received["/pointcloud_raw_ex"].raw) == len(sweeps) == stats.sweeps
    assert "replaying /velodyne_packets -> /pointcloud_raw_ex from" in log
    [note] = [line for line in log.splitlines() if line.startswith("note:")]
    assert "/velodyne_packets play decoded only (--packets decoded)" in note
    assert "source $VIRTUAL_ENV/opt/msgs/setup.bash" in note


def test_ros1_packet_bag_decodes_the_same(tmp_path: Path):
    """The VLP-16 scans in a ROS 1 bag (Autoware.AI's format) give the same sweeps, and are
    published as the same CDR bytes."""
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC)
    store.register(
        get_types_from_msg("time stamp\nuint8[1206] data\n", "velodyne_msgs/msg/VelodynePacket")
        | get_types_from_msg(
            "std_msgs/Header header\nvelodyne_msgs/VelodynePacket[] packets\n",
            "velodyne_msgs/msg/VelodyneScan",
        )
    )
    types = store.types
    path = tmp_path / "vlp16.bag"
    with Writer(path) as writer:
        connection = writer.add_connection(
            "/velodyne_packets", "velodyne_msgs/msg/VelodyneScan", typestore=store
        )
        for scan in read_velodyne_scans(bag_of("vlp16")):
            time = types["builtin_interfaces/msg/Time"]
            packets = [
                types["velodyne_msgs/msg/VelodynePacket"](stamp=time(int(s), int(n)), data=data)
                for s, n, data in zip(scan.stamp_sec, scan.stamp_nanosec, scan.packets, strict=True)
            ]
            header = types["std_msgs/msg/Header"](
                seq=7, stamp=time(*divmod(scan.stamp_ns, NS)), frame_id=scan.frame_id
            )
            message = types["velodyne_msgs/msg/VelodyneScan"](header=header, packets=packets)
            raw = store.serialize_ros1(message, "velodyne_msgs/msg/VelodyneScan")
            writer.write(connection, scan.bag_time_ns, raw)
    decoding = velodyne_options("vlp16").resolve()
    stream = packet_player.PacketStream(path, ["/velodyne_packets"], True, decoding)
    got = list(stream.messages(None, None))
    scans = [m for m in got if isinstance(m, packet_player.PacketMessage)]
    sweeps = [m for m in got if isinstance(m, packet_player.SweepMessage)]
    expected = expected_sweeps("vlp16")
    assert [m.timestamp_ns for m in sweeps] == [t for t, _ in expected]
    for message, (_, sweep) in zip(sweeps, expected, strict=True):
        assert message.sweep.points.tobytes() == sweep.points.tobytes()
        assert message.sweep.stamp == sweep.stamp
    # the ROS 1 messages as CDR: what the ROS 2 bag stores for the same scans (no header.seq),
    # but for the stored messages' trailing alignment padding (at most 3 zero bytes)
    stored = stored_scans("vlp16")
    assert len(scans) == len(stored)
    for message, recorded in zip(scans, stored, strict=True):
        padding = len(recorded) - len(message.cdr)
        assert 0 <= padding < 4 and recorded == message.cdr + bytes(padding)


# --- packets as recorded: replay and its subscribers as their own processes ------------------


def replay_into_recorder(
    env: dict[str, str], tmp_path: Path, argv: list[str], wanted: dict[str, tuple[str, int]]
) -> tuple[dict[str, list[bytes]], str]:
    """``replay ARGV`` (its own process) into ``test._packet_recorder`` (another) subscribed to
    ``wanted`` (topic -> ``packets`` or ``cloud``, count); what arrived and replay's output."""
    out = tmp_path / "received.pickle"
    topics = [f"{topic}={kind}={count}" for topic, (kind, count) in wanted.items()]
    recorder = Background(
        [str(BIN / "python"), "-m", "test._packet_recorder", str(out), str(DEADLINE_S), *topics],
        env, tmp_path / "recorder.log", cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        done = run(
            [str(BIN / "replay"), *argv, "--quiet",
             "--wait-for-subscribers", str(WAIT_FOR_SUBSCRIBERS_S)],
            env, timeout_s=DEADLINE_S,
        )  # fmt: skip
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        recorder.process.wait(timeout=DEADLINE_S)
    finally:
        recorder.close()
    assert out.is_file(), recorder.output()
    return pickle.loads(out.read_bytes())["received"], output


@pytest.mark.slow
@pytest.mark.parametrize("folder", sorted(CASES))
def test_raw_packets_arrive_as_recorded(msgs_env, tmp_path: Path, folder: str):
    """``--packets raw``: every recorded message, byte for byte, in order, on its own topic
    (the VLS-128 bag: 730 kB messages, a metadata.yaml rosbags refuses)."""
    packets_topic = TOPICS[folder][0]
    stored = stored_scans(folder)
    output_topic = NAMESPACE + packets_topic  # the same name, in the test's namespace
    argv = [str(bag_of(folder)), "--packets", "raw", *sensor_argv(folder)]
    argv += ["--remap", f"{packets_topic}:={output_topic}"]
    wanted = {output_topic: ("packets", len(stored))}
    received, output = replay_into_recorder(msgs_env, tmp_path, argv, wanted)
    assert received[output_topic] == stored, output
    assert f"replaying {packets_topic} -> {output_topic} from" in output
    assert "decoding" not in output  # the sensor options are not used
    assert f"replay done: {len(stored)} packet messages in" in output


@pytest.mark.slow
def test_both_with_remaps_of_the_packets_and_the_decoded_topic(msgs_env, tmp_path: Path):
    """The default with the sensor named and ``velodyne_msgs`` present: both. ``--remap`` of the
    packets topic renames the recorded messages, of the decoded name the sweeps."""
    stored = stored_scans("vlp16")
    sweeps = expected_sweeps("vlp16")
    packets, points = f"{NAMESPACE}/lidar/packets", f"{NAMESPACE}/lidar/points"
    argv = [
        str(bag_of("vlp16")), *sensor_argv("vlp16"),
        "--remap", f"/velodyne_packets:={packets}", f"/pointcloud_raw_ex:={points}",
    ]  # fmt: skip
    wanted = {packets: ("packets", len(stored)), points: ("cloud", len(sweeps))}
    received, output = replay_into_recorder(msgs_env, tmp_path, argv, wanted)
    assert received[packets] == stored, output
    assert len(received[points]) == len(sweeps), output
    for raw, (_, sweep) in zip(received[points], sweeps, strict=True):
        check_cloud(raw, sweep, "velodyne")
    assert f"replaying /velodyne_packets -> {packets}, {points} from" in output
    assert "note:" not in output
    assert (
        f"replay done: {len(sweeps)} frames ({len(sweeps)} decoded sweeps) and "
        f"{len(stored)} packet messages in"
    ) in output


@pytest.mark.slow
def test_wait_for_subscribers_waits_for_every_output_topic(msgs_env, tmp_path: Path):
    """A subscriber of the packets alone does not end ``--wait-for-subscribers`` with ``both``:
    the decoded cloud has none, so replay waits the whole time and says so."""
    packets = f"{NAMESPACE}/waiting/packets"
    recorder = Background(
        [str(BIN / "python"), "-m", "test._packet_recorder", str(tmp_path / "received.pickle"),
         str(DEADLINE_S), f"{packets}=packets=5"],
        msgs_env, tmp_path / "recorder.log", cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        done = run_replay(
            msgs_env,
            [str(bag_of("vlp32")), "--sensor-model", "VLP32", "--wait-for-subscribers", "10",
             "--remap", f"{TOPICS['vlp32'][0]}:={packets}",
             f"{TOPICS['vlp32'][1]}:={NAMESPACE}/waiting/points"],
        )  # fmt: skip
    finally:
        recorder.close()
    assert done.returncode == 0, done.stderr
    assert "fewer than 1 subscriber(s) after 10 s; replaying anyway" in done.stderr


def run_replay(env: dict[str, str], argv: list[str]):
    """``replay ARGV --quiet`` as its own process, nobody subscribed; its result."""
    return run([str(BIN / "replay"), *argv, "--quiet"], env, timeout_s=DEADLINE_S)


@pytest.mark.slow
@pytest.mark.parametrize("packets", [[], ["--packets", "both"]])
def test_without_the_sensor_both_plays_the_packets_with_a_note(msgs_env, packets: list[str]):
    topic = TOPICS["vlp32"][0]
    remap = ["--remap", f"{topic}:={NAMESPACE}{topic}"]
    done = run_replay(msgs_env, [str(bag_of("vlp32")), *packets, *remap])
    assert done.returncode == 0, done.stderr
    assert f"replaying {topic} -> {NAMESPACE}{topic} from" in done.stderr
    [note] = [line for line in done.stderr.splitlines() if line.startswith("note:")]
    assert note == (
        f"note: {topic} play as recorded only (--packets raw): decoding them needs the sensor "
        "(--sensor-model or --sensor-params)"
    )
    assert "replay done: 5 packet messages in" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--packets", "raw", "--remap", "/pointcloud_raw_ex:=/x"],
            "cannot remap /pointcloud_raw_ex: not replayed (replayed topics: /velodyne_packets "
            "(as recorded))",
        ),
        (
            ["--sensor-model", "VLP16", "--remap", "/velodyne_packets:=/pointcloud_raw_ex"],
            "/pointcloud_raw_ex would carry both velodyne_msgs/msg/VelodyneScan and "
            "sensor_msgs/msg/PointCloud2 messages: --remap one of them to another name",
        ),
    ],
)
def test_packet_output_errors_are_one_line(msgs_env, argv: list[str], message: str):
    done = run_replay(msgs_env, [str(bag_of("vlp16")), *argv])
    assert done.returncode == 2
    assert done.stderr.strip() == f"replay: error: {message}", done.stderr


def wait_until(condition, timeout_s: float = DEADLINE_S) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout_s`` passed (False)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.slow
def test_node_on_input_packets_fed_by_replay(msgs_env, tmp_path: Path):
    """The README's packet example: ``euclidean_cluster_node`` (its own process) with
    ``sensor_model`` and ``input/packets`` remapped, fed by ``replay --packets raw`` of the real
    VLS-128 bag (another process): every labelled cloud holds the library's sweep of those
    packets, with the library's cluster labels of it.

    The node clusters the newest sweep and drops one it had no time for (a CPU node on loaded
    cores may), so not every sweep need come out; the last one always does: nothing replaces it.
    """
    bag, calibration, settings = packet_node.SENSORS["VLS128"]
    data = NEBULA.parent
    expected = packet_node.expected_sweeps(data / bag, data / calibration, settings)
    assert len(expected) >= 2
    last = max(expected)
    params = ["-p", "backend:=cpu", "-p", "qos_reliability:=reliable"]
    params += [arg for name, value in [
        ("sensor_model", "VLS128"), ("calibration_file", data / calibration),
        ("return_mode", settings.return_mode), ("sensor_min_range", settings.min_range),
        ("sensor_max_range", settings.max_range), ("scan_phase", settings.scan_phase),
        ("cloud_min_angle", settings.cloud_min_angle),
        ("cloud_max_angle", settings.cloud_max_angle),
    ] for arg in ("-p", f"{name}:={value}")]  # fmt: skip
    node_topic = f"{packet_node.NAMESPACE}/sensing/lidar/top/velodyne_packets"
    with private_domain() as domain:
        node = Background(
            [str(BIN / "euclidean_cluster_node"), "--ros-args",
             "-r", f"__ns:={packet_node.NAMESPACE}", *params,
             "-r", f"input/packets:={node_topic}"],
            msgs_env, tmp_path / "node.log",
        )  # fmt: skip
        recorder = packet_node.LabeledRecorder(domain)
        try:
            # the labelled output is there before any packet is (replay waits for the input)
            assert wait_until(lambda: recorder.node.count_publishers(packet_node.LABELED) > 0)
            replaying = Background(
                [str(BIN / "replay"), str(data / bag), "--packets", "raw", "--rate", "0.25",
                 "--remap", f"/velodyne_packets:={node_topic}", "--quiet",
                 "--wait-for-subscribers", str(WAIT_FOR_SUBSCRIBERS_S)],
                msgs_env, tmp_path / "replay.log",
            )  # fmt: skip
            wait_until(lambda: last in {stamp_ns(cloud) for cloud in list(recorder.clouds)})
            replaying.process.wait(timeout=DEADLINE_S)
            replaying.close()
        finally:
            recorder.close()
            node.stop()
    replay_log = (tmp_path / "replay.log").read_text()
    node_log = (tmp_path / "node.log").read_text()
    assert f"replaying /velodyne_packets -> {node_topic}" in replay_log, replay_log
    assert "replay done: 4 packet messages" in replay_log, replay_log
    stamps = [stamp_ns(cloud) for cloud in recorder.clouds]
    assert stamps[-1:] == [last], (stamps, sorted(expected), replay_log, node_log)
    assert stamps == sorted(set(stamps)) and set(stamps) <= set(expected), stamps
    packet_node.assert_labelled_sweeps(
        recorder.clouds, expected, ("x", "y", "z", "time_stamp", "channel")
    )


# --- bad input: one line on stderr, exit status 2 -------------------------------------------


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    status = cli.main(["replay", "--quiet", *argv])
    return status, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--packets", "decoded"],
            "Velodyne packets need the sensor model: give --sensor-model",
        ),
        (["--sensor-model", "VLP64"], "unknown Velodyne sensor model 'VLP64' (--sensor-model)"),
        (
            ["--packets", "decoded", "--sensor-model", "VLP32", "--calibration", "absent.yaml"],
            "calibration file not found",
        ),
        (["--packets", "decoded", "--sensor-model", "HDL64"], "HDL64 has no default calibration"),
        (
            ["--packets", "decoded", "--sensor-params", "absent.param.yaml"],
            "sensor parameter file not found",
        ),
        (
            ["--packets", "decoded", "--sensor-model", "VLP32", "--scan-phase", "400"],
            "--scan-phase must be in [0.0, 360.0], got 400.0",
        ),
        (
            ["--packets", "decoded", "--sensor-model", "VLP32", "--remap", "/points:=/x"],
            "cannot remap /points",
        ),
        (["--packets", "bogus"], "argument --packets: invalid choice: 'bogus'"),
        (["--packets"], "argument --packets: expected one argument"),
    ],
)
def test_errors_are_one_line(capsys, argv: list[str], message: str):
    status, err = run_cli([str(bag_of("vlp32")), *argv], capsys)
    assert status == 2
    assert len(err.splitlines()) == 1 and message in err, err


def test_bad_packets_value_in_the_console_script_and_the_options(capsys):
    assert replay.main([str(bag_of("vlp32")), "--packets", "RAW"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "argument --packets: invalid choice: 'RAW'" in err, err
    with pytest.raises(ValueError, match="--packets must be raw, decoded or both, got 'all'"):
        replay.ReplayOptions(bag=bag_of("vlp32"), packets="all")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--packets", "raw"],
            "--packets raw publishes the recorded messages and needs the velodyne_msgs Python "
            "package",
        ),
        (
            ["--packets", "both", "--sensor-model", "VLP32"],
            "--packets both publishes the recorded messages and needs the velodyne_msgs Python "
            "package",
        ),
        (  # the default falls back to the sweeps, which need the sensor: both remedies
            [],
            "Velodyne packets need the sensor model: give --sensor-model",
        ),
    ],
)
def test_without_velodyne_msgs_the_packets_are_refused_in_one_line(
    without_velodyne_msgs, capsys, argv: list[str], message: str
):
    status, err = run_cli([str(bag_of("vlp32")), *argv], capsys)
    assert status == 2
    assert len(err.splitlines()) == 1 and message in err, err
    assert "source $VIRTUAL_ENV/opt/msgs/setup.bash" in err, err  # how to get it


def test_sensor_params_model_is_checked(tmp_path: Path, capsys):
    params = tmp_path / "bad.param.yaml"
    params.write_text("/**:\n  ros__parameters:\n    sensor_model: VLP32MR\n")
    status, err = run_cli([str(bag_of("vlp32")), "--sensor-params", str(params)], capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert f"unknown Velodyne sensor model 'VLP32MR' (sensor_model in {params})" in err


# --- decoder options: the node's ranges (one table), the files read as the node reads them ----


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--min-range", "nan"], "--min-range must be in [0.0, .inf), got nan"),
        (["--max-range", "-1"], "--max-range must be in (0.0, .inf], got -1.0"),
        (["--max-range", "0"], "--max-range must be in (0.0, .inf], got 0.0"),
        (["--scan-phase", "nan"], "--scan-phase must be in [0.0, 360.0], got nan"),
        (["--cloud-max-angle", "361"], "--cloud-max-angle must be in [0, 360], got 361"),
        (["--return-mode", "Triple"], "--return-mode must be one of SingleFirst, "),
        (["--frame-id", ""], "argument --frame-id: a frame id must not be empty, got ''"),
        (
            ["--min-range", "400"],
            "Velodyne decoder settings: --min-range 400.0 is not below the default --max-range "
            "300.0: no return would be kept",
        ),
        (
            ["--cloud-min-angle", "90", "--cloud-max-angle", "90"],
            "--cloud-min-angle 90 equals --cloud-max-angle 90: no azimuth would be kept",
        ),
    ],
)
def test_decoder_options_are_refused_naming_the_option(capsys, argv: list[str], message: str):
    """Both front ends, the sub-command and the console script: one line naming the option."""
    argv = [str(bag_of("vlp32")), "--packets", "decoded", "--sensor-model", "VLP32", *argv]
    status, err = run_cli(argv, capsys)
    assert status == 2
    assert len(err.splitlines()) == 1 and message in err, err
    assert replay.main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


@pytest.mark.parametrize(
    "setting", [name for name, parameter in SETTING_PARAMETERS.items() if SPECS[parameter].bounds]
)
def test_decoder_options_take_exactly_the_nodes_range(setting: str):
    """Each option with a range takes what the node's parameter for the same setting takes, at
    both ends, just outside them and beyond (the node's own check: ``range_problems``)."""
    spec = SPECS[SETTING_PARAMETERS[setting]]
    low, high = spec.bounds
    step = 1 if isinstance(spec.default, int) else 1e-6
    values = [low, high, low - step, high + step, -math.inf, math.inf]
    if not isinstance(spec.default, int):
        values.append(math.nan)
    for value in values:
        node_takes = not range_problems({spec.name: value})
        try:
            VelodyneOptions(**{setting: value})
        except ValueError as error:
            assert not node_takes, (setting, value, str(error))
            assert str(error).startswith(f"{SETTING_OPTIONS[setting]} must be in "), str(error)
        else:
            assert node_takes, (setting, value)


def write_params(folder: Path, lines: str) -> Path:
    """A VLP-32 sensor parameter file with ``lines`` (YAML, 4 spaces in) among its parameters."""
    params = folder / "VLP32.param.yaml"
    params.write_text(f"/**:\n  ros__parameters:\n    sensor_model: VLP32\n{lines}")
    return params


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("    min_range: .nan\n", "min_range must be in [0.0, .inf), got nan"),
        ("    max_range: -1\n", "max_range must be in (0.0, .inf], got -1"),
        ("    scan_phase: 1e999\n", "scan_phase must be in [0.0, 360.0], got inf"),
        ("    cloud_max_angle: 1" + "0" * 400 + "\n", "cloud_max_angle must be in [0, 360]"),
        ("    cloud_min_angle: .inf\n", "cloud_min_angle is not whole degrees: inf"),
        ("    return_mode: Triple\n", "return_mode must be one of SingleFirst, "),
        ("    frame_id: ''\n", "frame_id must not be empty, got ''"),
        (
            "    min_range: 50.0\n    max_range: 40.0\n",
            "Velodyne decoder settings: min_range of {params} 50.0 is not below max_range of "
            "{params} 40.0: no return would be kept",
        ),
    ],
    ids=[
        "nan-min-range",
        "negative-max-range",
        "infinite-scan-phase",
        "huge-cloud-angle",
        "infinite-cloud-angle",
        "unknown-return-mode",
        "empty-frame-id",
        "min-above-max",
    ],
)
def test_sensor_params_values_are_refused_naming_the_file(
    tmp_path: Path, capsys, lines: str, message: str
):
    params = write_params(tmp_path, lines)
    argv = [str(bag_of("vlp32")), "--packets", "decoded", "--sensor-params", str(params)]
    status, err = run_cli(argv, capsys)
    assert status == 2
    assert len(err.splitlines()) == 1 and message.format(params=params) in err, err
    assert str(params) in err, err


def test_sensor_params_option_overrides_a_bad_file_value(tmp_path: Path):
    """An option replaces the file's value before the settings are checked together."""
    params = write_params(tmp_path, "    min_range: 50.0\n    max_range: 40.0\n")
    decoding = VelodyneOptions(sensor_params=params, max_range=60.0).resolve()
    assert (decoding.settings.min_range, decoding.settings.max_range) == (50.0, 60.0)


@pytest.mark.parametrize("option", ["--calibration", "--sensor-params"])
@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_calibration_and_params_files_are_read_only_when_regular_and_small(
    tmp_path: Path, option: str, kind: str
):
    """A FIFO (no writer: opening it to read would wait forever), a device (endless) and a
    file over the calibration bound, as ``--calibration`` or ``--sensor-params``: ``replay``, its
    own process, refuses it at start-up in one line, exit status 2, within the deadline."""
    path = tmp_path / "sensor.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path = Path("/dev/zero")
    else:
        path.write_text("# padding\n" * 20_000)  # 200 kB of comments: valid YAML
    argv = [str(BIN / "replay"), str(bag_of("vlp32")), "--quiet", "--packets", "decoded"]
    argv += ["--sensor-model", "VLP32", option, str(path)]
    with private_domain() as domain:
        done = run(argv, user_env(domain), timeout_s=DEADLINE_S)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    reason = "bytes, over the" if kind == "huge" else "not a regular file"
    assert len(lines) == 1 and lines[0].startswith("replay: error: "), done.stderr
    assert str(path) in lines[0] and reason in lines[0], done.stderr


def test_defaults_are_nebulas():
    decoding = VelodyneOptions(sensor_model="vls128").resolve()
    assert decoding.settings == DecoderSettings("VLS128")
    assert decoding.calibration_file.name == "VLS128.yaml"
    assert decoding.calibration_file.read_bytes() == (CALIBRATION / "VLS128.yaml").read_bytes()


def test_messages_the_decoder_refuses_are_noted_and_skipped(tmp_path: Path):
    """A bag holding a message over the VLP-16's budget, another model's packets and a sensor
    that never turns, then a turning one: each refusal is one note naming its kind and bag time,
    the recorded messages still play, and the turning sensor's sweeps are decoded as a fresh
    decoder's."""
    from rosbags.rosbag2 import Writer

    from ..._velodyne_helpers import hostile_messages, rotating_packets, scan_message

    hostile = [cdr for _, cdr in hostile_messages(603, 0x22, 0x28)]
    turning = rotating_packets(180, product=0x22)
    good = [scan_message(turning[60 * i : 60 * (i + 1)], 50.0 + i) for i in range(3)]
    bag = tmp_path / "hostile"
    with Writer(bag, version=8) as writer:
        typestore = velodyne_typestore()
        scan_type = "velodyne_msgs/msg/VelodyneScan"
        connection = writer.add_connection("/velodyne_packets", scan_type, typestore=typestore)
        for i, cdr in enumerate([*hostile, *good]):
            writer.write(connection, 1_000_000_000 * (i + 1), cdr)
    options = VelodyneOptions(sensor_model="VLP16", return_mode="SingleStrongest")
    notes: list[str] = []
    stream = packet_player.PacketStream(
        bag, ["/velodyne_packets"], True, options.resolve(), notes.append
    )
    messages = list(stream.messages(None, None))
    played = [m for m in messages if isinstance(m, packet_player.PacketMessage)]
    sweeps = [m for m in messages if isinstance(m, packet_player.SweepMessage)]
    assert [m.cdr for m in played] == [*hostile, *good]  # played as recorded, every one
    kinds = ["message_over_budget", "other_model", "sweep_over_budget"]
    assert [note.split("(")[1].split(")")[0] for note in notes] == kinds, notes
    assert all(
        note.startswith("note: velodyne_msgs/msg/VelodyneScan message on ") for note in notes
    )
    assert "at bag time 1000000000 ns" in notes[0]
    fresh = SweepDecoder(stream.calibration, options.resolve().settings)
    expected = [s for cdr in good for s in fresh.feed(*_packets_and_seconds(cdr))]
    assert len(sweeps) == len(expected) == 2
    for message, sweep in zip(sweeps, expected, strict=True):
        assert message.sweep.points.tobytes() == sweep.points.tobytes()


def _packets_and_seconds(cdr: bytes) -> tuple[np.ndarray, np.ndarray]:
    from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_from_cdr

    scan = scan_from_cdr(cdr)
    return scan.packets, scan.packet_seconds
