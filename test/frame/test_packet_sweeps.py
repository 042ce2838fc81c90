"""Packets into frames without ROS: VelodyneScan CDR parsing, the node's packet decoder settings.

The CDR parser is checked against rosbags' deserializer on the real VLP-32C bag's messages; the
frame layer's sweeps against the library's decoder; the node's parameter checks one by one.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ConfigError
from gpu_euclidean_cluster.frame.packets import PacketSweeps
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import to_structured
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    SweepDecoder,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import (
    VelodyneCdrError,
    scan_from_cdr,
    scan_to_cdr,
)

from ..pointcloud_io.test_velodyne_decoder import CASES

_BAG, _, SETTINGS, _CALIBRATION = CASES["vlp32"]  # nebula's VLP-32C bag and its settings
BAG = Path("nebula", "vlp32", _BAG)
CALIBRATION = Path("nebula", "calibration", _CALIBRATION)


@pytest.fixture(scope="module")
def raw_messages(lidar_data_dir: Path) -> list[bytes]:
    rosbag2 = pytest.importorskip("rosbags.rosbag2")
    path = lidar_data_dir / BAG
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the nebula packet bags)")
    with rosbag2.Reader(path) as reader:
        return [raw for _, _, raw in reader.messages()]


def test_cdr_parser_equals_rosbags(raw_messages, lidar_data_dir):
    scans = list(read_velodyne_scans(lidar_data_dir / BAG))
    assert len(scans) == len(raw_messages) == 5
    for raw, scan in zip(raw_messages, scans, strict=True):
        parsed = scan_from_cdr(raw)
        assert parsed.stamp_ns == scan.stamp_ns and parsed.frame_id == scan.frame_id
        assert np.array_equal(parsed.packets, scan.packets)
        assert np.array_equal(parsed.stamp_sec, scan.stamp_sec)
        assert np.array_equal(parsed.stamp_nanosec, scan.stamp_nanosec)
        assert scan_to_cdr(scan) == bytes(raw)  # the recorded bytes back


def test_cdr_parser_refuses_what_is_not_a_scan(raw_messages):
    raw = raw_messages[0]
    for bad, reason in [
        (raw[:10], "too short"),
        (b"\x00\x07" + raw[2:], "not plain CDR"),
        (raw[:-100], "packets need"),
    ]:
        with pytest.raises(VelodyneCdrError, match=reason):
            scan_from_cdr(bad)


def test_packet_sweeps_are_the_decoders(raw_messages, lidar_data_dir):
    calibration = lidar_data_dir / CALIBRATION
    sweeps = PacketSweeps(calibration, SETTINGS)
    decoder = SweepDecoder(load_calibration(calibration), SETTINGS)
    got, want = [], []
    for raw, scan in zip(raw_messages, read_velodyne_scans(lidar_data_dir / BAG), strict=True):
        got += sweeps.feed(raw)
        want += decoder.feed(scan.packets, scan.packet_seconds)
    assert len(got) == len(want) >= 3
    for frame, sweep in zip(got, want, strict=True):
        assert frame.stamp_ns == sweep.stamp_ns and frame.frame_id == "velodyne_front"
        assert to_structured(frame.cloud).tobytes() == sweep.points.tobytes()


def _values(**changes: object) -> dict[str, object]:
    from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS

    return {**{spec.name: spec.default for spec in PARAMETERS}, **changes}


def test_node_packet_settings_are_checked(lidar_data_dir):
    from gpu_euclidean_cluster.ros.node.packet_input import packet_sweeps

    assert packet_sweeps(_values()) is None  # no sensor_model: no packet input
    shipped = packet_sweeps(_values(sensor_model="VLS128"))  # nebula's calibration, shipped
    assert shipped is not None and shipped.settings.model == "VLS128"
    lower = packet_sweeps(_values(sensor_model="vls128"))  # the sensor table's rule: any case
    assert lower is not None and lower.settings.model == "VLS128"
    cases = [
        (_values(sensor_model="VLP99"), r"unknown Velodyne sensor model 'VLP99' \(sensor_model\)"),
        (_values(sensor_model="HDL64"), "needs calibration_file"),
        (_values(sensor_model="VLP16", calibration_file="/no/such.yaml"), "packet input:"),
        (
            _values(sensor_model="VLP16", calibration_file="x.yaml", return_mode="Triple"),
            "return_mode 'Triple'",
        ),
    ]
    for values, reason in cases:
        with pytest.raises(ConfigError, match=reason):
            packet_sweeps(values)
    calibration = lidar_data_dir / CALIBRATION
    if calibration.is_file():
        values = _values(sensor_model="VLP32", calibration_file=str(calibration))
        assert packet_sweeps(values).settings.model == "VLP32"


def test_packets_without_velodyne_msgs_say_how_to_build_them(monkeypatch):
    from gpu_euclidean_cluster.ros.messages import BUILD_MESSAGE_PACKAGES
    from gpu_euclidean_cluster.ros.node.packet_input import packet_sweeps, subscribe_packets

    monkeypatch.setitem(sys.modules, "velodyne_msgs.msg", None)  # the import fails
    sweeps = packet_sweeps(_values(sensor_model="VLS128"))
    with pytest.raises(ConfigError) as refused:
        subscribe_packets(None, sweeps, None, print, print, time.monotonic)
    assert str(refused.value).startswith("sensor_model VLS128 needs the velodyne_msgs package (")
    assert str(refused.value).endswith(
        "install a ROS 2 distribution's ros-<distro>-velodyne-msgs, or " + BUILD_MESSAGE_PACKAGES
    )
