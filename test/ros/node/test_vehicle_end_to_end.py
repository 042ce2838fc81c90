"""Autoware's sample vehicle end to end, every step its own process as a user runs it:
``simulate --sensor-kit`` (a street seen by the kit's three LiDARs, as raw packets, with its
ground truth) → ``replay --packets raw --clock`` → the node (``sensor_kit:=sample_sensor_kit``,
``remove_ground``, ``use_sim_time``) → labelled clouds and cluster tables.

The replay runs at a tenth of real time with ``/clock``, the node on that clock: the sweeps are
grouped as in the recording however loaded the machine is (the groups' timeouts run in bag
time), and the node's worker has time for every vehicle sweep. Each labelled cloud must be the
frame layer's joined cloud of the same packets (``frame/vehicle.py``, CPU), byte for byte, its
labels those of the node's own frame path run here (``FrameService``, the same settings); and
against the ground truth: every object that the joined cloud holds 30 points of is one cluster
holding at least 90 % of them, and the cluster table has one row per cluster.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from gpu_euclidean_cluster.frame.packets import SweepCloud  # noqa: E402
from gpu_euclidean_cluster.frame.service import ClusteredFrame, FrameService  # noqa: E402
from gpu_euclidean_cluster.frame.vehicle import VehicleSweeps  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (  # noqa: E402
    from_message,
    read_fields,
    to_structured,
)
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import load_sensor_kit  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.velodyne import (  # noqa: E402
    SweepDecoder,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr  # noqa: E402
from gpu_euclidean_cluster.ros.node.frame_stats import FrameStats  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.settings import settings_from_values  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.velodyne_options import kit_calibration  # noqa: E402

from ..._ros2_tools import (  # noqa: E402
    BIN,
    Background,
    own_namespace,
    private_domain,
    run,
    user_env,
)
from .test_packet_input import (  # noqa: E402
    MSGS_VARIABLES,
    LabeledRecorder,
    msgs_env,  # noqa: F401 (a fixture)
    stamps_of,
    wait_for_output_matched,
)

REPO = Path(__file__).resolve().parents[3]
KIT = REPO / "config" / "sample_sensor_kit.yaml"
NAMESPACE = own_namespace("vehicle_e2e")
LABELED = f"{NAMESPACE}/output/labeled_points"
CLUSTERS = f"{NAMESPACE}/output/clusters"
FRAMES = 3
START_S = 1_700_000_000
TIMEOUT_S = 240.0
#: The node's parameters here, beside the kit: the ground removed, the replay's clock.
NODE_VALUES = {"backend": "cpu", "remove_ground": True, "qos_reliability": "reliable"}


@pytest.fixture(scope="module")
def vehicle_bag(tmp_path_factory) -> Path:
    """A simulated drive of the sample kit: 3 frames, its ground truth beside."""
    bag = tmp_path_factory.mktemp("vehicle") / "bag"
    command = [str(BIN / "gpu-euclidean-cluster"), "simulate", "--sensor-kit", str(KIT),
               "--bag", str(bag), "--frames", str(FRAMES), "--seed", "3",
               "--start-time", str(START_S)]  # fmt: skip
    done = run(command, dict(os.environ), timeout_s=300)
    assert done.returncode == 0, done.stderr
    return bag


def received(recorder: LabeledRecorder) -> int:
    """The vehicle sweeps the node's latest main /diagnostics report counts as received."""
    reports = [d for d in recorder.diagnostics if "frames_received" in d]
    return int(reports[-1]["frames_received"]) if reports else 0


def node_settings():
    values = {spec.name: spec.default for spec in PARAMETERS}
    return settings_from_values({**values, **NODE_VALUES, "sensor_kit": "sample_sensor_kit"})


def expected_frames(bag: Path) -> tuple[dict[int, tuple], dict[str, list]]:
    """Stamp -> (joined points, the node's labels of them, the group's sources, its ground mask),
    by the frame layer and the node's own frame path on the CPU; and each sensor's library
    sweeps."""
    kit = load_sensor_kit(KIT)
    vehicle = VehicleSweeps(kit, calibration_file=lambda s: kit_calibration(kit, s))
    by_topic = {s.input.topic: s for s in kit.sensors}
    # as the replay plays them on its clock: at their record times, in record order
    scans = sorted(
        (scan.bag_time_ns, by_topic[scan.topic].name, scan) for scan in read_velodyne_scans(bag)
    )
    joined = []
    for bag_time_ns, name, scan in scans:
        joined += vehicle.poll(bag_time_ns).clouds
        joined += vehicle.feed_packets(name, scan_to_cdr(scan), bag_time_ns).clouds
    joined += vehicle.flush(scans[-1][0] + 10**9).clouds
    service = FrameService("cpu", 0, FrameStats(), print)
    frames = {}
    for group in joined:
        clustered = service.process(SweepCloud(group.cloud, group.stamp_ns, group.frame_id),
                                    node_settings())  # fmt: skip
        assert isinstance(clustered, ClusteredFrame)
        labels = np.asarray(clustered.output.result.labels)
        ground = np.asarray(clustered.output.ground)
        frames[group.stamp_ns] = (to_structured(group.cloud), labels, group.sources, ground)
    sweeps = {}
    for sensor in kit.sensors:
        decoder = SweepDecoder(load_calibration(kit_calibration(kit, sensor)), sensor.input.decoder)
        sweeps[sensor.name] = [
            sweep
            for _, name, scan in scans
            if name == sensor.name
            for sweep in decoder.feed(scan.packets, scan.packet_seconds)
        ]
    return frames, sweeps


def truth_ids(bag: Path, frames: dict, sweeps: dict) -> dict[int, np.ndarray]:
    """Stamp -> the ground truth's object id of each joined point: each sensor's ids of its
    sweep, the points its crop boxes keep, in the group's join order."""
    kit = load_sensor_kit(KIT)
    vehicle = VehicleSweeps(kit, calibration_file=lambda s: kit_calibration(kit, s))
    truth = np.load(bag / "ground_truth.npz")
    from gpu_euclidean_cluster.cpu.stages.vehicle_frame import to_vehicle_frame

    ids, used = {}, Counter()
    for stamp in sorted(frames):
        parts = []
        for name, _, count in frames[stamp][2]:
            index = used[name]
            used[name] += 1
            start = truth[f"{name}/sweep_start"]
            sweep_ids = truth[f"{name}/object_id"][start[index] : start[index + 1]]
            keep = to_vehicle_frame(sweeps[name][index].points, vehicle.frames[name]).keep
            parts.append(sweep_ids[keep])
            assert parts[-1].size == count
        ids[stamp] = np.concatenate(parts)
    return ids


def test_simulated_vehicle_bag_through_replay_and_the_node_finds_the_objects(
    msgs_env,  # noqa: F811
    vehicle_bag: Path,
    tmp_path: Path,
) -> None:
    frames, sweeps = expected_frames(vehicle_bag)
    assert len(frames) == FRAMES
    ids = truth_ids(vehicle_bag, frames, sweeps)
    parameters = [arg for name, value in {**NODE_VALUES, "sensor_kit": "sample_sensor_kit",
                                         "use_sim_time": True}.items()
                  for arg in ("-p", f"{name}:={str(value).lower()}")]  # fmt: skip
    with private_domain() as domain:
        env = user_env(domain)
        env.update({k: msgs_env[k] for k in MSGS_VARIABLES if k in msgs_env})
        node = Background(
            [str(BIN / "euclidean_cluster_node"), "--ros-args", "-r", f"__ns:={NAMESPACE}",
             *parameters],
            env, tmp_path / "node.log",
        )  # fmt: skip
        recorder = LabeledRecorder(domain, LABELED)
        tables = LabeledRecorder(domain, CLUSTERS)
        try:
            wait_for_output_matched(recorder, LABELED)
            wait_for_output_matched(tables, CLUSTERS)
            replay = Background(
                [str(BIN / "gpu-euclidean-cluster"), "replay", str(vehicle_bag),
                 "--packets", "raw", "--rate", "0.1", "--clock", "200",
                 "--wait-for-subscribers", "60", "--quiet"],
                env, tmp_path / "replay.log",
            )  # fmt: skip
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline and not (
                max(frames) in stamps_of(recorder.clouds) and received(recorder) >= FRAMES
            ):
                time.sleep(0.2)
            time.sleep(1.0)  # the last cluster table
            replay.close()
            status = node.process.poll()
        finally:
            recorder.close()
            tables.close()
            node.stop()
    log = (tmp_path / "node.log").read_text()
    assert status is None and "Traceback" not in log, log
    # every vehicle sweep reached the worker; one it had no time for (a loaded machine) was
    # dropped by its newest-wins slot and counted; the last one is always published
    report = [d for d in recorder.diagnostics if "frames_received" in d][-1]
    assert int(report["frames_received"]) == FRAMES, (report, log)
    published = stamps_of(recorder.clouds)
    assert max(frames) in published and published <= set(frames), (sorted(frames), log)
    assert len(published) + int(report.get("frames_dropped", 0)) == FRAMES, (report, log)
    table_rows = {
        m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec: m.width * m.height
        for m in tables.clouds
    }
    checked = 0
    for message in recorder.clouds:
        stamp = message.header.stamp.sec * 1_000_000_000 + message.header.stamp.nanosec
        points, labels, _, ground = frames[stamp]
        assert message.header.frame_id == "base_link"
        got = read_fields(from_message(message), ["x", "y", "z", "channel", "cluster_id"])
        for name in ("x", "y", "z", "channel"):
            assert got[name].tobytes() == np.ascontiguousarray(points[name]).tobytes(), name
        assert np.array_equal(got["cluster_id"], labels)
        assert table_rows[stamp] == len(set(labels.tolist()) - {-1})
        truth = ids[stamp]
        # the ground (truth id 0) removed all but a trace
        assert (~ground & (truth == 0)).sum() <= 0.005 * (truth == 0).sum()
        for object_id in set(truth.tolist()) - {0}:
            # every object seen (30 points above the ground plane's band) is found: one cluster
            # holds most of it (a wall or a car behind a pole may show in pieces)
            mine = labels[(truth == object_id) & ~ground]
            if mine.size >= 30:
                checked += 1
                label, count = Counter(mine.tolist()).most_common(1)[0]
                assert label != -1 and count >= 0.5 * mine.size, (object_id, Counter(mine.tolist()))
        for label in set(labels.tolist()) - {-1}:
            # no cluster sweeps objects together: 3/4 of it one object (two touching ones merge)
            members = truth[labels == label]
            share = Counter(members.tolist()).most_common(1)[0][1] / members.size
            assert members.size < 30 or share >= 0.75, (label, Counter(members.tolist()))
    assert checked >= 30 * FRAMES // 3, checked  # dozens of objects per frame
