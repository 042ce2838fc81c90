"""euclidean_cluster_node in place of Autoware's voxel_grid_based_euclidean_cluster.

Autoware's launch arguments, with Autoware's defaults, so that replacing Autoware's clustering is
one line in the launch file that includes it: the package in the include's path,
``$(find-pkg-share gpu_euclidean_cluster)/launch/voxel_grid_based_euclidean_cluster.launch.xml``
(``autoware_euclidean_cluster`` before). The node is named ``euclidean_cluster`` as Autoware's
is, reads ``input_pointcloud`` and publishes tier4_perception_msgs/DetectedObjectsWithFeature on
``output_clusters``. The params file may use Autoware's parameter names, old or new
(docs/autoware.md, "Inside Autoware").

- ``algorithm`` (ours): ``voxel_grid`` (default: Autoware's voxel-grid algorithm, its output) or
  ``exact`` (every point clustered exactly, no thinning).
- ``use_low_height_cropbox``: true applies the params file's ``min_z``/``max_z`` (Autoware's
  crop-box limits) as the node's height window, in the input frame; false (default) clusters
  every height, as Autoware without its crop box. The crop box's x/y limits are not applied.
- ``input_map``, ``use_pointcloud_container``, ``pointcloud_container_name``,
  ``container_package``, ``container_executable``, ``ld_preload_value``: accepted, not
  applicable (``input_map`` is unused by Autoware as well): the node is a Python process of its
  own, not a component loaded into a C++ container.

A params file given by name (no ``/``) is the package's shipped file of that name
(``voxel_grid_based_euclidean_cluster``, ``.param.yaml`` optional). A params file that is missing
or unreadable stops the launch before the node starts; when the node exits with an error the
launch stops with the reason and ``ros2 launch`` exits with status 1
(``gpu_euclidean_cluster.ros.launch_files.rules``).
"""

import math
import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription

PACKAGE = "gpu_euclidean_cluster"

#: name -> (default, description); the default of the params file is filled in at launch time.
ARGUMENTS = {
    "input_pointcloud": (
        "/perception/obstacle_segmentation/pointcloud",
        "sensor_msgs/PointCloud2 topic to cluster",
    ),
    "input_map": ("/map/pointcloud_map", "accepted, not used (as in Autoware)"),
    "output_clusters": (
        "clusters",
        "tier4_perception_msgs/DetectedObjectsWithFeature output topic",
    ),
    "use_low_height_cropbox": (
        "false",
        "true: the params file's min_z/max_z bound the clustered heights (x/y not applied)",
    ),
    "voxel_grid_based_euclidean_param_path": (
        None,
        "params file, or a shipped one by name; Autoware's parameter names (old or new) and ours "
        "are accepted",
    ),
    "algorithm": ("voxel_grid", "voxel_grid (Autoware's algorithm) or exact (every point)"),
    "use_pointcloud_container": ("false", "not applicable: the node runs as its own process"),
    "pointcloud_container_name": ("pointcloud_container", "not applicable"),
    "container_package": ("rclcpp_components", "not applicable"),
    "container_executable": ("component_container", "not applicable"),
    "ld_preload_value": ("", "not applicable"),
}


def _node(context):
    """The node, the handler that ends the launch when it fails, and a note when a container was
    asked for."""
    from gpu_euclidean_cluster.ros.launch_files.rules import fail_when_node_fails, find_params_file

    configuration = context.launch_configurations
    params_file = find_params_file(
        "voxel_grid_based_euclidean_param_path",
        configuration["voxel_grid_based_euclidean_param_path"],
        get_package_share_directory(PACKAGE),
    )
    overrides = {"algorithm": configuration["algorithm"]}
    if configuration["use_low_height_cropbox"].strip().lower() not in ("true", "1"):
        overrides.update(min_z=-math.inf, max_z=math.inf)
    actions = []
    if configuration["use_pointcloud_container"].strip().lower() in ("true", "1"):
        actions.append(
            LogInfo(
                msg="use_pointcloud_container:=true is not applicable: gpu_euclidean_cluster's "
                "node runs as its own process (rclpy has no components)"
            )
        )
    node = Node(
        package=PACKAGE,
        executable="euclidean_cluster_node",
        name="euclidean_cluster",
        parameters=[params_file, overrides],
        remappings=[
            ("input/points", LaunchConfiguration("input_pointcloud")),
            ("output/objects_with_feature", LaunchConfiguration("output_clusters")),
        ],
        output="screen",
    )
    return [*actions, node, fail_when_node_fails(node)]


def generate_launch_description() -> LaunchDescription:
    """The launch arguments and the node."""
    default_params = os.path.join(
        get_package_share_directory(PACKAGE),
        "config",
        "voxel_grid_based_euclidean_cluster.param.yaml",
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
