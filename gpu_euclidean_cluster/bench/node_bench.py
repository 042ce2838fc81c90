"""End-to-end benchmark of the ROS node: receive -> publish latency and the highest clean rate.

In one process, a driver node publishes the same real frame (a fresh ``header.stamp`` each time)
on ``input/points`` at a fixed rate, and an :class:`EuclideanClusterNode` clusters it. Each rate
step gets a fresh node, so its counters and latency window cover that step only; the backend is
warmed up (kernels compiled, memory pool filled) before the first step. Rates go up until a step
drops frames. Per step:

- the node's own receive -> publish latency p50 / p99 (its ``stats()``, as in /diagnostics);
- the driver's publish -> ``output/clusters`` arrival latency p50 / p99 (adds both DDS hops);
- frames sent, received by the node, processed, overwritten in its one-slot buffer, rejected, and
  ``dropped = sent - processed`` (never published, for whatever reason).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..commands import CommandError
from .cases import data_dir
from .stats import median, p99

#: Frame sent by default (``--quick``: the small one).
DEFAULT_FRAME = "kitti_000001.bin"
QUICK_FRAME = "kitti_000008.bin"
#: Seconds to wait for the node and the driver to discover each other.
DISCOVERY_TIMEOUT_S = 10.0
#: Seconds to wait, after the last frame was sent, for the node to finish.
DRAIN_TIMEOUT_S = 5.0
#: A step sustains its rate when the driver really sent at >= this fraction of it.
MIN_SEND_FRACTION = 0.95


@dataclass(frozen=True)
class NodeBenchOptions:
    """What the node benchmark sends and how the node clusters."""

    rates_hz: tuple[float, ...] = (10.0, 20.0, 30.0, 50.0, 100.0)
    duration_s: float = 5.0
    method: str = "matrix"
    search: str = "range"
    d_th: float = 0.5
    backend: str = "auto"


QUICK_OPTIONS = NodeBenchOptions(rates_hz=(2.0, 5.0), duration_s=2.0, backend="cpu")


def options_from_args(args: argparse.Namespace) -> NodeBenchOptions:
    """Validated options of ``bench node`` (``--quick``: CPU backend, slow rates, short steps)."""
    if args.quick:
        return QUICK_OPTIONS
    try:
        rates = tuple(sorted(float(r) for r in args.rates.split(",") if r.strip()))
    except ValueError as error:
        raise CommandError(f"--rates must be comma-separated numbers: {error}") from error
    if not rates or min(rates) <= 0:
        raise CommandError("--rates must list at least one rate > 0 Hz")
    if not args.duration_s > 0:
        raise CommandError("--duration-s must be > 0")
    return NodeBenchOptions(
        rates_hz=rates,
        duration_s=args.duration_s,
        method=args.method,
        search=args.search,
        d_th=args.d_th,
        backend=args.backend,
    )


def frame_path(args: argparse.Namespace) -> Path:
    """``--frame``, else the default frame in ``$LIDAR_DATA_DIR`` (CommandError when absent)."""
    path = args.frame or data_dir() / (QUICK_FRAME if args.quick else DEFAULT_FRAME)
    if not path.is_file():
        raise CommandError(f"no frame to send: {path} does not exist (use --frame FILE)")
    return path


def run_node_bench(args: argparse.Namespace) -> dict[str, Any]:
    """The ``bench node`` sub-command: measure every rate step, return a JSON-ready result."""
    from ..config import ClusterConfig
    from ..pointcloud_io import load_points
    from .environment import python_command, run_metadata

    options = options_from_args(args)
    ClusterConfig(d_th=options.d_th, method=options.method, search=options.search)  # type: ignore[arg-type]
    path = frame_path(args)
    cloud = load_points(path)
    try:
        import rclpy  # noqa: F401 - the node benchmark needs the ROS 2 Python runtime
    except ImportError as error:
        raise CommandError(f"bench node needs rclpy ({error})") from error
    steps = measure_rates(cloud.xyz, path.name, options)
    backend = steps[0]["backend"] if steps else options.backend
    return {
        "meta": run_metadata(python_command(), backend),
        "options": {**options.__dict__, "rates_hz": list(options.rates_hz), "frame": path.name},
        "steps": steps,
        "max_rate_no_drops_hz": max_clean_rate(steps),
    }


def max_clean_rate(steps: list[dict[str, Any]]) -> float | None:
    """The highest rate of a step that sent at its rate and dropped nothing (None if none did)."""
    clean = [
        s["rate_hz"]
        for s in steps
        if s["dropped"] == 0 and s["sent_rate_hz"] >= MIN_SEND_FRACTION * s["rate_hz"]
    ]
    return max(clean) if clean else None


def measure_rates(xyz: np.ndarray, frame: str, options: NodeBenchOptions) -> list[dict[str, Any]]:
    """Run the rate steps in ascending order, stopping after the first one with drops."""
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        backend = _warm_up(xyz, options)
        steps = []
        for index, rate in enumerate(options.rates_hz):
            step = _run_step(context, xyz, rate, options, f"bench_node_{os.getpid()}_{index}")
            step.update(frame=frame, backend=backend, points=len(xyz))
            steps.append(step)
            if step["dropped"]:
                break
        return steps
    finally:
        rclpy.try_shutdown(context=context)


def _warm_up(xyz: np.ndarray, options: NodeBenchOptions) -> str:
    """Cluster the frame twice in this process (compiles kernels); return the backend's name."""
    from ..clusterer import EuclideanClusterer
    from ..config import ClusterConfig

    config = ClusterConfig(d_th=options.d_th, method=options.method, search=options.search)  # type: ignore[arg-type]
    clusterer = EuclideanClusterer(config, backend=options.backend)
    for _ in range(2):
        clusterer.cluster(xyz)
    return clusterer.backend.name


def _run_step(
    context: Any, xyz: np.ndarray, rate: float, options: NodeBenchOptions, namespace: str
) -> dict[str, Any]:
    """One rate step on a fresh node in its own namespace."""
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.parameter import Parameter

    from ..ros.node import EuclideanClusterNode

    node = EuclideanClusterNode(
        namespace=namespace,
        context=context,
        parameter_overrides=[
            Parameter("method", value=options.method),
            Parameter("search", value=options.search),
            Parameter("d_th", value=float(options.d_th)),
            Parameter("backend", value=options.backend),
        ],
    )
    driver = _Driver(context, namespace, xyz)
    executor = MultiThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(driver.node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        driver.wait_for_discovery()
        sent_rate = driver.send(rate, max(1, round(rate * options.duration_s)))
        _drain(node, driver.sent)
        return _step_result(rate, sent_rate, driver, node.stats())
    finally:
        executor.shutdown()
        spinner.join(timeout=5)
        node.destroy_node()
        driver.node.destroy_node()


class _Driver:
    """Publishes the frame on ``input/points`` and times ``output/clusters`` arrivals."""

    def __init__(self, context: Any, namespace: str, xyz: np.ndarray) -> None:
        import rclpy
        from rclpy.qos import qos_profile_sensor_data
        from sensor_msgs.msg import PointCloud2
        from std_msgs.msg import Header

        from ..pointcloud2 import from_structured
        from ..ros.cloud_messages import cloud_to_message

        self.node = rclpy.create_node("bench_driver", namespace=namespace, context=context)
        self._pub = self.node.create_publisher(PointCloud2, "input/points", qos_profile_sensor_data)
        self._sub = self.node.create_subscription(PointCloud2, "output/clusters", self._on_out, 100)
        points = np.empty(len(xyz), dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
        points["x"], points["y"], points["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        self._msg = cloud_to_message(from_structured(points), Header(frame_id="lidar"))
        self._sent_at: dict[int, float] = {}
        self._latencies_ms: list[float] = []
        self._lock = threading.Lock()
        self.sent = 0

    def wait_for_discovery(self) -> None:
        deadline = time.monotonic() + DISCOVERY_TIMEOUT_S
        while self._pub.get_subscription_count() < 1 or self._sub.get_publisher_count() < 1:
            if time.monotonic() > deadline:
                raise CommandError(
                    "the node and the driver did not discover each other in "
                    f"{DISCOVERY_TIMEOUT_S} s"
                )
            time.sleep(0.05)

    def send(self, rate: float, count: int) -> float:
        """Publish ``count`` frames at ``rate`` Hz; return the rate actually achieved."""
        period = 1.0 / rate
        start = next_time = time.monotonic()
        for index in range(count):
            delay = next_time - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._msg.header.stamp.sec = index
            with self._lock:
                self._sent_at[index] = time.monotonic()
            self._pub.publish(self._msg)
            self.sent += 1
            next_time += period
        elapsed = time.monotonic() - start
        return (count - 1) / elapsed if count > 1 and elapsed > 0 else rate

    def latencies_ms(self) -> list[float]:
        with self._lock:
            return list(self._latencies_ms)

    def _on_out(self, msg: Any) -> None:
        arrived = time.monotonic()
        with self._lock:
            sent = self._sent_at.get(msg.header.stamp.sec)
            if sent is not None:
                self._latencies_ms.append((arrived - sent) * 1e3)


def _drain(node: Any, sent: int) -> None:
    """Wait until every frame the node received is accounted for, or DRAIN_TIMEOUT_S."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while time.monotonic() < deadline:
        s = node.stats()
        if s.received >= sent and s.processed + s.dropped + s.total_rejected >= s.received:
            break
        time.sleep(0.05)
    time.sleep(0.2)  # let the last output/clusters message reach the driver


def _step_result(rate: float, sent_rate: float, driver: _Driver, stats: Any) -> dict[str, Any]:
    e2e = driver.latencies_ms()
    return {
        "rate_hz": rate,
        "sent": driver.sent,
        "sent_rate_hz": round(sent_rate, 3),
        "received": stats.received,
        "processed": stats.processed,
        "overwritten": stats.dropped,
        "rejected": stats.total_rejected,
        "dropped": driver.sent - stats.processed,
        "latency_p50_ms": _finite(stats.latency_p50_ms),
        "latency_p99_ms": _finite(stats.latency_p99_ms),
        "e2e_p50_ms": _finite(median(e2e)),
        "e2e_p99_ms": _finite(p99(e2e)),
    }


def _finite(value: float) -> float | None:
    return round(float(value), 3) if np.isfinite(value) else None
