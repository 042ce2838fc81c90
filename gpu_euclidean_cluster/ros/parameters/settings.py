"""The settings in force for a frame, validated from the node's parameter values, free of ROS.

Each parameter sets the field its spec names (:attr:`.specs.ParameterSpec.sets`), so the
settings are built by one loop over the specs. Clustering values are validated by
:mod:`gpu_euclidean_cluster.core.config`, so the library, the CLI and the node accept and reject
exactly the same values; the node adds its window checks, and refuses every value outside its
spec's range (:func:`range_problems`), so that the node accepts exactly the ranges its parameter
table documents, start-up parameters included.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ...core.config import DEFAULT_CONFIG, ClusterConfig, ConfigError
from ...core.diffnormals import DiffNormalsSettings
from ...core.frame import DEFAULT_LABELED_LAYOUT, MAX_COORDINATE, FrameWindow, LabeledLayout
from ...core.ground import GroundSettings
from ...pointcloud_io.pointcloud2 import MAX_FIELDS
from .specs import (
    DEFAULT_LANE_DISTANCE,
    DIAGNOSTICS_WARN_SHARE,
    MIN_POINT_FIELDS,
    NODE_MAX_WORK_S,
    PARAMETERS,
    SPECS,
    SWITCHED_SECTIONS,
    section_fields,
)


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
    problems = node_problems(values)
    sections: dict[str, Any] = {}
    for section, settings_type in (
        ("ground", GroundSettings),
        ("diffnormals", DiffNormalsSettings),
    ):
        try:
            sections[section] = settings_type(**section_fields(section, values))
        except ConfigError as error:
            problems.append(f"{section}_{error}")
    cluster = None
    try:
        cluster = DEFAULT_CONFIG.with_changes(**section_fields("cluster", values))
    except ConfigError as error:
        problems.insert(0, str(error))
    problems += range_problems(values, problems)
    if cluster is None or problems:
        raise ConfigError("; ".join(problems))
    fields = section_fields("node", values)
    for section in SWITCHED_SECTIONS:
        fields[section] = sections[section] if fields[section] else None
    return NodeSettings(cluster=cluster, **fields)


def node_problems(values: Mapping[str, object]) -> list[str]:
    """Every reason the node's own settings (windows, limits, layout) in ``values`` are invalid."""
    problems = [
        *_window_problems(values, "min_range", "max_range"),
        *_window_problems(values, "min_z", "max_z"),
    ]
    min_range = values["min_range"]
    if _is_number(min_range) and min_range < 0:
        problems.append(f"min_range must be >= 0 m, got {min_range}")
    for name in ("keep_lane_left_distance", "keep_lane_right_distance"):
        lane = values[name]
        if isinstance(lane, bool) or not (_is_number(lane) and lane >= 0):
            problems.append(f"{name} must be a number of metres >= 0, got {lane!r}")
    layouts = SPECS["labeled_layout"].choices
    if values["labeled_layout"] not in layouts:
        problems.append(
            f"labeled_layout must be one of {', '.join(layouts)}, got {values['labeled_layout']!r}"
        )
    max_coordinate = values["max_coordinate"]
    if not (_is_number(max_coordinate) and max_coordinate > 0):
        problems.append(f"max_coordinate must be > 0 m, got {max_coordinate}")
    fields = values["max_point_fields"]
    if isinstance(fields, bool) or not isinstance(fields, int) or fields < MIN_POINT_FIELDS:
        problems.append(
            f"max_point_fields must be an integer >= {MIN_POINT_FIELDS}, got {fields!r}"
        )
    share = values["diagnostics_warn_share"]
    if not (_is_number(share) and 0 <= share <= 1):
        problems.append(f"diagnostics_warn_share must be in [0, 1], got {share}")
    return problems


def range_problems(values: Mapping[str, object], named: Sequence[str] = ()) -> list[str]:
    """Every value in ``values`` outside its parameter's range (:attr:`.specs.ParameterSpec.bounds`,
    the table's), but for the parameters a problem in ``named`` names already (the library's own
    reason for the same value)."""
    text = "; ".join(named)
    return [
        f"{spec.name} must be in {spec.constraints}, got {values[spec.name]!r}"
        for spec in PARAMETERS
        if spec.name in values
        and not spec.in_range(values[spec.name])
        and not re.search(rf"\b{spec.name}\b", text)
    ]


def _is_number(value: object) -> TypeGuard[float]:
    """``value`` compares as a number (an int, a float or a bool, as Python compares them)."""
    return isinstance(value, (int, float))


def _window_problems(values: Mapping[str, object], low_name: str, high_name: str) -> list[str]:
    low, high = values[low_name], values[high_name]
    problems = [
        f"{name} must be a number, got {value!r}"
        for name, value in ((low_name, low), (high_name, high))
        if not _is_number(value) or math.isnan(value)
    ]
    if not problems and _is_number(low) and _is_number(high) and low >= high:
        problems.append(f"{low_name} ({low}) must be below {high_name} ({high})")
    return problems
