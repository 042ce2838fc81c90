"""Static transforms (``tf2_msgs/msg/TFMessage`` on ``/tf_static``) as frame joints.

A bag is opened with the package's bag reader (:class:`~..bags.PointCloudBag`: its record and
decompression bounds, its one-line errors), its ``/tf_static`` messages read in bag order and
decoded with rosbags' ROS 2 type store. Each ``geometry_msgs/TransformStamped`` is a joint
``header.frame_id -> child_frame_id`` with its translation and quaternion
(:meth:`~.poses.Pose.from_quaternion`). As in tf2's buffer, a child given again replaces the
earlier transform (a static broadcaster that publishes twice, two recordings of one latched
message). A live ``/tf_static`` is the ROS front end's to gather: it hands the same
``TransformStamped`` fields to :func:`joint_from_transform`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rosbags.typesys import Stores, get_typestore

from ..bags import BagError, PointCloudBag
from .fields import SensorKitError
from .poses import FrameJoint, Pose

TF_MESSAGE = "tf2_msgs/msg/TFMessage"
DEFAULT_TOPIC = "/tf_static"


def joint_from_transform(
    parent: str,
    child: str,
    translation: tuple[float, float, float],
    rotation: tuple[float, float, float, float],
    source: str,
) -> FrameJoint:
    """The joint of one ``TransformStamped``: ``header.frame_id``, ``child_frame_id``, the
    translation ``(x, y, z)`` and the rotation ``(x, y, z, w)``.

    Raises:
        SensorKitError: an empty frame name, a non-finite value or a quaternion tf2 refuses.
    """
    values = (*translation, *rotation)
    if not parent or not child:
        raise SensorKitError(f"{source}: a transform {parent!r} -> {child!r} names no frame")
    if not all(abs(v) < float("inf") for v in values):
        raise SensorKitError(f"{source}: transform {parent} -> {child} has a non-finite value")
    try:
        pose = Pose.from_quaternion(*translation, *rotation)
    except ValueError as error:
        raise SensorKitError(f"{source}: transform {parent} -> {child}: {error}") from None
    return FrameJoint(parent, child, pose, source)


def latest_joints(joints: Iterable[FrameJoint]) -> list[FrameJoint]:
    """``joints`` with each child's last transform only (tf2's static store), in first-seen
    order of the children."""
    by_child: dict[str, FrameJoint] = {}
    for joint in joints:
        by_child[joint.child] = joint
    return list(by_child.values())


def read_tf_static(bag_path: str | Path, topic: str = DEFAULT_TOPIC) -> list[FrameJoint]:
    """The static transforms of a bag's ``topic``, each child's last one.

    Raises:
        SensorKitError: the bag cannot be read (the bag reader's reason), the topic is missing
            or not a ``TFMessage``, or a transform is unusable.
    """
    path = Path(bag_path)
    store = get_typestore(Stores.ROS2_HUMBLE)
    source = f"{topic} in {path}"
    joints = []
    try:
        with PointCloudBag(path) as bag:
            found = bag.topics.get(topic)
            if found is None:
                listing = ", ".join(bag.topics) or "none"
                raise SensorKitError(f"{path}: no topic {topic}; topics: {listing}")
            if found.msgtype != TF_MESSAGE:
                raise SensorKitError(f"{path}: {topic} is {found.msgtype}, not {TF_MESSAGE}")
            for message in bag.messages([topic]):
                try:
                    decoded = store.deserialize_cdr(message.cdr, TF_MESSAGE)
                except Exception as error:  # rosbags' errors on damaged bytes
                    reason = f"{type(error).__name__}: {error}"
                    raise SensorKitError(f"{source}: undecodable message ({reason})") from None
                for stamped in decoded.transforms:
                    t, q = stamped.transform.translation, stamped.transform.rotation
                    joints.append(
                        joint_from_transform(
                            stamped.header.frame_id,
                            stamped.child_frame_id,
                            (t.x, t.y, t.z),
                            (q.x, q.y, q.z, q.w),
                            source,
                        )
                    )
    except BagError as error:
        raise SensorKitError(str(error)) from None
    return latest_joints(joints)
