"""``simulate --sensor-kit``: Autoware's sample kit as a bag of raw packets, read back and decoded.

The command runs as a user runs it, as its own process, for 3 frames of the sample kit (a VLS-128
and two VLP-16s). The bag is read back with rosbags and with the package's readers; each
sensor's messages are decoded with the sweep decoder and the kit's settings, and every point, in
the base frame by the kit's poses, must lie on what the ground truth beside the bag says it hit
(the ground or an object of that frame's table, the shapes rebuilt here from the table), within
the range quantisation; ``/tf_static`` read back must give the kit's poses.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from rosbags.interfaces import QosDurability
from rosbags.rosbag2 import Reader

from gpu_euclidean_cluster.commands import cli
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import (
    load_sensor_kit,
    parse_sensor_kit,
    read_tf_static,
    sensor_poses,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    SweepDecoder,
    load_calibration,
    read_velodyne_scans,
)

from .._ros2_tools import run

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / "config" / "sample_sensor_kit.yaml"
CALIBRATIONS = REPO / "config" / "velodyne"
FRAMES = 3
START_S = 1_700_000_000
#: the kit's advanced matching offsets: where each sensor's sweeps start after a frame's instant
OFFSETS_S = {"right": 0.0, "top": 0.015, "left": 0.016}
#: product id of each model's packets
PRODUCTS = {"VLS128": 0xA1, "VLP16": 0x22}
#: the range quantisation, half a count: VLS-128 0.004 m (nebula's constant), VLP-16 0.002 m
HALF_COUNT = {"VLS128": 0.002, "VLP16": 0.001}
DEADLINE_S = 300.0


def simulate(out: Path, *options: str) -> None:
    """``gpu-euclidean-cluster simulate --sensor-kit KIT --bag OUT`` as its own process."""
    command = [sys.executable, "-m", "gpu_euclidean_cluster.commands.cli", "simulate"]
    command += ["--sensor-kit", str(KIT), "--bag", str(out), "--frames", str(FRAMES)]
    command += ["--start-time", str(START_S), "--seed", "3", *options]
    done = run(command, dict(os.environ), timeout_s=DEADLINE_S, cwd=out.parent)
    assert done.returncode == 0, done.stderr
    assert f"wrote {FRAMES} frames of 3 sensors to {out}" in done.stdout, done.stdout


@pytest.fixture(scope="module", params=["sqlite3", "mcap"])
def vehicle_bag(request, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp(request.param) / "vehicle"
    simulate(out, "--tf-static", "--storage", request.param)
    return out


def surface_distance(points: np.ndarray, table: dict, row: int) -> np.ndarray:
    """(N,) distance of ``points`` from the surface of the ground-truth object of ``row``."""
    center, size = table["center"][row], table["size"][row]
    relative = points - center
    if table["shape"][row] == "box":
        c, s = math.cos(table["yaw"][row]), math.sin(table["yaw"][row])
        along = relative[:, 0] * c + relative[:, 1] * s
        across = -relative[:, 0] * s + relative[:, 1] * c
        outside = np.abs(np.stack([along, across, relative[:, 2]], axis=1)) - size / 2
    else:
        radial = np.hypot(relative[:, 0], relative[:, 1]) - table["radius"][row]
        outside = np.stack([radial, np.abs(relative[:, 2]) - size[2] / 2], axis=1)
    inside = np.minimum(outside.max(axis=1), 0.0)
    return np.abs(inside + np.linalg.norm(np.maximum(outside, 0.0), axis=1))


def test_the_bag_holds_each_sensors_packets_and_tf_static(vehicle_bag: Path):
    kit = load_sensor_kit(KIT)
    with Reader(vehicle_bag) as reader:
        found = {c.topic: (c.msgtype, c.msgcount) for c in reader.connections}
        static = next(c for c in reader.connections if c.topic == "/tf_static")
        qos = static.ext.offered_qos_profiles
    expected = {s.input.topic: ("velodyne_msgs/msg/VelodyneScan", FRAMES) for s in kit.sensors}
    assert found == {**expected, "/tf_static": ("tf2_msgs/msg/TFMessage", 1)}
    assert [q.durability for q in qos] == [QosDurability.TRANSIENT_LOCAL]
    scans = list(read_velodyne_scans(vehicle_bag))
    assert [s.bag_time_ns for s in scans] == sorted(s.bag_time_ns for s in scans)
    for sensor in kit.sensors:
        mine = [s for s in scans if s.topic == sensor.input.topic]
        assert len(mine) == FRAMES
        model = sensor.input.decoder.model
        for frame, scan in enumerate(mine):
            stamps = scan.stamp_sec * 1_000_000_000 + scan.stamp_nanosec
            assert scan.frame_id == sensor.frame
            assert scan.stamp_ns == stamps[0]  # nebula: the first packet's stamp
            assert scan.bag_time_ns == stamps[-1]  # recorded when its last packet is in
            assert np.all(np.diff(stamps) > 0)
            # each turn starts at the frame's instant plus the sensor's offset, to a packet
            start_s = START_S + OFFSETS_S[sensor.name] + frame / 10.0
            assert abs(scan.stamp_ns / 1e9 - start_s) < 2e-3
            assert np.all(scan.packets[:, 1204] == 55)  # SingleStrongest
            assert np.all(scan.packets[:, 1205] == PRODUCTS[model])
    poses = sensor_poses(kit)
    joints = {j.child: j for j in read_tf_static(vehicle_bag)}
    assert set(joints) == {s.frame for s in kit.sensors}
    for sensor in kit.sensors:
        joint, pose = joints[sensor.frame], poses[sensor.name]
        assert joint.parent == kit.base_frame
        assert np.allclose(joint.pose.rotation, pose.rotation, rtol=0, atol=1e-12)
        assert np.allclose(joint.pose.translation, pose.translation, rtol=0, atol=1e-12)
    # a kit taking its poses from the bag: the same poses (no description: the bag's
    # transforms already end at the sensors' frames)
    document = yaml.safe_load(KIT.read_text())
    document["poses"] = {"tf_static": {"bag": str(vehicle_bag)}}
    for sensor in document["sensors"]:
        sensor.pop("description")
    from_bag = sensor_poses(parse_sensor_kit(document, KIT.parent))
    for name, pose in poses.items():
        assert np.allclose(from_bag[name].rotation, pose.rotation, rtol=0, atol=1e-12)
        assert np.allclose(from_bag[name].translation, pose.translation, rtol=0, atol=1e-12)


def test_decoded_sweeps_lie_on_what_the_ground_truth_says_they_hit(vehicle_bag: Path):
    kit = load_sensor_kit(KIT)
    poses = sensor_poses(kit)
    truth = np.load(vehicle_bag / "ground_truth.npz")
    assert str(truth["base_frame"]) == kit.base_frame
    assert list(truth["sensors"]) == [s.name for s in kit.sensors]
    stamps = START_S * 1_000_000_000 + 100_000_000 * np.arange(FRAMES)
    assert np.array_equal(truth["frame_stamp_ns"], stamps)
    objects = {name[len("objects/") :]: truth[name] for name in truth.files if "objects/" in name}
    hit_anywhere = set()
    for sensor in kit.sensors:
        settings = sensor.input.decoder
        decoder = SweepDecoder(load_calibration(CALIBRATIONS / sensor.input.calibration), settings)
        sweeps = []
        for scan in read_velodyne_scans(vehicle_bag, [sensor.input.topic]):
            sweeps += decoder.feed(scan.packets, scan.packet_seconds)
        # one whole sweep a message
        assert len(sweeps) == FRAMES
        object_id = truth[f"{sensor.name}/object_id"]
        start = truth[f"{sensor.name}/sweep_start"]
        rotation = np.array(poses[sensor.name].rotation)
        translation = np.array(poses[sensor.name].translation)
        tolerance = HALF_COUNT[settings.model] + 1e-4
        for frame, sweep in enumerate(sweeps):
            ids = object_id[start[frame] : start[frame + 1]]
            assert sweep.points.shape[0] == ids.size > 1000
            local = np.stack([sweep.points[a] for a in "xyz"], axis=1).astype(np.float64)
            base = local @ rotation.T + translation
            ground = ids == 0
            assert np.abs(base[ground, 2] - float(truth["ground_z"])).max() <= tolerance
            rows = np.flatnonzero(objects["frame"] == frame)
            row_of = dict(zip(objects["id"][rows], rows, strict=True))
            for identity in np.unique(ids[~ground]):
                on = ids == identity
                assert surface_distance(base[on], objects, row_of[identity]).max() <= tolerance
            hit_anywhere.update(np.unique(ids).tolist())
    # the roof LiDAR sees much of the street: walls, parked cars, people, poles, traffic
    kinds = {str(objects["kind"][list(objects["id"]).index(i)]) for i in hit_anywhere - {0}}
    assert kinds == {"wall", "car", "person", "pole"}


def test_ground_truth_objects_move_with_their_velocity(vehicle_bag: Path):
    truth = np.load(vehicle_bag / "ground_truth.npz")
    frame, ids = truth["objects/frame"], truth["objects/id"]
    first, last = frame == 0, frame == FRAMES - 1
    assert np.array_equal(ids[first], ids[last])
    moved = truth["objects/center"][last] - truth["objects/center"][first]
    travel = truth["objects/velocity"][first] * (FRAMES - 1) / 10.0
    assert np.allclose(moved[:, :2], travel, rtol=0, atol=1e-9)
    assert np.count_nonzero(np.hypot(*travel.T) > 1.0) >= 3  # traffic at 8-12 m/s
    # nothing of the scene reaches the vehicle's body (x -1.1 to 3.79 m, y +-0.948 m)
    footprint = np.maximum(truth["objects/size"][:, 0], truth["objects/size"][:, 1]) / 2
    x, y = truth["objects/center"][:, 0], truth["objects/center"][:, 1]
    clear = (np.abs(y) - footprint > 0.948) | (x + footprint < -1.1) | (x - footprint > 3.79)
    assert clear.all()


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    status = cli.main(argv)
    return status, capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ([], "--sensor-kit needs --bag OUT, the ROS 2 bag directory to write"),
        (["--bag", "{out}/b", "--layout", "xyzirc"], "--layout: not with --sensor-kit"),
        (["--bag", "{out}/b", "--rate-hz", "30"], "--rate-hz 30: a Velodyne turns at 5 to 20 Hz"),
        (["--bag", "{out}/b.mcap"], "a ROS 2 bag directory, not a .mcap file"),
        (["--bag", "{out}/no/b"], "--bag {out}/no/b: no folder {out}/no"),
        (["--bag", "{out}/b", "--max-output-gb", "0.001"], "over the --max-output-gb bound"),
    ],
)
def test_bad_vehicle_options_are_one_line(tmp_path, capsys, options, message):
    argv = ["simulate", "--sensor-kit", str(KIT), "--frames", "3", *options]
    status, err = run_cli([arg.format(out=tmp_path) for arg in argv], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    assert message.format(out=tmp_path) in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_vehicle_options_need_a_kit_and_a_bag_is_never_overwritten(tmp_path, capsys):
    status, err = run_cli(["simulate", "--bag", str(tmp_path / "b"), "--tf-static"], capsys)
    assert status == 2 and err.endswith("--bag, --tf-static: only with --sensor-kit FILE"), err
    (tmp_path / "b").mkdir()
    status, err = run_cli(
        ["simulate", "--sensor-kit", str(KIT), "--bag", str(tmp_path / "b")], capsys
    )
    assert status == 2 and "exists already; not overwriting" in err, err
    assert list((tmp_path / "b").iterdir()) == []


def test_a_kit_with_a_points_sensor_is_refused(tmp_path, capsys):
    document = yaml.safe_load(KIT.read_text())
    document["sensors"][1]["input"] = {"points": {"topic": "/left/points"}}
    kit = tmp_path / "kit.yaml"
    kit.write_text(yaml.safe_dump(document))
    argv = ["simulate", "--sensor-kit", str(kit), "--bag", str(tmp_path / "b")]
    status, err = run_cli(argv, capsys)
    assert status == 2 and "sensors left of" in err and "packets sensors only" in err, err
