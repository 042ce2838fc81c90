"""A subscriber run as its own process: records the serialized messages that arrive on topics of
``velodyne_msgs/msg/VelodyneScan`` or ``sensor_msgs/msg/PointCloud2``, in arrival order, until
each topic has its count or the time is up, then writes them to a pickle file and exits (0: every
count reached, 1: the time ran out). Needs the ``velodyne_msgs`` package for a ``packets`` topic
(the environment of ``_perception_msgs.perception_msgs_env``).

    python -m test._packet_recorder OUT.pickle TIMEOUT_S TOPIC=packets|cloud=COUNT ...

The pickle holds ``{"received": {topic: [bytes, ...]}, "order": [topic, ...]}``, ``order`` being
the topics of all messages in arrival order.
"""

from __future__ import annotations

import pickle
import sys
import time
from pathlib import Path

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import PointCloud2

from gpu_euclidean_cluster.ros.transport import configure_transport


def main(out: str, timeout_s: str, *wanted: str) -> int:
    configure_transport()  # as the node does: a VLS-128 scan is over Fast DDS's 512 kB segment
    rclpy.init()
    node = rclpy.create_node("packet_recorder")
    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    received: dict[str, list[bytes]] = {}
    counts: dict[str, int] = {}
    order: list[str] = []
    for item in wanted:
        topic, kind, count = item.split("=")
        if kind == "packets":
            from velodyne_msgs.msg import VelodyneScan

            message_type = VelodyneScan
        else:
            message_type = PointCloud2
        received[topic] = []
        counts[topic] = int(count)

        def store(raw: bytes, topic: str = topic) -> None:
            received[topic].append(bytes(raw))
            order.append(topic)

        node.create_subscription(message_type, topic, store, qos, raw=True)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    deadline = time.monotonic() + float(timeout_s)
    done = False
    while not done and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.1)
        done = all(len(received[topic]) >= count for topic, count in counts.items())
    if done:  # anything more (a duplicate, an extra message) arrives within a second
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
    Path(out).write_bytes(pickle.dumps({"received": received, "order": order}))
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
