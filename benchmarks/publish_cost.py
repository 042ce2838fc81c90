"""What publishing the node's outputs costs in Python: message objects against CDR bytes.

For a kitti_000001-sized labelled cloud (the frame from ``$LIDAR_DATA_DIR`` with ``cluster_id``
and ``rgb`` appended, or random points of the same size when the file is absent) and a table of
2000 clusters, :func:`measure_publish_cost` times, in one process with one subscription matched:

- ``cloud_message``: ``cloud_to_message`` + ``publish`` of the message (the node today);
- ``cloud_bytes``: ``point_cloud_cdr`` + ``publish`` of the bytes;
- ``markers_message``: ``MarkerBuilder.build`` (and ``markers_message_publish``: + ``publish``);
- ``markers_bytes``: ``MarkerEncoder.build`` (and ``markers_bytes_publish``: + ``publish``);
- the build steps alone (``cloud_to_message``, ``point_cloud_cdr``).

With ``--sweep``, :func:`measure_publish_sweep` instead times ``publish`` of ready CDR bytes
against their size, to a subscriber in another process (as the node's outputs are read), with the
node's transport settings: labelled clouds of 0 to 500 000 points in the node's layout (every
input field, then ``cluster_id`` and ``rgb``: 24 bytes per point for x, y, z, intensity) and in the
smallest one that still identifies the clusters (x, y, z, ``cluster_id``: 16 bytes), and the
cluster cloud (``clusters``, 44 bytes per cluster) of 0 to 8000 clusters. The 0-point cloud is the
floor of one ``publish`` on the host.

    python -m benchmarks.publish_cost            # from the repository root; prints the JSON
    python -m benchmarks.publish_cost --sweep
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gpu_euclidean_cluster.core.cluster_stats import cluster_rgb, cluster_table, pack_rgb
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import RawCloud, append_fields, from_structured

from .cases import data_dir
from .environment import cpu_model
from .stats import median, p99, time_calls

#: The frame whose size is measured, x y z intensity float32.
FRAME = "kitti_000001.bin"
#: Points of kitti_000001, for the random stand-in.
FRAME_POINTS = 120_268
#: Clusters of the marker table.
CLUSTERS = 2000
#: Seconds to wait for the subscriptions to match the publishers.
MATCH_TIMEOUT_S = 5.0
XYZI = np.dtype([(name, "<f4") for name in ("x", "y", "z", "intensity")])


def labelled_frame(seed: int = 0) -> tuple[RawCloud, np.ndarray, str]:
    """The labelled cloud, a table of :data:`CLUSTERS` clusters over its points, and its source.

    Labels are random (every cluster gets points, some points none): costs depend on sizes,
    not on which point is in which cluster.
    """
    path = data_dir() / FRAME
    rng = np.random.default_rng(seed)
    if path.is_file():
        raw = np.fromfile(path, dtype="<f4").reshape(-1, 4)
        source = str(path)
    else:
        raw = rng.uniform(-80.0, 80.0, (FRAME_POINTS, 4)).astype("<f4")
        source = f"random ({FRAME} not found)"
    points = np.ascontiguousarray(raw).view(XYZI).reshape(-1)
    labels = rng.integers(-1, CLUSTERS, len(points)).astype(np.int32)
    labels[:CLUSTERS] = np.arange(CLUSTERS)
    cloud = append_fields(
        from_structured(points), {"cluster_id": labels, "rgb": pack_rgb(cluster_rgb(labels))}
    )
    xyz = np.stack([points[axis] for axis in "xyz"], axis=1)
    return cloud, cluster_table(xyz, labels, CLUSTERS), source


@dataclass(frozen=True)
class PublishTiming:
    """Milliseconds of one way to build (and publish) the outputs."""

    median_ms: float
    p99_ms: float
    runs: int


@dataclass(frozen=True)
class PublishCost:
    """The labelled cloud and marker table measured, and the timing of each way."""

    #: the frame file, or ``random (... not found)``
    frame: str
    points: int
    cloud_cdr_bytes: int
    clusters: int
    marker_cdr_bytes: int | None
    subscriptions_matched: int
    cpu: str
    #: other work on the machine skews the timings
    load_average: tuple[float, float, float]
    timings: dict[str, PublishTiming]


def measure_publish_cost(
    warmup: int = 3, repeats: int = 50, budget_s: float = 5.0, seed: int = 0
) -> PublishCost:
    """Median and p99 milliseconds of each way to build and publish (see the module doc).

    Each case runs ``warmup`` times untimed, then up to ``repeats`` times within ``budget_s``
    seconds. Publishers and the subscription (never spun: it keeps the last sample) live in a
    fresh rclpy context of this process.
    """
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import PointCloud2
    from std_msgs.msg import Header
    from visualization_msgs.msg import MarkerArray

    from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message
    from gpu_euclidean_cluster.ros.messages.markers import MarkerBuilder, MarkerEncoder
    from gpu_euclidean_cluster.ros.messages.serialized import point_cloud_cdr

    cloud, table, source = labelled_frame(seed)
    header = Header(frame_id="velodyne")
    header.stamp.sec, header.stamp.nanosec = 1_700_000_000, 123_456_789
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("publish_cost", context=context)
    try:
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        cloud_pub = node.create_publisher(PointCloud2, "publish_cost/labeled_points", qos)
        marker_pub = node.create_publisher(MarkerArray, "publish_cost/markers", qos)
        node.create_subscription(PointCloud2, "publish_cost/labeled_points", _ignore, qos)
        node.create_subscription(MarkerArray, "publish_cost/markers", _ignore, qos)
        deadline = time.monotonic() + MATCH_TIMEOUT_S
        while cloud_pub.get_subscription_count() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        builder, encoder = MarkerBuilder(), MarkerEncoder()
        cases: dict[str, Callable[[], Any]] = {
            "cloud_to_message": lambda: cloud_to_message(cloud, header),
            "point_cloud_cdr": lambda: point_cloud_cdr(cloud, header),
            "cloud_message": lambda: cloud_pub.publish(cloud_to_message(cloud, header)),
            "cloud_bytes": lambda: cloud_pub.publish(point_cloud_cdr(cloud, header)),
            "markers_message": lambda: builder.build(table, header),
            "markers_bytes": lambda: encoder.build(table, header),
            "markers_message_publish": lambda: marker_pub.publish(builder.build(table, header)),
            "markers_bytes_publish": lambda: marker_pub.publish(encoder.build(table, header)),
        }
        timings = time_cases(cases, warmup, repeats, budget_s)
        markers = encoder.build(table, header)
        return PublishCost(
            frame=source,
            points=cloud.num_points,
            cloud_cdr_bytes=len(point_cloud_cdr(cloud, header)),
            clusters=CLUSTERS,
            marker_cdr_bytes=len(markers) if isinstance(markers, bytes) else None,
            subscriptions_matched=cloud_pub.get_subscription_count(),
            cpu=cpu_model(),
            load_average=os.getloadavg(),
            timings=timings,
        )
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def time_cases(
    cases: dict[str, Callable[[], Any]], warmup: int, repeats: int, budget_s: float
) -> dict[str, PublishTiming]:
    """Each case timed by :func:`~.stats.time_calls`, in order: its median, p99 and runs."""
    timings = {}
    for name, case in cases.items():
        timed = time_calls(case, warmup, repeats, budget_s)
        timings[name] = PublishTiming(
            median_ms=median(timed.samples_ms),
            p99_ms=p99(timed.samples_ms),
            runs=len(timed.samples_ms),
        )
    return timings


def _ignore(message: Any) -> None:
    """A subscription callback (the subscription is never spun)."""


#: Points of the labelled clouds and clusters of the cluster clouds of the sweep.
SWEEP_POINTS = (0, 1_000, 10_000, 30_000, 120_268, 500_000)
SWEEP_CLUSTERS = (0, 100, 2_000, 8_000)
#: The sweep's topics, and a subscriber to them in a process of its own (raw: nothing decoded).
SWEEP_TOPICS = ("publish_sweep/labeled", "publish_sweep/compact", "publish_sweep/clusters")
_SUBSCRIBER = """
import sys, rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import PointCloud2
rclpy.init()
node = rclpy.create_node("publish_sweep_subscriber")
qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
subs = [
    node.create_subscription(PointCloud2, t, lambda m: None, qos, raw=True) for t in sys.argv[1:]
]
print("ready", flush=True)
try:
    rclpy.spin(node)
except (KeyboardInterrupt, rclpy.executors.ExternalShutdownException):
    pass
"""


@dataclass(frozen=True)
class SweepRow:
    """``publish`` of one message of the sweep."""

    topic: str
    #: points (labelled clouds) or clusters (the cluster cloud)
    rows: int
    cdr_bytes: int
    #: subscriptions the publisher had matched when it was measured
    matched: int
    median_ms: float
    p99_ms: float
    runs: int


def measure_publish_sweep(repeats: int = 50, budget_s: float = 3.0) -> list[SweepRow]:
    """``publish`` of ready CDR bytes per topic and size (see the module doc), to a
    subscriber process on a domain of this run's own."""
    import subprocess
    import sys

    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import PointCloud2
    from std_msgs.msg import Header

    from gpu_euclidean_cluster.core.cluster_stats import CLUSTER_DTYPE
    from gpu_euclidean_cluster.ros.messages.serialized import point_cloud_cdr
    from gpu_euclidean_cluster.ros.transport import ENV, LARGE_CLOUD_TRANSPORTS

    from .environment import private_domain_id

    os.environ.setdefault(ENV, LARGE_CLOUD_TRANSPORTS)  # the node's own setting
    domain = private_domain_id()
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain)}
    subscriber = subprocess.Popen(
        [sys.executable, "-c", _SUBSCRIBER, *SWEEP_TOPICS],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    node = rclpy.create_node("publish_sweep", context=context)
    try:
        if subscriber.stdout is None or subscriber.stdout.readline().strip() != "ready":
            raise RuntimeError("the subscriber process did not start")
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        publishers = {t: node.create_publisher(PointCloud2, t, qos) for t in SWEEP_TOPICS}
        deadline = time.monotonic() + MATCH_TIMEOUT_S
        while time.monotonic() < deadline and any(
            p.get_subscription_count() < 1 for p in publishers.values()
        ):
            time.sleep(0.01)
        header = Header(frame_id="velodyne")
        rng = np.random.default_rng(0)
        labeled = SWEEP_TOPICS[0], SWEEP_TOPICS[1]
        messages: list[tuple[str, int, bytes]] = []
        for n in SWEEP_POINTS:
            points = np.zeros(n, XYZI)
            for name in XYZI.names or ():
                points[name] = rng.uniform(-80.0, 80.0, n)
            labels = rng.integers(-1, 2000, n).astype(np.int32)
            full = append_fields(
                from_structured(points),
                {"cluster_id": labels, "rgb": pack_rgb(cluster_rgb(labels))},
            )
            xyz = np.zeros(n, [(name, "<f4") for name in "xyz"])  # packed: 12 bytes
            for name in "xyz":
                xyz[name] = points[name]
            compact = append_fields(from_structured(xyz), {"cluster_id": labels})
            messages += [(labeled[0], n, point_cloud_cdr(full, header))]
            messages += [(labeled[1], n, point_cloud_cdr(compact, header))]
        for k in SWEEP_CLUSTERS:
            table = np.zeros(k, CLUSTER_DTYPE)
            messages.append((SWEEP_TOPICS[2], k, point_cloud_cdr(from_structured(table), header)))
        rows = []
        for topic, count, data in messages:
            publish = functools.partial(publishers[topic].publish, data)
            timed = time_calls(publish, 5, repeats, budget_s)
            rows.append(
                SweepRow(
                    topic=topic,
                    rows=count,
                    cdr_bytes=len(data),
                    matched=publishers[topic].get_subscription_count(),
                    median_ms=median(timed.samples_ms),
                    p99_ms=p99(timed.samples_ms),
                    runs=len(timed.samples_ms),
                )
            )
        return rows
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)
        subscriber.terminate()
        subscriber.wait(10)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks.publish_cost", description=__doc__)
    parser.add_argument("--sweep", action="store_true", help="publish cost against message size")
    args = parser.parse_args(argv)
    if args.sweep:
        rows = measure_publish_sweep()
        report = {"cpu": cpu_model(), "load_average": os.getloadavg(), "rows": rows}
        print(json.dumps(report, default=asdict, indent=2))
    else:
        print(json.dumps(asdict(measure_publish_cost()), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
