"""``replay --sensor-kit`` and ``--concatenate``: a vehicle's bag played as its sensor kit says.

The bag is written here from nebula's real packet bags: the VLS-128's messages on the sample
kit's top LiDAR topic, the VLP-16's on its left and right ones (and one on a rear topic the kit
does not have), at bag times chosen so that the kit's naive matching groups them one way only
(:data:`SCHEDULE`). The kit is the sample kit with each sensor's decoder settings those of the
bag it is fed (``test_vehicle_input.write_kit_file``).

The replay runs as its own process, as a user runs it, into a subscriber in this process: each
sensor's ``pointcloud_raw_ex`` must be the library's sweeps of its packets decoded with that
sensor's settings (bytes, stamp, the sensor's frame), and the concatenated cloud what the frame
layer's ``VehicleSweeps`` joins of the same sequence (bytes, stamp, ``base_link``), on every pass.
When each joined cloud is due (the bag time its group closed) is checked on the player's stream,
where it does not depend on the machine's load; so are the notes' throttle and a points sensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from gpu_euclidean_cluster.frame.vehicle import JOINED_DTYPE, VehicleSweeps
from gpu_euclidean_cluster.pointcloud_io.bags import POINTCLOUD2, BagMessage
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import load_sensor_kit
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    SweepDecoder,
    load_calibration,
    read_velodyne_scans,
    velodyne_typestore,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.bags import VELODYNE_SCAN
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr

from ..._replay_helpers import NS, Recorder, decode_cdr
from ..._ros2_tools import BIN, own_namespace, private_domain, run, user_env
from ...frame.test_vehicle import BAG_OF
from ...pointcloud_io.test_velodyne_decoder import CASES, NEBULA

rclpy = pytest.importorskip("rclpy")
packet_player = pytest.importorskip("gpu_euclidean_cluster.ros.replay.packet_player")
kit_player = pytest.importorskip("gpu_euclidean_cluster.ros.replay.sensor_kit_player")

from ..node.test_vehicle_input import write_kit_file  # noqa: E402  (needs rclpy)

pytestmark = [
    pytest.mark.ros,
    pytest.mark.skipif(
        not NEBULA.is_dir(), reason=f"nebula packet bags not found at {NEBULA} (set LIDAR_DATA_DIR)"
    ),
]

MS = 1_000_000
BAG_START_NS = 1_700_000_000 * NS
SENSORS = ("top", "left", "right")
TOPICS = {name: f"/sensing/lidar/{name}/velodyne_packets" for name in (*SENSORS, "rear")}
KIT_TOPICS = [TOPICS[name] for name in SENSORS]
CONCATENATED = "/sensing/lidar/concatenated/pointcloud"
#: (sensor, ms after the bag's start) of every message, in time order; each message completes one
#: sweep. Three rounds of the three LiDARs 10 ms apart: a naive group each, complete at the right
#: LiDAR's sweep. The top LiDAR's fourth alone: its group closes at its 0.2 s timeout (500 ms)
#: without left and right. The side LiDARs' fourth 0.4 s later: left's comes after the group it
#: would have joined closed (a late sweep), and their group closes at the end of the pass without
#: top. The rear LiDAR is not in the kit.
SCHEDULE = [
    ("top", 0), ("left", 10), ("right", 20), ("rear", 50),
    ("top", 100), ("left", 110), ("right", 120),
    ("top", 200), ("left", 210), ("right", 220),
    ("top", 300), ("left", 700), ("right", 710),
]  # fmt: skip
#: When each joined cloud is due (ms after the bag's start), how its group closed, who is missing.
JOINED = [
    (20, "complete", ()),
    (120, "complete", ()),
    (220, "complete", ()),
    (500, "timeout", ("right", "left")),
    (710, "flush", ("top",)),
]
#: Generous bounds of waits for conditions (discovery, two processes on 2 loaded cores).
DEADLINE_S = 120.0
NAMESPACE = own_namespace("replay_sensor_kit")


@pytest.fixture(scope="module")
def vehicle(tmp_path_factory) -> tuple[Path, Path]:
    """The vehicle bag (:data:`SCHEDULE`) and the kit for it."""
    from rosbags.rosbag2 import Writer

    folder = tmp_path_factory.mktemp("vehicle")
    scans = {b: list(read_velodyne_scans(NEBULA / b / CASES[b][0])) for b in ("vls128", "vlp16")}
    bag = folder / "vehicle_bag"
    used = dict.fromkeys(TOPICS, 0)
    with Writer(bag, version=9) as writer:
        store = velodyne_typestore()
        connections = {
            name: writer.add_connection(topic, VELODYNE_SCAN, typestore=store)
            for name, topic in TOPICS.items()
        }
        for name, ms in SCHEDULE:
            scan = scans[BAG_OF.get(name, "vlp16")][used[name]]
            used[name] += 1
            writer.write(connections[name], BAG_START_NS + ms * MS, scan_to_cdr(scan))
    return bag, write_kit_file(folder)


def sensor_sweeps(bag: Path, kit_path: Path) -> list[tuple[int, str, object]]:
    """``(bag time, sensor, sweep)`` of every kit sensor's sweeps in bag-time order, each sensor's
    packets read from the bag by the library and decoded with its own settings."""
    kit = load_sensor_kit(kit_path)
    found = []
    for sensor in kit.sensors:
        calibration = load_calibration(sensor.input.calibration)
        decoder = SweepDecoder(calibration, sensor.input.decoder)
        for scan in read_velodyne_scans(bag, [sensor.input.topic]):
            for sweep in decoder.feed(scan.packets, scan.packet_seconds):
                found.append((scan.bag_time_ns, sensor.name, sweep))
    return sorted(found, key=lambda item: item[0])


def frame_layer_clouds(kit_path: Path, sweeps: list[tuple[int, str, object]]) -> list:
    """The joined clouds the frame layer's CPU ``VehicleSweeps`` makes of ``sweeps``, arriving
    at their bag times (the groups' timeouts checked at each arrival, the rest flushed)."""
    kit = load_sensor_kit(kit_path)
    vehicle = VehicleSweeps(kit, calibration_file=lambda sensor: Path(sensor.input.calibration))
    clouds = []
    for time_ns, name, sweep in sweeps:
        clouds += vehicle.poll(time_ns).clouds
        stamp_ns = int(sweep.stamp * 1e9)  # the stamp of the sensor's published cloud
        clouds += vehicle.feed_sweep(name, sweep.points, stamp_ns, time_ns).clouds
    return clouds + list(vehicle.flush(sweeps[-1][0]).clouds)


def stamp_of(message) -> int:
    return message.header.stamp.sec * NS + message.header.stamp.nanosec


# --- as a user runs it ------------------------------------------------------------------------


def test_each_sensor_decoded_with_its_own_settings_and_the_sweeps_joined(vehicle) -> None:
    """Two passes (``--repeat 2``: a fresh vehicle each), ``--topics`` leaving the rear LiDAR
    out, every output remapped into the test's namespace, ``--clock``."""
    bag, kit_path = vehicle
    kit = load_sensor_kit(kit_path)
    sweeps = sensor_sweeps(bag, kit_path)
    joined = frame_layer_clouds(kit_path, sweeps)
    assert [(cloud.group.trigger, cloud.group.missing) for cloud in joined] == [
        (trigger, missing) for _, trigger, missing in JOINED
    ]
    outputs = {name: f"{NAMESPACE}/{name}/points" for name in SENSORS}
    outputs["concatenated"] = f"{NAMESPACE}/concatenated"
    remaps = [f"/sensing/lidar/{name}/pointcloud_raw_ex:={outputs[name]}" for name in SENSORS] + [
        f"{CONCATENATED}:={outputs['concatenated']}"
    ]
    passes = 2
    recorder = Recorder(list(outputs.values()), clock=True)
    try:
        with private_domain() as domain:
            done = run(
                [str(BIN / "replay"), str(bag), "--sensor-kit", str(kit_path), "--concatenate",
                 "--packets", "decoded", "--topics", *KIT_TOPICS, "--repeat", str(passes),
                 "--clock", "--quiet", "--wait-for-subscribers", str(DEADLINE_S / 2),
                 "--remap", *remaps],
                user_env(domain), timeout_s=DEADLINE_S,
            )  # fmt: skip
        log = done.stdout + done.stderr
        assert done.returncode == 0, log
        for name, topic in outputs.items():
            count = len(joined) if name == "concatenated" else sum(s[1] == name for s in sweeps)
            assert recorder.wait_for(topic, passes * count, DEADLINE_S), (name, log)
        received = {name: list(recorder.received[topic].raw) for name, topic in outputs.items()}
        clock_ns = list(recorder.clock_ns)
    finally:
        recorder.close()
    # each sensor's sweeps: the library's, decoded with that sensor's settings, in its frame
    for sensor in kit.sensors:
        expected = [sweep for _, name, sweep in sweeps if name == sensor.name] * passes
        assert len(received[sensor.name]) == len(expected), sensor.name
        for raw, sweep in zip(received[sensor.name], expected, strict=True):
            message = decode_cdr(raw)
            assert message.header.frame_id == sensor.frame
            assert stamp_of(message) == int(sweep.stamp * 1e9)
            assert bytes(message.data) == sweep.points.tobytes()
    # the joined clouds: the frame layer's of the same sequence, on every pass
    assert len(received["concatenated"]) == passes * len(joined)
    for raw, cloud in zip(received["concatenated"], joined * passes, strict=True):
        message = decode_cdr(raw)
        assert message.header.frame_id == "base_link"
        assert stamp_of(message) == cloud.stamp_ns
        fields = [(f.name, f.offset) for f in message.fields]
        assert fields == [(name, JOINED_DTYPE.fields[name][1]) for name in JOINED_DTYPE.names]
        assert (message.width, message.point_step) == (cloud.cloud.width, JOINED_DTYPE.itemsize)
        assert bytes(message.data) == np.asarray(cloud.cloud.data).tobytes()
    # what it said: each topic's sensor, the joined output, the groups missing a sensor
    for sensor in kit.sensors:
        assert (
            f"decoding {sensor.input.topic} with sensor {sensor.name}'s settings of kit "
            f"sample_sensor_kit: {sensor.input.decoder.model}"
        ) in log, log
    assert (
        f"joining right, top, left into base_link -> {outputs['concatenated']}: naive matching, "
        "timeout 0.2 s of bag time"
    ) in log, log
    missing = [line for line in log.splitlines() if line.startswith("note: joined cloud")]
    assert len(missing) == 2 * passes, log
    assert f"at bag time {BAG_START_NS + 500 * MS} ns (timeout) without right, left" in missing[0]
    assert f"at bag time {BAG_START_NS + 710 * MS} ns (flush) without top" in missing[1]
    frames = passes * (len(sweeps) + len(joined))
    assert (
        f"replay done: {frames} frames ({passes * len(sweeps)} decoded sweeps, "
        f"{passes * len(joined)} joined clouds) in"
    ) in log, log
    # /clock carries the bag's time, not the wall clock (two years apart)
    assert clock_ns, log
    assert all(BAG_START_NS - NS <= t < BAG_START_NS + 60 * NS for t in clock_ns), clock_ns


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--sensor-model", "VLP16"],
            "--sensor-kit gives each sensor's model, calibration and decoder settings: drop "
            "--sensor-model",
        ),
        (
            ["--min-range", "1", "--calibration", "VLP16.yaml"],
            "--sensor-kit gives each sensor's model, calibration and decoder settings: drop "
            "--calibration, --min-range",
        ),
        (
            [],  # the rear LiDAR's topic
            f"{TOPICS['rear']}: not among the packets topics of sensor kit sample_sensor_kit "
            f"(KIT): {', '.join(KIT_TOPICS)}; leave it out with --topics",
        ),
        (
            ["--packets", "raw"],
            "--packets raw plays packet topics as recorded, undecoded: --sensor-kit (how to "
            "decode them) has no use there; use --packets decoded or both",
        ),
    ],
    ids=["sensor_model", "decoder_options", "topic_not_in_kit", "packets_raw"],
)
def test_what_a_kit_excludes_is_refused_in_one_line(vehicle, argv: list[str], message: str):
    bag, kit_path = vehicle
    with private_domain() as domain:
        done = run(
            [str(BIN / "replay"), str(bag), "--sensor-kit", str(kit_path), *argv, "--quiet"],
            user_env(domain),
            timeout_s=DEADLINE_S,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"replay: error: {message.replace('KIT', str(kit_path))}"


def test_concatenate_needs_a_kit(vehicle) -> None:
    bag, _ = vehicle
    with private_domain() as domain:
        done = run([str(BIN / "replay"), str(bag), "--concatenate"], user_env(domain))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "replay: error: --concatenate joins the sweeps of a sensor kit's LiDARs: give --sensor-kit"
    )


# --- the player's stream: when each joined cloud is due -----------------------------------------


def kit_stream(vehicle, note) -> tuple[object, object]:
    """The kit's plan for the vehicle bag (the rear LiDAR left out) and its packet stream."""
    bag, kit_path = vehicle
    kit, path = kit_player.load_kit(str(kit_path))
    bag_types = dict.fromkeys(TOPICS.values(), VELODYNE_SCAN)
    plan = kit_player.plan_kit(kit, path, bag_types, KIT_TOPICS)
    assert plan.notes == ()
    return plan, packet_player.PacketStream(bag, KIT_TOPICS, False, plan.decodings, note)


def test_joined_clouds_are_due_when_their_groups_close_in_bag_time(vehicle, monkeypatch) -> None:
    """Each joined cloud right after the sweep that completed its group, or at its group's
    timeout, or at the pass's end, in bag time; the same on every pass; the concatenation's notes
    beyond the first (here 1) counted at each pass's end."""
    monkeypatch.setattr(kit_player, "CONCATENATION_NOTES", 1)
    notes: list[str] = []
    plan, stream = kit_stream(vehicle, notes.append)
    concatenation = kit_player.Concatenation(plan, notes.append)
    expected = frame_layer_clouds(vehicle[1], sensor_sweeps(*vehicle))
    for _ in range(2):
        messages = list(concatenation.messages(stream.messages(None, None)))
        times = [message.timestamp_ns for message in messages]
        assert times == sorted(times)
        joined = [m for m in messages if isinstance(m, kit_player.JoinedMessage)]
        assert [
            ((m.timestamp_ns - BAG_START_NS) // MS, m.joined.group.trigger, m.joined.group.missing)
            for m in joined
        ] == JOINED
        assert [m.with_message for m in joined] == [True, True, True, False, False]
        for message in joined[:3]:  # right after the right LiDAR's sweep that completed it
            before = messages[messages.index(message) - 1]
            assert isinstance(before, packet_player.SweepMessage)
            assert before.topic == TOPICS["right"] and before.timestamp_ns == message.timestamp_ns
        for message, cloud in zip(joined, expected, strict=True):
            assert message.joined.sources == cloud.sources
            assert message.joined.cloud.data.tobytes() == cloud.cloud.data.tobytes()
            assert decode_cdr(message.cdr).header.frame_id == "base_link"
        sweeps = [m for m in messages if isinstance(m, packet_player.SweepMessage)]
        frames = {m.topic: m.sweep.frame_id for m in sweeps}
        assert frames == {TOPICS[name]: f"velodyne_{name}" for name in SENSORS}
    pass_notes = [
        f"note: joined cloud closed at bag time {BAG_START_NS + 500 * MS} ns (timeout) without "
        "right, left: Concatenated pointcloud is published but misses some topics",
        "note: 2 more concatenation notes in this pass (late 1, missing 1)",
    ]
    assert notes == pass_notes * 2


def test_a_points_sensor_joins_its_recorded_clouds(vehicle) -> None:
    """A kit whose left LiDAR is a points input (its recorded ``pointcloud_raw_ex``): its clouds
    join as its decoded sweeps do."""
    _, kit_path = vehicle
    notes: list[str] = []
    plan, stream = kit_stream(vehicle, notes.append)
    reference = [
        m
        for m in kit_player.Concatenation(plan, notes.append).messages(stream.messages(None, None))
        if isinstance(m, kit_player.JoinedMessage)
    ]
    document = yaml.safe_load(kit_path.read_text())
    points_topic = "/sensing/lidar/left/pointcloud_raw_ex"
    [left] = [sensor for sensor in document["sensors"] if sensor["name"] == "left"]
    left["input"] = {"points": {"topic": points_topic}}
    points_kit = kit_path.with_name("points_kit.yaml")
    points_kit.write_text(yaml.safe_dump(document))
    kit, path = kit_player.load_kit(str(points_kit))
    played = [TOPICS["top"], TOPICS["right"], points_topic]
    bag_types = {**dict.fromkeys(played[:2], VELODYNE_SCAN), points_topic: POINTCLOUD2}
    points_plan = kit_player.plan_kit(kit, path, bag_types, played)
    assert set(points_plan.decodings) == set(played[:2])

    def recorded(message):
        """The left LiDAR's decoded sweep as a recorded cloud on the points topic."""
        if isinstance(message, packet_player.SweepMessage) and message.topic == TOPICS["left"]:
            assert isinstance(message.cdr, bytes)
            return BagMessage(points_topic, message.timestamp_ns, message.cdr)
        return message

    played_stream = (recorded(m) for m in stream.messages(None, None))
    concatenation = kit_player.Concatenation(points_plan, notes.append)
    joined = [
        m for m in concatenation.messages(played_stream) if isinstance(m, kit_player.JoinedMessage)
    ]
    assert len(joined) == len(reference) == len(JOINED)
    for message, other in zip(joined, reference, strict=True):
        assert message.timestamp_ns == other.timestamp_ns
        assert message.joined.sources == other.joined.sources
        assert message.joined.cloud.data.tobytes() == other.joined.cloud.data.tobytes()


# --- the kit against the bag -------------------------------------------------------------------


def test_a_sensor_that_never_arrives_is_a_note_and_a_topic_of_another_type_refused(vehicle):
    _, kit_path = vehicle
    kit, path = kit_player.load_kit(str(kit_path))
    present = {TOPICS["top"]: VELODYNE_SCAN, TOPICS["left"]: VELODYNE_SCAN}
    plan = kit_player.plan_kit(kit, path, present, [TOPICS["top"]])
    assert set(plan.decodings) == {TOPICS["top"]}
    assert plan.decodings[TOPICS["top"]].settings == kit.sensor("top").input.decoder
    assert plan.notes == (
        f"note: sensor left of kit sample_sensor_kit: its topic {TOPICS['left']} is not played "
        "(--topics); it never arrives",
        f"note: sensor right of kit sample_sensor_kit: its topic {TOPICS['right']} is not in the "
        "bag; it never arrives",
    )
    clouds = {TOPICS["top"]: POINTCLOUD2}
    with pytest.raises(ValueError) as caught:
        kit_player.plan_kit(kit, path, clouds, [TOPICS["top"]])
    assert str(caught.value) == (
        f"sensor top of kit sample_sensor_kit reads {VELODYNE_SCAN} on {TOPICS['top']}, but the "
        f"bag's {TOPICS['top']} is {POINTCLOUD2}"
    )


def test_a_kit_is_found_by_name_and_a_missing_one_refused_in_one_line() -> None:
    kit, path = kit_player.load_kit("sample_sensor_kit")
    assert kit.name == "sample_sensor_kit" and path.name == "sample_sensor_kit.yaml"
    with pytest.raises(ValueError, match=r"^--sensor-kit no_such_kit: neither a file nor the name"):
        kit_player.load_kit("no_such_kit")


def test_decoders_share_a_calibration_file_read_once(vehicle) -> None:
    """The left and right LiDARs name the same calibration file: read once, shared."""
    plan, stream = kit_stream(vehicle, print)
    assert stream.calibrations[TOPICS["left"]] is stream.calibrations[TOPICS["right"]]
    assert stream.calibrations[TOPICS["top"]] is not stream.calibrations[TOPICS["left"]]
    assert stream.calibration is None  # two files: no one calibration for every topic
    single = packet_player.PacketStream(
        vehicle[0], KIT_TOPICS, False, plan.decodings[TOPICS["left"]]
    )
    assert single.calibration is single.calibrations[TOPICS["top"]]  # one decoding for all
