"""``gpu-euclidean-cluster replay``: publish the PointCloud2 topics of a bag with their timing.

The same options serve the ``replay`` console script (``gpu_euclidean_cluster.ros.replay``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from . import CommandError

if TYPE_CHECKING:
    from ..ros.replay import ReplayOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the replay options on ``parser``."""
    parser.add_argument(
        "bag", type=Path, help="ROS 1 .bag file, ROS 2 bag directory, or .db3/.mcap file"
    )
    parser.add_argument(
        "-r", "--rate", type=float, default=1.0, help="playback speed factor (default 1)"
    )
    parser.add_argument("-l", "--loop", action="store_true", help="repeat until Ctrl-C")
    parser.add_argument(
        "--start",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="skip this many seconds from the start of the bag",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="play only this many seconds of bag time",
    )
    parser.add_argument(
        "--topics",
        nargs="+",
        default=[],
        metavar="TOPIC",
        help="PointCloud2 topics to play (default: all PointCloud2 topics)",
    )
    parser.add_argument(
        "--remap",
        nargs="+",
        default=[],
        metavar="OLD:=NEW",
        help="publish topic OLD under the name NEW",
    )
    parser.add_argument(
        "--qos-reliability",
        choices=("reliable", "best-effort"),
        default="reliable",
        help="publisher reliability (default reliable, like ros2 bag play)",
    )
    parser.add_argument(
        "--qos-depth", type=int, default=10, help="publisher history depth (default 10)"
    )
    parser.add_argument(
        "--clock",
        type=float,
        nargs="?",
        const=40.0,
        default=0.0,
        metavar="HZ",
        help="publish /clock with the bag time at HZ (default 40 when given) for use_sim_time",
    )
    parser.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="before playing, wait up to this long for subscribers on every topic",
    )
    parser.add_argument(
        "--min-subscribers",
        type=int,
        default=1,
        metavar="N",
        help="subscribers per topic that --wait-for-subscribers waits for (default 1)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    """Build :class:`~gpu_euclidean_cluster.ros.replay.ReplayOptions` from parsed arguments."""
    try:
        from ..ros.replay import ReplayOptions, parse_remaps
    except ImportError as error:
        raise CommandError(
            f"replay needs rclpy and sensor_msgs (pip install -e '.[ros]'): {error}"
        ) from None
    return ReplayOptions(
        bag=args.bag,
        rate=args.rate,
        loop=args.loop,
        start_s=args.start,
        duration_s=args.duration,
        topics=tuple(args.topics),
        remap=parse_remaps(args.remap),
        qos_reliability=args.qos_reliability,
        qos_depth=args.qos_depth,
        clock_hz=args.clock,
        wait_for_subscribers_s=args.wait_for_subscribers,
        min_subscribers=args.min_subscribers,
        progress=not args.quiet,
    )


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    from ..ros.replay import run as run_replay

    return run_replay(options)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="publish the PointCloud2 topics of a ROS 1/ROS 2 bag with their recorded timing",
        description="Publish the PointCloud2 topics of a ROS 1 .bag or a ROS 2 bag (sqlite3 or "
        "MCAP) with the recorded inter-message timing. Ctrl-C stops.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run)
