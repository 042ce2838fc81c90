"""The node's parameters as data: names, defaults, types, ranges, descriptions and the settings
field each sets, free of ROS.

:data:`PARAMETERS` is the single source of truth: the node declares its ROS parameter descriptors
from it (:mod:`.descriptors`), :func:`.settings.settings_from_values` builds the settings from it
(each spec's :class:`ConfigField`), and the tests check the table of docs/parameters.md and the
YAML files against it. Defaults and choice lists come from
:class:`~gpu_euclidean_cluster.core.config.ClusterConfig` and :mod:`..qos`; other nodes' names for
these parameters are in :mod:`.autoware_names`.
"""

from __future__ import annotations

import difflib
import math
import textwrap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...core import config
from ...core.diffnormals import MAX_RADIUS as DIFFNORMALS_MAX_RADIUS
from ...core.diffnormals import DiffNormalsSettings
from ...core.frame import DEFAULT_LABELED_LAYOUT, LABELED_LAYOUTS, MAX_COORDINATE
from ...core.ground import MAX_ITERATIONS, GroundSettings
from ...pointcloud_io.pointcloud2 import MAX_FIELDS
from ...pointcloud_io.velodyne.sensors import AZIMUTH_TIMINGS
from ..qos import DEFAULT_RELIABILITY, RELIABILITIES
from .autoware_names import ALIAS_OF, AUTOWARE_NOT_APPLIED

#: Default limit of a frame's estimated neighbour search (s): a frame must not hold the node up
#: for more than about ten frames of a 10 Hz sensor.
NODE_MAX_WORK_S = 1.0
#: Autoware.ai's default keep_lane_left_distance and keep_lane_right_distance (m).
DEFAULT_LANE_DISTANCE = 5.0
#: Default share of lost frames in a diagnostics window that turns the status to WARN.
DIAGNOSTICS_WARN_SHARE = 0.1
#: Smallest ``max_point_fields``: a cloud needs x, y and z.
MIN_POINT_FIELDS = 3

#: The settings objects a parameter sets a field of: ``cluster``
#: (:class:`~gpu_euclidean_cluster.core.config.ClusterConfig`), ``ground``
#: (:class:`~gpu_euclidean_cluster.core.ground.GroundSettings`), ``diffnormals``
#: (:class:`~gpu_euclidean_cluster.core.diffnormals.DiffNormalsSettings`) and ``node``
#: (:class:`.settings.NodeSettings` itself).
Section = Literal["cluster", "ground", "diffnormals", "node"]
#: The sections a ``node`` field switches on: the field holds the section's settings while its
#: parameter is true, else None.
SWITCHED_SECTIONS: tuple[Section, ...] = ("ground", "diffnormals")


@dataclass(frozen=True)
class ConfigField:
    """The settings field a parameter sets, and how.

    Attributes:
        section: the settings object that holds the field (see :data:`Section`).
        name: the field's name.
        convert: the parameter's value as the field takes it; None: the value itself. A value
            the field cannot take is passed on, for the settings' validation to name.
    """

    section: Section
    name: str
    convert: Callable[[Any], object] | None = None

    def value(self, parameter_value: object) -> object:
        """``parameter_value`` as this field takes it."""
        return parameter_value if self.convert is None else self.convert(parameter_value)


def number_tuple(values: object) -> object:
    """A list parameter as ClusterConfig's tuple of floats (ROS gives an integer array for
    ``[15, 30]``)."""
    if isinstance(values, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    ):
        return tuple(float(v) for v in values)
    return values


def work_limit(seconds: object) -> object:
    """``max_work_s`` (or ``ground_max_work_s``) as ClusterConfig's (GroundSettings'): 0 means no
    limit (None)."""
    return None if seconds == 0 else seconds


def budget_bytes(megabytes: object) -> object:
    """``memory_budget_mb`` as ClusterConfig's ``memory_budget``: 0 means automatic (None)."""
    if isinstance(megabytes, int) and not isinstance(megabytes, bool) and megabytes >= 0:
        return None if megabytes == 0 else megabytes << 20
    return megabytes


@dataclass(frozen=True)
class ParameterSpec:
    """One node parameter.

    Attributes:
        name: parameter name.
        default: default value; its Python type (bool, int, float, str) is the parameter's type.
        description: what it does, with its unit.
        read_only: fixed at start-up (set it with ``--ros-args -p`` or a params file).
        choices: allowed string values, if restricted.
        bounds: ``(low, high)`` numeric range, if restricted: the values the node accepts, no
            more and no fewer (:func:`.settings.settings_from_values` refuses every value outside
            it; ``test/ros/parameters/test_parameter_ranges.py`` checks at each end, and just
            inside and outside it, that the node's whole validation agrees). The ROS
            descriptor's range is ``[low, high]``.
        open_bounds: whether ``low`` and ``high`` themselves are outside the range (a value
            must be above ``low``, below ``high``); the table writes ``(`` and ``)`` for them.
        sets: the settings field it sets; None: read by the node at start-up (backend, QoS,
            packet input).
    """

    name: str
    default: bool | int | float | str | list[float]
    description: str
    read_only: bool = False
    choices: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None
    open_bounds: tuple[bool, bool] = (False, False)
    sets: ConfigField | None = None

    @property
    def type_name(self) -> str:
        """``bool``, ``int``, ``double``, ``string`` or ``number[]`` (a list default: a list of
        numbers, integers or doubles, as a YAML file writes them)."""
        names = {bool: "bool", int: "int", float: "double", str: "string", list: "number[]"}
        return names[type(self.default)]

    @property
    def constraints(self) -> str:
        """The allowed values in words (empty when unrestricted)."""
        if self.choices:
            return ", ".join(self.choices)
        if self.bounds is None:
            return ""
        low, high = (_format_number(b) for b in self.bounds)
        low_open, high_open = self.open_bounds
        return f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"

    def in_range(self, value: object) -> bool:
        """Whether ``value`` is a number (not a bool, not NaN) inside :attr:`bounds`, open ends
        excluded (True for a parameter without bounds)."""
        if self.bounds is None:
            return True
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        (low, high), (low_open, high_open) = self.bounds, self.open_bounds
        above = value > low if low_open else value >= low
        below = value < high if high_open else value <= high
        return above and below


PARAMETERS: tuple[ParameterSpec, ...] = (
    ParameterSpec(
        "algorithm",
        config.DEFAULT_CONFIG.algorithm,
        "exact: every point clustered exactly (PCL's result); voxel_grid: Autoware's "
        "voxel_grid_based_euclidean_cluster (x-y voxel centroids clustered with d_th, large "
        "clusters split and thinned; see the voxel_* parameters).",
        choices=config.ALGORITHMS,
        sets=ConfigField("cluster", "algorithm"),
    ),
    ParameterSpec(
        "method",
        config.DEFAULT_CONFIG.method,
        "Labelling method: auto (fastest exact: union_find), union_find (fused, O(N) memory) or "
        "the paper's vertex- (4.1), edge- (4.2), matrix-based (4.3). Same labels for all.",
        choices=config.METHODS,
        sets=ConfigField("cluster", "method"),
    ),
    ParameterSpec(
        "search",
        config.DEFAULT_CONFIG.search,
        "Neighbour search: exhaustive (ES), voxel-grid range search (RS), kdtree (GPU kd-tree) "
        "or scan (ring x azimuth bins; rings from the cloud's ring/channel field); all exact.",
        choices=config.SEARCHES,
        sets=ConfigField("cluster", "search"),
    ),
    ParameterSpec(
        "pointer_jumping",
        config.DEFAULT_CONFIG.pointer_jumping,
        "vertex/edge: hook roots and compress paths after each pass (same labels, fewer "
        "passes); false runs the paper's algorithm as written.",
        sets=ConfigField("cluster", "pointer_jumping"),
    ),
    ParameterSpec(
        "d_th",
        config.DEFAULT_CONFIG.d_th,
        "Distance threshold in metres (PCL cluster_tolerance); must be > 0 and finite.",
        bounds=(0.0, math.inf),
        open_bounds=(True, True),
        sets=ConfigField("cluster", "d_th"),
    ),
    ParameterSpec(
        "min_cluster_size",
        config.DEFAULT_CONFIG.min_cluster_size,
        "Clusters with fewer points are dropped (cluster_id -1); voxel_grid counts the points "
        "left after thinning.",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("cluster", "min_cluster_size"),
    ),
    ParameterSpec(
        "max_cluster_size",
        config.UNLIMITED_CLUSTER_SIZE,
        "Clusters with more points are dropped (cluster_id -1); "
        f"{config.UNLIMITED_CLUSTER_SIZE} = no limit.",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("cluster", "max_cluster_size"),
    ),
    ParameterSpec(
        "use_height",
        True,
        "Cluster in 3-D; false clusters on x, y only (z ignored, as Autoware offers). "
        "voxel_grid is always 2-D and ignores it.",
        sets=ConfigField("node", "use_height", bool),
    ),
    ParameterSpec(
        "voxel_leaf_size",
        config.DEFAULT_CONFIG.voxel_leaf_size,
        "voxel_grid: voxel edge in x and y (m); z has two layers, split at z = 0.",
        bounds=(0.0, math.inf),
        open_bounds=(True, True),
        sets=ConfigField("cluster", "voxel_leaf_size"),
    ),
    ParameterSpec(
        "min_points_per_voxel",
        config.DEFAULT_CONFIG.min_points_per_voxel,
        "voxel_grid: voxels with fewer points are dropped (their points get cluster_id -1).",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("cluster", "min_points_per_voxel"),
    ),
    ParameterSpec(
        "max_voxels_per_cluster",
        config.DEFAULT_CONFIG.max_voxels_per_cluster,
        "voxel_grid: clusters of more voxels are split along their principal axis until every "
        "piece has at most this many (nothing is dropped).",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("cluster", "max_voxels_per_cluster"),
    ),
    ParameterSpec(
        "large_cluster_voxel_count_threshold",
        config.DEFAULT_CONFIG.large_cluster_voxel_count_threshold,
        "voxel_grid: clusters of more voxels than this are thinned to "
        "large_cluster_max_points_per_voxel points per voxel.",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("cluster", "large_cluster_voxel_count_threshold"),
    ),
    ParameterSpec(
        "large_cluster_max_points_per_voxel",
        config.DEFAULT_CONFIG.large_cluster_max_points_per_voxel,
        "voxel_grid: points a voxel of a thinned cluster keeps (the others get cluster_id -1).",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("cluster", "large_cluster_max_points_per_voxel"),
    ),
    ParameterSpec(
        "min_range",
        0.0,
        "Points closer than this horizontal distance (m) from the sensor are not clustered.",
        bounds=(0.0, math.inf),
        open_bounds=(False, True),
        sets=ConfigField("node", "min_range", float),
    ),
    ParameterSpec(
        "max_range",
        math.inf,
        "Points farther than this horizontal distance (m) are not clustered; .inf = no limit.",
        bounds=(0.0, math.inf),
        open_bounds=(True, False),
        sets=ConfigField("node", "max_range", float),
    ),
    ParameterSpec(
        "min_z",
        -math.inf,
        "Points below this height (m, input frame) are not clustered; -.inf = no limit.",
        bounds=(-math.inf, math.inf),
        open_bounds=(False, True),
        sets=ConfigField("node", "min_z", float),
    ),
    ParameterSpec(
        "max_z",
        math.inf,
        "Points above this height (m, input frame) are not clustered; .inf = no limit.",
        bounds=(-math.inf, math.inf),
        open_bounds=(True, False),
        sets=ConfigField("node", "max_z", float),
    ),
    ParameterSpec(
        "keep_lanes",
        False,
        "Autoware.ai's side filter: only points with -keep_lane_right_distance <= y <= "
        "keep_lane_left_distance (m, input frame) are clustered.",
        sets=ConfigField("node", "keep_lanes", bool),
    ),
    ParameterSpec(
        "keep_lane_left_distance",
        DEFAULT_LANE_DISTANCE,
        "keep_lanes: the largest y (m, to the left) of a clustered point.",
        bounds=(0.0, math.inf),
        sets=ConfigField("node", "keep_lane_left_distance", float),
    ),
    ParameterSpec(
        "keep_lane_right_distance",
        DEFAULT_LANE_DISTANCE,
        "keep_lanes: the largest -y (m, to the right) of a clustered point.",
        bounds=(0.0, math.inf),
        sets=ConfigField("node", "keep_lane_right_distance", float),
    ),
    ParameterSpec(
        "downsample_leaf_size",
        config.DEFAULT_CONFIG.downsample_leaf_size,
        "Autoware.ai's downsample_cloud / leaf_size: the points are binned into a PCL voxel grid "
        "of this leaf (m, every axis), the voxel centroids are clustered, and every point takes "
        "its voxel's cluster; 0 = off. Not with algorithm voxel_grid.",
        bounds=(0.0, math.inf),
        open_bounds=(False, True),
        sets=ConfigField("cluster", "downsample_leaf_size"),
    ),
    ParameterSpec(
        "clustering_ranges",
        [],
        "Autoware.ai's range bands: horizontal distances (m, increasing) where the tolerance "
        "changes; band i is [ranges[i-1], ranges[i]), clustered on its own with "
        "clustering_distances[i] (points of different bands never join). [] = one band, d_th. "
        "Read-only: it only makes sense with clustering_distances, and ros2 param set changes "
        "one parameter at a time.",
        read_only=True,
        sets=ConfigField("cluster", "clustering_ranges", number_tuple),
    ),
    ParameterSpec(
        "clustering_distances",
        [],
        "The tolerance (m) of each range band: one more than clustering_ranges (Autoware.ai: "
        "[0.5, 1.1, 1.6, 2.1, 2.6] for ranges [15, 30, 45, 60]). Read-only, as clustering_ranges.",
        read_only=True,
        sets=ConfigField("cluster", "clustering_distances", number_tuple),
    ),
    ParameterSpec(
        "cluster_merge_threshold",
        config.DEFAULT_CONFIG.cluster_merge_threshold,
        "Clusters whose x-y centroids are at most this far apart (m) are merged, transitively "
        "(Autoware.ai's cluster_merge_threshold); 0 = no merging.",
        bounds=(0.0, math.inf),
        open_bounds=(False, True),
        sets=ConfigField("cluster", "cluster_merge_threshold"),
    ),
    ParameterSpec(
        "pose_estimation",
        False,
        "Autoware.ai's pose_estimation: a minimum-area rectangle in x-y per cluster (yaw, "
        "length, width): output/clusters gains yaw, length, width; the objects and markers "
        "are rotated boxes.",
        sets=ConfigField("node", "pose_estimation", bool),
    ),
    ParameterSpec(
        "labeled_layout",
        DEFAULT_LABELED_LAYOUT,
        "Layout of output/labeled_points: full (every input field, then cluster_id and rgb) or "
        "compact (x, y, z as the input holds them, then cluster_id: 16 bytes a point for "
        "float32 coordinates, a third less than full for x, y, z, intensity; publish and copies "
        "cost in proportion).",
        choices=LABELED_LAYOUTS,
        sets=ConfigField("node", "labeled_layout"),
    ),
    ParameterSpec(
        "remove_ground",
        False,
        "Autoware.ai's remove_ground: fit the ground plane by RANSAC (on the GPU with the CUDA "
        "backend) and leave its points out of the clusters (cluster_id -1); they are published "
        "on output/ground_points.",
        sets=ConfigField("node", "ground"),
    ),
    ParameterSpec(
        "ground_distance_threshold",
        GroundSettings.distance_threshold,
        "remove_ground: points within this distance (m) of the plane are ground.",
        bounds=(0.0, math.inf),
        open_bounds=(True, True),
        sets=ConfigField("ground", "distance_threshold"),
    ),
    ParameterSpec(
        "ground_max_slope_deg",
        GroundSettings.max_slope_deg,
        "remove_ground: planes whose normal is more than this (degrees) from +z are not ground.",
        bounds=(0.0, 90.0),
        open_bounds=(False, True),
        sets=ConfigField("ground", "max_slope_deg"),
    ),
    ParameterSpec(
        "ground_iterations",
        GroundSettings.iterations,
        "remove_ground: RANSAC plane hypotheses per frame.",
        bounds=(1, MAX_ITERATIONS),
        sets=ConfigField("ground", "iterations"),
    ),
    ParameterSpec(
        "ground_seed",
        GroundSettings.seed,
        "remove_ground: seed of the hypotheses (same seed and frame: same plane, CPU or GPU).",
        bounds=(0, 2**63 - 1),
        sets=ConfigField("ground", "seed"),
    ),
    ParameterSpec(
        "ground_max_work_s",
        NODE_MAX_WORK_S,
        "remove_ground: seconds the plane fit may be estimated to take (hypotheses x points at "
        "the backend's declared rate, before any is drawn); a frame over it is fitted with the "
        "first hypotheses that fit, published, and warned about (a fallback in /diagnostics). "
        "0 = no limit.",
        bounds=(0.0, math.inf),
        open_bounds=(False, True),
        sets=ConfigField("ground", "max_work_s", work_limit),
    ),
    ParameterSpec(
        "use_diffnormals",
        False,
        "Autoware.ai's use_diffnormals: keep only the points whose normals at two radii differ "
        "(Difference of Normals, after the ground removal; on the GPU with the CUDA backend): "
        "flat surfaces are not clustered (cluster_id -1).",
        sets=ConfigField("node", "diffnormals"),
    ),
    ParameterSpec(
        "diffnormals_small_radius",
        DiffNormalsSettings.small_radius,
        "use_diffnormals: neighbourhood radius (m) of the small-scale normal.",
        bounds=(1e-3, DIFFNORMALS_MAX_RADIUS),
        open_bounds=(False, True),
        sets=ConfigField("diffnormals", "small_radius"),
    ),
    ParameterSpec(
        "diffnormals_large_radius",
        DiffNormalsSettings.large_radius,
        "use_diffnormals: neighbourhood radius (m) of the large-scale normal (above the small).",
        bounds=(1e-3, DIFFNORMALS_MAX_RADIUS),
        open_bounds=(True, False),
        sets=ConfigField("diffnormals", "large_radius"),
    ),
    ParameterSpec(
        "diffnormals_threshold",
        DiffNormalsSettings.threshold,
        "use_diffnormals: a point is kept when half the difference of its unit normals is "
        "longer than this.",
        bounds=(0.0, 1.0),
        open_bounds=(False, True),
        sets=ConfigField("diffnormals", "threshold"),
    ),
    ParameterSpec(
        "memory_budget_mb",
        0,
        "MiB the paper's methods may spend on their graph (edge list, matrices) per frame; 0 = "
        "automatic (on the CPU half of what the process can still allocate: available memory, "
        "RLIMIT_AS and cgroup limits; the free GPU memory). A frame over it runs with "
        "union_find (O(N) memory).",
        bounds=(0, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("cluster", "memory_budget", budget_bytes),
    ),
    ParameterSpec(
        "max_work_s",
        NODE_MAX_WORK_S,
        "Seconds a frame's neighbour search may be estimated to take with a paper's method or "
        "exhaustive search (point pairs at the backend's measured rate); a frame over it runs "
        "with union_find and a warning. 0 = no limit.",
        bounds=(0.0, math.inf),
        open_bounds=(False, True),
        sets=ConfigField("cluster", "max_work_s", work_limit),
    ),
    ParameterSpec(
        "max_coordinate",
        MAX_COORDINATE,
        "Points with an absolute coordinate above this (m) are implausible (sensor glitch, bad "
        "transform, wrong byte order): not clustered (cluster_id -1), counted in /diagnostics.",
        bounds=(0.0, math.inf),
        open_bounds=(True, False),
        sets=ConfigField("node", "max_coordinate", float),
    ),
    ParameterSpec(
        "max_point_fields",
        MAX_FIELDS,
        "A PointCloud2 declaring more fields than this is rejected as malformed before its field "
        "list is read (one reason in the log and /diagnostics); real clouds have a handful.",
        bounds=(MIN_POINT_FIELDS, config.UNLIMITED_CLUSTER_SIZE),
        sets=ConfigField("node", "max_point_fields", int),
    ),
    ParameterSpec(
        "diagnostics_warn_share",
        DIAGNOSTICS_WARN_SHARE,
        "/diagnostics turns WARN when more than this share of the frames of its window were "
        "dropped or rejected (ERROR when every frame failed).",
        bounds=(0.0, 1.0),
        sets=ConfigField("node", "diagnostics_warn_share", float),
    ),
    ParameterSpec(
        "backend",
        config.DEFAULT_BACKEND,
        "Where to cluster: auto (CUDA when CuPy sees a GPU, else CPU), cuda or cpu.",
        read_only=True,
        choices=config.BACKENDS,
    ),
    ParameterSpec(
        "device_id",
        0,
        "CUDA device index used by the cuda backend.",
        read_only=True,
        bounds=(0, 255),
    ),
    ParameterSpec(
        "qos_depth",
        5,
        "History depth of the input subscription (frames buffered by the middleware).",
        read_only=True,
        bounds=(1, 1000),
    ),
    ParameterSpec(
        "qos_reliability",
        DEFAULT_RELIABILITY,
        "Input reliability: best_effort (receives from any publisher) or reliable.",
        read_only=True,
        choices=RELIABILITIES,
    ),
    ParameterSpec(
        "sensor_model",
        "",
        "LiDAR model whose raw packets arrive on input/packets: a Velodyne (VLP16, VLP32, VLS128, "
        "HDL32, HDL64; velodyne_msgs/VelodyneScan) or a Hesai (Pandar40P, Pandar64, PandarQT64, "
        "PandarQT128, PandarXT16, PandarXT32, PandarXT32M, PandarAT128, Pandar128E4X; "
        "pandar_msgs/PandarScan, decoded on the CPU); empty: no packet input. Decoded as "
        "Autoware's driver (nebula) decodes them; needs the message package.",
        read_only=True,
    ),
    ParameterSpec(
        "calibration_file",
        "",
        "nebula-format calibration of the sensor (Velodyne: YAML; Hesai: CSV, the AT128's .dat); "
        "empty: nebula's file for sensor_model, shipped in config/velodyne or config/hesai "
        "(HDL64 has none: nebula ships an S2 and an S3 file).",
        read_only=True,
    ),
    ParameterSpec(
        "return_mode",
        "Dual",
        "Packet input: the sensor's return mode, as nebula names it (Velodyne: SingleFirst, "
        "SingleStrongest, SingleLast, Dual; Hesai: the model's, e.g. Dual, LastStrongest).",
        read_only=True,
    ),
    ParameterSpec(
        "scan_phase",
        0.0,
        "Packet input: azimuth (degrees) where a sweep is cut, as nebula's scan_phase.",
        read_only=True,
        bounds=(0.0, 360.0),
    ),
    ParameterSpec(
        "cloud_min_angle",
        0,
        "Packet input: first azimuth (whole degrees) kept in a sweep, as nebula's.",
        read_only=True,
        bounds=(0, 360),
    ),
    ParameterSpec(
        "cloud_max_angle",
        360,
        "Packet input: last azimuth (whole degrees) kept in a sweep, as nebula's.",
        read_only=True,
        bounds=(0, 360),
    ),
    ParameterSpec(
        "cut_angle",
        0.0,
        "Packet input, Hesai: azimuth (degrees) where a sweep is cut, as nebula's cut_angle "
        "(inside the cloud angles, not at their start).",
        read_only=True,
        bounds=(0.0, 360.0),
    ),
    ParameterSpec(
        "dual_return_distance_threshold",
        0.1,
        "Packet input, Hesai: a return of a multi-return firing within this distance (m) of "
        "another is dropped, as nebula's.",
        read_only=True,
        bounds=(0.01, 0.5),
    ),
    ParameterSpec(
        "sensor_min_range",
        0.3,
        "Packet input: returns nearer than this (m) are dropped by the decoder, as nebula's "
        "min_range.",
        read_only=True,
        bounds=(0.0, math.inf),
        open_bounds=(False, True),
    ),
    ParameterSpec(
        "sensor_max_range",
        300.0,
        "Packet input: returns farther than this (m) are dropped by the decoder, as nebula's "
        "max_range.",
        read_only=True,
        bounds=(0.0, math.inf),
        open_bounds=(True, False),
    ),
    ParameterSpec(
        "azimuth_timing",
        AZIMUTH_TIMINGS[0],
        "Packet input: when each laser of a block fired, for its azimuth: nebula (Autoware's "
        "driver, bit for bit; it gives the HDL-32E and HDL-64E the VLP-32C's timing and leaves a "
        "packet's last block uninterpolated) or sensor (each model's firing times from its "
        "manual; see docs/packets.md).",
        read_only=True,
        choices=AZIMUTH_TIMINGS,
    ),
    ParameterSpec(
        "sensor_kit",
        "",
        "A vehicle's LiDARs in one file (docs/sensor_kit.md; sample_sensor_kit: Autoware's sample "
        "kit, shipped): each sensor's topic subscribed and decoded with its own settings, brought "
        "into the kit's base frame through its crop boxes, joined as Autoware's "
        "concatenate_and_time_sync_node joins them, then clustered; empty: one sensor on "
        "input/points and input/packets. Excludes sensor_model.",
        read_only=True,
    ),
    ParameterSpec(
        "ring_outlier_filter",
        False,
        "Sensor kit: Autoware's ring outlier filter on each sensor's sweep before joining "
        "(the sample kit's parameters; docs/concatenation.md).",
        read_only=True,
    ),
)

SPECS: dict[str, ParameterSpec] = {spec.name: spec for spec in PARAMETERS}

#: Parameters every rclpy node has; overrides of them are rclpy's, not unknown.
ROS_PARAMETERS = ("use_sim_time", "start_type_description_service")


def section_fields(section: Section, values: Mapping[str, object]) -> dict[str, Any]:
    """The fields of ``section`` that the parameter ``values`` set (by name; names absent from
    ``values`` are left out), each as its field takes it."""
    return {
        spec.sets.name: spec.sets.value(values[spec.name])
        for spec in PARAMETERS
        if spec.sets is not None and spec.sets.section == section and spec.name in values
    }


def unknown_parameter_warnings(names: Iterable[str]) -> list[str]:
    """One warning per name that is not a parameter of the node, with the closest known name.

    rclpy ignores values given for undeclared parameters (in a YAML file or with ``-p``), so a
    misspelled or foreign name would otherwise do nothing without a word.
    """
    warnings = []
    for name in sorted(set(names)):
        known = name in SPECS or name in ALIAS_OF or name in ROS_PARAMETERS
        if known or name.startswith("qos_overrides."):
            continue
        if name in AUTOWARE_NOT_APPLIED:
            warnings.append(f"Autoware parameter {name!r} ignored: {AUTOWARE_NOT_APPLIED[name]}")
            continue
        close = difflib.get_close_matches(name, [*SPECS, *ALIAS_OF], n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        warnings.append(f"unknown parameter {name!r} ignored{hint}")
    return warnings


def parameters_help() -> str:
    """The node's parameters as plain text, for ``euclidean_cluster_node --help``."""
    lines = []
    for spec in PARAMETERS:
        allowed = ""
        if spec.constraints:
            allowed = ("; one of " if spec.choices else "; in ") + spec.constraints
        fixed = "; read-only" if spec.read_only else ""
        default = _format_value(spec.default)
        lines.append(f"  {spec.name} ({spec.type_name}, default {default}{allowed}{fixed})")
        lines += textwrap.wrap(
            spec.description, 92, initial_indent=" " * 6, subsequent_indent=" " * 6
        )
    return "\n".join(lines)


def parameters_markdown() -> str:
    """The parameter table of docs/parameters.md, generated from :data:`PARAMETERS`."""
    lines = [
        "| Parameter | Type | Default | Allowed | Live | Description |",
        "|---|---|---|---|---|---|",
    ]
    for spec in PARAMETERS:
        default = _format_value(spec.default)
        live = "no (read-only)" if spec.read_only else "yes"
        lines.append(
            f"| `{spec.name}` | {spec.type_name} | `{default}` | {spec.constraints or 'any'} "
            f"| {live} | {spec.description} |"
        )
    return "\n".join(lines)


def _format_value(value: bool | int | float | str | list[float]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return _format_number(value)
    return str(value)


def _format_number(value: float) -> str:
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(value)
