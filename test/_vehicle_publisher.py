"""A vehicle's drivers stand-in, run as its own process: publishes the ``VelodyneScan`` messages of
packet bags on several topics, one message of each topic in turn (``TOPIC=BAG`` pairs, in the
order given), ``period`` seconds between the rounds, then ``solo`` more rounds of the first topic
alone (a vehicle whose other sensors stopped).

    python -m test._vehicle_publisher PERIOD_S SOLO TOPIC=BAG [TOPIC=BAG ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from velodyne_msgs.msg import VelodyneScan

from gpu_euclidean_cluster.pointcloud_io.velodyne import read_velodyne_scans
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr
from gpu_euclidean_cluster.ros.transport import configure_transport


def rounds(pairs: list[tuple[str, str]], solo: int) -> list[list[tuple[str, bytes]]]:
    """The messages of each round: ``(topic, CDR bytes)`` in the pairs' order; every topic's
    messages while every bag lasts (keeping ``solo`` of the first topic's), then ``solo`` rounds of
    the first topic alone."""
    messages = {
        topic: [scan_to_cdr(s) for s in read_velodyne_scans(Path(bag))] for topic, bag in pairs
    }
    first = pairs[0][0]
    together = min(len(messages[first]) - solo, *(len(m) for m in messages.values()))
    plan = [[(topic, messages[topic][i]) for topic, _ in pairs] for i in range(together)]
    plan += [[(first, messages[first][together + i])] for i in range(solo)]
    return plan


def main(period_s: str, solo: str, *pairs_text: str) -> int:
    configure_transport()  # a VLS-128 scan (730 kB) is over Fast DDS's default 512 kB segment
    pairs = [tuple(text.split("=", 1)) for text in pairs_text]
    plan = rounds(pairs, int(solo))
    rclpy.init()
    node = rclpy.create_node("vehicle_publisher")
    qos = QoSProfile(depth=len(plan), reliability=ReliabilityPolicy.RELIABLE)
    publishers = {topic: node.create_publisher(VelodyneScan, topic, qos) for topic, _ in pairs}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(
        p.get_subscription_count() for p in publishers.values()
    ):
        time.sleep(0.05)
    time.sleep(0.5)  # discovery settles on the reader's side too
    for messages in plan:
        for topic, raw in messages:
            publishers[topic].publish(raw)
        time.sleep(float(period_s))
    for publisher in publishers.values():
        publisher.wait_for_all_acked(rclpy.duration.Duration(seconds=10))
    time.sleep(1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
