"""Sensor kits: a vehicle's LiDARs, where their poses come from, and their crop boxes. ROS-free.

    >>> kit = load_sensor_kit("config/sample_sensor_kit.yaml")
    >>> poses = sensor_poses(kit)                 # {"top": Pose, "left": Pose, "right": Pose}
    >>> poses["top"].rotation, poses["top"].translation     # velodyne_top in base_link, float64
    >>> kit.sensor("top").crop_boxes              # (CropBox self, CropBox mirror)

Modules: :mod:`.model` (the frozen dataclasses), :mod:`.loading` (the YAML file, checked: one
line a problem), :mod:`.poses` (float64 poses with ROS's conventions, the frame tree),
:mod:`.autoware` (Autoware's calibration files, sensor descriptions, self and mirror boxes),
:mod:`.crop_boxes` (the kit's named boxes), :mod:`.tf_static` (static transforms from a bag),
:mod:`.kit_poses` (each sensor's pose), :mod:`.fields` (reading fields and files). The
format: ``docs/sensor_kit.md``.
"""

from .autoware import SENSOR_DESCRIPTIONS
from .fields import SensorKitError
from .kit_poses import kit_joints, sensor_poses
from .loading import load_sensor_kit, parse_sensor_kit
from .model import CropBox, PoseSource, Sensor, SensorInput, SensorKit
from .poses import FrameJoint, FrameTree, FrameTreeError, Pose
from .tf_static import joint_from_transform, read_tf_static

__all__ = [
    "SENSOR_DESCRIPTIONS",
    "CropBox",
    "FrameJoint",
    "FrameTree",
    "FrameTreeError",
    "Pose",
    "PoseSource",
    "Sensor",
    "SensorInput",
    "SensorKit",
    "SensorKitError",
    "joint_from_transform",
    "kit_joints",
    "load_sensor_kit",
    "parse_sensor_kit",
    "read_tf_static",
    "sensor_poses",
]
