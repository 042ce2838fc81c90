"""Sensor kit poses from ``/tf_static``: read from a bag through the package's bag reader, or
handed in as the live topic's transforms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from gpu_euclidean_cluster.pointcloud_io.sensor_kit import (
    SensorKitError,
    joint_from_transform,
    load_sensor_kit,
    parse_sensor_kit,
    read_tf_static,
    sensor_poses,
)

from .test_sensor_kit import SAMPLE, q_rpy

TF_MESSAGE = "tf2_msgs/msg/TFMessage"
#: The sample kit's joints as a robot_state_publisher publishes them: parent, child, xyz, rpy.
SAMPLE_JOINTS = [
    ("base_link", "sensor_kit_base_link", (0.9, 0.0, 2.0), (-0.001, 0.015, -0.0364)),
    ("sensor_kit_base_link", "velodyne_top_base_link", (0.0, 0.0, 0.0), (0.0, 0.0, 1.575)),
    (
        "sensor_kit_base_link",
        "velodyne_left_base_link",
        (0.0, 0.56362, -0.30555),
        (-0.02, 0.71, 1.575),
    ),
    (
        "sensor_kit_base_link",
        "velodyne_right_base_link",
        (0.0, -0.56362, -0.30555),
        (-0.01, 0.71, -1.58),
    ),
    ("velodyne_top_base_link", "velodyne_top", (0.0, 0.0, 0.06611), (0.0, 0.0, 0.0)),
    ("velodyne_left_base_link", "velodyne_left", (0.0, 0.0, 0.0377), (0.0, 0.0, 0.0)),
    ("velodyne_right_base_link", "velodyne_right", (0.0, 0.0, 0.0377), (0.0, 0.0, 0.0)),
]


def write_tf_bag(path: Path, messages: list[list[tuple]], storage: str, topic: str = "/tf_static"):
    """A ROS 2 bag of ``TFMessage``s, each a list of ``(parent, child, xyz, quaternion)``."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    t = store.types
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(path, version=Writer.VERSION_LATEST, storage_plugin=plugin) as writer:
        connection = writer.add_connection(topic, TF_MESSAGE, typestore=store)
        for index, transforms in enumerate(messages):
            stamped = [
                t["geometry_msgs/msg/TransformStamped"](
                    header=t["std_msgs/msg/Header"](
                        stamp=t["builtin_interfaces/msg/Time"](sec=1, nanosec=0), frame_id=parent
                    ),
                    child_frame_id=child,
                    transform=t["geometry_msgs/msg/Transform"](
                        translation=t["geometry_msgs/msg/Vector3"](x=xyz[0], y=xyz[1], z=xyz[2]),
                        rotation=t["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
                    ),
                )
                for parent, child, xyz, q in transforms
            ]
            message = t[TF_MESSAGE](transforms=stamped)
            writer.write(
                connection, 1_000_000_000 + index, store.serialize_cdr(message, TF_MESSAGE)
            )


def sample_transforms() -> list[tuple]:
    return [(parent, child, xyz, q_rpy(*rpy)) for parent, child, xyz, rpy in SAMPLE_JOINTS]


def tf_static_kit(bag: str | None) -> dict:
    document = yaml.safe_load(SAMPLE.read_text())
    document["poses"] = {"tf_static": {"bag": bag} if bag else None}
    for sensor in document["sensors"]:
        del sensor["description"]  # the bag has the <frame>_base_link -> <frame> joints
    return document


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_tf_static_gives_the_sample_poses(tmp_path: Path, storage: str):
    transforms = sample_transforms()
    # the first message is replaced by a later one for the same child, as tf2's buffer does
    stale = [("base_link", "sensor_kit_base_link", (5.0, 5.0, 5.0), (0.0, 0.0, 0.0, 1.0))]
    write_tf_bag(tmp_path / "bag", [stale, transforms[:3], transforms[3:]], storage)
    joints = read_tf_static(tmp_path / "bag")
    assert [(j.parent, j.child) for j in joints] == [(p, c) for p, c, _, _ in transforms]
    kit = parse_sensor_kit(tf_static_kit("bag"), tmp_path)
    poses, expected = sensor_poses(kit), sensor_poses(load_sensor_kit(SAMPLE))
    for name, pose in poses.items():
        np.testing.assert_allclose(pose.rotation, expected[name].rotation, rtol=0, atol=1e-15)
        np.testing.assert_allclose(pose.translation, expected[name].translation, atol=1e-15)


def test_live_tf_static_is_handed_in(tmp_path: Path):
    kit = parse_sensor_kit(tf_static_kit(None), tmp_path)
    assert kit.poses.bag is None and kit.poses.topic == "/tf_static"
    with pytest.raises(SensorKitError, match="no bag given; the live /tf_static"):
        sensor_poses(kit)
    live = [joint_from_transform(p, c, xyz, q, "live") for p, c, xyz, q in sample_transforms()]
    assert sensor_poses(kit, live).keys() == {"top", "left", "right"}


def test_description_joint_the_bag_already_has_is_refused(tmp_path: Path):
    write_tf_bag(tmp_path / "bag", [sample_transforms()], "sqlite3")
    document = tf_static_kit("bag")
    document["sensors"][0]["description"] = "VLS-128"
    with pytest.raises(SensorKitError) as caught:
        sensor_poses(parse_sensor_kit(document, tmp_path))
    assert caught.value.problems == (
        "poses: frame velodyne_top has two parents: velodyne_top_base_link (/tf_static in "
        f"{tmp_path / 'bag'}) and velodyne_top_base_link (the VLS-128 description)",
    )


def test_bag_without_tf_static_or_of_another_type_is_refused(tmp_path: Path):
    write_tf_bag(tmp_path / "bag", [sample_transforms()], "sqlite3", topic="/tf")
    with pytest.raises(SensorKitError, match=r"no topic /tf_static; topics: /tf$"):
        read_tf_static(tmp_path / "bag")
    with pytest.raises(SensorKitError, match="corrupt or truncated bag"):
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "metadata.yaml").write_text("rosbag2_bagfile_information: {}\n")
        read_tf_static(tmp_path / "empty")


def test_unusable_transforms_are_refused():
    with pytest.raises(SensorKitError, match="live: transform a -> b: quaternion"):
        joint_from_transform("a", "b", (0, 0, 0), (0.0, 0.0, 0.0, 0.0), "live")
    with pytest.raises(SensorKitError, match="non-finite"):
        joint_from_transform("a", "b", (float("nan"), 0, 0), (0.0, 0.0, 0.0, 1.0), "live")
    with pytest.raises(SensorKitError, match="names no frame"):
        joint_from_transform("", "b", (0, 0, 0), (0.0, 0.0, 0.0, 1.0), "live")
