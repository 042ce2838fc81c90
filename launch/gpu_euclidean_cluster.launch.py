"""Start euclidean_cluster_node.

    ros2 launch gpu_euclidean_cluster gpu_euclidean_cluster.launch.py \
        input_topic:=/points_raw params_file:=<yaml> namespace:=perception use_sim_time:=false \
        log_level:=info fastdds_large_clouds:=false

Raw Velodyne packets instead of (or beside) a PointCloud2 topic, decoded inside the node:

    ros2 launch gpu_euclidean_cluster gpu_euclidean_cluster.launch.py \
        packets_topic:=/sensing/lidar/top/velodyne_packets sensor_model:=VLS128 \
        calibration_file:=<nebula calibration yaml>

sensor_model and calibration_file given here override the params file; left empty they leave it
alone.

params_file takes a path, or the name of a file shipped in the package's config/ (the presets:
params_file:=hdl64e, or hdl64e.param.yaml). A params_file that is missing or unreadable stops the
launch before the node starts; when the node exits with an error (a bad parameter, a params file
it cannot parse) the launch stops with the reason and ros2 launch exits with status 1
(gpu_euclidean_cluster.ros.launch_files.rules).

fastdds_large_clouds:=true is for a LiDAR driver (or bag player) started by the same launch, after
this file is included: it sets FASTDDS_BUILTIN_TRANSPORTS=DEFAULT?sockets_size=8MB in the launch
process's environment, which every process the launch starts from then on inherits (so the
driver's Fast DDS shared-memory segment holds a large cloud; see docs/node.md, "Large clouds between
processes"). It sets nothing when you configured Fast DDS yourself (FASTDDS_BUILTIN_TRANSPORTS,
FASTDDS_DEFAULT_PROFILES_FILE, FASTRTPS_DEFAULT_PROFILES_FILE, FASTDDS_ENVIRONMENT_FILE, a
DEFAULT_FASTDDS_PROFILES.xml in the working directory), when the RMW is not Fast DDS, or when
ROS_AUTOMATIC_DISCOVERY_RANGE is LOCALHOST/OFF; it logs what it did. Processes started before
the include, and anything outside this launch, are not affected; inside a scoped GroupAction the
setting ends with the group. The node itself always sets it for its own process.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription

PACKAGE = "gpu_euclidean_cluster"

#: name -> (default, description); the default of params_file is filled in at launch time.
ARGUMENTS = {
    "params_file": (
        None,
        "YAML file of node parameters, or a shipped one by name (presets: vlp16, hdl32e, hdl64e)",
    ),
    "input_topic": ("/points_raw", "sensor_msgs/PointCloud2 topic to cluster"),
    "namespace": ("", "namespace of the node and its topics"),
    "use_sim_time": ("false", "use /clock for ROS time (true when replaying a bag with /clock)"),
    "log_level": ("info", "logging level: debug, info, warn, error or fatal"),
    "packets_topic": (
        "/velodyne_packets",
        "velodyne_msgs/VelodyneScan topic decoded in the node when sensor_model is set",
    ),
    "sensor_model": ("", "VLP16, VLP32, VLS128, HDL32 or HDL64: decode packets_topic; empty: no"),
    "calibration_file": ("", "nebula-format calibration YAML of the sensor (with sensor_model)"),
    "fastdds_large_clouds": (
        "false",
        "true: processes this launch starts from here on (a co-launched LiDAR driver or bag "
        "player) get FASTDDS_BUILTIN_TRANSPORTS=DEFAULT?sockets_size=8MB unless Fast DDS is "
        "configured already, so that their large clouds reach the node",
    ),
}


def _large_clouds(context):
    """With fastdds_large_clouds:=true, the node's own Fast DDS choice for the launch's later
    processes (gpu_euclidean_cluster.ros.transport.configure_transport)."""
    if context.launch_configurations["fastdds_large_clouds"].strip().lower() not in ("true", "1"):
        return []
    from gpu_euclidean_cluster.ros.transport import configure_transport

    environ = context.environment  # the launch process's environment: children inherit it
    rmw = environ.get("RMW_IMPLEMENTATION") or "rmw_fastrtps_cpp"  # Kilted's default
    return [LogInfo(msg="fastdds_large_clouds: " + configure_transport(environ, rmw))]


def _node(context):
    """The node, and the handler that ends the launch when it fails; sensor_model and
    calibration_file override the params file when given."""
    from gpu_euclidean_cluster.ros.launch_files.rules import fail_when_node_fails, find_params_file

    params_file = find_params_file(
        "params_file",
        context.launch_configurations["params_file"],
        get_package_share_directory(PACKAGE),
    )
    overrides = {
        "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)
    }
    for name in ("sensor_model", "calibration_file"):
        value = context.launch_configurations[name]
        if value:
            overrides[name] = value
    node = Node(
        package=PACKAGE,
        executable="euclidean_cluster_node",
        name="euclidean_cluster_node",
        namespace=LaunchConfiguration("namespace"),
        parameters=[params_file, overrides],
        remappings=[
            ("input/points", LaunchConfiguration("input_topic")),
            ("input/packets", LaunchConfiguration("packets_topic")),
        ],
        arguments=["--ros-args", "--log-level", LaunchConfiguration("log_level")],
        output="screen",
    )
    return [node, fail_when_node_fails(node)]


def generate_launch_description() -> LaunchDescription:
    """The launch arguments and the node."""
    default_params = os.path.join(
        get_package_share_directory(PACKAGE), "config", "gpu_euclidean_cluster.param.yaml"
    )
    arguments = [
        DeclareLaunchArgument(
            name,
            default_value=default_params if default is None else default,
            description=description,
        )
        for name, (default, description) in ARGUMENTS.items()
    ]
    return LaunchDescription(
        [*arguments, OpaqueFunction(function=_large_clouds), OpaqueFunction(function=_node)]
    )
