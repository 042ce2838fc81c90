"""The node's parameters: names, defaults, types, ranges and descriptions, free of ROS.

:data:`PARAMETERS` is the single source of truth: the node declares its ROS parameter descriptors
from it (:mod:`.descriptors`), and the tests check the README table and the YAML files against it.
Defaults and choice lists come from :class:`~gpu_euclidean_cluster.core.config.ClusterConfig` and
:mod:`.qos`; values are validated by :func:`.settings.settings_from_values`.
"""

from __future__ import annotations

import difflib
import math
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..core import config
from ..core.config import ConfigError
from ..core.diffnormals import MAX_RADIUS as DIFFNORMALS_MAX_RADIUS
from ..core.diffnormals import DiffNormalsSettings
from ..core.frame import DEFAULT_LABELED_LAYOUT, LABELED_LAYOUTS
from ..core.ground import MAX_ITERATIONS, GroundSettings
from .qos import DEFAULT_RELIABILITY, RELIABILITIES
from .settings import (
    DEFAULT_LANE_DISTANCE,
    DIAGNOSTICS_WARN_SHARE,
    MAX_COORDINATE,
    MAX_FIELDS,
    MIN_POINT_FIELDS,
    NODE_MAX_WORK_S,
)


@dataclass(frozen=True)
class ParameterSpec:
    """One node parameter.

    Attributes:
        name: parameter name.
        default: default value; its Python type (bool, int, float, str) is the parameter's type.
        description: what it does, with its unit.
        read_only: fixed at start-up (set it with ``--ros-args -p`` or a params file).
        choices: allowed string values, if restricted.
        bounds: inclusive ``(low, high)`` numeric range, if restricted.
    """

    name: str
    default: bool | int | float | str | list[float]
    description: str
    read_only: bool = False
    choices: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None

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
        return f"[{low}, {high}]"


PARAMETERS: tuple[ParameterSpec, ...] = (
    ParameterSpec(
        "algorithm",
        config.DEFAULT_CONFIG.algorithm,
        "exact: every point clustered exactly (PCL's result); voxel_grid: Autoware's "
        "voxel_grid_based_euclidean_cluster (x-y voxel centroids clustered with d_th, large "
        "clusters split and thinned; see the voxel_* parameters).",
        choices=config.ALGORITHMS,
    ),
    ParameterSpec(
        "method",
        config.DEFAULT_CONFIG.method,
        "Labelling method: auto (fastest exact: union_find), union_find (fused, O(N) memory) or "
        "the paper's vertex- (4.1), edge- (4.2), matrix-based (4.3). Same labels for all.",
        choices=config.METHODS,
    ),
    ParameterSpec(
        "search",
        config.DEFAULT_CONFIG.search,
        "Neighbour search: exhaustive (ES), voxel-grid range search (RS), kdtree (GPU kd-tree) "
        "or scan (ring x azimuth bins; rings from the cloud's ring/channel field); all exact.",
        choices=config.SEARCHES,
    ),
    ParameterSpec(
        "pointer_jumping",
        config.DEFAULT_CONFIG.pointer_jumping,
        "vertex/edge: hook roots and compress paths after each pass (same labels, fewer "
        "passes); false runs the paper's algorithm as written.",
    ),
    ParameterSpec(
        "d_th",
        config.DEFAULT_CONFIG.d_th,
        "Distance threshold in metres (PCL cluster_tolerance); must be > 0 and finite.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "min_cluster_size",
        config.DEFAULT_CONFIG.min_cluster_size,
        "Clusters with fewer points are dropped (cluster_id -1); voxel_grid counts the points "
        "left after thinning.",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "max_cluster_size",
        config.UNLIMITED_CLUSTER_SIZE,
        "Clusters with more points are dropped (cluster_id -1); "
        f"{config.UNLIMITED_CLUSTER_SIZE} = no limit.",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "use_height",
        True,
        "Cluster in 3-D; false clusters on x, y only (z ignored, as Autoware offers). "
        "voxel_grid is always 2-D and ignores it.",
    ),
    ParameterSpec(
        "voxel_leaf_size",
        config.DEFAULT_CONFIG.voxel_leaf_size,
        "voxel_grid: voxel edge in x and y (m); z has two layers, split at z = 0.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "min_points_per_voxel",
        config.DEFAULT_CONFIG.min_points_per_voxel,
        "voxel_grid: voxels with fewer points are dropped (their points get cluster_id -1).",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "max_voxels_per_cluster",
        config.DEFAULT_CONFIG.max_voxels_per_cluster,
        "voxel_grid: clusters of more voxels are split along their principal axis until every "
        "piece has at most this many (nothing is dropped).",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "large_cluster_voxel_count_threshold",
        config.DEFAULT_CONFIG.large_cluster_voxel_count_threshold,
        "voxel_grid: clusters of more voxels than this are thinned to "
        "large_cluster_max_points_per_voxel points per voxel.",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "large_cluster_max_points_per_voxel",
        config.DEFAULT_CONFIG.large_cluster_max_points_per_voxel,
        "voxel_grid: points a voxel of a thinned cluster keeps (the others get cluster_id -1).",
        bounds=(1, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "min_range",
        0.0,
        "Points closer than this horizontal distance (m) from the sensor are not clustered.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "max_range",
        math.inf,
        "Points farther than this horizontal distance (m) are not clustered; .inf = no limit.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "min_z",
        -math.inf,
        "Points below this height (m, input frame) are not clustered; -.inf = no limit.",
        bounds=(-math.inf, math.inf),
    ),
    ParameterSpec(
        "max_z",
        math.inf,
        "Points above this height (m, input frame) are not clustered; .inf = no limit.",
        bounds=(-math.inf, math.inf),
    ),
    ParameterSpec(
        "keep_lanes",
        False,
        "Autoware.ai's side filter: only points with -keep_lane_right_distance <= y <= "
        "keep_lane_left_distance (m, input frame) are clustered.",
    ),
    ParameterSpec(
        "keep_lane_left_distance",
        DEFAULT_LANE_DISTANCE,
        "keep_lanes: the largest y (m, to the left) of a clustered point.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "keep_lane_right_distance",
        DEFAULT_LANE_DISTANCE,
        "keep_lanes: the largest -y (m, to the right) of a clustered point.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "downsample_leaf_size",
        config.DEFAULT_CONFIG.downsample_leaf_size,
        "Autoware.ai's downsample_cloud / leaf_size: the points are binned into a PCL voxel grid "
        "of this leaf (m, every axis), the voxel centroids are clustered, and every point takes "
        "its voxel's cluster; 0 = off. Not with algorithm voxel_grid.",
        bounds=(0.0, math.inf),
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
    ),
    ParameterSpec(
        "clustering_distances",
        [],
        "The tolerance (m) of each range band: one more than clustering_ranges (Autoware.ai: "
        "[0.5, 1.1, 1.6, 2.1, 2.6] for ranges [15, 30, 45, 60]). Read-only, as clustering_ranges.",
        read_only=True,
    ),
    ParameterSpec(
        "cluster_merge_threshold",
        config.DEFAULT_CONFIG.cluster_merge_threshold,
        "Clusters whose x-y centroids are at most this far apart (m) are merged, transitively "
        "(Autoware.ai's cluster_merge_threshold); 0 = no merging.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "pose_estimation",
        False,
        "Autoware.ai's pose_estimation: a minimum-area rectangle in x-y per cluster (yaw, "
        "length, width): output/clusters gains yaw, length, width; the objects and markers "
        "are rotated boxes.",
    ),
    ParameterSpec(
        "labeled_layout",
        DEFAULT_LABELED_LAYOUT,
        "Layout of output/labeled_points: full (every input field, then cluster_id and rgb) or "
        "compact (x, y, z as the input holds them, then cluster_id: 16 bytes a point for "
        "float32 coordinates, a third less than full for x, y, z, intensity; publish and copies "
        "cost in proportion).",
        choices=LABELED_LAYOUTS,
    ),
    ParameterSpec(
        "remove_ground",
        False,
        "Autoware.ai's remove_ground: fit the ground plane by RANSAC (on the GPU with the CUDA "
        "backend) and leave its points out of the clusters (cluster_id -1); they are published "
        "on output/ground_points.",
    ),
    ParameterSpec(
        "ground_distance_threshold",
        GroundSettings.distance_threshold,
        "remove_ground: points within this distance (m) of the plane are ground.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "ground_max_slope_deg",
        GroundSettings.max_slope_deg,
        "remove_ground: planes whose normal is more than this (degrees) from +z are not ground.",
        bounds=(0.0, 90.0),
    ),
    ParameterSpec(
        "ground_iterations",
        GroundSettings.iterations,
        "remove_ground: RANSAC plane hypotheses per frame.",
        bounds=(1, MAX_ITERATIONS),
    ),
    ParameterSpec(
        "ground_seed",
        GroundSettings.seed,
        "remove_ground: seed of the hypotheses (same seed and frame: same plane, CPU or GPU).",
        bounds=(0, 2**63 - 1),
    ),
    ParameterSpec(
        "use_diffnormals",
        False,
        "Autoware.ai's use_diffnormals: keep only the points whose normals at two radii differ "
        "(Difference of Normals, after the ground removal; on the GPU with the CUDA backend): "
        "flat surfaces are not clustered (cluster_id -1).",
    ),
    ParameterSpec(
        "diffnormals_small_radius",
        DiffNormalsSettings.small_radius,
        "use_diffnormals: neighbourhood radius (m) of the small-scale normal.",
        bounds=(1e-3, DIFFNORMALS_MAX_RADIUS),
    ),
    ParameterSpec(
        "diffnormals_large_radius",
        DiffNormalsSettings.large_radius,
        "use_diffnormals: neighbourhood radius (m) of the large-scale normal (above the small).",
        bounds=(1e-3, DIFFNORMALS_MAX_RADIUS),
    ),
    ParameterSpec(
        "diffnormals_threshold",
        DiffNormalsSettings.threshold,
        "use_diffnormals: a point is kept when half the difference of its unit normals is "
        "longer than this.",
        bounds=(0.0, 1.0),
    ),
    ParameterSpec(
        "memory_budget_mb",
        0,
        "MiB the paper's methods may spend on their graph (edge list, matrices) per frame; 0 = "
        "automatic (on the CPU half of what the process can still allocate: available memory, "
        "RLIMIT_AS and cgroup limits; the free GPU memory). A frame over it runs with "
        "union_find (O(N) memory).",
        bounds=(0, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "max_work_s",
        NODE_MAX_WORK_S,
        "Seconds a frame's neighbour search may be estimated to take with a paper's method or "
        "exhaustive search (point pairs at the backend's measured rate); a frame over it runs "
        "with union_find and a warning. 0 = no limit.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "max_coordinate",
        MAX_COORDINATE,
        "Points with an absolute coordinate above this (m) are implausible (sensor glitch, bad "
        "transform, wrong byte order): not clustered (cluster_id -1), counted in /diagnostics.",
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "max_point_fields",
        MAX_FIELDS,
        "A PointCloud2 declaring more fields than this is rejected as malformed before its field "
        "list is read (one reason in the log and /diagnostics); real clouds have a handful.",
        bounds=(MIN_POINT_FIELDS, config.UNLIMITED_CLUSTER_SIZE),
    ),
    ParameterSpec(
        "diagnostics_warn_share",
        DIAGNOSTICS_WARN_SHARE,
        "/diagnostics turns WARN when more than this share of the frames of its window were "
        "dropped or rejected (ERROR when every frame failed).",
        bounds=(0.0, 1.0),
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
        "Velodyne model whose raw packets (velodyne_msgs/VelodyneScan) arrive on input/packets: "
        "VLP16, VLP32, VLS128, HDL32 or HDL64; empty: no packet input. Decoded as Autoware's "
        "driver (nebula) decodes them; needs velodyne_msgs.",
        read_only=True,
    ),
    ParameterSpec(
        "calibration_file",
        "",
        "nebula-format calibration YAML of the sensor; empty: nebula's file for sensor_model, "
        "shipped in config/velodyne (HDL64 has none: nebula ships an S2 and an S3 file).",
        read_only=True,
    ),
    ParameterSpec(
        "return_mode",
        "Dual",
        "Packet input: the sensor's return mode, as nebula names it (SingleFirst, "
        "SingleStrongest, SingleLast, Dual).",
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
        "sensor_min_range",
        0.3,
        "Packet input: returns nearer than this (m) are dropped by the decoder, as nebula's "
        "min_range.",
        read_only=True,
        bounds=(0.0, math.inf),
    ),
    ParameterSpec(
        "sensor_max_range",
        300.0,
        "Packet input: returns farther than this (m) are dropped by the decoder, as nebula's "
        "max_range.",
        read_only=True,
        bounds=(0.0, math.inf),
    ),
)

SPECS: dict[str, ParameterSpec] = {spec.name: spec for spec in PARAMETERS}

#: Autoware Universe's release that renamed its clustering parameters (2026).
AUTOWARE_RENAME = "0.52"


@dataclass(frozen=True)
class ParameterAlias:
    """Another clustering node's name for one of our parameters, accepted as that parameter.

    Attributes:
        name: the other node's parameter name.
        target: our parameter it sets (declared under both names; they always hold one value).
        origin: whose name it is.
        difference: where the meaning differs from ours; empty when it is the same.
    """

    name: str
    target: str
    origin: str
    difference: str = ""


_NEW = f"Autoware {AUTOWARE_RENAME}+"
#: The origin of Autoware's names before the rename.
AUTOWARE_BEFORE_RENAME = f"Autoware before {AUTOWARE_RENAME}"
_OLD = AUTOWARE_BEFORE_RENAME
#: The parameters of the ``voxel_grid`` algorithm only.
VOXEL_GRID_PARAMETERS = (
    "voxel_leaf_size",
    "min_points_per_voxel",
    "max_voxels_per_cluster",
    "large_cluster_voxel_count_threshold",
    "large_cluster_max_points_per_voxel",
)

ALIASES: tuple[ParameterAlias, ...] = (
    ParameterAlias("tolerance_m", "d_th", _NEW),
    ParameterAlias("tolerance", "d_th", _OLD),
    ParameterAlias("cluster_tolerance", "d_th", "PCL"),
    ParameterAlias(
        "min_points_per_cluster",
        "min_cluster_size",
        _NEW,
        "voxel_grid counts the points left after thinning, as Autoware does",
    ),
    ParameterAlias("voxel_leaf_size_m", "voxel_leaf_size", _NEW),
    ParameterAlias("min_points_number_per_voxel", "min_points_per_voxel", _OLD),
    ParameterAlias(
        "max_voxel_cluster_for_output",
        "max_voxels_per_cluster",
        _OLD,
        f"before {AUTOWARE_RENAME} Autoware dropped larger clusters; here they are split, as in "
        f"Autoware {AUTOWARE_RENAME}+",
    ),
    ParameterAlias(
        "min_voxel_cluster_size_for_filtering", "large_cluster_voxel_count_threshold", _OLD
    ),
    ParameterAlias(
        "max_points_per_voxel_in_large_cluster", "large_cluster_max_points_per_voxel", _OLD
    ),
)

ALIAS_OF: dict[str, ParameterAlias] = {alias.name: alias for alias in ALIASES}

#: Autoware's parameters that have our name already, and how their meaning compares.
AUTOWARE_SAME_NAMES: dict[str, str] = {
    "use_height": "same for the exact algorithm; voxel_grid is always 2-D, as in Autoware",
    "min_cluster_size": f"same (points; {_OLD}'s name of min_points_per_cluster)",
    "max_cluster_size": (
        "points, as Autoware's euclidean_cluster; Autoware's voxel node before "
        f"{AUTOWARE_RENAME} counted voxels and {AUTOWARE_RENAME}+ ignores it: voxel_grid here "
        "counts the points left after thinning (the default, no limit, matches "
        f"{AUTOWARE_RENAME}+)"
    ),
    "min_points_per_voxel": "same",
    "max_voxels_per_cluster": "same (split, not dropped)",
    "large_cluster_voxel_count_threshold": "same",
    "large_cluster_max_points_per_voxel": (
        "same count; which points a voxel keeps is a fixed spread choice, where Autoware "
        "shuffles with a generator that carries over from frame to frame"
    ),
    "min_z": (
        "Autoware's low-height crop box; applied by our Autoware launch file only with "
        "use_low_height_cropbox:=true, in the input frame (the crop box transforms to "
        "input_frame first)"
    ),
    "max_z": "as min_z",
}

#: Autoware's parameters with no counterpart here: named, with the reason, when given.
AUTOWARE_NOT_APPLIED: dict[str, str] = {
    "input_frame": "no transform here: the windows apply in the input cloud's frame",
    "min_x": "Autoware's crop box in x and y is not applied (min_range/max_range bound the "
    "horizontal distance)",
    "max_x": "as min_x",
    "min_y": "as min_x",
    "max_y": "as min_x",
    "negative": "as min_x",
    "max_cluster_diagonal_size": "no size filter on a cluster's diagonal",
}

#: Autoware.ai's ``lidar_euclidean_cluster_detect`` parameters (its ``config/params.yaml``): our
#: parameter, or None, and how they compare. ``config/autoware_ai.param.yaml`` sets ours to its
#: defaults.
AUTOWARE_AI_PARAMETERS: tuple[tuple[str, str | None, str], ...] = (
    ("points_node", None, "the input topic: remap input/points"),
    ("use_gpu", "backend", "backend auto (CUDA when present); every stage runs on the GPU"),
    ("remove_points_upto", "min_range", "min_range keeps r >= min_range; Autoware.ai r > it"),
    ("downsample_cloud", "downsample_leaf_size", "0 = off; else the leaf_size"),
    ("leaf_size", "downsample_leaf_size", "every input point takes its voxel's cluster"),
    ("clip_min_height", "min_z", "same (inclusive)"),
    ("clip_max_height", "max_z", "same (inclusive)"),
    ("keep_lanes", "keep_lanes", "same"),
    ("keep_lane_left_distance", "keep_lane_left_distance", "same (give 5.0, not 5: a double)"),
    ("keep_lane_right_distance", "keep_lane_right_distance", "same (a double)"),
    (
        "remove_ground",
        "remove_ground",
        "RANSAC plane within ground_max_slope_deg of horizontal (Autoware.ai: 0.1 rad, 100 "
        "iterations, 0.2 m) without PCL's least-squares refit",
    ),
    (
        "use_diffnormals",
        "use_diffnormals",
        "radii 0.5/2.0 m and threshold 0.5 as its code (diffnormals_*); Autoware.ai built the "
        "filtered cloud but clustered the unfiltered one, so there it changed nothing",
    ),
    ("cluster_size_min", "min_cluster_size", "points of the (merged) cluster"),
    ("cluster_size_max", "max_cluster_size", "points of the (merged) cluster"),
    ("clustering_distance", "d_th", "same"),
    ("use_multiple_thres", "clustering_ranges", "true: give clustering_ranges; [] = off"),
    ("clustering_ranges", "clustering_ranges", "same bands (horizontal distance)"),
    ("clustering_distances", "clustering_distances", "same"),
    (
        "cluster_merge_threshold",
        "cluster_merge_threshold",
        "transitive merging of x-y centroids (Autoware.ai: always on, its result depends on "
        "cluster order); 0 = off",
    ),
    ("pose_estimation", "pose_estimation", "canonical yaw (length >= width)"),
    ("output_frame", None, "no transform: outputs keep the input's frame"),
)


def autoware_ai_parameters_markdown() -> str:
    """The README's table of Autoware.ai's parameters, from :data:`AUTOWARE_AI_PARAMETERS`."""
    lines = ["| Autoware.ai | Ours | Difference |", "|---|---|---|"]
    for theirs, ours, difference in AUTOWARE_AI_PARAMETERS:
        lines.append(f"| `{theirs}` | {f'`{ours}`' if ours else '—'} | {difference} |")
    return "\n".join(lines)


#: Parameters every rclpy node has; overrides of them are rclpy's, not unknown.
ROS_PARAMETERS = ("use_sim_time", "start_type_description_service")


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


def resolve_aliases(given: Mapping[str, object]) -> dict[str, object]:
    """The values of our parameters that ``given`` (names as set by a user: ours or aliases)
    sets, with every alias translated to its target.

    Raises:
        ConfigError: two names of one parameter are given different values.
    """
    resolved: dict[str, object] = {}
    named: dict[str, str] = {}
    for name, value in given.items():
        target = ALIAS_OF[name].target if name in ALIAS_OF else name
        if target in resolved and resolved[target] != value:
            raise ConfigError(
                f"{named[target]} {resolved[target]!r} and {name} {value!r} set the same "
                f"parameter ({target}): give one of them"
            )
        resolved[target] = value
        named.setdefault(target, name)
    return resolved


def names_of(target: str) -> tuple[str, ...]:
    """Our parameter ``target`` and its aliases: the names that always hold its value."""
    return (target, *(alias.name for alias in ALIASES if alias.target == target))


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
    """The README's parameter table, generated from :data:`PARAMETERS`."""
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


def autoware_parameters_markdown() -> str:
    """The README's table of Autoware's parameter names, generated from :data:`ALIASES`,
    :data:`AUTOWARE_SAME_NAMES` and :data:`AUTOWARE_NOT_APPLIED`."""
    lines = ["| Autoware's name | Ours | Difference |", "|---|---|---|"]
    for alias in ALIASES:
        if alias.origin != "PCL":
            lines.append(
                f"| `{alias.name}` ({alias.origin}) | `{alias.target}` "
                f"| {alias.difference or 'same'} |"
            )
    for name, difference in AUTOWARE_SAME_NAMES.items():
        lines.append(f"| `{name}` | `{name}` | {difference} |")
    for name, reason in AUTOWARE_NOT_APPLIED.items():
        lines.append(f"| `{name}` | — | not applied (a warning names it): {reason} |")
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
