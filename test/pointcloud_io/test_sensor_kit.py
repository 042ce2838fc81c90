"""Sensor kits: the shipped sample kit against Autoware's own numbers, the pose sources, and the
loader's one-line-a-problem refusals."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpu_euclidean_cluster.pointcloud_io.sensor_kit import (
    FrameJoint,
    FrameTree,
    FrameTreeError,
    Pose,
    SensorKitError,
    load_sensor_kit,
    parse_sensor_kit,
    sensor_poses,
)
from gpu_euclidean_cluster.pointcloud_io.sensor_kit.poses import rotation_from_rpy

from ..conftest import LIDAR_DATA_DIR, REPO_ROOT

SAMPLE = REPO_ROOT / "config" / "sample_sensor_kit.yaml"
AUTOWARE_FILES = LIDAR_DATA_DIR / "sample_sensor_kit"


def sample_document() -> dict:
    return yaml.safe_load(SAMPLE.read_text())


def qmul(a: tuple, b: tuple) -> tuple:
    """Hamilton product of quaternions (x, y, z, w)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def q_rpy(roll: float, pitch: float, yaw: float) -> tuple:
    """URDF's fixed-axis rpy as a quaternion: qz(yaw) * qy(pitch) * qx(roll)."""
    qx = (math.sin(roll / 2), 0.0, 0.0, math.cos(roll / 2))
    qy = (0.0, math.sin(pitch / 2), 0.0, math.cos(pitch / 2))
    qz = (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
    return qmul(qz, qmul(qy, qx))


def q_rotate(q: tuple, v: tuple) -> tuple:
    conjugate = (-q[0], -q[1], -q[2], q[3])
    return qmul(qmul(q, (*v, 0.0)), conjugate)[:3]


def q_chain(*joints: tuple) -> tuple:
    """(quaternion, translation) of joints ``(xyz, rpy)`` composed base first: the route of
    robot_state_publisher and tf2, independent of the package's matrices."""
    q, t = (0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0)
    for xyz, rpy in joints:
        t = tuple(a + b for a, b in zip(q_rotate(q, xyz), t, strict=True))
        q = qmul(q, q_rpy(*rpy))
    return q, t


KIT = ((0.9, 0.0, 2.0), (-0.001, 0.015, -0.0364))  # sensors_calibration.yaml
#: sensor -> (sensor_kit_calibration.yaml's joint, the description's height)
MOUNTS = {
    "top": (((0.0, 0.0, 0.0), (0.0, 0.0, 1.575)), 0.06611),
    "left": (((0.0, 0.56362, -0.30555), (-0.02, 0.71, 1.575)), 0.0377),
    "right": (((0.0, -0.56362, -0.30555), (-0.01, 0.71, -1.580)), 0.0377),
}
#: The sensors' origins in base_link, by hand. Top: its base link sits at the kit's origin and
#: turns about z only, so the scan origin is t_kit + 0.06611 * (third column of R_kit); with
#: r = -0.001, p = 0.015, y = -0.0364 that column is (cy sp cr + sy sr, sy sp cr - cy sr, cp cr)
#: = (0.0150259, 0.0004535, 0.9998870): (0.9 + 0.0009934, 0.0000300, 2.0 + 0.0661025). Left and
#: right: t_kit + R_kit (t_mount + 0.0377 * third column of R_mount), the same arithmetic.
HAND_ORIGINS = {
    "top": (0.9009934, 0.0000300, 2.0661025),
    "left": (0.9163782, 0.5877018, 1.7224906),
    "right": (0.8745924, -0.5879368, 1.7236560),
}


def test_sample_kit_lists_the_bag_lidars_with_autoware_settings():
    kit = load_sensor_kit(SAMPLE)
    assert (kit.name, kit.base_frame) == ("sample_sensor_kit", "base_link")
    assert [(s.name, s.frame, s.description) for s in kit.sensors] == [
        ("top", "velodyne_top", "VLS-128"),
        ("left", "velodyne_left", "VLP-16"),
        ("right", "velodyne_right", "VLP-16"),
    ]
    # lidar.launch.xml and the velodyne_*.launch.xml defaults it does not override
    expected = {
        "top": ("VLS128", 0.5, 250.0, 300.0, 0, 360),
        "left": ("VLP16", 0.4, 5.0, 180.0, 300, 60),
        "right": ("VLP16", 0.4, 5.0, 180.0, 300, 60),
    }
    for sensor in kit.sensors:
        d = sensor.input.decoder
        assert sensor.input.kind == "packets"
        assert sensor.input.topic == f"/sensing/lidar/{sensor.name}/velodyne_packets"
        assert (d.model, d.min_range, d.max_range, d.scan_phase) == expected[sensor.name][:4]
        assert (d.cloud_min_angle, d.cloud_max_angle) == expected[sensor.name][4:]
        assert (d.return_mode, d.frame_id) == ("SingleStrongest", sensor.frame)
        assert sensor.input.calibration == f"{d.model}.yaml"


def test_sample_kit_crop_boxes_are_autowares_self_and_mirror():
    kit = load_sensor_kit(SAMPLE)
    for sensor in kit.sensors:
        self_box, mirror = sensor.crop_boxes
        # autoware_launch's generated crop_box_filter_self.param.yaml, float for float
        assert (self_box.minimum, self_box.maximum) == ((-1.1, -0.948, 0.0), (3.79, 0.948, 2.5))
        assert (mirror.minimum, mirror.maximum) == ((1.8, -1.4, 0.8), (3.2, 1.4, 1.5))
        assert self_box.negative and mirror.negative
        assert not self_box.in_sensor_frame and not mirror.in_sensor_frame
        assert (self_box.derived_from, mirror.derived_from) == ("vehicle_info", "mirror")


def test_sample_kit_poses_match_the_hand_derivation_and_the_quaternion_route():
    poses = sensor_poses(load_sensor_kit(SAMPLE))
    for name, (mount, height) in MOUNTS.items():
        pose = poses[name]
        np.testing.assert_allclose(pose.translation, HAND_ORIGINS[name], rtol=0, atol=1e-7)
        q, t = q_chain(KIT, mount, ((0.0, 0.0, height), (0.0, 0.0, 0.0)))
        np.testing.assert_allclose(pose.translation, t, rtol=0, atol=1e-14)
        via_quaternion = Pose.from_quaternion(0, 0, 0, *q).rotation
        np.testing.assert_allclose(pose.rotation, via_quaternion, rtol=0, atol=1e-14)


def test_autoware_calibration_files_give_the_sample_kit_poses_exactly():
    if not (AUTOWARE_FILES / "sensors_calibration.yaml").is_file():
        pytest.skip(f"Autoware's sample calibration files not in {AUTOWARE_FILES}")
    document = sample_document()
    document["poses"] = {
        "autoware_calibration": ["sensors_calibration.yaml", "sensor_kit_calibration.yaml"]
    }
    kit = parse_sensor_kit(document, AUTOWARE_FILES)
    assert len(kit.poses.joints) == 2 + 13  # every entry, cameras, GNSS and IMU included
    assert sensor_poses(kit) == sensor_poses(load_sensor_kit(SAMPLE))


def test_vehicle_parameter_files_give_the_inline_boxes(tmp_path: Path):
    document = sample_document()
    for box, key in (("self", "vehicle_info"), ("mirror", "mirror")):
        values = document["crop_boxes"][box].pop(key)
        if key == "vehicle_info":
            values = {**values, "wheel_radius": 0.383, "max_steer_angle": 0.7}
        params = {"/**": {"ros__parameters": values}}
        (tmp_path / f"{key}.param.yaml").write_text(yaml.safe_dump(params))
        document["crop_boxes"][box][f"{key}_file"] = f"{key}.param.yaml"
    kit = parse_sensor_kit(document, tmp_path)
    assert kit.sensors[0].crop_boxes == load_sensor_kit(SAMPLE).sensors[0].crop_boxes


def test_rpy_is_urdfs_fixed_axis_convention():
    rotation = np.array(rotation_from_rpy(0.3, -0.4, 1.1))
    rx = np.array(
        [[1, 0, 0], [0, math.cos(0.3), -math.sin(0.3)], [0, math.sin(0.3), math.cos(0.3)]]
    )
    c, s = math.cos(-0.4), math.sin(-0.4)
    ry = np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])
    rz = np.array(
        [[math.cos(1.1), -math.sin(1.1), 0], [math.sin(1.1), math.cos(1.1), 0], [0, 0, 1]]
    )
    np.testing.assert_allclose(rotation, rz @ ry @ rx, rtol=0, atol=1e-15)
    # a quarter roll takes the child's y axis to the parent's z
    np.testing.assert_allclose(
        Pose.from_rpy(0, 0, 0, math.pi / 2, 0, 0).apply((0, 1, 0)), (0, 0, 1), atol=1e-15
    )


def test_compose_and_quaternions_agree_with_matrix_products():
    a = Pose.from_rpy(1.0, -2.0, 0.5, 0.1, 0.2, 0.3)
    b = Pose.from_quaternion(0.3, 0.0, -1.0, *q_rpy(-0.5, 0.05, 2.0))
    ab = a.compose(b)
    matrix = np.array(a.rotation) @ np.array(b.rotation)
    np.testing.assert_allclose(ab.rotation, matrix, rtol=0, atol=1e-15)
    expected = np.array(a.rotation) @ np.array(b.translation) + np.array(a.translation)
    np.testing.assert_allclose(ab.translation, expected, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="not normalised"):
        Pose.from_quaternion(0, 0, 0, 0.0, 0.0, 0.0, 1.1)


def test_frame_tree_refuses_two_parents_loops_and_strays():
    pose = Pose()
    with pytest.raises(FrameTreeError, match=r"frame b has two parents: a \(x\) and c \(y\)"):
        FrameTree([FrameJoint("a", "b", pose, "x"), FrameJoint("c", "b", pose, "y")])
    tree = FrameTree([FrameJoint("a", "b", pose, "x"), FrameJoint("b", "a", pose, "y")])
    with pytest.raises(FrameTreeError, match="loops"):
        tree.chain("base_link", "b")
    with pytest.raises(FrameTreeError, match="not connected to base_link: it is unknown"):
        tree.chain("base_link", "lidar")
    assert tree.pose("a", "a") == Pose()


def test_sensor_frame_missing_from_the_poses_is_one_line_per_sensor():
    document = sample_document()
    del document["poses"]["inline"]["sensor_kit_base_link"]["velodyne_left_base_link"]
    del document["sensors"][2]["description"]
    with pytest.raises(SensorKitError) as caught:
        sensor_poses(parse_sensor_kit(document, REPO_ROOT / "config"))
    assert caught.value.problems == (
        "sensor left: frame velodyne_left is not connected to base_link: it reaches "
        "velodyne_left_base_link, which has no parent",
        "sensor right: frame velodyne_right is not connected to base_link: it is unknown",
    )


def packets(document: dict, index: int) -> dict:
    return document["sensors"][index]["input"]["packets"]


def kit_pose(document: dict) -> dict:
    return document["poses"]["inline"]["base_link"]["sensor_kit_base_link"]


BROKEN = [
    (lambda d: d.update(version=2), "version: must be 1, got 2"),
    (lambda d: d.update(colour="red"), "kit: unknown key colour"),
    (lambda d: packets(d, 0).pop("model"), "sensors[0].input.packets: model is missing"),
    (lambda d: packets(d, 1).update(max_range=0.1), "is not below"),
    (lambda d: d["sensors"][1].update(crop_boxes=["self", "wheels"]), "'wheels' is not a box"),
    (lambda d: packets(d, 2).update(topic=packets(d, 0)["topic"]), "sensor topic given twice"),
    (lambda d: d["sensors"][2].update(frame="/velodyne_right"), "does not start with /"),
    (lambda d: d["sensors"][0].update(description="VLP-64"), "unknown 'VLP-64'"),
    (
        lambda d: d["crop_boxes"]["mirror"]["mirror"].update(max_height_offset=0.5),
        "crop_boxes.mirror: min z 0.8 is not below max z 0.5",
    ),
    (lambda d: d["crop_boxes"]["self"]["vehicle_info"].pop("wheel_base"), "wheel_base is missing"),
    (lambda d: d["crop_boxes"]["self"].update(min=[0, 0, 0], max=[1, 1, 1]), "exactly one"),
    (lambda d: d["crop_boxes"]["self"].update(negative="yes"), "negative: must be true or false"),
    (lambda d: kit_pose(d).update(qw=1.0), "not both"),
    (lambda d: kit_pose(d).update(x=".9"), "x: must be a finite number"),
    (lambda d: d.update(poses={"autoware_calibration": ["no.yaml"]}), "no.yaml: cannot open"),
    (lambda d: d.update(poses={"tf_static": {"bag": "missing_bag"}}), "missing_bag does not exist"),
]


@pytest.mark.parametrize(("breakage", "message"), BROKEN)
def test_each_mistake_is_named_in_one_line(breakage, message, tmp_path: Path):
    document = sample_document()
    breakage(document)
    path = tmp_path / "kit.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(SensorKitError) as caught:
        load_sensor_kit(path)
    [line] = caught.value.problems
    assert line.startswith(f"{path}: ") and message in line, line
    assert str(caught.value) == line


def test_several_mistakes_give_one_line_each(tmp_path: Path):
    document = copy.deepcopy(sample_document())
    for breakage, _ in BROKEN[:4]:
        breakage(document)
    with pytest.raises(SensorKitError) as caught:
        parse_sensor_kit(document, tmp_path)
    assert len(caught.value.problems) == 4
    assert str(caught.value).count("\n") == 3


def test_unreadable_files_are_refused_in_one_line(tmp_path: Path):
    (tmp_path / "kit.yaml").write_text("sensors: [unclosed\n")
    with pytest.raises(SensorKitError, match=r"kit.yaml: not YAML: ") as caught:
        load_sensor_kit(tmp_path / "kit.yaml")
    assert "\n" not in str(caught.value)
    with pytest.raises(SensorKitError, match="not a regular file"):
        load_sensor_kit(tmp_path)
