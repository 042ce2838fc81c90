"""A Velodyne driver stand-in, run as its own process: publishes the ``VelodyneScan`` messages of
a packet bag, as recorded (their CDR bytes), on a topic, ``period`` seconds apart; with a sensor
``MODEL``, first the hostile messages a node of that model refuses
(``_velodyne_helpers.hostile_messages``: one over the budget, one of another model, a stream that
never completes a sweep). With ``--stock-transport`` it leaves Fast DDS at its defaults, as a
driver of someone else's does (512 kB shared-memory segments: a VLS-128 scan does not fit).

    python -m test._packet_publisher BAG TOPIC PERIOD_S [MODEL] [--stock-transport]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from velodyne_msgs.msg import VelodyneScan

from gpu_euclidean_cluster.pointcloud_io.velodyne import SENSOR_MODELS, read_velodyne_scans
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr
from gpu_euclidean_cluster.ros.transport import configure_transport

from ._velodyne_helpers import hostile_messages


def hostile_prelude(model_name: str) -> list[bytes]:
    """The hostile messages for a node of ``model_name`` (another model's packets: a VLP-16's,
    or a VLP-32C's for a VLP-16)."""
    model = SENSOR_MODELS[model_name]
    own = model.product_ids[0] if model.product_ids else 0
    other = 0x28 if own == 0x22 else 0x22
    return [raw for _, raw in hostile_messages(model.sweep_packet_budget, own, other)]


def main(
    bag: str, topic: str, period_s: str, model: str = "", stock_transport: bool = False
) -> int:
    if not stock_transport:
        configure_transport()  # a VLS-128 scan (730 kB) is over Fast DDS's default 512 kB segment
    # the recorded bytes (scan_to_cdr gives rosbags' serialization back, and also reads the
    # VLS-128 bag, whose empty serialization_format rosbags' Reader refuses)
    messages = [scan_to_cdr(scan) for scan in read_velodyne_scans(Path(bag))]
    if model:
        messages = hostile_prelude(model) + messages
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
        # delivered before the next: a loaded machine delays, never loses, the driver's messages
        publisher.wait_for_all_acked(rclpy.duration.Duration(seconds=10))
        time.sleep(float(period_s))
    publisher.wait_for_all_acked(rclpy.duration.Duration(seconds=10))
    time.sleep(1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--stock-transport"]
    sys.exit(main(*arguments, stock_transport="--stock-transport" in sys.argv[1:]))
