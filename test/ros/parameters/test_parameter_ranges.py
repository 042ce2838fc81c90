"""Every parameter's documented range is exactly the range the node enforces.

For each parameter with a range (its spec's ``bounds`` and ``open_bounds``, which the table of
docs/parameters.md is generated from), the node's whole validation is asked about the values at
and around each end: the ROS descriptor (rclpy's own range check, on a bare node), the settings
(:func:`settings_from_values`, the library's rules included) and, for the packet decoder's
parameters, the decoder the node builds at start-up (``packet_sweeps``). A closed end must be
accepted, an open end refused and the value just inside it accepted (so the table's bracket is
the truth, not a guess), and the value just outside a finite end refused. A range tied to another
parameter (a value below or above another's) is tried with that one at its loosest.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_euclidean_cluster.core.config import ConfigError
from gpu_euclidean_cluster.core.diffnormals import MAX_RADIUS
from gpu_euclidean_cluster.ros.parameters.settings import settings_from_values
from gpu_euclidean_cluster.ros.parameters.specs import (
    PARAMETERS,
    SPECS,
    ParameterSpec,
    parameters_markdown,
)

rclpy = pytest.importorskip("rclpy")

from rclpy.exceptions import ParameterException  # noqa: E402

from gpu_euclidean_cluster.ros.node.packet_input import packet_sweeps  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.descriptors import descriptor  # noqa: E402

from ..._ros2_tools import own_domain_id  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}
#: The decoder's parameters: read at start-up by the packet input, which a sensor_model turns on.
PACKET_PARAMETERS = {
    "scan_phase",
    "cloud_min_angle",
    "cloud_max_angle",
    "sensor_min_range",
    "sensor_max_range",
}
#: The loosest values of the parameters a range is tied to, for trying its ends.
COMPANIONS: dict[str, dict[str, object]] = {
    "min_range": {"max_range": math.inf},
    "max_range": {"min_range": 0.0},
    "min_z": {"max_z": math.inf},
    "max_z": {"min_z": -math.inf},
    "diffnormals_small_radius": {"diffnormals_large_radius": MAX_RADIUS},
    "diffnormals_large_radius": {"diffnormals_small_radius": 1e-3},
    "sensor_min_range": {"sensor_max_range": math.inf},
    "sensor_max_range": {"sensor_min_range": 0.0},
    "cloud_min_angle": {"cloud_max_angle": 180},
    "cloud_max_angle": {"cloud_min_angle": 180},
}
RANGED = [spec for spec in PARAMETERS if spec.bounds is not None]


@pytest.fixture(scope="module")
def bare_node():
    """An rclpy node of its own context, for rclpy's range check of each descriptor."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=own_domain_id())
    node = rclpy.create_node("parameter_ranges", context=context)
    try:
        yield node
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


_fresh_names = itertools.count()


def refusal(node, spec: ParameterSpec, value: float) -> str | None:
    """Why the node refuses ``value`` for ``spec`` at start-up (None: it accepts it)."""
    fresh = replace(spec, name=f"{spec.name}_{next(_fresh_names)}")
    try:
        node.declare_parameter(fresh.name, value, descriptor(fresh))
    except ParameterException as error:
        return f"rclpy: {error}"
    values = {**DEFAULTS, **COMPANIONS.get(spec.name, {}), spec.name: value}
    try:
        settings_from_values(values)
        if spec.name in PACKET_PARAMETERS:
            packet_sweeps({**values, "sensor_model": "VLP16"})
    except ConfigError as error:
        return str(error)
    return None


def typed(spec: ParameterSpec, value: float) -> float:
    """``value`` as the parameter's type takes it (an int parameter's bounds are whole)."""
    return int(value) if spec.type_name == "int" else float(value)


@pytest.mark.parametrize("spec", RANGED, ids=lambda spec: spec.name)
def test_the_documented_range_is_what_the_node_accepts(bare_node, spec: ParameterSpec):
    for end, (bound, is_open) in enumerate(zip(spec.bounds, spec.open_bounds, strict=True)):
        inward, outward = (math.inf, -math.inf) if end == 0 else (-math.inf, math.inf)
        if is_open:
            assert spec.type_name == "double", f"{spec.name}: an int range has closed ends"
            reason = refusal(bare_node, spec, bound)
            assert reason is not None, f"{spec.name} {bound!r}: open end accepted"
            inside = math.nextafter(bound, inward)
            reason = refusal(bare_node, spec, inside)
            assert reason is None, f"{spec.name} {inside!r} (just inside {bound!r}): {reason}"
        else:
            reason = refusal(bare_node, spec, typed(spec, bound))
            assert reason is None, f"{spec.name} {bound!r}: closed end refused: {reason}"
        if math.isfinite(bound):
            outside = bound + (-1 if end == 0 else 1) if spec.type_name == "int" else None
            outside = outside if outside is not None else math.nextafter(bound, outward)
            reason = refusal(bare_node, spec, outside)
            assert reason is not None, f"{spec.name} {outside!r} (just outside {bound!r}) accepted"


def test_nan_is_refused_wherever_a_double_has_a_range(bare_node):
    for spec in RANGED:
        if spec.type_name == "double":
            assert refusal(bare_node, spec, math.nan) is not None, spec.name


@pytest.mark.parametrize(
    ("name", "allowed", "value", "reason"),
    [
        ("diffnormals_threshold", "[0.0, 1.0)", 1.0, "diffnormals_threshold must be in [0, 1)"),
        ("ground_max_slope_deg", "[0.0, 90.0)", 90.0, "ground_max_slope_deg must be a number"),
        ("d_th", "(0.0, .inf)", 0.0, "d_th must be > 0 m"),
        ("scan_phase", "[0.0, 360.0]", 360.00001, "scan_phase must be in [0.0, 360.0], got"),
        ("sensor_max_range", "(0.0, .inf]", 0.0, "sensor_max_range must be in (0.0, .inf]"),
    ],
)
def test_the_table_says_what_the_node_refuses(bare_node, name, allowed, value, reason):
    """The two values a hostile-input round found the table allowing and the node refusing, a
    range only the ROS descriptor enforced before (rclpy takes a value within 1e-6 of an end),
    and a value nothing refused though the decoder keeps no point with it (sensor_max_range 0)."""
    row = re.search(rf"^\| `{name}` \|[^|]*\|[^|]*\| ([^|]*) \|", parameters_markdown(), re.M)
    assert row is not None and row.group(1) == allowed
    docs = (REPO / "docs" / "parameters.md").read_text(encoding="utf-8")
    assert f"| `{name}` | {SPECS[name].type_name} | " in docs and f"| {allowed} |" in docs
    given = refusal(bare_node, SPECS[name], value)
    assert given is not None and reason in given
