"""Start euclidean_cluster_node on a whole vehicle: every LiDAR of a sensor kit, joined in its base
frame, under Autoware's topic names.

    ros2 launch gpu_euclidean_cluster vehicle.launch.py sensor_kit:=sample_sensor_kit \
        params_file:=<yaml> use_sim_time:=true ring_outlier_filter:=false log_level:=info

The node subscribes each sensor's topic as the kit names it (the sample kit: Autoware's
/sensing/lidar/{top,left,right}/velodyne_packets), decodes each with its own settings, joins the
sweeps as Autoware's concatenate_and_time_sync_node does, and publishes the objects as Autoware's
clustering does: tier4_perception_msgs/DetectedObjectsWithFeature on
/perception/object_recognition/detection/clustering/clusters, and the joined cloud on
/sensing/lidar/concatenated/pointcloud while that has a subscriber. Its other outputs stay under
the namespace (/perception/object_recognition/detection/clustering/output/...). sensor_kit takes
a path or the name of a kit shipped in the package's config/ (docs/sensor_kit.md); params_file as
gpu_euclidean_cluster.launch.py takes it. A bad kit or params file stops the launch with the
reason and ros2 launch exits with status 1 (gpu_euclidean_cluster.ros.launch_files.rules).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription

PACKAGE = "gpu_euclidean_cluster"
#: Autoware's names of the outputs it reads, for the node's relative ones.
AUTOWARE_OUTPUTS = {
    "output/objects_with_feature": "/perception/object_recognition/detection/clustering/clusters",
    "output/concatenated/pointcloud": "/sensing/lidar/concatenated/pointcloud",
}

#: name -> (default, description); the default of params_file is filled in at launch time.
ARGUMENTS = {
    "sensor_kit": ("sample_sensor_kit", "sensor kit file, or a shipped kit by name"),
    "params_file": (None, "YAML file of node parameters, or a shipped one by name"),
    "namespace": (
        "/perception/object_recognition/detection/clustering",
        "namespace of the node and its other outputs",
    ),
    "ring_outlier_filter": ("false", "true: Autoware's ring outlier filter on each sweep"),
    "use_sim_time": ("false", "use /clock for ROS time (true when replaying a bag with /clock)"),
    "log_level": ("info", "logging level: debug, info, warn, error or fatal"),
}


def _node(context):
    """The node, and the handler that ends the launch when it fails."""
    from gpu_euclidean_cluster.ros.launch_files.rules import fail_when_node_fails, find_params_file

    params_file = find_params_file(
        "params_file",
        context.launch_configurations["params_file"],
        get_package_share_directory(PACKAGE),
    )
    overrides = {
        "sensor_kit": context.launch_configurations["sensor_kit"],
        "ring_outlier_filter": ParameterValue(
            LaunchConfiguration("ring_outlier_filter"), value_type=bool
        ),
        "use_sim_time": ParameterValue(LaunchConfiguration("use_sim_time"), value_type=bool),
    }
    node = Node(
        package=PACKAGE,
        executable="euclidean_cluster_node",
        name="euclidean_cluster_node",
        namespace=LaunchConfiguration("namespace"),
        parameters=[params_file, overrides],
        remappings=list(AUTOWARE_OUTPUTS.items()),
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
    return LaunchDescription([*arguments, OpaqueFunction(function=_node)])
