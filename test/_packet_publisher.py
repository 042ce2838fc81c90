"""A Velodyne driver stand-in, run as its own process: publishes the ``VelodyneScan`` messages of
a packet bag, as recorded (their CDR bytes), on a topic, ``period`` seconds apart.

    python -m test._packet_publisher BAG TOPIC PERIOD_S
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


def main(bag: str, topic: str, period_s: str) -> int:
    configure_transport()  # a VLS-128 scan (730 kB) is over Fast DDS's default 512 kB segment
    # the recorded bytes (scan_to_cdr gives rosbags' serialization back, and also reads the
    # VLS-128 bag, whose empty serialization_format rosbags' Reader refuses)
    messages = [scan_to_cdr(scan) for scan in read_velodyne_scans(Path(bag))]
    rclpy.init()
    node = rclpy.create_node("packet_publisher")
    qos = QoSProfile(depth=len(messages), reliability=ReliabilityPolicy.RELIABLE)
    publisher = node.create_publisher(VelodyneScan, topic, qos)
    deadline = time.monotonic() + 60
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # discovery settles on the reader's side too
    for raw in messages:
        publisher.publish(raw)
        time.sleep(float(period_s))
    publisher.wait_for_all_acked(rclpy.duration.Duration(seconds=10))
    time.sleep(1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
