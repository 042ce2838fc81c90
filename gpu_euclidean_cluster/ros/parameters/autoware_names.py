"""Other clustering nodes' names for the node's parameters, as tables, free of ROS.

Autoware Universe's names after its rename (:data:`AUTOWARE_RENAME`) and before it, PCL's, and
Autoware.ai's ``lidar_euclidean_cluster_detect``: which of our parameters each sets
(:data:`ALIASES`, :data:`AUTOWARE_AI_PARAMETERS`), which have our name already
(:data:`AUTOWARE_SAME_NAMES`), and which are not applied here (:data:`AUTOWARE_NOT_APPLIED`).
The node declares every alias beside its target (:mod:`.node_parameters`); the tables of
docs/autoware.md are generated from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...core.config import ConfigError

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

#: Autoware's names of its voxel node's parameters before the rename: a params file that uses
#: them means ``max_cluster_size`` in voxels.
OLD_VOXEL_NAMES = frozenset(
    alias.name
    for alias in ALIASES
    if alias.origin == AUTOWARE_BEFORE_RENAME and alias.target in VOXEL_GRID_PARAMETERS
)

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


def autoware_warnings(given: Mapping[str, object], algorithm: str) -> list[str]:
    """Warnings about Autoware settings whose meaning differs here, for the start-up log."""
    if algorithm == "voxel_grid" and "max_cluster_size" in given and OLD_VOXEL_NAMES & set(given):
        return [
            f"max_cluster_size {given['max_cluster_size']!r} counts points here (after "
            "thinning); the Autoware voxel node whose names this params file uses (before the "
            "rename) counted voxels and dropped larger clusters, and Autoware 0.52+ ignores it: "
            "remove it to keep every cluster"
        ]
    return []


def autoware_ai_parameters_markdown() -> str:
    """docs/autoware.md's table of Autoware.ai's parameters, from :data:`AUTOWARE_AI_PARAMETERS`."""
    lines = ["| Autoware.ai | Ours | Difference |", "|---|---|---|"]
    for theirs, ours, difference in AUTOWARE_AI_PARAMETERS:
        lines.append(f"| `{theirs}` | {f'`{ours}`' if ours else '—'} | {difference} |")
    return "\n".join(lines)


def autoware_parameters_markdown() -> str:
    """docs/autoware.md's table of Autoware's parameter names, generated from :data:`ALIASES`,
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
