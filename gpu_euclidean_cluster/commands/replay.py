"""``gpu-euclidean-cluster replay``: the ``replay`` tool of
:mod:`gpu_euclidean_cluster.ros.replay.replay`.

The tool owns its options, as ROS 2's own tools do; this sub-command registers the same parser.
"""

from __future__ import annotations

import argparse

from ..ros.replay.replay import add_arguments, options_from_args
from ..ros.replay.replay import run as run_replay


def run(args: argparse.Namespace) -> int:
    return run_replay(options_from_args(args))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="publish the PointCloud2 topics of a ROS 1/ROS 2 bag with their recorded timing",
        description="Publish the PointCloud2 topics of a ROS 1 .bag or a ROS 2 bag (sqlite3 or "
        "MCAP) with the recorded inter-message timing. Ctrl-C stops.",
    )
    add_arguments(parser)
    parser.set_defaults(run=run)
