"""The node with a sensor kit (``sensor_kit``), as its own process, fed three LiDARs' packets by
a drivers' stand-in in another process: joined clouds in ``base_link``, the library's clusters.

The kit is the sample kit (a VLS-128 on top, VLP-16s left and right, their poses and crop boxes)
with each sensor's decoder settings those of nebula's bag it is fed, and naive matching: the
stand-in publishes one message of each sensor in turn, a second apart, then one more of the top
LiDAR alone. Each labelled cloud the node publishes must be the joined cloud the frame layer
makes of the same sequence (``frame/vehicle.py``, CPU), byte for byte, with the library's labels;
the last group is joined without left and right at its timeout, and the log says so.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip("rclpy")

from gpu_euclidean_cluster import euclidean_cluster  # noqa: E402
from gpu_euclidean_cluster.frame.vehicle import VehicleSweeps  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (  # noqa: E402
    from_message,
    read_fields,
    to_structured,
)
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import load_sensor_kit  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.velodyne import read_velodyne_scans  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr  # noqa: E402

from ..._ros2_tools import BIN, Background, own_namespace, private_domain, user_env  # noqa: E402
from ...frame.test_vehicle import BAG_OF, calibration_of  # noqa: E402
from ...pointcloud_io.test_velodyne_decoder import CASES  # noqa: E402
from .test_packet_input import (  # noqa: E402
    MSGS_VARIABLES,
    LabeledRecorder,
    msgs_env,  # noqa: F401 (a fixture)
    stamps_of,
)

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = own_namespace("vehicle_input")
LABELED = f"{NAMESPACE}/output/labeled_points"
TIMEOUT_S = 120.0
MS = 1_000_000
#: Seconds between the stand-in's rounds; rounds of the top LiDAR alone after the others'.
PERIOD_S, SOLO = 1.0, 1


def write_kit_file(tmp_path: Path) -> Path:
    """The sample kit with the bags' decoder settings and naive matching, written to a file."""
    document = yaml.safe_load((REPO / "config" / "sample_sensor_kit.yaml").read_text())
    for sensor in document["sensors"]:
        settings = CASES[BAG_OF[sensor["name"]]][2]
        packets = sensor["input"]["packets"]
        packets.update(
            return_mode=settings.return_mode,
            min_range=settings.min_range,
            max_range=settings.max_range,
            scan_phase=settings.scan_phase,
            cloud_min_angle=settings.cloud_min_angle,
            cloud_max_angle=settings.cloud_max_angle,
            calibration=str(REPO / "config" / "velodyne" / packets["calibration"]),
        )
    document["concatenation"]["matching_strategy"] = {"type": "naive"}
    path = tmp_path / "kit.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def expected_clouds(kit_path: Path, bags: dict[str, Path]) -> dict[int, np.ndarray]:
    """Stamp (ns) -> joined points of every group the frame layer makes of the stand-in's plan."""
    kit = load_sensor_kit(kit_path)
    vehicle = VehicleSweeps(kit, calibration_file=calibration_of)
    scans = {name: [scan_to_cdr(s) for s in read_velodyne_scans(bag)] for name, bag in bags.items()}
    together = min(len(scans["top"]) - SOLO, *(len(m) for m in scans.values()))
    plan = [[(name, scans[name][i]) for name in bags] for i in range(together)]
    plan += [[("top", scans["top"][together + i])] for i in range(SOLO)]
    joined, now = [], 0
    for index, messages in enumerate(plan):
        for offset, (name, cdr) in enumerate(messages):
            joined += vehicle.feed_packets(name, cdr, index * 1000 * MS + offset * MS).clouds
        now = index * 1000 * MS + 500 * MS
        joined += vehicle.poll(now).clouds
    joined += vehicle.flush(now).clouds
    return {j.stamp_ns: to_structured(j.cloud) for j in joined}


def test_three_lidars_packets_become_joined_clouds_with_the_librarys_clusters(
    msgs_env,  # noqa: F811
    lidar_data_dir: Path,
    tmp_path: Path,
) -> None:
    bags = {name: lidar_data_dir / "nebula" / b / CASES[b][0] for name, b in BAG_OF.items()}
    if not all(bag.is_dir() for bag in bags.values()):
        pytest.skip(f"{lidar_data_dir / 'nebula'} lacks the nebula packet bags")
    kit_path = write_kit_file(tmp_path)
    expected = expected_clouds(kit_path, bags)
    assert len(expected) >= 3
    kit = load_sensor_kit(kit_path)
    topics = [f"{s.input.topic}={bags[s.name]}" for s in kit.sensors]
    with private_domain() as domain:
        env = user_env(domain)
        env.update({k: msgs_env[k] for k in MSGS_VARIABLES if k in msgs_env})
        node = Background(
            [str(BIN / "euclidean_cluster_node"), "--ros-args", "-r", f"__ns:={NAMESPACE}",
             "-p", "backend:=cpu", "-p", "qos_reliability:=reliable",
             "-p", f"sensor_kit:={kit_path}"],
            env, tmp_path / "node.log",
        )  # fmt: skip
        recorder = LabeledRecorder(domain, LABELED)
        try:
            publisher = Background(
                [str(BIN / "python"), "-m", "test._vehicle_publisher", str(PERIOD_S), str(SOLO),
                 *topics],
                env, tmp_path / "publisher.log", cwd=REPO,
            )  # fmt: skip
            last = max(expected)  # the solo group: closed at its timeout
            deadline = time.monotonic() + TIMEOUT_S
            while last not in stamps_of(recorder.clouds) and time.monotonic() < deadline:
                time.sleep(0.2)
            publisher.close()
            status = node.process.poll()
        finally:
            recorder.close()
            node.stop()
    log = (tmp_path / "node.log").read_text()
    assert status is None and "Traceback" not in log, log
    assert last in stamps_of(recorder.clouds), (sorted(expected), log)
    # the worker may skip a frame while it clusters the one before (newest wins): the clouds
    # that came are each checked, and the solo one at least
    for message in recorder.clouds:
        stamp_ns = message.header.stamp.sec * 1_000_000_000 + message.header.stamp.nanosec
        points = expected[stamp_ns]
        assert message.header.frame_id == "base_link"
        got = read_fields(from_message(message), ["x", "y", "z", "channel", "cluster_id"])
        for name in ("x", "y", "z", "channel"):
            assert got[name].tobytes() == np.ascontiguousarray(points[name]).tobytes(), name
        xyz = np.stack([points[a] for a in "xyz"], axis=1)
        labels = euclidean_cluster(xyz, 0.5, backend="cpu").labels
        assert np.array_equal(got["cluster_id"], labels)
    assert "concatenation: joined without right, left" in log, log
    # each group's status on /diagnostics, with Autoware's keys: the solo group's an error
    groups = [d for d in recorder.diagnostics if "Pointcloud concatenation succeeded" in d]
    assert any(d["Pointcloud concatenation succeeded"] == "False" for d in groups), groups
    complete = [d for d in groups if d["Pointcloud concatenation succeeded"] == "True"]
    assert complete and all("Latency (ms): left" in d for d in complete), groups
    assert "no twist is given" in log, log  # the sample kit asks for motion compensation


def test_sensor_kit_and_sensor_model_together_are_refused(tmp_path: Path) -> None:
    import subprocess

    with private_domain() as domain:
        done = subprocess.run(
            [str(BIN / "euclidean_cluster_node"), "--ros-args",
             "-p", "sensor_kit:=sample_sensor_kit", "-p", "sensor_model:=VLP16"],
            env=user_env(domain), capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "sensor_kit and sensor_model exclude each other" in done.stderr + done.stdout


def test_a_kits_calibration_is_found_beside_the_kit_shipped_or_refused(
    tmp_path: Path, monkeypatch
) -> None:
    from gpu_euclidean_cluster.ros.parameters.velodyne_options import kit_calibration

    folder = tmp_path / "kit"
    (folder / "calib").mkdir(parents=True)
    own = folder / "calib" / "VLP16.yaml"
    own.write_text((REPO / "config" / "velodyne" / "VLP16.yaml").read_text())
    document = yaml.safe_load((REPO / "config" / "sample_sensor_kit.yaml").read_text())
    document["sensors"][1]["input"]["packets"]["calibration"] = "calib/VLP16.yaml"
    document["sensors"][2]["input"]["packets"]["calibration"] = "missing.yaml"
    path = folder / "kit.yaml"
    path.write_text(yaml.safe_dump(document))
    monkeypatch.chdir(tmp_path)  # not the kit's folder
    kit = load_sensor_kit(path)
    top, left, right = kit.sensors
    assert kit_calibration(kit, left) == own  # beside the kit, whatever the working directory
    assert kit_calibration(kit, top).name == "VLS128.yaml"  # shipped
    with pytest.raises(ValueError, match=r"sensor right: calibration missing\.yaml not found"):
        kit_calibration(kit, right)
