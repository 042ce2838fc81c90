"""Start euclidean_cluster_node.

    ros2 launch gpu_euclidean_cluster gpu_euclidean_cluster.launch.py \
        input_topic:=/points_raw params_file:=<yaml> namespace:=perception use_sim_time:=false \
        log_level:=info
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription

PACKAGE = "gpu_euclidean_cluster"

#: name -> (default, description); the default of params_file is filled in at launch time.
ARGUMENTS = {
    "params_file": (None, "YAML file of node parameters (presets: vlp16, hdl32e, hdl64e)"),
    "input_topic": ("/points_raw", "sensor_msgs/PointCloud2 topic to cluster"),
    "namespace": ("", "namespace of the node and its topics"),
    "use_sim_time": ("false", "use /clock for ROS time (true when replaying a bag with /clock)"),
    "log_level": ("info", "logging level: debug, info, warn, error or fatal"),
}


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
    node = Node(
        package=PACKAGE,
        executable="euclidean_cluster_node",
        name="euclidean_cluster_node",
        namespace=LaunchConfiguration("namespace"),
        parameters=[
            LaunchConfiguration("params_file"),
            {"use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool)},
        ],
        remappings=[("input/points", LaunchConfiguration("input_topic"))],
        arguments=["--ros-args", "--log-level", LaunchConfiguration("log_level")],
        output="screen",
    )
    return LaunchDescription([*arguments, node])
