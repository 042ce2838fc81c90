"""``gpu-euclidean-cluster``: one command, several sub-commands.

Each sub-command lives in ``gpu_euclidean_cluster/commands/<name>.py`` and exposes
``add_parser(subparsers)``, which registers its options and sets ``run`` (a function of the parsed
arguments returning the exit status). Heavy imports (CuPy, rclpy, matplotlib) happen inside
``run`` so that ``--help`` and the other sub-commands stay fast.

Expected failures raise :class:`CommandError`, ``ReplayError`` (or ValueError/OSError from the
library, OptionError for a bad option, checked when the command line is parsed): the user sees
one line, ``gpu-euclidean-cluster: error: <reason>``, and exit status 2 —
never a traceback. Running out of memory (a MemoryError anywhere) is one line and exit 2 as well.

The benchmarks are no part of the installed command: run them from a checkout with
``python -m benchmarks`` (see benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ..ros.parameters.option_values import OneLineParser, one_line
from ..ros.replay.replay import ReplayError
from . import cluster, demo, make_bag, replay, simulate, view
from .errors import CommandError

COMMANDS = (cluster, simulate, make_bag, replay, demo, view)


def build_parser() -> argparse.ArgumentParser:
    """The command's parser; a bad option raises OptionError (a ValueError) with one line."""
    parser = OneLineParser(
        prog="gpu-euclidean-cluster",
        description="GPU Euclidean cluster extraction for LiDAR point clouds.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=logging.DEBUG if args.verbose else logging.INFO,
            format="%(levelname)s %(name)s: %(message)s",
        )
        return int(args.run(args) or 0)
    except (CommandError, ReplayError, ValueError, OSError) as error:
        print(f"{parser.prog}: error: {one_line(error)}", file=sys.stderr)
        return 2
    except MemoryError as error:
        print(f"{parser.prog}: error: out of memory: {one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
