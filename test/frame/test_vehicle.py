"""A vehicle's LiDARs joined in its base frame (``frame/vehicle.py``), on nebula's real packets.

The sample kit's three sensors are fed nebula's VLS-128 bag (``top``) and VLP-16 bag (``left``
and ``right``, the same packets), each with the bag's own decoder settings; every joined cloud is
checked against the pieces made independently: the library's sweeps, ``to_vehicle_frame`` and
``filter_rings`` on them, concatenated in Autoware's join order.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.core.ring_outlier import RingOutlierSettings
from gpu_euclidean_cluster.cpu.stages.ring_outlier import filter_rings
from gpu_euclidean_cluster.cpu.stages.vehicle_frame import to_vehicle_frame
from gpu_euclidean_cluster.frame.time_sync import autoware_join_order
from gpu_euclidean_cluster.frame.vehicle import (
    JOINED_DTYPE,
    VehicleSweeps,
    concatenation_settings,
)
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import on_host, to_structured
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import (
    SensorKitError,
    load_sensor_kit,
    parse_sensor_kit,
    sensor_poses,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    SweepDecoder,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr

from ..conftest import BACKEND_PARAMS, twin_backend
from ..pointcloud_io.test_velodyne_decoder import CASES

REPO = Path(__file__).resolve().parents[2]
SAMPLE_KIT = REPO / "config" / "sample_sensor_kit.yaml"
SHIPPED = REPO / "config" / "velodyne"
#: Which nebula bag each sensor of the sample kit is fed.
BAG_OF = {"top": "vls128", "left": "vlp16", "right": "vlp16"}
MS = 1_000_000


def bag_kit():
    """The sample kit with each sensor's decoder settings those of the bag it is fed."""
    kit = load_sensor_kit(SAMPLE_KIT)
    sensors = []
    for sensor in kit.sensors:
        settings = replace(CASES[BAG_OF[sensor.name]][2], frame_id=sensor.frame)
        sensors.append(replace(sensor, input=replace(sensor.input, decoder=settings)))
    return replace(kit, sensors=tuple(sensors))


def calibration_of(sensor) -> Path:
    return SHIPPED / sensor.input.calibration


@pytest.fixture(scope="module")
def scans(lidar_data_dir: Path) -> dict[str, list]:
    """Each bag's scans (the nebula packet bags; skipped where absent)."""
    found = {}
    for name in ("vls128", "vlp16"):
        path = lidar_data_dir / "nebula" / name / CASES[name][0]
        if not path.is_dir():
            pytest.skip(f"{path} is absent (the nebula packet bags)")
        found[name] = list(read_velodyne_scans(path))
    return found


def expected_part(kit, sensor_name: str, points: np.ndarray, rings=None) -> np.ndarray:
    """The joined rows one sweep contributes, made from the library's pieces."""
    sensor = kit.sensor(sensor_name)
    vehicle = VehicleSweeps(kit, calibration_file=calibration_of)
    moved = to_vehicle_frame(points, vehicle.frames[sensor_name])
    kept = np.flatnonzero(moved.keep)
    if rings is not None:
        kept = kept[filter_rings(points[kept], rings).order]
    part = np.zeros(kept.size, JOINED_DTYPE)
    for axis, name in enumerate("xyz"):
        part[name] = moved.xyz[kept, axis]
    for name in ("intensity", "return_type", "channel"):
        part[name] = points[name][kept]
    assert sensor.frame == vehicle.packets[sensor_name].settings.frame_id
    return part


def library_sweeps(kit, sensor_name: str, scans: list) -> list:
    sensor = kit.sensor(sensor_name)
    decoder = SweepDecoder(load_calibration(calibration_of(sensor)), sensor.input.decoder)
    return [sweep for scan in scans for sweep in decoder.feed(scan.packets, scan.packet_seconds)]


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
@pytest.mark.parametrize("ring_filter", [False, True], ids=["plain", "ring_outlier"])
def test_joined_clouds_are_the_sensors_sweeps_moved_cropped_and_concatenated(
    backend: str, ring_filter: bool, scans: dict
) -> None:
    kit = replace(bag_kit(), concatenation=(("matching_strategy", {"type": "naive"}),))
    rings = RingOutlierSettings() if ring_filter else None
    vehicle = VehicleSweeps(
        kit, twin_backend(backend), calibration_file=calibration_of, ring_outlier=rings
    )
    # each sensor's first two messages, interleaved, arriving 1 ms apart: naive matching puts
    # one sweep of each sensor in a group, which closes as soon as the third arrives
    clouds, now = [], 0
    for index in range(2):
        for name in ("top", "left", "right"):
            now += MS
            cdr = scan_to_cdr(scans[BAG_OF[name]][index])
            clouds += vehicle.feed_packets(name, cdr, now).clouds
    clouds += vehicle.flush(now + MS).clouds
    assert clouds, "no vehicle sweep joined"
    swept = {name: library_sweeps(kit, name, scans[BAG_OF[name]][:2]) for name in BAG_OF}
    used = dict.fromkeys(BAG_OF, 0)
    for joined in clouds:
        order = [name for name, _, _ in joined.sources]
        arrived = sorted(joined.group.sweeps, key=lambda sweep: sweep.arrival_ns)
        assert tuple(order) == autoware_join_order([sweep.sensor for sweep in arrived])
        assert joined.frame_id == "base_link" and set(order) == set(joined.group.present)
        parts = []
        for name, first, count in joined.sources:
            sweep = swept[name][used[name]]
            used[name] += 1
            part = expected_part(kit, name, sweep.points, rings)
            assert count == part.size and first == sum(p.size for p in parts)
            parts.append(part)
        points = to_structured(on_host(joined.cloud))
        expected = np.concatenate(parts)
        assert points.dtype.names == JOINED_DTYPE.names
        for field in JOINED_DTYPE.names:
            assert points[field].tobytes() == expected[field].tobytes(), field
        assert joined.stamp_ns == min(joined.group.stamps.values())
    assert used == {name: len(swept[name]) for name in BAG_OF}


def test_a_sensor_that_never_sends_is_missing_from_each_group_after_the_timeout(scans) -> None:
    vehicle = VehicleSweeps(bag_kit(), calibration_file=calibration_of)
    out = vehicle.feed_packets("top", scan_to_cdr(scans["vls128"][1]), 10 * MS)
    assert not out.clouds  # still waiting for left and right
    deadline = vehicle.next_deadline_ns()
    assert deadline == 10 * MS + 200 * MS  # the sample kit's timeout_sec 0.2
    assert not vehicle.poll(deadline - 1).clouds
    [joined] = vehicle.poll(deadline).clouds
    assert joined.group.present == ("top",) and set(joined.group.missing) == {"left", "right"}
    level, message, _ = joined.group.diagnostic()
    assert level == 2 and "misses some topics" in message


def test_the_sample_kit_joins_as_autoware_configures_it() -> None:
    settings = concatenation_settings(load_sensor_kit(SAMPLE_KIT))
    assert settings.sensors == ("right", "top", "left")
    assert settings.strategy == "advanced" and settings.timeout_ns == 200 * MS
    assert settings.offsets_ns == (0, 15 * MS, 16 * MS)
    assert settings.noise_windows_ns == (10 * MS,) * 3
    assert settings.output_frame == "base_link"
    vehicle = VehicleSweeps(load_sensor_kit(SAMPLE_KIT), calibration_file=calibration_of)
    assert "no twist" in vehicle.notice  # motion compensation asked, not done: said so


def test_a_kit_joining_other_sensors_is_refused_in_one_line(tmp_path: Path) -> None:
    import yaml

    document = yaml.safe_load(SAMPLE_KIT.read_text())
    document["concatenation"]["inputs"] = ["right", "top", "rear"]
    with pytest.raises(SensorKitError) as caught:
        parse_sensor_kit(document, SAMPLE_KIT.parent)
    [line] = caught.value.problems
    assert "concatenation.inputs: must list each sensor once: left, right, top" in line


def test_a_points_input_takes_nebulas_layout_only(scans) -> None:
    from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz

    kit = bag_kit()
    vehicle = VehicleSweeps(kit, calibration_file=calibration_of, poses=sensor_poses(kit))
    with pytest.raises(ValueError, match="nebula's PointXYZIRCAEDT"):
        vehicle.feed_cloud("top", from_xyz(np.zeros((3, 3))), 0, 0)


def test_sweeps_decoded_elsewhere_join_as_packets_do(scans) -> None:
    """``feed_sweep`` (a player that decodes each sensor itself) gives the joined clouds that
    ``feed_packets`` gives."""
    kit = replace(bag_kit(), concatenation=(("matching_strategy", {"type": "naive"}),))
    by_packets = VehicleSweeps(kit, calibration_file=calibration_of)
    by_sweeps = VehicleSweeps(kit, calibration_file=calibration_of)
    decoders = {
        s.name: SweepDecoder(load_calibration(calibration_of(s)), s.input.decoder)
        for s in kit.sensors
    }
    joined, again, now = [], [], 0
    for index in range(2):
        for name in ("top", "left", "right"):
            now += MS
            scan = scans[BAG_OF[name]][index]
            joined += by_packets.feed_packets(name, scan_to_cdr(scan), now).clouds
            for sweep in decoders[name].feed(scan.packets, scan.packet_seconds):
                again += by_sweeps.feed_sweep(name, sweep.points, sweep.stamp_ns, now).clouds
    assert len(joined) == len(again) >= 1
    for one, other in zip(joined, again, strict=True):
        assert one.sources == other.sources and one.stamp_ns == other.stamp_ns
        assert one.cloud.data.tobytes() == other.cloud.data.tobytes()
