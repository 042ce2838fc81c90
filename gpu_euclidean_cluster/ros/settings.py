"""The node's parameters: their specification and validation, free of ROS.

:data:`PARAMETERS` is the single source of truth for names, defaults, types, ranges and
descriptions: the node declares its ROS parameter descriptors from it, and the tests check the
README table and the YAML files against it. Clustering values are validated by
:mod:`gpu_euclidean_cluster.config`, so the library, the CLI and the node agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..config import (
    BACKENDS,
    METHODS,
    SEARCHES,
    UNLIMITED_CLUSTER_SIZE,
    ClusterConfig,
    ConfigError,
)

#: Input QoS reliabilities: best effort receives from best-effort and reliable publishers alike.
RELIABILITIES: tuple[str, ...] = ("best_effort", "reliable")

_DEFAULT_CONFIG = ClusterConfig()
_INT32_MAX = 2**31 - 1


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
    default: bool | int | float | str
    description: str
    read_only: bool = False
    choices: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None

    @property
    def type_name(self) -> str:
        """``bool``, ``int``, ``double`` or ``string``."""
        return {bool: "bool", int: "int", float: "double", str: "string"}[type(self.default)]

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
        "method",
        _DEFAULT_CONFIG.method,
        "Labelling method of the paper: vertex- (4.1), edge- (4.2) or matrix-based (4.3).",
        choices=METHODS,
    ),
    ParameterSpec(
        "search",
        _DEFAULT_CONFIG.search,
        "Neighbour search: exhaustive (ES) or voxel-grid range search (RS).",
        choices=SEARCHES,
    ),
    ParameterSpec(
        "pointer_jumping",
        _DEFAULT_CONFIG.pointer_jumping,
        "vertex/edge: hook roots and compress paths after each pass (same labels, fewer "
        "passes); false runs the paper's algorithm as written.",
    ),
    ParameterSpec(
        "d_th",
        _DEFAULT_CONFIG.d_th,
        "Distance threshold in metres (PCL cluster_tolerance); must be > 0.",
        bounds=(0.0, 100.0),
    ),
    ParameterSpec(
        "min_cluster_size",
        _DEFAULT_CONFIG.min_cluster_size,
        "Clusters with fewer points are dropped (cluster_id -1).",
        bounds=(1, _INT32_MAX),
    ),
    ParameterSpec(
        "max_cluster_size",
        UNLIMITED_CLUSTER_SIZE,
        "Clusters with more points are dropped (cluster_id -1); 2147483647 = no limit.",
        bounds=(1, _INT32_MAX),
    ),
    ParameterSpec(
        "use_height",
        True,
        "Cluster in 3-D; false clusters on x, y only (z ignored, as Autoware offers).",
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
        "backend",
        "auto",
        "Where to cluster: auto (CUDA when CuPy sees a GPU, else CPU), cuda or cpu.",
        read_only=True,
        choices=BACKENDS,
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
        "best_effort",
        "Input reliability: best_effort (receives from any publisher) or reliable.",
        read_only=True,
        choices=RELIABILITIES,
    ),
)

SPECS: dict[str, ParameterSpec] = {spec.name: spec for spec in PARAMETERS}


@dataclass(frozen=True)
class NodeSettings:
    """The tunable settings in force for a frame.

    Attributes:
        cluster: clustering configuration (validated by :class:`ClusterConfig`).
        use_height: cluster on x, y, z (True) or on x, y only (False).
        min_range, max_range: horizontal distance window in metres of clustered points.
        min_z, max_z: height window in metres of clustered points.
    """

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    use_height: bool = True
    min_range: float = 0.0
    max_range: float = math.inf
    min_z: float = -math.inf
    max_z: float = math.inf

    @property
    def clips(self) -> bool:
        """True when a range or height window excludes any point."""
        return (
            self.min_range > 0.0
            or self.max_range < math.inf
            or self.min_z > -math.inf
            or self.max_z < math.inf
        )


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
    cluster = None
    try:
        cluster = _DEFAULT_CONFIG.with_changes(
            d_th=values["d_th"],
            method=values["method"],
            search=values["search"],
            pointer_jumping=values["pointer_jumping"],
            min_cluster_size=values["min_cluster_size"],
            max_cluster_size=values["max_cluster_size"],
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
    )


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


def _format_value(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return _format_number(value)
    return str(value)


def _format_number(value: float) -> str:
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    return repr(value)
