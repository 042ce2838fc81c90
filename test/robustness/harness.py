"""The robustness suite's harness: the node as its own process, and a probe that feeds it.

:class:`NodeProcess` starts ``euclidean_cluster_node`` exactly as a user would (the console script
next to ``sys.executable`` with ``--ros-args``), in the default environment except a private
``ROS_DOMAIN_ID``, in a process group of its own, with stdout and stderr captured to a log file.
A watchdog thread samples its RSS (``VmRSS`` of ``/proc/<pid>/status``) and kills it when it
passes a limit, so a runaway allocation is recorded instead of taking the machine down.

:class:`Probe` is the benchmark's own rclpy node on the same domain: it publishes clouds on the
node's input and records which input stamps came back on ``output/labeled_points`` and every
``/diagnostics`` report (:class:`Tick`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from benchmarks.errors import BenchError

NODE_SCRIPT = "euclidean_cluster_node"
#: Used only where the console script is not installed next to ``sys.executable``.
NODE_MODULE = "gpu_euclidean_cluster.ros.node.node"
#: Where the node's ``input/points`` is remapped to.
INPUT_TOPIC = "/reliability/points"
#: Seconds a node may take to start and answer its first cloud.
READY_TIMEOUT_S = 60.0
#: Seconds between SIGINT and SIGKILL when stopping the node.
STOP_TIMEOUT_S = 10.0
#: Seconds between two RSS samples of the watchdog.
WATCH_PERIOD_S = 0.05
#: Depth of the probe's subscriptions (outputs are recorded by stamp only).
RECORD_DEPTH = 100
#: RSS reads of :meth:`NodeProcess.idle_rss_mb`, :data:`WATCH_PERIOD_S` apart.
IDLE_SAMPLES = 5
#: What Python prints before a stack trace.
TRACEBACK = "Traceback (most recent call last)"
LEVEL_NAMES = {0: "OK", 1: "WARN", 2: "ERROR", 3: "STALE"}


def node_command(backend: str, reliability: str) -> list[str]:
    """The command line a user would type to start the node on ``backend``."""
    script = Path(sys.executable).parent / NODE_SCRIPT
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", NODE_MODULE]
    return [
        *launcher,
        "--ros-args",
        "-p", f"backend:={backend}",
        "-p", f"qos_reliability:={reliability}",
        "-r", f"input/points:={INPUT_TOPIC}",
    ]  # fmt: skip


class NodeProcess:
    """The node under test, started by the constructor; always end with :meth:`stop`.

    Args:
        command: the node's command line (:func:`node_command`).
        domain_id: the private ``ROS_DOMAIN_ID``.
        log_path: where its stdout and stderr go.
        rss_limit_mb: the watchdog kills the node's process group above this RSS.
    """

    def __init__(
        self, command: list[str], domain_id: int, log_path: Path, rss_limit_mb: float
    ) -> None:
        self.command = command
        self.log_path = log_path
        self.rss_limit_mb = rss_limit_mb
        self.killed_for_memory = False
        self._peak_mb = 0.0
        self._stopping = threading.Event()
        self._log: IO[bytes] = log_path.open("wb")
        env = {**os.environ, "ROS_DOMAIN_ID": str(domain_id)}
        try:
            self._process = subprocess.Popen(
                command, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
            )
        except OSError as error:
            self._log.close()
            raise BenchError(f"cannot start the node ({command[0]}): {error}") from error
        self._watchdog = threading.Thread(target=self._watch, name="rss-watchdog", daemon=True)
        self._watchdog.start()

    @property
    def pid(self) -> int:
        """The node's process id (also its process group id)."""
        return self._process.pid

    @property
    def exit_code(self) -> int | None:
        """The node's exit status, or None while it runs."""
        return self._process.poll()

    def rss_mb(self) -> float | None:
        """The node's resident set size in MB (None once it has exited)."""
        try:
            status = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
        return None

    def idle_rss_mb(self) -> float | None:
        """The lowest RSS over a short pause (:data:`IDLE_SAMPLES` reads), so that the memory
        of a frame still being published or freed does not count (None once it has exited)."""
        samples = []
        for _ in range(IDLE_SAMPLES):
            samples.append(self.rss_mb())
            time.sleep(WATCH_PERIOD_S)
        found = [s for s in samples if s is not None]
        return min(found) if found else None

    def take_peak_mb(self) -> float:
        """The highest RSS the watchdog saw since the last call (then start over)."""
        peak, self._peak_mb = self._peak_mb, self.rss_mb() or 0.0
        return round(peak, 1)

    def log_size(self) -> int:
        """Bytes written to the log so far (an offset for :meth:`log_since`)."""
        return self.log_path.stat().st_size

    def log_since(self, offset: int) -> str:
        """What the node wrote after ``offset``."""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode("utf-8", "replace")

    def stop(self) -> int | None:
        """SIGINT to the node's process group, SIGKILL after :data:`STOP_TIMEOUT_S`; its status."""
        self._stopping.set()
        if self._process.poll() is None:
            self._signal(signal.SIGINT)
            try:
                self._process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._process.wait(STOP_TIMEOUT_S)
        self._watchdog.join(STOP_TIMEOUT_S)
        self._log.close()
        return self._process.returncode

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def _watch(self) -> None:
        while not self._stopping.is_set() and self._process.poll() is None:
            rss = self.rss_mb() or 0.0
            self._peak_mb = max(self._peak_mb, rss)
            if rss > self.rss_limit_mb:
                self.killed_for_memory = True
                self._signal(signal.SIGKILL)
                return
            time.sleep(WATCH_PERIOD_S)


@dataclass(frozen=True)
class Tick:
    """One /diagnostics report of the node: its level and counters (cumulative since start)."""

    arrived: float
    level: int
    message: str
    values: dict[str, str]

    def count(self, key: str) -> int:
        """The integer value ``key`` (0 when absent)."""
        return int(self.values.get(key, "0"))

    @property
    def received(self) -> int:
        """Frames the node took from its subscription."""
        return self.count("frames_received")

    @property
    def processed(self) -> int:
        """Frames clustered and published."""
        return self.count("frames_processed")

    @property
    def dropped(self) -> int:
        """Frames overwritten in the node's one-slot buffer."""
        return self.count("frames_dropped")

    @property
    def rejected(self) -> int:
        """Frames rejected, every kind."""
        return self.count("frames_rejected")

    @property
    def lost(self) -> int:
        """Frames sent that never reached the node (its publication sequence gaps)."""
        return self.count("frames_lost_before_node")

    @property
    def level_name(self) -> str:
        """``OK``, ``WARN``, ``ERROR`` or ``STALE``."""
        return LEVEL_NAMES.get(self.level, str(self.level))

    @property
    def settled(self) -> bool:
        """Every frame received was processed, dropped or rejected."""
        return self.processed + self.dropped + self.rejected >= self.received

    def rejected_by_kind(self) -> dict[str, int]:
        """Rejections per kind (``malformed``, ``missing_fields``, ...)."""
        prefix = "frames_rejected_"
        return {k[len(prefix) :]: int(v) for k, v in self.values.items() if k.startswith(prefix)}


class Probe:
    """The benchmark's rclpy node on ``domain_id``: publishes input, records outputs and ticks.

    Args:
        domain_id: the node's private ROS domain.
        reliability: of the input publisher (``best_effort`` or ``reliable``), as the node's.
    """

    def __init__(self, domain_id: int, reliability: str) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud2

        from gpu_euclidean_cluster.ros.qos import reliability_policy

        self._condition = threading.Condition()
        self.outputs: dict[int, float] = {}
        self.ticks: list[Tick] = []
        self._stamp = 0
        self._context = rclpy.Context()
        rclpy.init(context=self._context, domain_id=domain_id)
        self._node = rclpy.create_node("reliability_probe", context=self._context)
        # As a LiDAR driver publishes (sensor-data history), with the node's reliability.
        qos = QoSProfile(
            history=qos_profile_sensor_data.history,
            depth=qos_profile_sensor_data.depth,
            reliability=reliability_policy(reliability),
        )
        self._publisher = self._node.create_publisher(PointCloud2, INPUT_TOPIC, qos)
        record = QoSProfile(depth=RECORD_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
        self._node.create_subscription(
            PointCloud2, "output/labeled_points", self._on_output, record
        )
        self._node.create_subscription(DiagnosticArray, "/diagnostics", self._on_tick, record)
        self._executor = SingleThreadedExecutor(context=self._context)
        self._executor.add_node(self._node)
        self._spinner = threading.Thread(target=self._executor.spin, daemon=True)
        self._spinner.start()

    def next_stamp(self) -> int:
        """A header stamp (seconds) not used before in this session."""
        self._stamp += 1
        return self._stamp

    def publish(self, msg: Any, stamp: int) -> float:
        """Publish ``msg`` stamped ``stamp`` seconds; return the monotonic send time."""
        msg.header.stamp.sec = stamp
        sent = time.monotonic()
        self._publisher.publish(msg)
        return sent

    def wait_output(self, stamp: int, timeout_s: float) -> float | None:
        """When the output of input ``stamp`` arrived (monotonic), or None after ``timeout_s``."""
        with self._condition:
            self._condition.wait_for(lambda: stamp in self.outputs, timeout_s)
            return self.outputs.get(stamp)

    def wait_tick(self, predicate: Callable[[Tick], bool], timeout_s: float) -> Tick | None:
        """The first tick from now on that satisfies ``predicate``, or None after ``timeout_s``."""
        with self._condition:
            seen = len(self.ticks)
            self._condition.wait_for(
                lambda: any(predicate(t) for t in self.ticks[seen:]), timeout_s
            )
            return next((t for t in self.ticks[seen:] if predicate(t)), None)

    def settle(self, timeout_s: float) -> Tick | None:
        """The first tick that is settled and received nothing since the tick before, or None."""
        deadline = time.monotonic() + timeout_s
        previous = self.wait_tick(lambda t: True, timeout_s)
        while previous is not None:
            tick = self.wait_tick(lambda t: True, deadline - time.monotonic())
            if tick is None or (tick.settled and tick.received == previous.received):
                return tick
            previous = tick
        return None

    def wait_ready(self, node: NodeProcess, msg: Any) -> None:
        """Send ``msg`` until the node answers (matching alone is not enough for best effort).

        Raises:
            BenchError: the node exited, or did not answer within :data:`READY_TIMEOUT_S`.
        """
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if node.exit_code is not None:
                raise BenchError(
                    f"the node exited with status {node.exit_code} at start-up: "
                    f"{_last_line(node.log_since(0))}"
                )
            if self._publisher.get_subscription_count() > 0:
                stamp = self.next_stamp()
                self.publish(msg, stamp)
                if self.wait_output(stamp, 0.5) is not None:
                    return
            else:
                time.sleep(0.05)
        raise BenchError(f"the node did not answer within {READY_TIMEOUT_S:g} s ({node.log_path})")

    def close(self) -> None:
        """Stop spinning and shut the probe's context down."""
        self._executor.shutdown()
        self._spinner.join(STOP_TIMEOUT_S)
        self._node.destroy_node()
        self._context.try_shutdown()

    def _on_output(self, msg: Any) -> None:
        arrived = time.monotonic()
        with self._condition:
            self.outputs.setdefault(msg.header.stamp.sec, arrived)
            self._condition.notify_all()

    def _on_tick(self, msg: Any) -> None:
        arrived = time.monotonic()
        for status in msg.status:
            if not status.name.startswith(NODE_SCRIPT):
                continue
            level = status.level
            tick = Tick(
                arrived=arrived,
                level=int.from_bytes(level, "little") if isinstance(level, bytes) else int(level),
                message=status.message,
                values={kv.key: kv.value for kv in status.values},
            )
            with self._condition:
                self.ticks.append(tick)
                self._condition.notify_all()


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


class Session:
    """A node process and a probe on its domain; the node has answered a first cloud.

    Args:
        command, domain_id, log_path, rss_limit_mb: as for :class:`NodeProcess`.
        reliability: of the node's input and of the probe's publisher.
        ready_msg: the cloud sent until the node answers.

    Raises:
        BenchError: the node exited or did not answer (both are stopped first).
    """

    def __init__(
        self,
        command: list[str],
        domain_id: int,
        log_path: Path,
        rss_limit_mb: float,
        reliability: str,
        ready_msg: Any,
    ) -> None:
        self.reliability = reliability
        self.exit_code: int | None = None
        self._closed = False
        self.probe = Probe(domain_id, reliability)
        try:
            self.node = NodeProcess(command, domain_id, log_path, rss_limit_mb)
        except BaseException:
            self.probe.close()
            raise
        try:
            self.probe.wait_ready(self.node, ready_msg)
        except BaseException:
            self.close()
            raise

    @property
    def alive(self) -> bool:
        """True while the node runs."""
        return self.node.exit_code is None

    def close(self) -> int | None:
        """Stop the probe and the node (once); the node's exit status."""
        if not self._closed:
            self._closed = True
            self.probe.close()
            self.exit_code = self.node.stop()
        return self.exit_code

    def tracebacks(self) -> int:
        """Tracebacks in the node's log so far."""
        return self.node.log_since(0).count(TRACEBACK)
