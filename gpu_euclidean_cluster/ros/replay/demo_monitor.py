"""The demo's observer: pairs each input cloud with the node's labelled output by header stamp.

It subscribes to the node's input topic (raw CDR, only the stamp is read) and to
``output/labeled_points``; the end-to-end latency of a frame is the time between the two arrivals,
both measured here, so it includes transport, decoding, clustering and publishing.
"""

from __future__ import annotations

import queue
import struct
import threading
import time
from dataclasses import dataclass

import numpy as np
import rclpy
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.qos import QoSProfile, QoSReliabilityPolicy
from sensor_msgs.msg import PointCloud2

from ...core.units import NS_PER_S
from ...pointcloud_io.pointcloud2 import from_message, read_fields

_CDR_STAMP = struct.Struct("<iI")  # header.stamp after the 4-byte encapsulation header


@dataclass(frozen=True)
class FrameReport:
    """One clustered frame as seen by the monitor."""

    stamp_ns: int
    points: int
    clusters: int
    latency_ms: float  # NaN when the input was not seen (started late)
    labels: np.ndarray  # int32 cluster_id per point, -1 = none


def cdr_stamp_ns(raw: bytes) -> int:
    """``header.stamp`` (ns) of a serialized little-endian CDR message with a Header first."""
    if len(raw) < 12 or raw[1] != 1:
        raise ValueError("not a little-endian CDR message")
    sec, nanosec = _CDR_STAMP.unpack_from(raw, 4)
    return sec * NS_PER_S + nanosec


class DemoMonitor:
    """Watches ``input_topic`` and ``labeled_topic`` in its own context and spinning thread."""

    def __init__(self, input_topic: str, labeled_topic: str) -> None:
        self.input_topic = input_topic
        self.labeled_topic = labeled_topic
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("demo_monitor", context=self.context)
        qos = QoSProfile(depth=50, reliability=QoSReliabilityPolicy.RELIABLE)
        self.node.create_subscription(PointCloud2, input_topic, self._on_input, qos, raw=True)
        self.node.create_subscription(PointCloud2, labeled_topic, self._on_labeled, qos)
        self.reports: queue.Queue[FrameReport] = queue.Queue()
        self._arrivals: dict[int, float] = {}
        self._lock = threading.Lock()
        self.inputs_seen = 0
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="demo_monitor", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            while self.context.ok():
                self.executor.spin_once(timeout_sec=0.1)
        except ExternalShutdownException:
            return

    def _on_input(self, raw: bytes) -> None:
        now = time.monotonic()
        with self._lock:
            self._arrivals[cdr_stamp_ns(raw)] = now
            self.inputs_seen += 1

    def _on_labeled(self, msg: PointCloud2) -> None:
        now = time.monotonic()
        stamp_ns = msg.header.stamp.sec * NS_PER_S + msg.header.stamp.nanosec
        labels = read_fields(from_message(msg), ["cluster_id"])["cluster_id"].astype(np.int32)
        with self._lock:
            arrived = self._arrivals.pop(stamp_ns, None)
        latency = float("nan") if arrived is None else 1e3 * (now - arrived)
        clusters = int(labels.max()) + 1 if labels.size else 0
        self.reports.put(FrameReport(stamp_ns, labels.size, max(clusters, 0), latency, labels))

    def node_ready(self) -> bool:
        """True once the node subscribes to the input and publishes the labelled cloud."""
        subscribers = self.node.count_subscribers(self.input_topic)  # ours included
        return subscribers >= 2 and self.node.count_publishers(self.labeled_topic) >= 1

    def close(self) -> None:
        self.context.try_shutdown()
        self._thread.join(timeout=5)
        self.executor.shutdown()
