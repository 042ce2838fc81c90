"""The node's parameters on a ROS node: declared under our names and Autoware's, kept equal.

Every parameter of :data:`.specs.PARAMETERS` is declared with its descriptor, and every
alias of :data:`.autoware_names.ALIASES` (Autoware's names, old and new, and PCL's) is declared as a
parameter of the same type and range. A value given at start-up under any name of a parameter
(``--ros-args -p``, a params file) sets all its names; two names given different values are an
error. A live set of any name (``ros2 param set``) sets all its names in the same atomic change
(a pre-set callback adds the others), so ``ros2 param get`` shows one value under every name and
the on-set callback validates our names only.
"""

from __future__ import annotations

from dataclasses import replace

from rclpy.node import Node
from rclpy.parameter import Parameter

from ...core.config import ConfigError
from .autoware_names import ALIAS_OF, ALIASES, autoware_warnings, names_of, resolve_aliases
from .descriptors import descriptor
from .specs import PARAMETERS, SPECS, unknown_parameter_warnings


def declare_node_parameters(node: Node) -> dict[str, object]:
    """Declare every parameter and alias of ``node``, log a warning for each start-up value it
    cannot apply as given (unknown names, Autoware settings that mean something else here), and
    return our parameters' values.

    Raises:
        ConfigError: two names of one parameter were given different values at start-up.
        ParameterException: a value given has the wrong type or is out of range.
    """
    overrides = start_up_values(node)
    given = {name: v for name, v in overrides.items() if name in SPECS or name in ALIAS_OF}
    resolved = resolve_aliases(given)
    for spec in PARAMETERS:
        value = resolved.get(spec.name, spec.default)
        # A params file's empty list ([]) reaches rclpy as no value: it means the empty list.
        empty = spec.type_name == "number[]" and value is None
        node.declare_parameter(
            spec.name, [] if empty else value, descriptor(spec), ignore_override=empty
        )
    for alias in ALIASES:
        target = SPECS[alias.target]
        spec = replace(
            target,
            name=alias.name,
            description=f"{alias.origin}'s name for {alias.target}: {target.description}",
        )
        value = node.get_parameter(alias.target).value
        node.declare_parameter(alias.name, value, descriptor(spec))
        # An override of the alias wins over the default given above; resolve_aliases made it
        # equal to the target's value already.
    node.add_pre_set_parameters_callback(with_every_name)
    values = {spec.name: node.get_parameter(spec.name).value for spec in PARAMETERS}
    # rclpy keeps the values given for names never declared, and ignores them.
    for warning in [
        *unknown_parameter_warnings(overrides),
        *autoware_warnings(given, str(values["algorithm"])),
    ]:
        node.get_logger().warning(warning)
    return values


def start_up_values(node: Node) -> dict[str, object]:
    """The values ``node`` was given at start-up, by name: its ``--ros-args`` (``-p``, params
    files) and its constructor's ``parameter_overrides``, declared or not.

    rclpy keeps them only in ``Node._parameter_overrides``, the one private attribute read here:
    it has no public accessor (rclcpp's is ``NodeOptions::parameter_overrides``), and declaring a
    name and reading it back cannot reveal the names never declared, which the unknown-name
    warnings are about.
    """
    return {name: parameter.value for name, parameter in node._parameter_overrides.items()}


def with_every_name(parameters: list[Parameter]) -> list[Parameter]:
    """``parameters`` plus, for each one, its other names with the same value (rclpy's pre-set
    callback: the change stays atomic)."""
    named = {p.name for p in parameters}
    extra = []
    for parameter in parameters:
        target = ALIAS_OF[parameter.name].target if parameter.name in ALIAS_OF else parameter.name
        for name in names_of(target):
            if name not in named:
                named.add(name)
                extra.append(Parameter(name, parameter.type_, parameter.value))
    return [*parameters, *extra]


def alias_conflict(parameters: list[Parameter]) -> str | None:
    """Why one change sets two names of one parameter to different values, or None."""
    try:
        resolve_aliases({p.name: p.value for p in parameters})
    except ConfigError as error:
        return str(error)
    return None
