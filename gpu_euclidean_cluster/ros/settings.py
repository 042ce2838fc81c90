"""The settings in force for a frame, validated from the node's parameter values, free of ROS.

Clustering values are validated by :mod:`gpu_euclidean_cluster.core.config`, so the library, the
CLI and the node accept and reject exactly the same values; the node adds its window checks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.config import DEFAULT_CONFIG, ClusterConfig, ConfigError
from ..core.diffnormals import DiffNormalsSettings
from ..core.frame import (
    DEFAULT_LABELED_LAYOUT,
    LABELED_LAYOUTS,
    MAX_COORDINATE,
    FrameWindow,
    LabeledLayout,
)
from ..core.ground import GroundSettings
from ..pointcloud_io.pointcloud2 import MAX_FIELDS

#: Default limit of a frame's estimated neighbour search (s): a frame must not hold the node up
#: for more than about ten frames of a 10 Hz sensor.
NODE_MAX_WORK_S = 1.0
#: Autoware.ai's default keep_lane_left_distance and keep_lane_right_distance (m).
DEFAULT_LANE_DISTANCE = 5.0
#: Default share of lost frames in a diagnostics window that turns the status to WARN.
DIAGNOSTICS_WARN_SHARE = 0.1
#: Smallest ``max_point_fields``: a cloud needs x, y and z.
MIN_POINT_FIELDS = 3


@dataclass(frozen=True)
class NodeSettings:
    """The tunable settings in force for a frame.

    Attributes:
        cluster: clustering configuration (validated by :class:`ClusterConfig`).
        use_height: cluster on x, y, z (True) or on x, y only (False); the ``voxel_grid``
            algorithm ignores it (always 2-D, as Autoware's).
        min_range, max_range: horizontal distance window in metres of clustered points.
        min_z, max_z: height window in metres of clustered points.
        max_coordinate: points with a larger |coordinate| (m) are implausible and not clustered.
        diagnostics_warn_share: share of lost frames in a diagnostics window that means WARN.
        keep_lanes: Autoware.ai's side filter: only points with
            ``-keep_lane_right_distance <= y <= keep_lane_left_distance`` (m, input frame) are
            clustered.
        ground: RANSAC ground removal before clustering (``frame/ground.py``), or None (off).
        diffnormals: Difference-of-Normals filtering after the ground removal
            (``frame/diffnormals.py``), or None (off).
        pose_estimation: a minimum-area oriented box per cluster (``core/oriented_boxes.py``).
        max_point_fields: a message declaring more fields is rejected before they are read.
        labeled_layout: the layout of ``output/labeled_points`` (``core.frame.LABELED_LAYOUTS``).
    """

    cluster: ClusterConfig = field(
        default_factory=lambda: ClusterConfig(max_work_s=NODE_MAX_WORK_S)
    )
    use_height: bool = True
    min_range: float = 0.0
    max_range: float = math.inf
    min_z: float = -math.inf
    max_z: float = math.inf
    max_coordinate: float = MAX_COORDINATE
    diagnostics_warn_share: float = DIAGNOSTICS_WARN_SHARE
    keep_lanes: bool = False
    keep_lane_left_distance: float = DEFAULT_LANE_DISTANCE
    keep_lane_right_distance: float = DEFAULT_LANE_DISTANCE
    ground: GroundSettings | None = None
    diffnormals: DiffNormalsSettings | None = None
    pose_estimation: bool = False
    max_point_fields: int = MAX_FIELDS
    labeled_layout: LabeledLayout = DEFAULT_LABELED_LAYOUT

    @property
    def window(self) -> FrameWindow:
        """The frame layer's window of these settings: the points a frame clusters.

        The ``voxel_grid`` algorithm reads the points' true z (its grid has two layers) and is
        always 2-D on its centroids, so z is never flattened for it."""
        return FrameWindow(
            min_range=self.min_range,
            max_range=self.max_range,
            min_z=self.min_z,
            max_z=self.max_z,
            max_coordinate=self.max_coordinate,
            use_height=self.use_height or self.cluster.algorithm == "voxel_grid",
            min_y=-self.keep_lane_right_distance if self.keep_lanes else -math.inf,
            max_y=self.keep_lane_left_distance if self.keep_lanes else math.inf,
        )


def settings_from_values(values: Mapping[str, object]) -> NodeSettings:
    """The settings of a full mapping of parameter values.

    Raises:
        ConfigError: every problem found, joined in one message.
    """
    problems = [
        *_window_problems(values, "min_range", "max_range"),
        *_window_problems(values, "min_z", "max_z"),
    ]
    if values["min_range"] < 0:  # type: ignore[operator]
        problems.append(f"min_range must be >= 0 m, got {values['min_range']}")
    for name in ("keep_lane_left_distance", "keep_lane_right_distance"):
        lane = values[name]
        if isinstance(lane, bool) or not isinstance(lane, (int, float)) or not lane >= 0:
            problems.append(f"{name} must be a number of metres >= 0, got {lane!r}")
    if values["labeled_layout"] not in LABELED_LAYOUTS:
        problems.append(
            f"labeled_layout must be one of {', '.join(LABELED_LAYOUTS)}, "
            f"got {values['labeled_layout']!r}"
        )
    if not values["max_coordinate"] > 0:  # type: ignore[operator]
        problems.append(f"max_coordinate must be > 0 m, got {values['max_coordinate']}")
    fields = values["max_point_fields"]
    if isinstance(fields, bool) or not isinstance(fields, int) or fields < MIN_POINT_FIELDS:
        problems.append(
            f"max_point_fields must be an integer >= {MIN_POINT_FIELDS}, got {fields!r}"
        )
    if not 0 <= values["diagnostics_warn_share"] <= 1:  # type: ignore[operator]
        problems.append(
            f"diagnostics_warn_share must be in [0, 1], got {values['diagnostics_warn_share']}"
        )
    ground = None
    try:
        ground = GroundSettings(
            distance_threshold=values["ground_distance_threshold"],  # type: ignore[arg-type]
            max_slope_deg=values["ground_max_slope_deg"],  # type: ignore[arg-type]
            iterations=values["ground_iterations"],  # type: ignore[arg-type]
            seed=values["ground_seed"],  # type: ignore[arg-type]
        )
    except ConfigError as error:
        problems.append(f"ground_{error}")
    diffnormals = None
    try:
        diffnormals = DiffNormalsSettings(
            small_radius=values["diffnormals_small_radius"],  # type: ignore[arg-type]
            large_radius=values["diffnormals_large_radius"],  # type: ignore[arg-type]
            threshold=values["diffnormals_threshold"],  # type: ignore[arg-type]
        )
    except ConfigError as error:
        problems.append(f"diffnormals_{error}")
    cluster = None
    try:
        cluster = DEFAULT_CONFIG.with_changes(
            d_th=values["d_th"],
            method=values["method"],
            search=values["search"],
            pointer_jumping=values["pointer_jumping"],
            min_cluster_size=values["min_cluster_size"],
            max_cluster_size=values["max_cluster_size"],
            memory_budget=_budget_bytes(values["memory_budget_mb"]),
            max_work_s=_work_limit(values["max_work_s"]),
            algorithm=values["algorithm"],
            voxel_leaf_size=values["voxel_leaf_size"],
            min_points_per_voxel=values["min_points_per_voxel"],
            max_voxels_per_cluster=values["max_voxels_per_cluster"],
            large_cluster_voxel_count_threshold=values["large_cluster_voxel_count_threshold"],
            large_cluster_max_points_per_voxel=values["large_cluster_max_points_per_voxel"],
            clustering_ranges=_numbers(values["clustering_ranges"]),
            clustering_distances=_numbers(values["clustering_distances"]),
            cluster_merge_threshold=values["cluster_merge_threshold"],
            downsample_leaf_size=values["downsample_leaf_size"],
        )
    except ConfigError as error:
        problems.insert(0, str(error))
    if cluster is None or problems:
        raise ConfigError("; ".join(problems))
    return NodeSettings(
        cluster=cluster,
        use_height=bool(values["use_height"]),
        min_range=float(values["min_range"]),  # type: ignore[arg-type]
        max_range=float(values["max_range"]),  # type: ignore[arg-type]
        min_z=float(values["min_z"]),  # type: ignore[arg-type]
        max_z=float(values["max_z"]),  # type: ignore[arg-type]
        max_coordinate=float(values["max_coordinate"]),  # type: ignore[arg-type]
        diagnostics_warn_share=float(values["diagnostics_warn_share"]),  # type: ignore[arg-type]
        keep_lanes=bool(values["keep_lanes"]),
        keep_lane_left_distance=float(values["keep_lane_left_distance"]),  # type: ignore[arg-type]
        keep_lane_right_distance=float(values["keep_lane_right_distance"]),  # type: ignore[arg-type]
        ground=ground if values["remove_ground"] else None,
        diffnormals=diffnormals if values["use_diffnormals"] else None,
        pose_estimation=bool(values["pose_estimation"]),
        max_point_fields=int(fields),  # type: ignore[call-overload]
        labeled_layout=values["labeled_layout"],  # type: ignore[arg-type]
    )


def _numbers(values: object) -> object:
    """A list parameter as ClusterConfig's tuple of floats (ROS gives an integer array for
    ``[15, 30]``); anything else is passed on for ClusterConfig to name."""
    if isinstance(values, (list, tuple)) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
    ):
        return tuple(float(v) for v in values)
    return values


def _work_limit(seconds: object) -> object:
    """``max_work_s`` as ClusterConfig's: 0 means no limit (None)."""
    return None if seconds == 0 else seconds


def _budget_bytes(megabytes: object) -> object:
    """``memory_budget_mb`` as ClusterConfig's ``memory_budget``: 0 means automatic (None)."""
    if isinstance(megabytes, int) and not isinstance(megabytes, bool) and megabytes >= 0:
        return None if megabytes == 0 else megabytes << 20
    return megabytes  # ClusterConfig names the bad value


def _window_problems(values: Mapping[str, object], low_name: str, high_name: str) -> list[str]:
    low, high = values[low_name], values[high_name]
    problems = [
        f"{name} must be a number, got {value!r}"
        for name, value in ((low_name, low), (high_name, high))
        if not isinstance(value, (int, float)) or math.isnan(value)
    ]
    if not problems and low >= high:  # type: ignore[operator]
        problems.append(f"{low_name} ({low}) must be below {high_name} ({high})")
    return problems
