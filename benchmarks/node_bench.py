"""End-to-end benchmark of the ROS node: receive -> publish latency and the highest clean rate.

An :class:`~gpu_euclidean_cluster.ros.node.node.EuclideanClusterNode` runs in this process; a
driver process (:mod:`.node_driver`) publishes the same real frame (a fresh ``header.stamp`` each
time) on ``input/points``, first :data:`WARMUP_FRAMES` slow warm-up frames, then
``duration * rate`` frames at the step's rate.
Each rate step gets a fresh node, so its counters and latency window cover that step only; the
backend is warmed up in-process (kernels compiled, memory pool filled) before the first step.
Rates go up until a step drops frames. Per step:

- the node's own receive -> publish latency p50 / p99 (its ``stats()``, as in /diagnostics; the
  warm-up frames are in its window);
- the driver's publish -> ``output/labeled_points`` (with ``--objects``:
  ``output/objects_with_feature``, the only output subscribed then) arrival latency p50 / p99 of
  the timed frames (both DDS hops included, warm-up excluded);
- the node's stage breakdown p50 / p99 (decode and output build, clustering, publishing the
  subscribed outputs, markers), as in /diagnostics.

Then the same rate steps with the node as **its own process** (the ``euclidean_cluster_node``
script, started as a user would, default transport selection), the driver in another, both in a
private ROS domain; the node's counters, latency and stages come from its /diagnostics.
- frames sent, received by the node, processed, overwritten in its one-slot buffer, rejected, and
  ``dropped = sent - processed`` (never published, for whatever reason).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpu_euclidean_cluster.core.config import DEFAULT_BACKEND, DEFAULT_CONFIG, ClusterConfig
from gpu_euclidean_cluster.ros.node.frame_stats import STAGES, StatsSnapshot
from gpu_euclidean_cluster.ros.qos import DEFAULT_RELIABILITY

from .cases import data_dir
from .environment import DOMAIN_IDS
from .errors import BenchError
from .node_driver import (
    DISCOVERY_TIMEOUT_S,
    DRAIN_TIMEOUT_S,
    WARMUP_PERIOD_S,
    DriveReport,
    DriveRequest,
    drive,
)
from .rows import NodeReport, NodeStep
from .stats import median, p99

if TYPE_CHECKING:
    from gpu_euclidean_cluster.clusterer import Backend

log = logging.getLogger(__name__)

#: Frame sent by default (``--quick``: the small one).
DEFAULT_FRAME = "kitti_000001.bin"
QUICK_FRAME = "kitti_000008.bin"
#: Simulated sensors used when the frame files are absent.
SIMULATED_SENSOR = "hdl64e"
QUICK_SIMULATED_SENSOR = "vlp16"
#: Slow frames sent to each fresh node before the timed ones.
WARMUP_FRAMES = 3
#: Seconds, beyond the frames' own schedule, to wait for the driver's report.
DRIVER_SLACK_S = 60.0
#: Seconds for the node process to come up (its start-up warm-up included) and report.
NODE_START_TIMEOUT_S = 60.0
#: The node's module, run with ``python -m`` where its console script is not installed.
NODE_MODULE = "gpu_euclidean_cluster.ros.node.node"
#: Seconds between the node's /diagnostics reports (ros/node/node.py).
DIAGNOSTICS_PERIOD_S = 1.0
#: A step sustains its rate when the driver really sent at >= this fraction of it.
MIN_SEND_FRACTION = 0.95


@dataclass(frozen=True)
class NodeBenchOptions:
    """What the node benchmark sends and how the node clusters."""

    rates_hz: tuple[float, ...] = (10.0, 20.0, 30.0, 50.0, 100.0)
    duration_s: float = 5.0
    method: str = DEFAULT_CONFIG.method
    search: str = DEFAULT_CONFIG.search
    d_th: float = DEFAULT_CONFIG.d_th
    backend: str = DEFAULT_BACKEND
    reliability: str = DEFAULT_RELIABILITY
    frame: Path | None = None
    quick: bool = False
    #: the driver subscribes to ``output/objects_with_feature`` instead of the labelled cloud,
    #: so the node builds and publishes Autoware's objects (and the clouds have no subscriber)
    objects: bool = False
    #: a YAML parameters file the node starts with (e.g. ``config/autoware_ai.param.yaml``: the
    #: whole Autoware.ai pipeline); its values replace ``method``, ``search`` and ``d_th``
    params_file: Path | None = None

    def __post_init__(self) -> None:
        if not self.rates_hz or min(self.rates_hz) <= 0:
            raise BenchError("--rates must list at least one rate > 0 Hz")
        if not self.duration_s > 0:
            raise BenchError("--duration-s must be > 0")
        if self.params_file is not None and not self.params_file.is_file():
            raise BenchError(f"--params-file {self.params_file}: no such file")


#: ``--quick`` (CI): CPU backend, the small frame, slow rates, short steps.
QUICK_OPTIONS = NodeBenchOptions(rates_hz=(2.0, 5.0), duration_s=2.0, backend="cpu", quick=True)


def load_frame(options: NodeBenchOptions) -> tuple[np.ndarray, str]:
    """The (N, 3) points to send and their name.

    ``--frame FILE``; else the default frame of ``$LIDAR_DATA_DIR``; else, when that is absent,
    a simulated sweep (HDL-64E, or VLP-16 with ``--quick``) of the simulator's street scene.
    """
    from gpu_euclidean_cluster.pointcloud_io import load_points

    if options.frame is not None:
        return load_points(options.frame).xyz, options.frame.name
    path = data_dir() / (QUICK_FRAME if options.quick else DEFAULT_FRAME)
    if path.is_file():
        return load_points(path).xyz, path.name
    sensor = QUICK_SIMULATED_SENSOR if options.quick else SIMULATED_SENSOR
    log.warning("%s not found: sending a simulated %s sweep instead", path, sensor)
    return simulated_frame(sensor), f"simulated-{sensor}"


def simulated_frame(sensor: str) -> np.ndarray:
    """One sweep of ``sensor`` over the simulator's street scene (seed 0)."""
    from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene

    return LidarSimulator(get_sensor(sensor), seed=0).scan(street_scene(seed=0)).xyz


def run_node_bench(options: NodeBenchOptions) -> NodeReport:
    """The ``node`` sub-command: measure every rate step, in-process then cross-process."""
    from .environment import python_command, run_metadata

    # Validate the clustering options before ROS starts (ConfigError names the bad value).
    ClusterConfig(d_th=options.d_th, method=options.method, search=options.search)  # type: ignore[arg-type]
    try:
        import rclpy  # noqa: F401 - the node benchmark needs the ROS 2 Python runtime
    except ImportError as error:
        raise BenchError(f"the node benchmark needs rclpy ({error})") from error
    xyz, frame = load_frame(options)
    backend = _warm_backend(xyz, options)
    steps = measure_rates(xyz, frame, options, backend.name)
    cross = measure_rates_cross_process(xyz, frame, options, backend.name)
    return NodeReport(
        meta=run_metadata(python_command(), backend),
        options={
            **asdict(options),
            "rates_hz": list(options.rates_hz),
            "frame": frame,
            "params_file": None if options.params_file is None else str(options.params_file),
        },
        steps=steps,
        max_rate_no_drops_hz=max_clean_rate(steps),
        cross_process_steps=cross,
        max_rate_no_drops_cross_process_hz=max_clean_rate(cross),
    )


def max_clean_rate(steps: list[NodeStep]) -> float | None:
    """The highest rate of a step that sent at its rate and dropped nothing (None if none did)."""
    clean = [
        s.rate_hz
        for s in steps
        if s.dropped == 0 and s.sent_rate_hz >= MIN_SEND_FRACTION * s.rate_hz
    ]
    return max(clean) if clean else None


def measure_rates(
    xyz: np.ndarray, frame: str, options: NodeBenchOptions, backend: str
) -> list[NodeStep]:
    """Run the rate steps in ascending order, stopping after the first one with drops."""
    import rclpy

    from gpu_euclidean_cluster.ros.transport import configure_transport

    log.info(configure_transport())  # the node here publishes ~2 MB clouds to the driver
    context = rclpy.Context()
    file_args = ["--ros-args", "--params-file", str(options.params_file)]
    rclpy.init(context=context, args=file_args if options.params_file else None)
    try:
        return _rate_steps(
            xyz, frame, options, backend, "bench_node", lambda r: _run_step(context, r, options)
        )
    finally:
        rclpy.try_shutdown(context=context)


def _warm_backend(xyz: np.ndarray, options: NodeBenchOptions) -> Backend:
    """Cluster the frame twice in this process (compiles kernels, fills the memory pool, as the
    node's start-up does); return the backend the node resolves ``options.backend`` to."""
    from gpu_euclidean_cluster.clusterer import EuclideanClusterer

    config = ClusterConfig(d_th=options.d_th, method=options.method, search=options.search)  # type: ignore[arg-type]
    clusterer = EuclideanClusterer(config, backend=options.backend)
    for _ in range(2):
        clusterer.cluster(xyz)
    return clusterer.backend


def _run_step(context: Any, request: DriveRequest, options: NodeBenchOptions) -> NodeStep:
    """One rate step: a fresh node here, the driver in a child process."""
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from gpu_euclidean_cluster.ros.node.node import EuclideanClusterNode

    node = EuclideanClusterNode(
        namespace=request.namespace,
        context=context,
        parameter_overrides=[
            *(
                []
                if options.params_file  # the context's --params-file sets them
                else [
                    Parameter("method", value=options.method),
                    Parameter("search", value=options.search),
                    Parameter("d_th", value=float(options.d_th)),
                ]
            ),
            Parameter("backend", value=options.backend),
            Parameter("qos_reliability", value=options.reliability),
        ],
    )
    # As `euclidean_cluster_node` runs (rclpy.spin): one executor thread beside the node's worker.
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        return _measure_step(request, lambda: _settled_stats(node))
    finally:
        executor.shutdown()
        spinner.join(timeout=5)
        node.destroy_node()


def _measure_step(request: DriveRequest, settled: Callable[[], Any]) -> NodeStep:
    """Drive one step; the node's counters (``settled()``) before and after the timed frames."""
    baseline: list[Any] = []
    report = _run_driver(request, on_warm=lambda: baseline.append(settled()))
    return _step_result(request, report, baseline[0], settled())


def _run_driver(request: DriveRequest, on_warm: Callable[[], None]) -> DriveReport:
    """Run the driver in a spawned process and return its report (BenchError on failure).

    ``on_warm`` runs between the warm-up frames and the timed ones.
    """
    spawn = multiprocessing.get_context("spawn")
    reports, warmed, go = spawn.Queue(), spawn.Event(), spawn.Event()
    process = spawn.Process(target=drive, args=(request, reports, warmed, go), daemon=True)
    process.start()
    schedule_s = request.warmup * WARMUP_PERIOD_S + request.count / request.rate_hz
    try:
        if warmed.wait(DISCOVERY_TIMEOUT_S + DRIVER_SLACK_S):
            on_warm()
            go.set()
        report: DriveReport = reports.get(
            timeout=schedule_s + DISCOVERY_TIMEOUT_S + DRAIN_TIMEOUT_S + DRIVER_SLACK_S
        )
    except queue.Empty as error:
        raise BenchError("the node benchmark's driver process did not report") from error
    finally:
        process.join(timeout=10)
        if process.is_alive():
            process.terminate()
    if report.error:
        raise BenchError(f"node benchmark driver failed: {report.error}")
    return report


def _settled_stats(node: Any) -> Any:
    """The node's counters once every frame it received is processed, dropped or rejected."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    stats = node.stats()
    while time.monotonic() < deadline:
        if stats.processed + stats.dropped + stats.total_rejected >= stats.received:
            break
        time.sleep(0.05)
        stats = node.stats()
    return stats


def _step_result(request: DriveRequest, report: DriveReport, before: Any, after: Any) -> NodeStep:
    """Counters of the timed frames (``after - before``) and the latencies."""
    processed = after.processed - before.processed
    return NodeStep(
        rate_hz=request.rate_hz,
        warmup_frames=request.warmup,
        sent=request.count,
        sent_rate_hz=round(report.sent_rate_hz, 3),
        received=after.received - before.received,
        processed=processed,
        overwritten=after.dropped - before.dropped,
        rejected=after.total_rejected - before.total_rejected,
        dropped=request.count - processed,
        latency_p50_ms=_finite(after.latency_p50_ms),
        latency_p99_ms=_finite(after.latency_p99_ms),
        stages_ms={
            stage: [_finite(p50), _finite(p99)] for stage, (p50, p99) in after.stage_ms.items()
        },
        e2e_p50_ms=_finite(median(report.e2e_ms)),
        e2e_p99_ms=_finite(p99(report.e2e_ms)),
        e2e_max_ms=_finite(max(report.e2e_ms, default=float("nan"))),
        warmup_e2e_ms=[round(v, 3) for v in report.warmup_e2e_ms],
    )


def _finite(value: float) -> float | None:
    return round(float(value), 3) if np.isfinite(value) else None


def measure_rates_cross_process(
    xyz: np.ndarray, frame: str, options: NodeBenchOptions, backend: str
) -> list[NodeStep]:
    """The rate steps against the node as its own process (a fresh one per step)."""

    def measure(request: DriveRequest) -> NodeStep:
        with _NodeProcess(request, options) as node:
            return _measure_step(request, node.settled)

    return _rate_steps(xyz, frame, options, backend, "bench_node_process", measure)


def _rate_steps(
    xyz: np.ndarray,
    frame: str,
    options: NodeBenchOptions,
    backend: str,
    prefix: str,
    measure: Callable[[DriveRequest], NodeStep],
) -> list[NodeStep]:
    """``measure`` each rate step in ascending order, stopping after the first with drops.

    Cross-process steps (``prefix`` ``bench_node_process``) run in a private ROS domain each.
    """
    steps = []
    for index, rate in enumerate(options.rates_hz):
        request = DriveRequest(
            namespace=f"{prefix}_{os.getpid()}_{index}",
            xyz=xyz,
            rate_hz=rate,
            count=max(1, round(rate * options.duration_s)),
            warmup=WARMUP_FRAMES,
            reliability=options.reliability,
            domain_id=_private_domain(index) if prefix == "bench_node_process" else None,
            objects=options.objects,
        )
        step = measure(request)
        step.frame, step.backend, step.points = frame, backend, len(xyz)
        steps.append(step)
        if step.dropped:
            break
    return steps


def _private_domain(index: int) -> int:
    """A ROS domain for one cross-process step, apart from other runs on the host: within the
    benchmarks' ids (``environment.DOMAIN_IDS``), outside the test suite's (101..200)."""
    low, high = DOMAIN_IDS
    return low + (os.getpid() * 7 + index) % (high - low + 1)


class _NodeProcess:
    """``euclidean_cluster_node`` in its own process; its counters read from /diagnostics."""

    def __init__(self, request: DriveRequest, options: NodeBenchOptions) -> None:
        self.request = request
        self.options = options
        self.latest: dict[str, str] = {}
        self.reports = 0
        self.lock = threading.Lock()

    def __enter__(self) -> _NodeProcess:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor

        script = Path(sys.executable).with_name("euclidean_cluster_node")
        command = [str(script)] if script.exists() else [sys.executable, "-m", NODE_MODULE]
        options = self.options
        command += [
            "--ros-args", "-r", f"__ns:=/{self.request.namespace}",
            "-p", f"method:={options.method}", "-p", f"search:={options.search}",
            "-p", f"d_th:={float(options.d_th)}", "-p", f"backend:={options.backend}",
            "-p", f"qos_reliability:={options.reliability}",
        ]  # fmt: skip
        if options.params_file is not None:  # its values, not the defaults of --method etc.
            for name in ("method", "search", "d_th"):
                at = next(i for i, arg in enumerate(command) if arg.startswith(f"{name}:="))
                del command[at - 1 : at + 1]
            command += ["--params-file", str(options.params_file)]
        env = {**os.environ, "ROS_DOMAIN_ID": str(self.request.domain_id)}
        self.process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=self.request.domain_id)
        self.node = rclpy.create_node("bench_diagnostics", context=self.context)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, 10)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self.spinner.start()
        deadline = time.monotonic() + NODE_START_TIMEOUT_S
        while not self._values():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise BenchError("the node process did not start: " + self._stderr())
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.executor.shutdown()
        self.spinner.join(timeout=5)
        self.node.destroy_node()
        self.context.try_shutdown()

    def settled(self) -> StatsSnapshot:
        """The node's counters once a report made after this call shows every frame it
        received accounted for."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S + 2 * DIAGNOSTICS_PERIOD_S
        with self.lock:
            seen = self.reports
        while self._reports() <= seen + 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the next report may have been made before this call
        stats = _snapshot(self._values())
        while time.monotonic() < deadline:
            if stats.processed + stats.dropped + stats.total_rejected >= stats.received:
                break
            time.sleep(0.1)
            stats = _snapshot(self._values())
        return stats

    def _values(self) -> dict[str, str]:
        with self.lock:
            return dict(self.latest)

    def _reports(self) -> int:
        with self.lock:
            return self.reports

    def _on_diagnostics(self, msg: Any) -> None:
        for status in msg.status:
            if status.name.startswith("euclidean_cluster_node"):
                with self.lock:
                    self.latest = {kv.key: kv.value for kv in status.values}
                    self.reports += 1

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return "no /diagnostics within the start-up timeout"
        return " ".join((self.process.stderr.read() or b"").decode(errors="replace").split())[-400:]


def _snapshot(values: dict[str, str]) -> StatsSnapshot:
    """A :class:`StatsSnapshot` of /diagnostics key-value pairs (see ros/node/diagnostics.py)."""

    def number(key: str) -> float:
        text = values.get(key, "nan")
        return float("nan") if text == "n/a" else float(text)

    return StatsSnapshot(
        received=int(number("frames_received")) if values else 0,
        processed=int(number("frames_processed")) if values else 0,
        dropped=int(number("frames_dropped")) if values else 0,
        lost=int(number("frames_lost_before_node")) if values else 0,
        rejected={"all": int(number("frames_rejected"))} if values else {},
        fallbacks=int(number("fallbacks")) if values else 0,
        cpu_fallbacks=int(number("cpu_fallbacks")) if values else 0,
        implausible_points=0,
        last_implausible="",
        last_rejection=values.get("last_rejection", ""),
        last_fallback=values.get("last_fallback", ""),
        input_rate_hz=number("input_rate_hz"),
        latency_p50_ms=number("latency_p50_ms"),
        latency_p99_ms=number("latency_p99_ms"),
        stage_ms={
            stage: (number(f"stage_{stage}_p50_ms"), number(f"stage_{stage}_p99_ms"))
            for stage in STAGES
        },
    )
