"""The ``replay`` tool: publish the PointCloud2 topics of a bag with their recorded timing.

Console script ``replay BAG`` (``ros2 run gpu_euclidean_cluster replay BAG`` in a workspace); the
``gpu-euclidean-cluster replay`` sub-command reuses this module's parser. The module owns the
parser (:func:`add_arguments`, giving :class:`~.replay_options.ReplayOptions`) and imports nothing
of ROS at import time, so that the CLI's help works without it; the player is :mod:`.bag_player`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from .qos import RELIABILITIES
from .replay_options import ReplayOptions, parse_remaps


class ReplayError(Exception):
    """An expected failure of the replay tool; shown to the user as one line."""


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
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="play the segment N times (default 1; --loop: until Ctrl-C)",
    )
    parser.add_argument(
        "--rate-hz",
        type=float,
        default=None,
        metavar="HZ",
        help="publish one message every 1/HZ s whatever the bag's stamps (default: the recorded "
        "timing; a one-message segment that loops or repeats plays at 10 Hz)",
    )
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
        choices=RELIABILITIES,
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
    """Build :class:`ReplayOptions` from arguments parsed by :func:`add_arguments`."""
    return ReplayOptions(
        bag=args.bag,
        rate=args.rate,
        loop=args.loop,
        repeat=args.repeat,
        rate_hz=args.rate_hz,
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


def run(options: ReplayOptions) -> int:
    """Replay in the main thread; SIGINT and SIGTERM stop it cleanly. Returns the exit status.

    Raises:
        ReplayError: the ROS 2 Python runtime is missing.
        ValueError: a bad bag, topic or remap (``BagError``).
    """
    try:
        from .bag_player import replay_bag
    except ImportError as error:
        raise ReplayError(
            f"replay needs rclpy and sensor_msgs (pip install -e '.[ros]'): {error}"
        ) from None
    from .transport import configure_transport

    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # The tool (not the library function) sets this process's Fast DDS transport.
        stats = replay_bag(options, stop, transport=configure_transport)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(stats.summary(), file=sys.stderr)
    return 0


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split a command line into the tool's own arguments and the ROS arguments.

    As rcl does: every ``--ros-args`` opens a ROS section that runs to the next ``--`` or to the
    end. Only those sections go to ``rclpy.init``, so an option value such as the ``OLD:=NEW``
    of ``--remap`` stays the tool's.
    """
    own: list[str] = []
    ros: list[str] = []
    inside = False
    for arg in argv:
        if arg == "--ros-args":
            inside = True
            ros.append(arg)
        elif inside and arg == "--":
            inside = False
        else:
            (ros if inside else own).append(arg)
    return own, ros


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``replay``: same options as ``gpu-euclidean-cluster replay``."""
    parser = argparse.ArgumentParser(
        prog="replay", description="Replay PointCloud2 topics of a ROS 1 or ROS 2 bag."
    )
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    own_args, ros_args = split_ros_args(argv)
    args = parser.parse_args(own_args)
    try:
        # --ros-args (remapping, namespace, log level, ...) go to rclpy.init
        return run(replace(options_from_args(args), rcl_args=(parser.prog, *ros_args)))
    except (ReplayError, ValueError, OSError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
