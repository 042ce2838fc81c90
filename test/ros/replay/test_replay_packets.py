"""Replay of Velodyne packet bags: nebula's three real bags, decoded and published as Autoware's
``pointcloud_raw_ex``, into a subscriber in this process.

Each published cloud must be the ``PointXYZIRCAEDT`` PointCloud2 of the sweep the CPU decoder
gives for the same packets (fed as nebula's ROS driver feeds its decoder: the packet stamps in
whole nanoseconds), byte for byte, with nebula's header stamp; and the sweep completed by the
message that names nebula's PCD must carry that PCD's points. (nebula's decoder test fed
``stamp.sec`` only, so its PCD's ``time_stamp`` column differs from the driver's; every other
field is compared.)
"""

from __future__ import annotations

import io
import threading
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
from gpu_euclidean_cluster.ros.parameters.velodyne_options import VelodyneOptions

from ..._replay_helpers import NS, Recorder, decode_cdr, make_frames, write_bag
from ...pointcloud_io.test_velodyne_decoder import CALIBRATION, CASES, NEBULA

rclpy = pytest.importorskip("rclpy")
replay = pytest.importorskip("gpu_euclidean_cluster.ros.replay.replay")
bag_player = pytest.importorskip("gpu_euclidean_cluster.ros.replay.bag_player")

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
TIMING_TOLERANCE_S = 0.08
#: PointField datatypes of POINT_DTYPE's fields (FLOAT32 7, UINT8 2, UINT16 4, UINT32 6)
DATATYPES = {"<f4": 7, "|u1": 2, "<u2": 4, "<u4": 6}


def bag_of(folder: str) -> Path:
    return NEBULA / folder / CASES[folder][0]


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


def play(options, topics: list[str], expected: int) -> tuple[dict, str]:
    """Replay ``options`` into a recorder of ``topics``; return what arrived and the log."""
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
        thread.join(20.0)
        assert "error" not in outcome, outcome.get("error")
        assert not thread.is_alive(), "replay did not finish"
        for topic in topics:
            recorder.wait_for(topic, expected, 5.0)
        received = dict(recorder.received)
    finally:
        recorder.close()
    return received, stream.getvalue()


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


@pytest.mark.parametrize("folder", sorted(CASES))
def test_packet_bag_plays_nebulas_sweeps(folder: str):
    stem, settings = CASES[folder][1], CASES[folder][2]
    packets_topic, cloud_topic = TOPICS[folder]
    sweeps = expected_sweeps(folder)
    options = replay.ReplayOptions(
        bag=bag_of(folder),
        velodyne=velodyne_options(folder),
        wait_for_subscribers_s=5.0,
        progress=False,
    )
    received, log = play(options, [cloud_topic], len(sweeps))
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
    # published at the bag times of the completing messages
    bag_gaps = np.diff([time_ns for time_ns, _ in sweeps]) / NS
    np.testing.assert_allclose(np.diff(clouds.times), bag_gaps, atol=TIMING_TOLERANCE_S)
    if folder == "vls128":  # its metadata.yaml leaves serialization_format empty
        notes = [line for line in log.splitlines() if line.startswith("note:")]
        assert len(notes) == 1 and "metadata.yaml is damaged or incomplete" in notes[0]


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
            "--wait-for-subscribers",
            "5",
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
        recorder.wait_for("/decoded", len(sweeps), 5.0)
        clouds = recorder.received["/decoded"].raw
    finally:
        recorder.close()
    assert len(clouds) == len(sweeps) == 4
    for raw, (_, sweep) in zip(clouds, sweeps, strict=True):
        check_cloud(raw, sweep, "velodyne_front")


def test_bag_with_clouds_and_packets_plays_both(tmp_path: Path):
    """The VLP-16 packets copied into a bag beside a PointCloud2 topic; ``--remap`` by the
    packets topic's name; ``--rate-hz`` puts every message, cloud or sweep, on one schedule."""
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
        remap={"/velodyne_packets": "/vlp16/points"},
        rate_hz=20.0,
        wait_for_subscribers_s=5.0,
        progress=False,
    )
    received, _ = play(options, ["/points_raw", "/vlp16/points"], len(frames))
    assert [bytes(decode_cdr(r).data) for r in received["/points_raw"].raw] == [
        f.payload for f in frames
    ]
    assert len(received["/vlp16/points"].raw) == len(sweeps)
    for raw, (_, sweep) in zip(received["/vlp16/points"].raw, sweeps, strict=True):
        check_cloud(raw, sweep, "velodyne")
    times = sorted(received["/points_raw"].times + received["/vlp16/points"].times)
    np.testing.assert_allclose(np.diff(times), 0.05, atol=TIMING_TOLERANCE_S / 2)


def test_ros1_packet_bag_decodes_the_same(tmp_path: Path):
    """The VLP-16 scans in a ROS 1 bag (Autoware.AI's format) give the same sweeps."""
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    from gpu_euclidean_cluster.ros.replay.packet_player import PacketStream

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
    got = list(PacketStream(path, ["/velodyne_packets"], decoding).messages(None, None))
    expected = expected_sweeps("vlp16")
    assert [m.timestamp_ns for m in got] == [t for t, _ in expected]
    for message, (_, sweep) in zip(got, expected, strict=True):
        assert message.sweep.points.tobytes() == sweep.points.tobytes()
        assert message.sweep.stamp == sweep.stamp


# --- bad input: one line on stderr, exit status 2 -------------------------------------------


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    status = cli.main(["replay", "--quiet", *argv])
    return status, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "Velodyne packets need the sensor model: give --sensor-model"),
        (["--sensor-model", "VLP64"], "unknown Velodyne sensor model 'VLP64' (--sensor-model)"),
        (["--sensor-model", "VLP32", "--calibration", "absent.yaml"], "calibration file not found"),
        (["--sensor-model", "HDL64"], "HDL64 has no default calibration"),
        (["--sensor-params", "absent.param.yaml"], "sensor parameter file not found"),
        (["--sensor-model", "VLP32", "--scan-phase", "400"], "scan_phase 400.0 outside [0, 360]"),
        (["--sensor-model", "VLP32", "--remap", "/points:=/x"], "cannot remap /points"),
    ],
)
def test_errors_are_one_line(capsys, argv: list[str], message: str):
    status, err = run_cli([str(bag_of("vlp32")), *argv], capsys)
    assert status == 2
    assert len(err.splitlines()) == 1 and message in err, err


def test_sensor_params_model_is_checked(tmp_path: Path, capsys):
    params = tmp_path / "bad.param.yaml"
    params.write_text("/**:\n  ros__parameters:\n    sensor_model: VLP32MR\n")
    status, err = run_cli([str(bag_of("vlp32")), "--sensor-params", str(params)], capsys)
    assert status == 2 and len(err.splitlines()) == 1
    assert f"unknown Velodyne sensor model 'VLP32MR' (sensor_model in {params})" in err


def test_defaults_are_nebulas():
    decoding = VelodyneOptions(sensor_model="vls128").resolve()
    assert decoding.settings == DecoderSettings("VLS128")
    assert decoding.calibration_file.name == "VLS128.yaml"
    assert decoding.calibration_file.read_bytes() == (CALIBRATION / "VLS128.yaml").read_bytes()
