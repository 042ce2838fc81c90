"""Each sensor's pose in the kit's base frame, from the kit's pose source.

The joints are the pose source's (:class:`~.model.PoseSource`: Autoware's calibration files and
inline poses read when the kit loaded; a bag's ``/tf_static`` read here; a live ``/tf_static``
handed in by the ROS front end), plus, for each sensor with a ``description``, its xacro's
``<frame>_base_link -> <frame>`` joint (:func:`~.autoware.description_joint`). They make one
:class:`~.poses.FrameTree`; a sensor's pose is its frame's chain from the base frame, composed
from the base outwards in float64 (:mod:`.poses`).
"""

from __future__ import annotations

from collections.abc import Iterable

from .autoware import description_joint
from .fields import SensorKitError
from .model import TF_STATIC, SensorKit
from .poses import FrameJoint, FrameTree, FrameTreeError, Pose
from .tf_static import latest_joints, read_tf_static


def kit_joints(
    kit: SensorKit, live_tf_static: Iterable[FrameJoint] | None = None
) -> list[FrameJoint]:
    """The joints the kit's poses come from (see the module docstring).

    Args:
        kit: the sensor kit.
        live_tf_static: for a ``tf_static`` source without a bag: the transforms received on
            the live topic (:func:`~.tf_static.joint_from_transform`), each child's last kept.

    Raises:
        SensorKitError: a ``tf_static`` source without a bag and no ``live_tf_static``, or a
            bag that cannot be read.
    """
    source = kit.poses
    if source.kind != TF_STATIC:
        joints = list(source.joints)
    elif source.bag is not None:
        joints = read_tf_static(source.bag, source.topic)
    elif live_tf_static is not None:
        joints = latest_joints(live_tf_static)
    else:
        raise SensorKitError(
            f"poses.tf_static: no bag given; the live {source.topic} must be gathered first"
        )
    joints += [description_joint(s.description, s.frame) for s in kit.sensors if s.description]
    return joints


def sensor_poses(
    kit: SensorKit, live_tf_static: Iterable[FrameJoint] | None = None
) -> dict[str, Pose]:
    """Each sensor's pose in ``kit.base_frame`` (``p_base = R p_sensor + t``), by sensor name.

    Raises:
        SensorKitError: the joints do not make a tree (a frame with two parents: e.g. a
            ``description`` joint the pose source already has), or a sensor's frame is not
            connected to the base frame; one line per sensor.
    """
    try:
        tree = FrameTree(kit_joints(kit, live_tf_static))
    except FrameTreeError as error:
        raise SensorKitError(f"poses: {error}") from None
    poses, problems = {}, []
    for sensor in kit.sensors:
        try:
            poses[sensor.name] = tree.pose(kit.base_frame, sensor.frame)
        except FrameTreeError as error:
            problems.append(f"sensor {sensor.name}: {error}")
    if problems:
        raise SensorKitError(problems)
    return poses
