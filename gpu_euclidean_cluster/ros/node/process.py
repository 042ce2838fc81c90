"""A node as a process: start-up checks, one line and exit status 2 for what it cannot use,
spinning, and a clean stop on Ctrl-C or SIGTERM.

    >>> sys.exit(run_node("euclidean_cluster_node", EuclideanClusterNode, lambda: USAGE))

:func:`run_node` checks the ``--params-file`` arguments before rclpy reads them (rcl's own
messages on a bad file are several lines of C source locations), holds rcl's log lines while it
parses the ROS arguments (an argument error is one line: :func:`rcl_message`), sends the
package's Python log records to the node's ROS logger (``ros/node/ros_logging.py``), chooses Fast
DDS's transports for large clouds (``ros/transport.py``), then spins the node until shutdown
(:class:`StopSignals`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from ...core.config import ConfigError
from ..transport import configure_transport
from .ros_logging import RosLogHandler, forward_package_logging, stop_forwarding


def run_node(
    name: str,
    make_node: Callable[[], Node],
    usage: Callable[[], str],
    args: Sequence[str] | None = None,
) -> int:
    """Run the node ``make_node`` creates until shutdown; exit status 2, with one line saying why
    (``<name>: error: ...``), when a start-up input is invalid (a ROS argument, a params file, a
    parameter value: ``make_node`` raises ConfigError or ParameterException). With -h or --help
    among the program's own arguments (``args``, default ``sys.argv``; those before
    ``--ros-args``), print ``usage()`` instead and return 0.

    Ctrl-C (SIGINT) or SIGTERM stops it with exit status 0. Under ``ros2 launch`` a Ctrl-C
    reaches the node twice (the terminal's SIGINT, then the one launch sends): the second, and
    any signal once the node is stopping, is ignored, so the shutdown finishes without a
    KeyboardInterrupt traceback.
    """
    argv = list(sys.argv if args is None else args)
    own = argv[1 : argv.index("--ros-args")] if "--ros-args" in argv else argv[1:]
    if {"-h", "--help"} & set(own):
        print(usage())
        return 0
    problem = params_files_problem(argv)
    if problem:
        print(f"{name}: error: {problem}", file=sys.stderr)
        return 2
    signals = StopSignals()
    signals.install()  # before rclpy's handlers, which call it after shutting ROS down
    try:
        return _spin(name, make_node, argv, signals)
    except KeyboardInterrupt:  # Ctrl-C before rclpy started: nothing of ROS to stop
        return 0
    finally:
        signals.ignore()


def _spin(name: str, make_node: Callable[[], Node], argv: list[str], signals: StopSignals) -> int:
    """:func:`run_node` from ``rclpy.init`` on: a KeyboardInterrupt (the first Ctrl-C) anywhere
    after it stops the node as a shutdown does."""
    transport = configure_transport()  # before the first participant: large output clouds
    try:
        with held_stderr():  # rcl logs its own line before raising; ours says it all
            rclpy.init(args=argv)
    except Exception as error:  # rcl's argument errors (UnknownROSArgsError, ...) are not exported
        print(f"{name}: error: {type(error).__name__}: {rcl_message(error)}", file=sys.stderr)
        return 2
    node: Node | None = None
    forwarding: RosLogHandler | None = None
    try:
        # The executor spin uses, made before the node's seconds of start-up: a stop signal in
        # them must not find it half built (rclpy then prints an error as it is collected).
        rclpy.get_global_executor()
        logger = rclpy.logging.get_logger(name)
        forwarding = forward_package_logging(logger)
        try:
            node = make_node()
        except (ConfigError, ParameterException) as error:
            logger.error(f"error: {error}")
            return 2
        node.get_logger().info(transport)
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():
            raise
        # a signal shut ROS down while the executor built its wait set (rcl's RCLError)
    finally:
        signals.stopping = True
        if node is not None:
            node.destroy_node()
        if forwarding is not None:
            stop_forwarding(forwarding)
        rclpy.try_shutdown()
    return 0


class StopSignals:
    """The node's SIGINT handler: the first SIGINT raises KeyboardInterrupt in the main thread
    (rclpy's own handler, which runs first, has shut ROS down); later ones, and any once
    :attr:`stopping` is set, do nothing."""

    def __init__(self) -> None:
        self.stopping = False

    def install(self) -> None:
        """Install the handler; call it before ``rclpy.init`` (rclpy chains to the one it finds)."""
        signal.signal(signal.SIGINT, self._on_signal)

    def ignore(self) -> None:
        """Ignore SIGINT and SIGTERM from now on (call after ``rclpy.try_shutdown``, which puts
        the handlers it found back): Python's finalisation would restore the default action,
        and a late signal would then kill the exiting process (exit status 130)."""
        self.stopping = True
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def held_stderr() -> Iterator[None]:
    """Hold what is written to file descriptor 2 (rcl's log lines) while the block runs; write it
    out afterwards only when the block succeeds."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        sys.stderr.write(held.read().decode("utf-8", "replace"))
        sys.stderr.flush()


def rcl_message(error: BaseException) -> str:
    """rcl's error message on one line, without the C source locations it appends."""
    text = " ".join(str(error).split())
    return re.sub(r",? at \S+\.c:\d+", "", text).strip() or type(error).__name__


def params_files_problem(argv: Sequence[str]) -> str | None:
    """Why a ``--params-file`` of the ROS arguments cannot be read as YAML (missing, not a file,
    unreadable, not YAML), in one line; None when they all can. rcl checks the rest."""
    import yaml

    for path in _params_files(argv):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return f"params file {path}: no such file"
        except IsADirectoryError:
            return f"params file {path}: is a directory"
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            return f"params file {path}: cannot read: {reason or error}"
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            what = getattr(error, "problem", None) or str(error)
            return f"params file {path}: not valid YAML: {' '.join(str(what).split())}{where}"
    return None


def _params_files(argv: Sequence[str]) -> list[str]:
    """The ``--params-file`` values inside the ``--ros-args`` sections of ``argv``."""
    files: list[str] = []
    inside = False
    for index, arg in enumerate(argv):
        if arg == "--ros-args":
            inside = True
        elif arg == "--":
            inside = False
        elif inside and arg == "--params-file" and index + 1 < len(argv):
            files.append(argv[index + 1])
    return files
