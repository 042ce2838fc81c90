"""The node benchmark's driver: publishes a frame at a fixed rate and times the node's outputs.

It runs in a process of its own (started by :mod:`.node_bench`), so that publishing never competes
with the node under test for the Python interpreter lock: the node sees the load of a real
sensor driver. Frames carry ``header.stamp.sec = index``; the node publishes its outputs with the
input header unchanged, which pairs each ``output/labeled_points`` message with its send time.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Seconds to wait for the node and the driver to discover each other.
DISCOVERY_TIMEOUT_S = 10.0
#: Seconds to wait, after the last frame, for outputs still to come.
DRAIN_TIMEOUT_S = 5.0
#: Seconds between warm-up frames (slow, so each is processed alone).
WARMUP_PERIOD_S = 0.5
#: Seconds without a new warm-up output after which the warm-up is over.
WARMUP_QUIET_S = 2.0
#: Seconds the driver waits for the parent's go after the warm-up.
GO_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DriveRequest:
    """What to send: ``warmup`` slow frames first, then ``count`` frames at ``rate_hz``."""

    namespace: str
    xyz: np.ndarray
    rate_hz: float
    count: int
    warmup: int
    reliability: str = "best_effort"
    #: ROS domain of the driver (None: ROS_DOMAIN_ID / 0), to reach a node in another process.
    domain_id: int | None = None
    #: end the frame at :data:`OBJECTS_TOPIC` instead of :data:`OUTPUT_TOPIC` (so the node builds
    #: and publishes Autoware's objects; needs tier4_perception_msgs)
    objects: bool = False


#: The output whose arrival ends a frame's end-to-end time: the labelled cloud (~3 MB).
OUTPUT_TOPIC = "output/labeled_points"
#: ... or, with ``DriveRequest.objects``, Autoware's DetectedObjectsWithFeature (~3.5 MB).
OBJECTS_TOPIC = "output/objects_with_feature"


@dataclass
class DriveReport:
    """What the driver saw. ``e2e_ms``: publish -> :data:`OUTPUT_TOPIC` (or
    :data:`OBJECTS_TOPIC`) of the timed frames."""

    sent: int = 0
    sent_rate_hz: float = 0.0
    e2e_ms: list[float] = field(default_factory=list)
    warmup_e2e_ms: list[float] = field(default_factory=list)
    error: str | None = None


def drive(request: DriveRequest, reports: multiprocessing.Queue, warmed: Any, go: Any) -> None:
    """Process entry point: run ``request`` and put a :class:`DriveReport` on ``reports``.

    After the warm-up frames (and their outputs) the driver sets the event ``warmed`` and waits
    for the event ``go``, so the parent can read the node's counters between the two phases.
    """
    try:
        report = _Driver(request).run(warmed, go)
    except Exception as error:  # reported to the parent process, which raises it as one line
        report = DriveReport(error=f"{type(error).__name__}: {error}")
    reports.put(report)


class _Driver:
    def __init__(self, request: DriveRequest) -> None:
        import rclpy
        from rclpy.qos import QoSProfile, qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud2
        from std_msgs.msg import Header

        from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz
        from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message
        from gpu_euclidean_cluster.ros.qos import reliability_policy
        from gpu_euclidean_cluster.ros.transport import configure_transport

        self.request = request
        configure_transport()  # a driver process publishing ~2 MB clouds, like a LiDAR driver
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=request.domain_id)
        self.node = rclpy.create_node(
            "bench_driver", namespace=request.namespace, context=self.context
        )
        qos = QoSProfile(
            history=qos_profile_sensor_data.history,
            depth=qos_profile_sensor_data.depth,
            reliability=reliability_policy(request.reliability),
        )
        self.pub = self.node.create_publisher(PointCloud2, "input/points", qos)
        if request.objects:
            from tier4_perception_msgs.msg import DetectedObjectsWithFeature

            # Raw: a C++ consumer (Autoware's) deserializes ~1700 nested clouds in well under a
            # millisecond; rclpy's Python objects would take longer than the frame period and
            # hold the node's reliable publisher back.
            self.sub = self.node.create_subscription(
                DetectedObjectsWithFeature, OBJECTS_TOPIC, self._on_serialized_output, 100, raw=True
            )
        else:
            self.sub = self.node.create_subscription(
                PointCloud2, OUTPUT_TOPIC, self._on_output, 100
            )
        self.msg = cloud_to_message(from_xyz(request.xyz), Header(frame_id="lidar"))
        self.sent_at: dict[int, float] = {}
        self.arrived_at: dict[int, float] = {}
        self.lock = threading.Lock()

    def run(self, warmed: Any, go: Any) -> DriveReport:
        from rclpy.executors import SingleThreadedExecutor

        executor = SingleThreadedExecutor(context=self.context)
        executor.add_node(self.node)
        spinner = threading.Thread(target=executor.spin, daemon=True)
        spinner.start()
        try:
            self._wait_for_discovery()
            request = self.request
            self._send(range(request.warmup), 1.0 / WARMUP_PERIOD_S)
            self._drain(request.warmup, WARMUP_QUIET_S)
            warmed.set()
            if not go.wait(GO_TIMEOUT_S):
                raise TimeoutError(f"no go from the benchmark in {GO_TIMEOUT_S} s")
            timed = range(request.warmup, request.warmup + request.count)
            sent_rate = self._send(timed, request.rate_hz)
            self._drain(request.warmup + request.count, DRAIN_TIMEOUT_S)
            with self.lock:
                latencies = {
                    i: (self.arrived_at[i] - self.sent_at[i]) * 1e3 for i in self.arrived_at
                }
            return DriveReport(
                sent=len(self.sent_at),
                sent_rate_hz=sent_rate,
                e2e_ms=[v for i, v in latencies.items() if i >= request.warmup],
                warmup_e2e_ms=[v for i, v in latencies.items() if i < request.warmup],
            )
        finally:
            executor.shutdown()
            self.node.destroy_node()
            self.context.try_shutdown()

    def _wait_for_discovery(self) -> None:
        deadline = time.monotonic() + DISCOVERY_TIMEOUT_S
        while self.pub.get_subscription_count() < 1 or self.sub.get_publisher_count() < 1:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the node and the driver did not discover each other in "
                    f"{DISCOVERY_TIMEOUT_S} s"
                )
            time.sleep(0.05)

    def _send(self, indices: range, rate: float) -> float:
        """Publish frame ``i`` for each index at ``rate`` Hz; return the rate achieved."""
        period = 1.0 / rate
        start = next_time = time.monotonic()
        for index in indices:
            delay = next_time - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.msg.header.stamp.sec = index
            with self.lock:
                self.sent_at[index] = time.monotonic()
            self.pub.publish(self.msg)
            next_time += period
        elapsed = time.monotonic() - start
        return (len(indices) - 1) / elapsed if len(indices) > 1 and elapsed > 0 else rate

    def _drain(self, total: int, quiet_s: float) -> None:
        """Wait until ``total`` outputs arrived, or none arrived for ``quiet_s`` seconds."""
        last_count, last_change = -1, time.monotonic()
        while time.monotonic() - last_change < quiet_s:
            with self.lock:
                count = len(self.arrived_at)
            if count >= total:
                return
            if count != last_count:
                last_count, last_change = count, time.monotonic()
            time.sleep(0.05)

    def _on_output(self, msg: Any) -> None:
        self._arrived(msg.header.stamp.sec, time.monotonic())

    def _on_serialized_output(self, cdr: bytes) -> None:
        """A message whose first field is a std_msgs/Header, still in CDR: its ``stamp.sec`` is
        the int32 after the 4-byte encapsulation header."""
        self._arrived(int.from_bytes(cdr[4:8], "little", signed=True), time.monotonic())

    def _arrived(self, index: int, arrived: float) -> None:
        with self.lock:
            if index in self.sent_at:
                self.arrived_at.setdefault(index, arrived)
