"""ROS parameter descriptors of the node, built from :data:`.specs.PARAMETERS`."""

from __future__ import annotations

import math

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)

from .specs import ParameterSpec

_TYPES = {
    "bool": ParameterType.PARAMETER_BOOL,
    "int": ParameterType.PARAMETER_INTEGER,
    "double": ParameterType.PARAMETER_DOUBLE,
    "string": ParameterType.PARAMETER_STRING,
}


def descriptor(spec: ParameterSpec) -> ParameterDescriptor:
    """The descriptor of ``spec``: type, description, constraints, range, read-only flag."""
    # A list of numbers takes integers or doubles (YAML's [15, 30] is an integer array):
    # dynamically typed, checked by the settings.
    listed = spec.type_name == "number[]"
    result = ParameterDescriptor(
        name=spec.name,
        type=ParameterType.PARAMETER_NOT_SET if listed else _TYPES[spec.type_name],
        dynamic_typing=listed,
        description=spec.description,
        additional_constraints=f"one of: {spec.constraints}" if spec.choices else "",
        read_only=spec.read_only,
    )
    if spec.bounds is not None and spec.type_name == "int":
        low, high = (int(b) for b in spec.bounds)
        result.integer_range = [IntegerRange(from_value=low, to_value=high, step=1)]
    elif spec.bounds is not None and spec.type_name == "double":
        low, high = (float(b) for b in spec.bounds)
        if not (math.isinf(low) and math.isinf(high)):
            result.floating_point_range = [
                FloatingPointRange(from_value=low, to_value=high, step=0.0)
            ]
    return result
