"""``azimuth_timing``: the node parameter and the replay options that set the Velodyne decoder's
azimuth timing (``nebula`` or ``sensor``; the rules themselves:
test/pointcloud_io/test_velodyne_azimuth_timing.py)."""

from __future__ import annotations

import pytest

from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import AZIMUTH_TIMINGS
from gpu_euclidean_cluster.ros.parameters.specs import SPECS
from gpu_euclidean_cluster.ros.parameters.velodyne_options import (
    AZIMUTH_TIMING_CHOICES,
    VelodyneOptions,
)


def test_the_node_parameter_is_a_read_only_choice_defaulting_to_nebula():
    spec = SPECS["azimuth_timing"]
    assert (spec.default, spec.choices, spec.read_only) == ("nebula", AZIMUTH_TIMINGS, True)
    assert spec.type_name == "string" and spec.sets is None  # read by the packet input
    descriptors = pytest.importorskip("gpu_euclidean_cluster.ros.parameters.descriptors")
    descriptor = descriptors.descriptor(spec)
    assert descriptor.read_only and descriptor.additional_constraints == "one of: nebula, sensor"


def test_replay_options_set_the_decoders_azimuth_timing():
    assert AZIMUTH_TIMING_CHOICES == "{nebula,sensor}"
    default = VelodyneOptions(sensor_model="hdl32").resolve()
    assert default.settings.azimuth_timing == "nebula"
    decoding = VelodyneOptions(sensor_model="hdl32", azimuth_timing="sensor").resolve()
    assert decoding.settings.azimuth_timing == "sensor"
    assert decoding.describe().endswith(", azimuth timing sensor")
    with pytest.raises(
        ValueError, match=r"^--azimuth-timing must be one of nebula, sensor, got 'exact'"
    ):
        VelodyneOptions(sensor_model="hdl32", azimuth_timing="exact")
