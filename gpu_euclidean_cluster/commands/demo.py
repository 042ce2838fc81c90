"""``gpu-euclidean-cluster demo``: simulated bag -> replay -> clustering node, end to end.

1. Simulates a short Autoware-style bag (HDL-64E sweeps of a street scene, ``/points_raw``).
2. Starts ``euclidean_cluster_node`` (through its launch file with ``ros2 launch`` when launch_ros
   and the ros2 CLI are installed, otherwise as a process of its own) and the ``replay`` tool.
3. Prints one line per clustered frame (points, clusters, end-to-end latency) and a summary, and
   writes a bird's-eye PNG of one frame coloured by cluster beside the simulator's ground truth.
   The panels share colours by object: a cluster has the colour of the ground-truth object that
   holds most of its points (``tools.birdseye.object_colour_keys``).

Without a CUDA device the node runs on the CPU backend and the demo says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..core.config import DEFAULT_CONFIG
from ..ros.ament_prefix import ament_environment, package_share
from ..ros.parameters.option_values import argument, rate_factor
from .errors import CommandError
from .simulate import add_simulation_arguments

if TYPE_CHECKING:
    import numpy as np

    from ..ros.replay.demo_monitor import DemoMonitor, FrameReport
    from ..tools.simulation import Scan

PACKAGE = "gpu_euclidean_cluster"
LAUNCH_FILE = "gpu_euclidean_cluster.launch.py"
INPUT_TOPIC = "/points_raw"
LABELED_TOPIC = "/output/labeled_points"
NODE_START_TIMEOUT_S = 60.0
#: After the replay ends: stop waiting for outputs once none came for DRAIN_QUIET_S seconds,
#: and at the latest after DRAIN_MAX_S.
DRAIN_QUIET_S = 5.0
DRAIN_MAX_S = 30.0
#: Height above the ground below which points are left out of clustering (ground removal).
GROUND_CLEARANCE_M = 0.25
#: A ground-truth object counts as recovered when one cluster holds this share of its points and
#: at least this share of that cluster's points are the object's.
RECOVERY_OVERLAP = 0.8
MIN_OBJECT_POINTS = 10
#: Default replay rate without CUDA: a 10 Hz sensor at 3 Hz, so that the CPU node (about 0.1 s a
#: 126 k-point frame, receive to publish, sharing the cores with the replay) keeps up.
CPU_RATE = 0.3
#: Half-width of the bird's-eye view (m): the street scene around the sensor.
VIEW_EXTENT_M = 40.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="simulate a bag, replay it into the clustering node, report and plot the result",
        description="End-to-end demo: simulated HDL-64E bag -> replay -> euclidean_cluster_node. "
        "Prints one line per frame and a summary; writes a bird's-eye PNG beside the ground "
        "truth. Uses the CPU backend when no CUDA device is available.",
    )
    add_simulation_arguments(parser, frames=20)
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=Path("demo_output"),
        help="output directory (default ./demo_output)",
    )
    parser.add_argument(
        "--rate",
        type=argument(rate_factor),
        default=None,
        help=f"replay speed factor (default 1 with CUDA; {CPU_RATE:g} on the CPU backend, "
        "whose node takes about 0.1 s per HDL-64E frame, receive to publish)",
    )
    default_d_th = DEFAULT_CONFIG.d_th
    parser.add_argument(
        "--d-th",
        type=float,
        default=default_d_th,
        help=f"distance threshold (m, default {default_d_th})",
    )
    parser.add_argument(
        "--min-cluster-size", type=int, default=10, help="smallest cluster reported"
    )
    parser.set_defaults(run=run)


@dataclass(frozen=True)
class DemoPaths:
    """Files the demo writes under its output directory."""

    out: Path

    @property
    def bag(self) -> Path:
        return self.out / "demo_bag"

    @property
    def params(self) -> Path:
        return self.out / "demo.param.yaml"

    @property
    def node_log(self) -> Path:
        return self.out / "node.log"

    @property
    def replay_log(self) -> Path:
        return self.out / "replay.log"

    @property
    def png(self) -> Path:
        return self.out / "birdseye.png"


def prepare_output(paths: DemoPaths) -> None:
    """Create the output directory; remove the bag of a previous demo run (only a bag)."""
    paths.out.mkdir(parents=True, exist_ok=True)
    if paths.bag.exists():
        if not (paths.bag / "metadata.yaml").is_file():
            raise CommandError(f"{paths.bag} exists and is not a bag; not removing it")
        shutil.rmtree(paths.bag)


def write_params(path: Path, args: argparse.Namespace, ground_z: float) -> None:
    """Node parameters of the demo (a ROS 2 parameter file)."""
    path.write_text(
        "# euclidean_cluster_node parameters written by `gpu-euclidean-cluster demo`\n"
        "/**:\n"
        "  ros__parameters:\n"
        f"    d_th: {args.d_th}\n"
        f"    min_cluster_size: {args.min_cluster_size}\n"
        f"    min_z: {ground_z + GROUND_CLEARANCE_M:.3f}\n"
        "    max_range: 120.0\n"
        "    backend: auto\n"
        "    # the replay publishes reliably: no frame lost to UDP fragment loss\n"
        "    qos_reliability: reliable\n",
        encoding="utf-8",
    )


def simulate_bag(paths: DemoPaths, args: argparse.Namespace) -> tuple[dict[int, Scan], float]:
    """Simulate the sweeps, write them to the demo bag; return them by stamp and the ground z."""
    from ..pointcloud_io.bags import write_pointcloud_bag
    from ..tools.simulation import LidarSimulator, get_sensor, street_scene

    scene = street_scene(seed=args.seed)
    simulator = LidarSimulator(get_sensor(args.sensor), seed=args.seed)
    start_ns = int(time.time()) * 1_000_000_000
    scans = list(simulator.sequence(scene, args.frames, args.rate_hz, start_ns))
    write_pointcloud_bag(
        paths.bag, ((s.stamp_ns, s.autoware_points()) for s in scans), storage="mcap"
    )
    moving = sum(obj.moving for obj in scene.objects)
    print(
        f"simulated {len(scans)} {args.sensor} sweeps at {args.rate_hz:g} Hz of a street with "
        f"{len(scene.objects)} objects ({moving} moving), {len(scans[0])} points each -> "
        f"{paths.bag}"
    )
    return {scan.stamp_ns: scan for scan in scans}, scene.ground_z


def node_command(params: Path, environ: Mapping[str, str]) -> tuple[list[str], str]:
    """How to start the node in ``environ``: ``ros2 launch`` when available, else the node's
    module."""
    ros2 = shutil.which("ros2")
    if ros2 and importlib.util.find_spec("launch_ros") is not None:
        share = package_share(environ)
        if share is not None and (share / "launch" / LAUNCH_FILE).is_file():
            command = [
                ros2,
                "launch",
                PACKAGE,
                LAUNCH_FILE,
                f"params_file:={params}",
                f"input_topic:={INPUT_TOPIC}",
            ]
            return command, "launch file (ros2 launch)"
    command = [
        sys.executable,
        "-m",
        f"{PACKAGE}.ros.node.node",
        "--ros-args",
        "--params-file",
        str(params),
        "-r",
        f"input/points:={INPUT_TOPIC}",
    ]
    return command, "node process (launch_ros not available)"


def start_process(command: list[str], log: Path, environ: Mapping[str, str]) -> subprocess.Popen:
    with log.open("w", encoding="utf-8") as stream:
        return subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=environ)


def stop_process(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Ctrl-C the process (clean ROS shutdown); kill it if it does not exit in time."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def log_tail(path: Path, lines: int = 5) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return " | ".join(text[-lines:]) if text else "(empty log)"


def wait_for_node(monitor: DemoMonitor, node: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + NODE_START_TIMEOUT_S
    while not monitor.node_ready():
        if node.poll() is not None:
            raise CommandError(f"the node exited with status {node.returncode}: {log_tail(log)}")
        if time.monotonic() > deadline:
            raise CommandError(f"the node did not come up in {NODE_START_TIMEOUT_S:g} s ({log})")
        time.sleep(0.1)


def recovered_objects(truth: np.ndarray, labels: np.ndarray) -> tuple[int, int]:
    """(recovered, total) ground-truth objects of at least MIN_OBJECT_POINTS points (ground
    excluded); recovered means one cluster and the object overlap one-to-one: the shared points
    are at least RECOVERY_OVERLAP of the object and of the cluster."""
    import numpy as np

    ids, id_sizes = np.unique(truth[truth > 0], return_counts=True)
    counted = ids[id_sizes >= MIN_OBJECT_POINTS]
    if counted.size == 0:
        return 0, 0
    shared = np.isin(truth, counted) & (labels >= 0)
    if not shared.any():
        return 0, int(counted.size)
    pairs, overlap = np.unique(
        np.stack([truth[shared], labels[shared]]), axis=1, return_counts=True
    )
    object_size = dict(zip(ids.tolist(), id_sizes.tolist(), strict=True))
    cluster_size = np.bincount(labels[labels >= 0])
    recovered = {
        obj
        for (obj, cluster), count in zip(pairs.T.tolist(), overlap.tolist(), strict=True)
        if count >= RECOVERY_OVERLAP * object_size[obj]
        and count >= RECOVERY_OVERLAP * cluster_size[cluster]
    }
    return len(recovered), int(counted.size)


def frame_line(index: int, total: int, report: FrameReport, truth: Scan | None) -> str:
    latency = (
        "latency    n/a"
        if math.isnan(report.latency_ms)
        else (f"latency {report.latency_ms:7.1f} ms")
    )
    line = (
        f"frame {index + 1:3d}/{total}  points {report.points:7d}  "
        f"clusters {report.clusters:4d}  {latency}"
    )
    if truth is not None and len(truth) == report.points:
        recovered, objects = recovered_objects(truth.object_id, report.labels)
        line += f"  objects recovered {recovered}/{objects}"
    return line


def collect_reports(
    monitor: DemoMonitor, replay: subprocess.Popen, scans: dict[int, Scan], stream: TextIO
) -> list[FrameReport]:
    """Print a line per labelled frame until the replay ended and the outputs drained (no new
    output for DRAIN_QUIET_S, every frame reported, or DRAIN_MAX_S after the replay)."""
    import queue

    stamps = sorted(scans)
    reports: list[FrameReport] = []
    replay_end = last_report = math.inf
    while True:
        try:
            report = monitor.reports.get(timeout=0.1)
        except queue.Empty:
            if replay.poll() is None:
                continue
            now = time.monotonic()
            replay_end = min(replay_end, now)
            quiet = now - max(replay_end, last_report if reports else replay_end)
            if (
                len(reports) >= len(stamps)
                or quiet > DRAIN_QUIET_S
                or (now - replay_end > DRAIN_MAX_S)
            ):
                return reports
            continue
        last_report = time.monotonic()
        reports.append(report)
        index = stamps.index(report.stamp_ns) if report.stamp_ns in scans else -1
        print(frame_line(index, len(stamps), report, scans.get(report.stamp_ns)), file=stream)


def summarise(reports: list[FrameReport], sent: int, backend: str) -> str:
    import numpy as np

    latencies = np.array([r.latency_ms for r in reports if not math.isnan(r.latency_ms)])
    clusters = np.array([r.clusters for r in reports])
    text = f"summary: {len(reports)}/{sent} frames clustered on the {backend} backend"
    if latencies.size:
        text += (
            f"; latency mean {latencies.mean():.1f} ms, median {np.median(latencies):.1f} ms, "
            f"max {latencies.max():.1f} ms"
        )
    if clusters.size:
        text += f"; clusters per frame mean {clusters.mean():.1f}"
    if len(reports) < sent:
        text += (
            f"; {sent - len(reports)} frame(s) not clustered (the node skips frames that arrive "
            "while it is busy)"
        )
    return text


def write_png(
    paths: DemoPaths, reports: list[FrameReport], scans: dict[int, Scan], sensor: str
) -> Path:
    """Bird's-eye PNG of the last clustered frame beside its ground truth, a cluster coloured as
    the object it mostly covers."""
    from ..tools.birdseye import write_birdseye_png

    report = next(
        (
            r
            for r in reversed(reports)
            if r.stamp_ns in scans and r.points == len(scans[r.stamp_ns])
        ),
        None,
    )
    if report is None:
        raise CommandError("no labelled frame matches a simulated sweep; no PNG written")
    scan = scans[report.stamp_ns]
    index = sorted(scans).index(report.stamp_ns)
    return write_birdseye_png(
        paths.png,
        scan.xyz,
        report.labels,
        scan.object_id,
        title=f"{sensor} frame {index + 1}: {report.clusters} clusters "
        f"(ground below +{GROUND_CLEARANCE_M} m removed)",
        extent_m=VIEW_EXTENT_M,
    )


def run(args: argparse.Namespace) -> int:
    try:
        from ..ros.replay.demo_monitor import DemoMonitor
    except ImportError as error:
        raise CommandError(
            f"the demo needs the ROS 2 Python packages (pip install -e '.[ros]'): {error}"
        ) from None
    from ..clusterer import cuda_available

    on_gpu = cuda_available()
    backend = "cuda" if on_gpu else "cpu"
    rate = args.rate if args.rate is not None else (1.0 if on_gpu else CPU_RATE)
    print(
        "CUDA device found: the node clusters on the GPU"
        if on_gpu
        else "no CUDA device (or CuPy not installed): the node runs on the CPU backend"
    )
    paths = DemoPaths(args.out)
    prepare_output(paths)
    scans, ground_z = simulate_bag(paths, args)
    write_params(paths.params, args, ground_z)

    environ = ament_environment()
    command, how = node_command(paths.params, environ)
    print(f"starting euclidean_cluster_node via {how}; log: {paths.node_log}")
    monitor = DemoMonitor(INPUT_TOPIC, LABELED_TOPIC)
    node = start_process(command, paths.node_log, environ)
    replay = None
    try:
        wait_for_node(monitor, node, paths.node_log)
        replay_command = [
            sys.executable,
            "-m",
            f"{PACKAGE}.ros.replay.replay",
            str(paths.bag),
            "--rate",
            f"{rate}",
            "--wait-for-subscribers",
            "30",
            "--min-subscribers",
            "2",
            "--quiet",
        ]
        print(f"replaying {paths.bag} at rate {rate:g}; log: {paths.replay_log}")
        replay = start_process(replay_command, paths.replay_log, environ)
        reports = collect_reports(monitor, replay, scans, sys.stdout)
        if replay.wait() != 0:
            raise CommandError(f"replay failed: {log_tail(paths.replay_log)}")
    finally:
        if replay is not None:
            stop_process(replay)
        stop_process(node)
        monitor.close()
    print(summarise(reports, len(scans), backend))
    if not reports:
        raise CommandError(f"the node published no labelled cloud; see {paths.node_log}")
    print(f"bird's-eye view: {write_png(paths, reports, scans, args.sensor)}")
    return 0
