"""Autoware's vehicle description, read as Autoware reads it: calibration files, the sensor
descriptions' fixed joints, and the self and mirror crop boxes.

**Poses.** Autoware's sample sensor kit (autowarefoundation/sample_sensor_kit_launch,
``sample_sensor_kit_description``; the same files in autowarefoundation/autoware_launch under
``sensor_kit/sample_sensor_kit_launch``) builds its URDF with xacro from two files of
``{parent: {child: {x, y, z, roll, pitch, yaw}}}``: ``sensors_calibration.yaml`` (``base_link ->
sensor_kit_base_link``, and the rear LiDAR's ``base_link -> velodyne_rear_base_link``) and
``sensor_kit_calibration.yaml`` (``sensor_kit_base_link -> velodyne_top_base_link``,
``velodyne_left_base_link``, ``velodyne_right_base_link``, cameras, GNSS, IMU), pasted into the
``origin`` of fixed joints (``rpy``: fixed-axis roll, pitch, yaw). Each LiDAR's xacro macro then
adds one more fixed joint, ``<name>_base_link -> <name>`` (``<name>_base_scan_joint``), the
frame its driver stamps. A LiDAR point in ``velodyne_top`` reaches ``base_link`` through::

    base_link -> sensor_kit_base_link            sensors_calibration.yaml
      -> velodyne_top_base_link                  sensor_kit_calibration.yaml
        -> velodyne_top                          VLS-128 xacro: xyz 0 0 0.06611, rpy 0 0 0

and ``velodyne_left`` and ``velodyne_right`` the same way with the VLP-16 xacro's 0.0377 m.
:data:`SENSOR_DESCRIPTIONS` holds those last joints by xacro macro name.

**Crop boxes.** The kit's LiDAR launch (the sample kit's ``common_sensor_launch`` node
container at 005bf85, and ``autoware_sensing_launch``'s crop box generator script in
autoware_launch, 2026) derives the self box from ``vehicle_info.param.yaml`` and takes the
mirror box from ``mirror.param.yaml``, both read as ``document["/**"]["ros__parameters"]``:

- self: ``min_x = -rear_overhang``, ``max_x = front_overhang + wheel_base``,
  ``min_y = -(wheel_tread / 2.0 + right_overhang)``, ``max_y = wheel_tread / 2.0 +
  left_overhang``, ``min_z = 0.0``, ``max_z = vehicle_height`` (Python floats, as the launch);
- mirror: ``min/max_longitudinal_offset`` (x), ``min/max_lateral_offset`` (y),
  ``min/max_height_offset`` (z).

Both boxes are in ``base_link`` and ``negative`` (the points inside are removed).
"""

from __future__ import annotations

from pathlib import Path

from .fields import Problems, joints_from_mapping, mapping, number, read_yaml
from .poses import FrameJoint, Pose

#: The fixed joint ``<name>_base_link -> <name>`` of each LiDAR description's xacro macro:
#: ``<name>_base_scan_joint``, ``origin xyz="0 0 z" rpy="0 0 0"``. VLP-16 and HDL-32E:
#: ``velodyne_description/urdf/VLP-16.urdf.xacro`` and ``HDL-32E.urdf.xacro`` of
#: tier4/velodyne_simulator (ros-drivers/velodyne_simulator's); VLP-32C:
#: ``velodyne_description/urdf/VLP-32C.urdf.xacro`` of tier4/sensor_component_description;
#: VLS-128: ``vls_description/urdf/VLS-128.urdf.xacro`` of
#: autowarefoundation/sample_sensor_kit_launch (commit 24d7380), kept in autoware_launch's
#: ``sample_sensor_kit_description/sensor/vls/urdf``.
SENSOR_DESCRIPTIONS: dict[str, float] = {
    "VLP-16": 0.0377,
    "VLP-32C": 0.0377,
    "HDL-32E": 0.09081,
    "VLS-128": 0.06611,
}

#: The parameters of ``vehicle_info.param.yaml`` the self box is derived from.
VEHICLE_INFO_KEYS = (
    "wheel_base",
    "wheel_tread",
    "front_overhang",
    "rear_overhang",
    "left_overhang",
    "right_overhang",
    "vehicle_height",
)
#: The other parameters ``vehicle_info.param.yaml`` holds (accepted, not used here).
VEHICLE_INFO_OTHER_KEYS = ("wheel_radius", "wheel_width", "max_steer_angle")
#: The parameters of ``mirror.param.yaml``.
MIRROR_KEYS = (
    "min_longitudinal_offset",
    "max_longitudinal_offset",
    "min_lateral_offset",
    "max_lateral_offset",
    "min_height_offset",
    "max_height_offset",
)

Bounds = tuple[tuple[float, float, float], tuple[float, float, float]]


def description_joint(description: str, frame: str) -> FrameJoint:
    """The joint ``<frame>_base_link -> <frame>`` of the xacro macro ``description``."""
    height = SENSOR_DESCRIPTIONS[description]
    pose = Pose.from_rpy(0.0, 0.0, height, 0.0, 0.0, 0.0)
    return FrameJoint(f"{frame}_base_link", frame, pose, f"the {description} description")


def calibration_joints(path: Path) -> list[FrameJoint]:
    """The joints of an Autoware calibration file (``{parent: {child: pose}}``), as it is.

    Raises:
        SensorKitError: unreadable, or an entry that is not a pose; one line per problem.
    """
    problems = Problems()
    joints = joints_from_mapping(read_yaml(path), str(path), problems, path.name)
    problems.raise_any()
    return joints


def ros_parameters(path: Path, keys: tuple[str, ...], others: tuple[str, ...] = ()) -> dict:
    """The numbers ``keys`` of a ROS 2 parameter file's ``/**: ros__parameters`` (each needed;
    ``others`` accepted and ignored), as Autoware's launch reads vehicle_info and mirror.

    Raises:
        SensorKitError: unreadable, not that layout, a key missing, unknown or not a number.
    """
    problems = Problems()
    where = f"{path}: /**.ros__parameters"
    top = mapping(read_yaml(path), str(path), problems, ("/**",))
    section = mapping((top or {}).get("/**"), f"{path}: /**", problems, ("ros__parameters",))
    found = parameter_values((section or {}).get("ros__parameters"), where, problems, keys, others)
    problems.raise_any()
    return found


def parameter_values(
    value: object, where: str, problems: Problems, keys: tuple, others: tuple = ()
) -> dict[str, float]:
    """The numbers ``keys`` of the mapping ``value`` (all needed, ``others`` ignored)."""
    found = {}
    fields = mapping(value, where, problems, keys + others)
    for key in keys if fields is not None else ():
        if key not in fields:
            problems.add(where, f"{key} is missing")
            continue
        parsed = number(fields[key], f"{where}.{key}", problems)
        if parsed is not None:
            found[key] = parsed
    return found


def self_box_bounds(info: dict[str, float]) -> Bounds:
    """The vehicle body's box from ``vehicle_info`` (:data:`VEHICLE_INFO_KEYS`), as the launch
    derives it (see the module docstring)."""
    half_tread = info["wheel_tread"] / 2.0
    return (
        (-info["rear_overhang"], -(half_tread + info["right_overhang"]), 0.0),
        (
            info["front_overhang"] + info["wheel_base"],
            half_tread + info["left_overhang"],
            info["vehicle_height"],
        ),
    )


def mirror_box_bounds(mirror: dict[str, float]) -> Bounds:
    """The mirrors' box from ``mirror.param.yaml``'s offsets (:data:`MIRROR_KEYS`)."""
    return (
        (
            mirror["min_longitudinal_offset"],
            mirror["min_lateral_offset"],
            mirror["min_height_offset"],
        ),
        (
            mirror["max_longitudinal_offset"],
            mirror["max_lateral_offset"],
            mirror["max_height_offset"],
        ),
    )
