"""Velodyne packets straight into the node: ``input/packets`` as a user runs it.

The node runs as its own process (the ``euclidean_cluster_node`` script, CPU backend) with
``sensor_model`` and ``calibration_file`` set; a driver stand-in, another process, publishes the
real VLP-32C bag's (Autoware's ``/sensing/lidar/front/velodyne_packets``) or VLS-128 bag's
``VelodyneScan`` messages as recorded. The node decodes them itself (no PointCloud2 between
driver and clusterer), and every labelled cloud it publishes must hold exactly the sweep the
library's decoder cuts from those packets, with the library's cluster labels of it. Hostile
packets first (a message over the decoder's budget, another model's packets, a sweep that never
completes) are each refused with a warning and a ``/diagnostics`` count, and the node runs on.
Needs ``velodyne_msgs``: built from ``../shared/msgs`` (skips with the reason without it).
"""

from __future__ import annotations

import fcntl
import threading
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import PointCloud2  # noqa: E402

from gpu_euclidean_cluster import euclidean_cluster  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_message, read_fields  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.velodyne import (  # noqa: E402
    DecoderSettings,
    SweepDecoder,
    load_calibration,
    read_velodyne_scans,
)

from ..._perception_msgs import BUILD_LOCK, perception_msgs_env  # noqa: E402
from ..._ros2_tools import BIN, Background, own_namespace, private_domain, user_env  # noqa: E402
from ...pointcloud_io.test_velodyne_decoder import CASES  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

#: Sensor model -> bag, calibration and nebula's settings (``test_velodyne_decoder.CASES``).
SENSORS = {
    model: (Path("nebula", folder, bag), Path("nebula", "calibration", calibration), settings)
    for model, folder in (("VLP32", "vlp32"), ("VLS128", "vls128"))
    for bag, _, settings, calibration in [CASES[folder]]
}
#: the namespace of the test's node, one of its own
NAMESPACE = own_namespace("packet_input")
PACKETS_TOPIC = f"{NAMESPACE}/input/packets"
LABELED = f"{NAMESPACE}/output/labeled_points"
#: where replay publishes the sweeps it decodes, and the node's input/points is remapped to
SWEEPS_TOPIC = f"{NAMESPACE}/pointcloud_raw_ex"
TIMEOUT_S = 90.0
#: The refusals of the driver stand-in's hostile prelude (``_velodyne_helpers.hostile_messages``).
HOSTILE_KINDS = ("message_over_budget", "other_model", "sweep_over_budget")
#: What the message packages' setup.bash sets for a process that uses them.
MSGS_VARIABLES = ("PYTHONPATH", "LD_LIBRARY_PATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH")


@pytest.fixture(scope="module")
def msgs_env() -> dict[str, str]:
    env, reason = perception_msgs_env()
    if env is None:
        pytest.skip(reason)
    return env


def test_message_package_builds_take_turns(msgs_env):
    """A run of build.sh waits while another holds the lock (built already: it then takes 0.1 s)."""
    results = []
    build = threading.Thread(target=lambda: results.append(perception_msgs_env.__wrapped__()))
    with open(BUILD_LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        build.start()
        build.join(2.0)
        assert build.is_alive() and not results, "build.sh ran while another run held the lock"
    build.join(TIMEOUT_S)
    assert len(results) == 1 and results[0][0] is not None, results


def expected_sweeps(
    bag: Path, calibration: Path, settings: DecoderSettings
) -> dict[int, np.ndarray]:
    """Stamp (ns) -> points of every sweep the library cuts from the bag's packets, fed as a ROS
    driver feeds them (packet stamps in ns / 1e9)."""
    decoder = SweepDecoder(load_calibration(calibration), settings)
    sweeps = {}
    for scan in read_velodyne_scans(bag):
        for sweep in decoder.feed(scan.packets, scan.packet_seconds):
            sweeps[sweep.stamp_ns] = sweep.points
    return sweeps


def stamps_of(clouds: list[PointCloud2]) -> set[int]:
    """The header stamps (ns) of ``clouds``."""
    return {m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec for m in clouds}


def wait_for_sweeps(recorder: LabeledRecorder, expected: dict[int, np.ndarray]) -> None:
    """Until ``recorder`` holds the last expected sweep's cloud and a /diagnostics report counts
    every expected sweep received by the node, or TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and not (
        max(expected) in stamps_of(recorder.clouds) and received(recorder) >= len(expected)
    ):
        time.sleep(0.2)


def wait_for_output_matched(recorder: LabeledRecorder, topic: str = LABELED) -> None:
    """Until the recorder sees the node's labelled output and receives its /diagnostics (the
    node has then discovered the recorder's subscriptions), or TIMEOUT_S: the node publishes
    only while a subscriber is matched, so a sweep clustered before that is published to no one
    (neither published nor dropped)."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and not (
        recorder.node.count_publishers(topic) and recorder.diagnostics
    ):
        time.sleep(0.2)


def received(recorder: LabeledRecorder) -> int:
    """The sweeps the latest /diagnostics report counts as received (``frames_received``)."""
    reports = list(recorder.diagnostics)
    return int(reports[-1].get("frames_received", 0)) if reports else 0


def assert_every_sweep_accounted(recorder: LabeledRecorder, expected: dict, log: str) -> None:
    """Every expected sweep reached the node, and each one not published was dropped by the
    node's newest-wins slot (its worker busy with the sweep before: a slow machine), counted in
    /diagnostics; the last sweep is always published."""
    report = recorder.diagnostics[-1]
    dropped = int(report.get("frames_dropped", 0))
    assert int(report["frames_received"]) == len(expected), (report, log)
    assert len(recorder.clouds) + dropped == len(expected), (len(recorder.clouds), report, log)
    assert max(expected) in stamps_of(recorder.clouds)


def rejected(recorder: LabeledRecorder) -> dict[str, int]:
    """The most /diagnostics counted of each hostile kind so far (``frames_rejected_<kind>``)."""
    reports = list(recorder.diagnostics)
    return {
        kind: max((int(r.get(f"frames_rejected_{kind}", 0)) for r in reports), default=0)
        for kind in HOSTILE_KINDS
    }


def rejections(recorder: LabeledRecorder) -> int:
    """The refused messages of every hostile kind the latest /diagnostics report counted."""
    return sum(rejected(recorder).values())


def wait_for_rejections(recorder: LabeledRecorder, count: int) -> None:
    """Until a /diagnostics report counts ``count`` refused messages, or TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while rejections(recorder) < count and time.monotonic() < deadline:
        time.sleep(0.2)


def wait_for_stamp(recorder: LabeledRecorder, stamp_ns: int) -> None:
    """Until ``recorder`` holds the cloud stamped ``stamp_ns``, or TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while stamp_ns not in stamps_of(recorder.clouds) and time.monotonic() < deadline:
        time.sleep(0.2)


def assert_labelled_sweeps(
    clouds: list[PointCloud2], expected: dict[int, np.ndarray], fields: tuple[str, ...]
) -> None:
    """Each cloud is the expected sweep of its stamp (``fields`` byte for byte) with the library's
    cluster labels of it at the node's default d_th."""
    for message in clouds:
        stamp_ns = message.header.stamp.sec * 1_000_000_000 + message.header.stamp.nanosec
        points = expected[stamp_ns]
        got = read_fields(from_message(message), [*fields, "cluster_id"])
        for name in fields:
            assert got[name].tobytes() == np.ascontiguousarray(points[name]).tobytes(), name
        xyz = np.stack([points[a] for a in "xyz"], axis=1)
        assert np.array_equal(got["cluster_id"], euclidean_cluster(xyz, 0.5, backend="cpu").labels)


class LabeledRecorder:
    """This process's subscriber of the node's labelled clouds."""

    def __init__(self, domain: int, topic: str = LABELED) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node("packet_input_recorder", context=self.context)
        self.clouds: list[PointCloud2] = []
        self.diagnostics: list[dict[str, str]] = []
        qos = QoSProfile(depth=20, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(PointCloud2, topic, self.clouds.append, qos)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._diagnostics, 10)
        self._executor = rclpy.executors.SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, daemon=True)
        self._thread.start()

    def _diagnostics(self, message: DiagnosticArray) -> None:
        self.diagnostics.append({kv.key: kv.value for kv in message.status[0].values})

    def close(self) -> None:
        self._executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()


def run_packets_into_node(
    model: str,
    msgs_env: dict[str, str],
    lidar_data_dir: Path,
    tmp_path: Path,
    hostile: bool,
    stock_transport: bool = False,
) -> tuple[dict[int, np.ndarray], LabeledRecorder, str, int | None]:
    """The node (its own process) on ``model``'s packets, published by the driver stand-in (with
    its hostile prelude when ``hostile``; with Fast DDS's defaults when ``stock_transport``): the
    library's sweeps of the bag, the recorder (stopped), the node's log and its exit status when
    it stopped on its own (None: it ran until stopped)."""
    bag, calibration, settings = SENSORS[model]
    packet_bag, calibration = lidar_data_dir / bag, lidar_data_dir / calibration
    if not packet_bag.is_dir():
        pytest.skip(f"{packet_bag} is absent (the nebula packet bags)")
    expected = expected_sweeps(packet_bag, calibration, settings)
    assert len(expected) >= 2
    params = ["-p", "backend:=cpu", "-p", "qos_reliability:=reliable"]
    params += [arg for name, value in [
        ("sensor_model", model), ("calibration_file", calibration),
        ("return_mode", settings.return_mode), ("sensor_min_range", settings.min_range),
        ("sensor_max_range", settings.max_range), ("scan_phase", settings.scan_phase),
        ("cloud_min_angle", settings.cloud_min_angle),
        ("cloud_max_angle", settings.cloud_max_angle),
    ] for arg in ("-p", f"{name}:={value}")]  # fmt: skip
    with private_domain() as domain:
        env = user_env(domain)
        env.update({k: msgs_env[k] for k in MSGS_VARIABLES if k in msgs_env})
        node = Background(
            [
                str(BIN / "euclidean_cluster_node"),
                "--ros-args",
                "-r",
                f"__ns:={NAMESPACE}",
                *params,
            ],
            env,
            tmp_path / "node.log",
        )
        recorder = LabeledRecorder(domain)
        try:
            wait_for_output_matched(recorder)
            publisher = Background(
                [str(BIN / "python"), "-m", "test._packet_publisher", str(packet_bag),
                 PACKETS_TOPIC, "0.5", *([model] if hostile else []),
                 *(["--stock-transport"] if stock_transport else [])],
                env, tmp_path / "publisher.log", cwd=Path(__file__).resolve().parents[3],
            )  # fmt: skip
            wait_for_sweeps(recorder, expected)
            if hostile:  # the report that counts the refusals may come after the clouds
                wait_for_rejections(recorder, len(HOSTILE_KINDS))
            publisher.close()
            status = node.process.poll()
        finally:
            recorder.close()
            node.stop()
    return expected, recorder, (tmp_path / "node.log").read_text(), status


@pytest.mark.parametrize("model", sorted(SENSORS))
def test_packets_into_the_node_give_the_librarys_sweeps_and_clusters(
    msgs_env, lidar_data_dir, tmp_path, model
):
    expected, recorder, log, _ = run_packets_into_node(
        model, msgs_env, lidar_data_dir, tmp_path, hostile=False
    )
    bag = lidar_data_dir / SENSORS[model][0]
    (frame_id,) = {scan.frame_id for scan in read_velodyne_scans(bag)}
    assert f"sensor_model {model!r}" in log, log
    assert_every_sweep_accounted(recorder, expected, log)
    assert {m.header.frame_id for m in recorder.clouds} == {frame_id}  # the scans' header frame
    assert_labelled_sweeps(recorder.clouds, expected, ("x", "y", "z", "time_stamp", "channel"))


def test_packets_from_a_driver_with_fast_dds_defaults_reach_the_node(
    msgs_env, lidar_data_dir, tmp_path
):
    """A driver that leaves Fast DDS at its defaults, as nebula launched by itself does: its
    VLP-32C scans (under the default 512 kB segment) reach the node, which publishes the
    library's sweeps."""
    expected, recorder, log, status = run_packets_into_node(
        "VLP32", msgs_env, lidar_data_dir, tmp_path, hostile=False, stock_transport=True
    )
    assert status is None and "Traceback" not in log, log
    assert_every_sweep_accounted(recorder, expected, log)
    assert_labelled_sweeps(recorder.clouds, expected, ("x", "y", "z", "time_stamp", "channel"))


def test_hostile_packets_are_refused_counted_and_the_node_runs_on(
    msgs_env, lidar_data_dir, tmp_path
):
    """Before the VLP-32C bag: a message of 1 207 packets (over the budget of 1 206), one of a
    VLP-16's packets, and a sensor that never turns, 202 packets a message, whose sixth message
    would take its sweep past the budget. Each is refused (throttled warnings, three counts in
    ``/diagnostics``), the node keeps running, and the bag's sweeps come out as a fresh decoder
    cuts them (the cut sweep left nothing behind)."""
    expected, recorder, log, status = run_packets_into_node(
        "VLP32", msgs_env, lidar_data_dir, tmp_path, hostile=True
    )
    assert status is None, f"the node stopped ({status}):\n{log}"
    assert "VelodyneScan refused (message_over_budget): 1207 packets at once" in log, log
    assert "Traceback" not in log, log
    assert rejected(recorder) == dict.fromkeys(HOSTILE_KINDS, 1), (recorder.diagnostics[-1:], log)
    assert_every_sweep_accounted(recorder, expected, log)
    assert_labelled_sweeps(recorder.clouds, expected, ("x", "y", "z", "time_stamp", "channel"))


def test_replayed_packet_bag_reaches_the_node_as_clouds(lidar_data_dir, tmp_path):
    """VLS-128 packets bag -> ``replay`` (its own process, decoding as nebula) -> the node (its own
    process, ``input/points``) -> labelled clouds: the library's sweeps and cluster labels."""
    bag, calibration, settings = SENSORS["VLS128"]
    packet_bag = lidar_data_dir / bag
    if not packet_bag.is_dir():
        pytest.skip(f"{packet_bag} is absent (the nebula packet bags)")
    expected = expected_sweeps(packet_bag, lidar_data_dir / calibration, settings)
    with private_domain() as domain:
        env = user_env(domain)
        node = Background(
            [str(BIN / "euclidean_cluster_node"), "--ros-args", "-p", "backend:=cpu",
             "-p", "qos_reliability:=reliable", "-r", f"__ns:={NAMESPACE}",
             "-r", f"input/points:={SWEEPS_TOPIC}"],
            env, tmp_path / "node.log",
        )  # fmt: skip
        recorder = LabeledRecorder(domain)
        try:
            replay = Background(
                [str(BIN / "replay"), str(packet_bag), "--sensor-model", "VLS128",
                 "--calibration", str(lidar_data_dir / calibration), "--cloud-max-angle", "359",
                 "--packets", "decoded", "--rate", "0.25", "--loop", "--wait-for-subscribers", "30",
                 "--remap", f"/pointcloud_raw_ex:={SWEEPS_TOPIC}", "--quiet"],
                env, tmp_path / "replay.log",
            )  # fmt: skip
            wait_for_stamp(recorder, max(expected))
            replay.close()
        finally:
            recorder.close()
            node.stop()
    replay_log = (tmp_path / "replay.log").read_text()
    assert f"/velodyne_packets -> {SWEEPS_TOPIC}" in replay_log, replay_log
    # Looping until the last sweep is labelled: whenever the node's output found the recorder,
    # and however many sweeps a busy node skipped (it keeps the newest), every cloud is checked.
    assert max(expected) in stamps_of(recorder.clouds), (len(recorder.clouds), replay_log)
    assert_labelled_sweeps(recorder.clouds, expected, ("x", "y", "z"))
