"""Packets into frames without ROS: VelodyneScan CDR parsing, the node's packet decoder settings.

The CDR parser is checked against rosbags' deserializer on the real VLP-32C bag's messages; the
frame layer's sweeps against the library's decoder; the node's parameter checks one by one.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ClusterConfig, ConfigError
from gpu_euclidean_cluster.frame.packets import PacketSweeps
from gpu_euclidean_cluster.frame.service import ClusteredFrame, FrameService
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (
    RawCloud,
    on_device,
    on_host,
    to_structured,
)
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
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import packets_reaching_points
from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import Family
from gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps import first_packet_reaching_points
from gpu_euclidean_cluster.ros.node.frame_stats import FrameStats
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

from ..conftest import cuda_only, twin_backend
from ..pointcloud_io.test_velodyne_decoder import CASES

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "velodyne"
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
        (  # settings under which no return is kept: named as the node's parameters
            _values(sensor_model="VLP16", sensor_min_range=5.0, sensor_max_range=1.0),
            "packet input: sensor_min_range 5.0 is not below sensor_max_range 1.0: no return",
        ),
        (
            _values(sensor_model="VLP16", cloud_min_angle=90, cloud_max_angle=90),
            "packet input: cloud_min_angle 90 equals cloud_max_angle 90: no azimuth",
        ),
        (  # another model's calibration
            _values(sensor_model="VLP16", calibration_file=str(SHIPPED / "VLS128.yaml")),
            "num_lasers 128, but a VLP16 has 16 lasers",
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


def _scans_and_messages(lidar_data_dir: Path, case: str) -> tuple[Path, list, list[bytes]]:
    """The calibration, the parsed scans and the serialized messages of nebula's ``case`` bag
    (the recorded bytes: ``scan_to_cdr`` gives them back, as the test above shows)."""
    bag = lidar_data_dir / "nebula" / case / CASES[case][0]
    if not bag.is_dir():
        pytest.skip(f"{bag} is absent (the nebula packet bags)")
    scans = list(read_velodyne_scans(bag))
    calibration = lidar_data_dir / "nebula" / "calibration" / CASES[case][3]
    return calibration, scans, [scan_to_cdr(scan) for scan in scans]


@pytest.mark.parametrize("case", sorted(CASES))
def test_packet_sweeps_on_each_twin_are_the_decoders(case, backend, lidar_data_dir):
    """The sweeps the frame layer cuts on each twin (on the GPU: decoded, cut and kept there)
    carry the CPU sweep decoder's bytes, stamps and frames."""
    calibration, scans, raw = _scans_and_messages(lidar_data_dir, case)
    settings = CASES[case][2]
    sweeps = PacketSweeps(calibration, settings, twin_backend(backend))
    decoder = SweepDecoder(load_calibration(calibration), settings)
    got, want = [], []
    for message, scan in zip(raw, scans, strict=True):
        got += sweeps.feed(message)
        want += decoder.feed(scan.packets, scan.packet_seconds)
    assert len(got) == len(want) >= 1
    for frame, sweep in zip(got, want, strict=True):
        assert on_device(frame.cloud.data) == (backend == "cuda")
        assert frame.stamp_ns == sweep.stamp_ns
        assert to_structured(frame.cloud).tobytes() == sweep.points.tobytes()


@cuda_only
@pytest.mark.parametrize(
    "settings",
    [
        NodeSettings(),
        NodeSettings(pose_estimation=True, max_range=60.0),
        NodeSettings(cluster=ClusterConfig(search="scan")),
    ],
    ids=["default", "boxes", "scan_search"],
)
def test_a_sweep_kept_on_the_gpu_gives_the_outputs_of_its_host_copy(settings, lidar_data_dir):
    """Every output of a device-resident sweep (whole-frame graph, staged with boxes, the scan
    search reading rings) equals the output of the same bytes handed over from the host."""
    calibration, _, raw = _scans_and_messages(lidar_data_dir, "vls128")
    gpu = twin_backend("cuda")
    sweeps = PacketSweeps(calibration, CASES["vls128"][2], gpu)
    frames = [frame for message in raw for frame in sweeps.feed(message)]
    service = FrameService(gpu, 0, FrameStats(), print)
    for frame in frames:
        hosted = replace(frame, cloud=on_host(frame.cloud))
        assert not on_device(hosted.cloud.data)
        kept = service.process(frame, settings, group_records=True)
        copied = service.process(hosted, settings, group_records=True)
        assert isinstance(kept, ClusteredFrame) and isinstance(copied, ClusteredFrame)
        for name in ("labeled", "clusters"):
            assert _payload(getattr(kept.output, name)) == _payload(getattr(copied.output, name))
        assert kept.output.table.tobytes() == copied.output.table.tobytes()
        assert kept.output.grouped.records.tobytes() == copied.output.grouped.records.tobytes()
        if settings.pose_estimation:
            assert kept.output.boxes.tobytes() == copied.output.boxes.tobytes()


def _payload(cloud: RawCloud) -> bytes:
    return bytes(memoryview(cloud.data).cast("B"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_first_packet_reaching_points_is_found_in_chunks(case, lidar_data_dir):
    """The sweep stamp's packet, found on growing chunks, is the first of the whole test, also
    when it lies deep in a message (packets before it without a valid block header)."""
    _, scans, _ = _scans_and_messages(lidar_data_dir, case)
    settings = CASES[case][2]
    packets = np.concatenate([scan.packets for scan in scans])
    for depth in (0, 1, 9, 73, 600):
        damaged = packets.copy()
        damaged[:depth, :2] = 0  # the first block header of each: no return decoded
        damaged[:depth, 100:102] = 0
        whole = np.flatnonzero(packets_reaching_points(damaged, settings))
        found = first_packet_reaching_points(damaged, settings)
        assert found == (int(whole[0]) if whole.size else None)
        if settings.sensor.family is not Family.VLP32:  # a VLP-32 block always decodes
            assert found == depth
    assert first_packet_reaching_points(packets[:0], settings) is None


def test_restamping_keeps_the_low_32_bits_of_a_long_offset():
    """Rule 3 past 2**32 ns (packet stamps running backwards): the low 32 bits of the int64
    offset, as x86 converts nebula's double; held at 2**62 ns beyond that, on both twins."""
    from gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps import restamped_ns

    stamps = np.array([0, 7, 4_000_000_000], np.uint32)
    got = restamped_ns(stamps, 100.0, 90.0, np)  # about 10 s: past 2**32 ns
    moved = np.trunc(1e9 * ((100.0 + 1e-9 * stamps.astype(np.float64)) - 90.0)).astype(np.int64)
    assert np.array_equal(got, (moved % 2**32).astype(np.uint32)) and (moved > 2**32).all()
    huge = restamped_ns(stamps, 1e12, 0.0, np)  # 1e21 ns: held at 2**62, whose low bits are 0
    assert np.array_equal(huge, np.zeros(3, np.uint32))
    assert np.array_equal(restamped_ns(stamps, 90.0, 100.0, np), np.zeros(3, np.uint32))


@cuda_only
def test_the_gpu_restamps_as_the_cpu(lidar_data_dir):
    """``sweep_restamp`` on rows equals ``restamped_ns``, short, wrapped and held offsets."""
    import cupy

    from gpu_euclidean_cluster.cuda.codecs.velodyne_sweeps import DeviceSweepDecoder
    from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import POINT_DTYPE
    from gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps import restamped_ns

    calibration = lidar_data_dir / CALIBRATION
    if not calibration.is_file():
        pytest.skip(f"{calibration} is absent")
    decoder = DeviceSweepDecoder(load_calibration(calibration), SETTINGS)
    points = np.zeros(1000, POINT_DTYPE)
    points["time_stamp"] = np.linspace(0, 2**32 - 1, 1000).astype(np.uint32)
    for stamp, last in ((100.0, 99.99), (100.0, 90.0), (1e12, 0.0), (90.0, 100.0)):
        rows = cupy.asarray(points.view(np.uint8).reshape(-1, POINT_DTYPE.itemsize))
        got = decoder._restamp(rows, stamp, last).get().view(POINT_DTYPE).reshape(-1)
        want = restamped_ns(points["time_stamp"], stamp, last, np)
        assert np.array_equal(got["time_stamp"], want), (stamp, last)
