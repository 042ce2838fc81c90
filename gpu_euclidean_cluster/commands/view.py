"""``gpu-euclidean-cluster view``: bird's-eye PNGs of labelled clouds, from a bag or live.

A labelled cloud is a PointCloud2 with a ``cluster_id`` field, as the node publishes on
``output/labeled_points``. The node's ``output/clusters`` (one point per cluster, with a
``num_points`` field) is a table of clusters, not a labelled cloud: it is skipped.

* ``view BAG --png-dir DIR [--topic T]``: one PNG per labelled cloud of the bag (ROS 1 ``.bag``,
  ROS 2 bag directory, ``.db3`` or ``.mcap``; read by ``pointcloud_io.bags.PointCloudBag``), of
  every PointCloud2 topic or of topic T only.
* ``view --topic T --png-dir DIR [--count N]``: live, from a running node: subscribes to T with
  rclpy (imported only then, so that ``--help`` and the bag mode work without ROS) and writes one
  PNG per message until N are written or Ctrl-C.

Both decode the message's CDR bytes alike (``pointcloud_io.pointcloud2.from_cdr``) and draw with
``tools/birdseye.py``: clusters in the node's ``rgb`` colours, points with ``cluster_id`` -1 grey,
each cluster's oriented box, a scale bar. A PNG is named ``TOPIC_INDEX_STAMP.png``
(:func:`png_name`).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..ros.parameters.option_values import argument, offset_seconds, positive_integer, topic_name
from ..ros.qos import RELIABILITIES
from .errors import CommandError

if TYPE_CHECKING:
    import numpy as np

    from ..pointcloud_io.pointcloud2 import CloudHeader, RawCloud

log = logging.getLogger(__name__)

#: The field that makes a PointCloud2 a labelled cloud, and the one that marks the cluster table.
LABEL_FIELD = "cluster_id"
TABLE_FIELD = "num_points"
POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
#: Messages the live subscription keeps while a PNG is drawn (older ones are dropped).
LIVE_DEPTH = 2


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``view`` and its options."""
    parser = subparsers.add_parser(
        "view",
        help="bird's-eye PNGs of labelled clouds (cluster_id field) from a bag or a live topic",
        description="Write one bird's-eye PNG per labelled cloud (a PointCloud2 with a "
        "cluster_id field, as the node publishes on output/labeled_points): from a bag, or "
        "live from a running node with --topic and no BAG. Clusters are coloured as the node's "
        "rgb field colours them, cluster_id -1 grey, each cluster with its oriented box. PNG "
        "names: TOPIC_INDEX_STAMP.png, TOPIC the topic with '/' as '_', INDEX the message's "
        "number on its topic in the bag (live: the PNG's number) from 000000, STAMP its "
        "header stamp as SECONDS.NANOSECONDS "
        "(e.g. output_labeled_points_000003_1700000000.300000000.png).",
    )
    parser.add_argument(
        "bag",
        nargs="?",
        type=Path,
        metavar="BAG",
        help="ROS 1 .bag file, ROS 2 bag directory, or .db3/.mcap file (leave out for --topic)",
    )
    parser.add_argument(
        "--png-dir",
        type=Path,
        required=True,
        metavar="DIR",
        help="folder for the PNGs (created if missing; files of the same name are replaced)",
    )
    parser.add_argument(
        "--topic",
        type=argument(topic_name),
        metavar="T",
        help="with BAG: draw this topic only (default: every labelled topic); without BAG: "
        "subscribe to T live",
    )
    parser.add_argument(
        "--count",
        type=argument(positive_integer),
        metavar="N",
        help="stop after N PNGs (default: the whole bag; live: until Ctrl-C)",
    )
    parser.add_argument(
        "--wait-for-publisher",
        type=argument(offset_seconds),
        default=10.0,
        metavar="SECONDS",
        help="live: how long to wait for a publisher on --topic before giving up (default 10)",
    )
    parser.add_argument(
        "--qos-reliability",
        choices=RELIABILITIES,
        default="reliable",
        help="live: subscription reliability (default reliable, as the node publishes; "
        "best_effort for a best-effort publisher)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Draw the labelled clouds of a bag, or of a live topic."""
    if args.bag is None and args.topic is None:
        raise CommandError("give a BAG, or --topic T to draw a running node's output live")
    prepare_png_dir(args.png_dir)
    if args.bag is not None:
        written = view_bag(args.bag, args.png_dir, args.topic, args.count)
    else:
        written = view_live(
            args.topic, args.png_dir, args.count, args.wait_for_publisher, args.qos_reliability
        )
    listing = ", ".join(f"{topic} {count}" for topic, count in written.items())
    print(f"wrote {sum(written.values())} PNG(s) to {args.png_dir} ({listing or 'none'})")
    return 0


def prepare_png_dir(folder: Path) -> None:
    """Create ``folder`` where missing; refuse one that cannot hold the PNGs (one line)."""
    if folder.exists() and not folder.is_dir():
        raise CommandError(f"{folder}: cannot write the PNGs: not a directory")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CommandError(f"{folder}: cannot create the PNG folder: {error.strerror}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CommandError(f"{folder}: cannot write the PNGs: permission denied")


def png_name(topic: str, index: int, stamp_sec: int, stamp_nanosec: int) -> str:
    """``TOPIC_INDEX_STAMP.png``: the topic with '/' as '_', the message's number on its topic
    in the bag (live: the PNG's number; 6 digits), its header stamp as ``SECONDS.NANOSECONDS``."""
    slug = topic.strip("/").replace("/", "_")
    return f"{slug}_{index:06d}_{stamp_sec}.{stamp_nanosec:09d}.png"


def labelled_points(cloud: RawCloud) -> tuple[np.ndarray, np.ndarray] | None:
    """``(xyz, cluster_id)`` of a labelled cloud; None for a cloud without ``cluster_id`` and for
    the node's cluster table (``num_points``).

    Raises:
        PointCloud2Error: a malformed cloud, or a ``cluster_id`` that is not one integer per
            point.
    """
    from ..pointcloud_io.pointcloud2 import PointCloud2Error, read_fields, read_xyz

    if cloud.field(LABEL_FIELD) is None or cloud.field(TABLE_FIELD) is not None:
        return None
    labels = read_fields(cloud, [LABEL_FIELD])[LABEL_FIELD]
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise PointCloud2Error(
            "unsupported", f"field {LABEL_FIELD} must be one integer per point, got {labels.dtype}"
        )
    return read_xyz(cloud), labels.astype("int64")


def why_unlabelled(cloud: RawCloud) -> str:
    """Why :func:`labelled_points` gave None for ``cloud``, naming its fields."""
    fields = " ".join(field.name for field in cloud.fields) or "none"
    if cloud.field(TABLE_FIELD) is not None:
        return f"a table of clusters ({TABLE_FIELD} field), not a labelled cloud"
    return f"no {LABEL_FIELD} field (fields: {fields})"


def draw(
    png_dir: Path,
    topic: str,
    index: int,
    header: CloudHeader,
    points: tuple[np.ndarray, np.ndarray],
) -> Path:
    """Write the PNG of message ``index`` of ``topic``."""
    import numpy as np

    from ..tools.birdseye import write_birdseye_png

    xyz, labels = points
    stamp = f"{header.stamp.sec}.{header.stamp.nanosec:09d}"
    clusters = int(np.unique(labels[labels >= 0]).size)
    path = png_dir / png_name(topic, index, header.stamp.sec, header.stamp.nanosec)
    title = f"{topic} #{index}, stamp {stamp}, frame {header.frame_id}: {clusters} clusters"
    try:
        return write_birdseye_png(path, xyz, labels, title=title)
    except OSError as error:
        raise CommandError(f"{path}: cannot write the PNG: {error.strerror or error}") from None


def view_bag(bag_path: Path, png_dir: Path, topic: str | None, count: int | None) -> Counter:
    """One PNG per labelled cloud of the bag (of ``topic`` only, when given), at most ``count``;
    the PNGs written per topic.

    Raises:
        BagError: the bag cannot be read, or ``topic`` is not a PointCloud2 topic of it.
        CommandError: no labelled cloud in the bag (or on ``topic``).
    """
    from ..pointcloud_io.bags import PointCloudBag
    from ..pointcloud_io.pointcloud2 import PointCloud2Error, from_cdr
    from ..tools.progress import ProgressBar

    written: Counter = Counter()
    unlabelled: dict[str, str] = {}
    rejected: list[str] = []
    with PointCloudBag(bag_path) as bag:
        topics = bag.select_topics([topic] if topic else None)
        total = sum(bag.topics[name].count for name in topics)
        progress = ProgressBar(total, log_when_piped=False, min_period_s=0.2)
        seen: Counter = Counter()
        try:
            for message in bag.messages(topics):
                index = seen[message.topic]
                seen[message.topic] += 1
                progress.show(sum(seen.values()), f"{sum(written.values())} PNG(s)")
                if message.topic in unlabelled:
                    continue
                try:
                    cloud, header = from_cdr(message.cdr)
                    points = labelled_points(cloud)
                except PointCloud2Error as error:
                    rejected.append(f"{message.topic} #{index}: {error}")
                    log.warning("skipping %s message %d: %s", message.topic, index, error)
                    continue
                if points is None:
                    unlabelled[message.topic] = why_unlabelled(cloud)
                    continue
                draw(png_dir, message.topic, index, header, points)
                written[message.topic] += 1
                if count is not None and sum(written.values()) >= count:
                    break
        finally:
            progress.close()
    if not written:
        raise CommandError(no_labelled_cloud(bag_path, topic, unlabelled, rejected))
    return written


def no_labelled_cloud(
    bag_path: Path, topic: str | None, unlabelled: dict[str, str], rejected: list[str]
) -> str:
    """The one-line error of a bag (or topic) that gave no PNG."""
    if rejected and not unlabelled:
        return (
            f"no labelled cloud could be decoded in {bag_path}: {len(rejected)} message(s) "
            f"rejected, the last {rejected[-1]}"
        )
    if topic is not None:
        reason = unlabelled.get(topic, "no message")
        return f"topic {topic} in {bag_path} carries no labelled cloud: {reason}"
    listing = "; ".join(f"{name}: {reason}" for name, reason in unlabelled.items())
    return (
        f"no labelled cloud (a PointCloud2 with a {LABEL_FIELD} field) in {bag_path}; "
        f"PointCloud2 topics: {listing or 'none with messages'}"
    )


def view_live(
    topic: str, png_dir: Path, count: int | None, wait_s: float, reliability: str
) -> Counter:
    """Subscribe to ``topic`` and write a PNG per message until ``count`` or Ctrl-C; the PNGs
    written (by topic).

    Raises:
        CommandError: rclpy is missing, no publisher on ``topic`` within ``wait_s``, a topic of
            another type, or a message that is no labelled cloud.
    """
    try:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import HistoryPolicy, QoSProfile
        from rclpy.signals import SignalHandlerOptions
        from sensor_msgs.msg import PointCloud2
    except ImportError as error:
        raise CommandError(
            f"view --topic needs the ROS 2 Python packages (pip install -e '.[ros]'): {error}"
        ) from None
    from ..ros.qos import reliability_policy

    context = Context()
    # Ctrl-C raises KeyboardInterrupt here (rclpy's handler would only shut the context down)
    rclpy.init(context=context, signal_handler_options=SignalHandlerOptions.NO)
    written: Counter = Counter()
    try:
        node = rclpy.create_node("birdseye_view", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        name = node.resolve_topic_name(topic)
        received: list[bytes] = []
        qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=LIVE_DEPTH,
            reliability=reliability_policy(reliability),
        )
        try:
            # before subscribing: a subscription of another type than the topic's fails in rcl
            wait_for_publisher(node, executor, name, wait_s)
            node.create_subscription(PointCloud2, name, received.append, qos, raw=True)
            print(f"drawing {name} into {png_dir}; Ctrl-C to stop", flush=True)
            while count is None or written[name] < count:
                executor.spin_once(timeout_sec=0.1)
                while received and (count is None or written[name] < count):
                    draw_live(png_dir, name, written, received.pop(0))
        except KeyboardInterrupt:
            print("stopped (Ctrl-C)", flush=True)
        finally:
            executor.shutdown()
            node.destroy_node()
    finally:
        context.try_shutdown()
    return written


def draw_live(png_dir: Path, name: str, written: Counter, raw: bytes) -> None:
    """Draw one message of the live topic ``name`` (a malformed one is skipped with a warning).

    Raises:
        CommandError: the message is no labelled cloud.
    """
    from ..pointcloud_io.pointcloud2 import PointCloud2Error, from_cdr

    index = written[name]
    try:
        cloud, header = from_cdr(raw)
        points = labelled_points(cloud)
    except PointCloud2Error as error:
        log.warning("skipping a message of %s: %s", name, error)
        return
    if points is None:
        raise CommandError(f"{name} carries no labelled cloud: {why_unlabelled(cloud)}")
    draw(png_dir, name, index, header, points)
    written[name] += 1


def wait_for_publisher(node: Any, executor: Any, name: str, wait_s: float) -> None:
    """Spin until ``name`` has a publisher; CommandError after ``wait_s``, or when its publishers
    publish another type than PointCloud2."""
    deadline = time.monotonic() + wait_s
    while True:
        kinds = {info.topic_type for info in node.get_publishers_info_by_topic(name)}
        if kinds and POINTCLOUD2 not in kinds:
            raise CommandError(
                f"topic {name} has type {', '.join(sorted(kinds))}, not {POINTCLOUD2}"
            )
        if kinds:
            return
        if time.monotonic() >= deadline:
            published = sorted(
                topic
                for topic, types in node.get_topic_names_and_types()
                if POINTCLOUD2 in types and node.count_publishers(topic) > 0
            )
            raise CommandError(
                f"no publisher on {name} within {wait_s:g} s; PointCloud2 topics published: "
                f"{', '.join(published) or 'none'}"
            )
        executor.spin_once(timeout_sec=0.1)
