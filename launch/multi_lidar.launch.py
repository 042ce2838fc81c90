"""Start one euclidean_cluster_node per LiDAR, each in its own namespace.

    ros2 launch gpu_euclidean_cluster multi_lidar.launch.py \
        input_topics:=/sensing/lidar/top/pointcloud,/sensing/lidar/left/pointcloud \
        namespaces:=top,left gpus:=auto params_file:=<yaml> use_sim_time:=false log_level:=info

Node i clusters the i-th topic of input_topics (its input/points is remapped there) in namespace
i of namespaces, so its outputs are /<namespace>/output/labeled_points and so on. Left empty,
namespaces are derived from the topics: the topic's parent path segment
(/sensing/lidar/top/pointcloud -> top), or the topic's own name when it has none (/points_raw ->
points_raw); two topics deriving the same namespace are refused (give namespaces:=). All nodes
read the same params_file; device_id = i % gpus spreads them over the GPUs round-robin, gpus:=auto
counting them with CuPy (1 without CuPy or a device). The rules are in
gpu_euclidean_cluster.ros.launch_files.multi_lidar; bad arguments stop the launch with one line
saying why, as does a params_file that is missing or unreadable (a name without / is looked
up among the package's shipped ones: params_file:=hdl64e). When any node exits with an error
the launch stops with the reason and ros2 launch exits with status 1
(gpu_euclidean_cluster.ros.launch_files.rules).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription

PACKAGE = "gpu_euclidean_cluster"
NODE_NAME = "euclidean_cluster_node"

#: name -> (default, description); the default of params_file is filled in at launch time.
ARGUMENTS = {
    "input_topics": (
        "/sensing/lidar/top/pointcloud,/sensing/lidar/left/pointcloud,"
        "/sensing/lidar/right/pointcloud",
        "comma-separated sensor_msgs/PointCloud2 topics, one node each",
    ),
    "namespaces": (
        "",
        "comma-separated namespaces, one per topic in the same order; empty: each topic's parent "
        "path segment (/sensing/lidar/top/pointcloud -> top), which must be unique",
    ),
    "params_file": (
        None,
        "YAML file of node parameters, the same for every node, or a shipped one by name (hdl64e)",
    ),
    "gpus": (
        "auto",
        "number of GPUs to spread the nodes over (device_id = index % gpus); auto: CuPy's device "
        "count, 1 without CuPy",
    ),
    "use_sim_time": ("false", "use /clock for ROS time (true when replaying a bag with /clock)"),
    "log_level": ("info", "logging level: debug, info, warn, error or fatal"),
}


def _nodes(context):
    """One node per input topic (gpu_euclidean_cluster.ros.launch_files.multi_lidar.plan_nodes)."""
    from gpu_euclidean_cluster.ros.launch_files.multi_lidar import describe, plan_nodes
    from gpu_euclidean_cluster.ros.launch_files.rules import fail_when_node_fails, find_params_file

    configurations = context.launch_configurations
    plan = plan_nodes(
        configurations["input_topics"], configurations["namespaces"], configurations["gpus"]
    )
    params_file = find_params_file(
        "params_file", configurations["params_file"], get_package_share_directory(PACKAGE)
    )
    actions = [LogInfo(msg="multi_lidar: " + line) for line in describe(plan, NODE_NAME)]
    for lidar in plan:
        overrides = {
            "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool),
            "device_id": lidar.device_id,
        }
        node = Node(
            package=PACKAGE,
            executable=NODE_NAME,
            name=NODE_NAME,
            namespace=lidar.namespace,
            parameters=[params_file, overrides],
            remappings=[("input/points", lidar.input_topic)],
            arguments=["--ros-args", "--log-level", configurations["log_level"]],
            output="screen",
        )
        actions += [node, fail_when_node_fails(node)]
    return actions


def generate_launch_description() -> LaunchDescription:
    """The launch arguments and the nodes."""
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
    return LaunchDescription([*arguments, OpaqueFunction(function=_nodes)])
