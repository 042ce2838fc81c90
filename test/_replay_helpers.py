"""Helpers for the bag, replay and demo tests: bags written with rosbags directly, a subscriber."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rosbags.rosbag1 import Writer as Ros1Writer
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Ros2Writer
from rosbags.typesys import Stores, get_typestore

POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
NS = 1_000_000_000
BAG_START_NS = 1_700_000_000 * NS


@dataclass(frozen=True)
class Frame:
    """A recorded frame: bag timestamp and the raw point payload."""

    stamp_ns: int
    payload: bytes


def make_frames(gaps_s: list[float], points: int = 500, seed: int = 0) -> list[Frame]:
    """Frames with random x y z intensity payloads, separated by ``gaps_s``."""
    rng = np.random.default_rng(seed)
    stamps = BAG_START_NS + np.round(np.concatenate([[0.0], np.cumsum(gaps_s)]) * NS)
    return [
        Frame(int(stamp), rng.standard_normal((points, 4)).astype(np.float32).tobytes())
        for stamp in stamps
    ]


def _message(typestore, frame: Frame, frame_id: str = "lidar") -> object:
    types = typestore.types
    field_type = types["sensor_msgs/msg/PointField"]
    fields = [field_type(name, 4 * i, 7, 1) for i, name in enumerate(("x", "y", "z", "intensity"))]
    stamp = types["builtin_interfaces/msg/Time"](
        sec=frame.stamp_ns // NS, nanosec=frame.stamp_ns % NS
    )
    header_type = types["std_msgs/msg/Header"]
    extra = {"seq": 7} if "seq" in header_type.__dataclass_fields__ else {}
    points = len(frame.payload) // 16
    return types[POINTCLOUD2](
        header=header_type(stamp=stamp, frame_id=frame_id, **extra),
        height=1,
        width=points,
        fields=fields,
        is_bigendian=False,
        point_step=16,
        row_step=16 * points,
        data=np.frombuffer(frame.payload, dtype=np.uint8),
        is_dense=True,
    )


def write_bag(path: Path, storage: str, topics: dict[str, list[Frame]]) -> dict[str, list[bytes]]:
    """Write PointCloud2 ``topics`` with rosbags' own writers; return each topic's stored bytes.

    ``storage``: ``ros1`` (``path`` ends in .bag), ``sqlite3`` or ``mcap`` (a directory).
    """
    stored: dict[str, list[bytes]] = {topic: [] for topic in topics}
    if storage == "ros1":
        typestore = get_typestore(Stores.ROS1_NOETIC)
        with Ros1Writer(path) as writer:
            for topic, frames in topics.items():
                connection = writer.add_connection(topic, POINTCLOUD2, typestore=typestore)
                for frame in frames:
                    raw = bytes(typestore.serialize_ros1(_message(typestore, frame), POINTCLOUD2))
                    writer.write(connection, frame.stamp_ns, raw)
                    stored[topic].append(raw)
        return stored
    typestore = get_typestore(Stores.ROS2_HUMBLE)
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Ros2Writer(path, version=9, storage_plugin=plugin) as writer:
        for topic, frames in topics.items():
            connection = writer.add_connection(topic, POINTCLOUD2, typestore=typestore)
            for frame in frames:
                raw = bytes(typestore.serialize_cdr(_message(typestore, frame), POINTCLOUD2))
                writer.write(connection, frame.stamp_ns, raw)
                stored[topic].append(raw)
    return stored


def write_string_bag(path: Path, topic: str = "/chatter") -> None:
    """A ROS 2 sqlite3 bag with one std_msgs/String message (not a point cloud)."""
    typestore = get_typestore(Stores.ROS2_HUMBLE)
    with Ros2Writer(path, version=9) as writer:
        connection = writer.add_connection(topic, "std_msgs/msg/String", typestore=typestore)
        message = typestore.types["std_msgs/msg/String"](data="hello")
        writer.write(
            connection, BAG_START_NS, typestore.serialize_cdr(message, "std_msgs/msg/String")
        )


def decode_cdr(raw: bytes) -> object:
    """Deserialize ROS 2 CDR PointCloud2 bytes with rosbags."""
    return get_typestore(Stores.ROS2_HUMBLE).deserialize_cdr(raw, POINTCLOUD2)


@dataclass
class Received:
    """Messages received on one topic: wall arrival times and raw bytes."""

    times: list[float] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)


class Recorder:
    """Subscribes (raw CDR) to topics in its own rclpy context and spins in a thread."""

    def __init__(self, topics: list[str], clock: bool = False) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, QoSReliabilityPolicy
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import PointCloud2

        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("test_recorder", context=self.context)
        qos = QoSProfile(depth=100, reliability=QoSReliabilityPolicy.RELIABLE)
        self.received = {topic: Received() for topic in topics}
        self.clock_ns: list[int] = []
        for topic in topics:
            self.node.create_subscription(
                PointCloud2, topic, self._callback(self.received[topic]), qos, raw=True
            )
        if clock:
            self.node.create_subscription(
                Clock,
                "/clock",
                lambda m: self.clock_ns.append(m.clock.sec * NS + m.clock.nanosec),
                10,
            )
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    @staticmethod
    def _callback(store: Received):
        def callback(raw: bytes) -> None:
            store.times.append(time.monotonic())
            store.raw.append(raw)

        return callback

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            while self.context.ok():
                self.executor.spin_once(timeout_sec=0.05)
        except ExternalShutdownException:
            return

    def wait_for(self, topic: str, count: int, timeout_s: float = 10.0) -> bool:
        """Wait until ``count`` messages arrived on ``topic``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.received[topic].raw) >= count:
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        self.context.try_shutdown()
        self._thread.join(timeout=5)
        self.executor.shutdown()
