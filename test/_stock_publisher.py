"""A third-party LiDAR driver stand-in: publishes a KITTI frame as PointCloud2 with nothing of this
package (plain rclpy, whatever Fast DDS settings its environment carries).

Run as a script, in its own process (``test_third_party_publisher.py``)::

    python test/_stock_publisher.py FRAME.bin --topic /input/points --count 20 --rate-hz 5 \
        --reliability best_effort --stamp 100

It waits until a subscription is matched (and ``--settle-s`` more, so that the reader has
discovered this writer too), publishes ``--count`` frames stamped ``--stamp``, ``--stamp`` + 1, ...
at ``--rate-hz``, lingers ``--linger-s`` (a best-effort sample still in flight when the
participant goes away is lost) and prints ``published N`` on stdout. Exit status 3 when no
subscription was matched within ``--wait-s``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import rclpy
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import PointCloud2, PointField

FIELDS = ("x", "y", "z", "intensity")


def frame_message(path: str) -> PointCloud2:
    """The KITTI ``.bin`` frame (x y z intensity float32) as an unorganised PointCloud2."""
    raw = np.fromfile(path, dtype=np.float32)
    msg = PointCloud2()
    msg.header.frame_id = "velodyne"
    msg.height, msg.width = 1, len(raw) // len(FIELDS)
    msg.fields = [
        PointField(name=name, offset=4 * i, datatype=PointField.FLOAT32, count=1)
        for i, name in enumerate(FIELDS)
    ]
    msg.is_bigendian = False
    msg.point_step = 4 * len(FIELDS)
    msg.row_step = msg.point_step * msg.width
    msg.data = raw.tobytes()
    msg.is_dense = True
    return msg


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frame")
    parser.add_argument("--topic", default="/input/points")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--rate-hz", type=float, default=5.0)
    parser.add_argument("--reliability", choices=("best_effort", "reliable"), default="best_effort")
    parser.add_argument("--stamp", type=int, default=1)
    parser.add_argument("--wait-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=1.0)
    parser.add_argument("--linger-s", type=float, default=2.0)
    parser.add_argument(
        "--small-every",
        type=int,
        default=0,
        help="every Nth frame (from the first) is cut to --small-points points (0: none)",
    )
    parser.add_argument("--small-points", type=int, default=10_000)
    options = parser.parse_args()

    msg = frame_message(options.frame)
    small = frame_message(options.frame)
    small.width = min(options.small_points, msg.width)
    small.row_step = small.point_step * small.width
    small.data = msg.data[: small.row_step]
    rclpy.init()
    node = rclpy.create_node("stock_lidar_driver")
    reliability = {
        "best_effort": ReliabilityPolicy.BEST_EFFORT,
        "reliable": ReliabilityPolicy.RELIABLE,
    }[options.reliability]
    qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5, reliability=reliability)
    publisher = node.create_publisher(PointCloud2, options.topic, qos)
    deadline = time.monotonic() + options.wait_s
    while publisher.get_subscription_count() == 0:
        if time.monotonic() > deadline:
            print(f"no subscription on {options.topic} within {options.wait_s:g} s", flush=True)
            return 3
        time.sleep(0.05)
    time.sleep(options.settle_s)
    period = 1.0 / options.rate_hz
    start = time.monotonic()
    for i in range(options.count):
        time.sleep(max(0.0, start + i * period - time.monotonic()))
        out = small if options.small_every and i % options.small_every == 0 else msg
        out.header.stamp.sec = options.stamp + i
        publisher.publish(out)
    time.sleep(options.linger_s)
    print(f"published {options.count}", flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
