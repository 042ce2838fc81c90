"""``reliability``: the node as its own process under floods, a soak and malformed input.

The node is started as a user starts it (:mod:`.harness`) and fed from this process:

1. **Flood**: one frame at each rate (50 and 200 Hz) for a few seconds, per input reliability.
   Frames sent, what the node's /diagnostics say it received, processed, dropped (overwritten in
   its one-slot buffer) and rejected, the outputs seen on ``output/labeled_points``, and the
   /diagnostics level of every report window that lies in the flood.
2. **Soak**: ``soak_frames`` frames, each sent when the output of the previous one arrived (the
   rate the node sustains), the node's RSS sampled every ``rss_every`` frames; crashes (the node
   exits) and hangs (no output for ``hang_timeout_s``).
3. **Malformed-message matrix** (:mod:`.matrix`).
4. **RANSAC at the largest ``ground_iterations``** (:mod:`.ransac`): a node of its own, the frame
   sent a few times; each answered within a deadline, the fit's cap reported.
5. **Hostile input** (:mod:`.attack`): an attack's cases against the command-line tools,
   the node's start-up and the launch files, each case its own process (``--attack-only`` runs
   this part alone).

The report (:class:`ReliabilityReport`) ends with the reliability targets: 0 crashes and 0
tracebacks over the matrix, every malformed case rejected with a one-line reason or accepted as
valid, RSS slope <= 1 MB per 1000 frames, drops reported == drops observed, /diagnostics not OK
when more than 10 % of the frames are lost; over the hostile input 0 crashes, 0 tracebacks, 0
wrong outputs, 0 refusals of valid input and a peak RSS <= 20 x the input + 512 MB on every case.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cases import data_dir
from benchmarks.environment import private_domain_id
from benchmarks.errors import BenchError
from benchmarks.rows import RunMeta
from benchmarks.targets import TargetCheck, format_targets
from gpu_euclidean_cluster.clusterer import make_backend
from gpu_euclidean_cluster.core.config import BACKENDS, DEFAULT_BACKEND
from gpu_euclidean_cluster.ros.qos import RELIABILITIES

from .attack import (
    MEMORY_FACTOR,
    PCL_KITTI_000008_AT_0_5,
    AttackReport,
    format_attack,
    run_attack,
)
from .harness import TRACEBACK, Session, Tick, node_command
from .matrix import MatrixCaseResult, Message, message, run_matrix, settled
from .ransac import RansacResult, check_ransac, format_ransac, measure_ransac

log = logging.getLogger(__name__)

FRAME = "kitti_000008.bin"
#: The hostile-input suite's memory cases at extreme d_th use this frame when it is found.
LARGE_FRAME = "kitti_000001.bin"
#: Simulated sensors used when the frame file is absent (full run / quick run).
SIMULATED_SENSORS = ("hdl64e", "vlp16")
#: Targets of the reliability benchmark.
MAX_RSS_SLOPE_MB_PER_1000 = 1.0
MAX_LOST_SHARE_WHILE_OK = 0.1
#: A report window belongs to a flood when at least this share of it overlaps the flood.
WINDOW_OVERLAP = 0.5
#: The soak stops after this many frames without an output (the node is stuck).
SOAK_MAX_HANGS = 3


@dataclass(frozen=True)
class ReliabilityOptions:
    """What the reliability benchmark sends and how long.

    Attributes:
        backend: the node's ``backend`` parameter.
        flood_rates_hz: rates of the flood steps.
        flood_duration_s: seconds each flood step sends.
        flood_reliabilities: input reliabilities flooded (one node each; the soak and the matrix
            run on a ``reliable`` node, so that every message arrives).
        soak_frames: frames of the soak.
        rss_every: the node's RSS is sampled after the first soak frame and every this many.
        hang_timeout_s: seconds without an answer that count as a hang.
        rss_limit_mb: the node is killed (and the case recorded) above this RSS.
        frame: the cloud file to send (default: kitti_000008.bin of ``$LIDAR_DATA_DIR``, else a
            simulated sweep).
        max_points: send only every k-th point so that at most this many remain (None: all).
        domain_id: the node's ``ROS_DOMAIN_ID`` (default: a random private one).
        log_dir: keep the node's logs here (default: a temporary folder, removed).
        quick: marks a CI-sized run (:data:`QUICK_OPTIONS`); without the frame file it sends a
            simulated VLP-16 sweep instead of an HDL-64E one.
        damaged_bags: randomly damaged copies of a valid bag per storage in the hostile-input
            suite.
    """

    backend: str = DEFAULT_BACKEND
    flood_rates_hz: tuple[float, ...] = (50.0, 200.0)
    flood_duration_s: float = 5.0
    flood_reliabilities: tuple[str, ...] = RELIABILITIES
    soak_frames: int = 2000
    rss_every: int = 100
    hang_timeout_s: float = 10.0
    rss_limit_mb: float = 4096.0
    frame: Path | None = None
    max_points: int | None = None
    domain_id: int | None = None
    log_dir: Path | None = None
    quick: bool = False
    damaged_bags: int = 10

    def __post_init__(self) -> None:
        checks = [
            (self.backend in BACKENDS, f"backend must be one of {', '.join(BACKENDS)}"),
            (bool(self.flood_rates_hz) and min(self.flood_rates_hz) > 0, "flood rates must be > 0"),
            (self.flood_duration_s > 0, "flood duration must be > 0 s"),
            (set(self.flood_reliabilities) <= set(RELIABILITIES), "unknown flood reliability"),
            (self.soak_frames >= 1 and self.rss_every >= 1, "soak frames and rss_every >= 1"),
            (self.hang_timeout_s > 0 and self.rss_limit_mb > 0, "timeouts and limits must be > 0"),
            (self.max_points is None or self.max_points >= 1, "max_points must be >= 1"),
            (self.damaged_bags >= 0, "damaged_bags must be >= 0"),
        ]
        for ok, problem in checks:
            if not ok:
                raise BenchError(f"reliability options: {problem}")


#: CI-sized (well under a minute of sending on 2 cores): CPU, a 4096-point frame, short floods
#: on a reliable node only, 200 soak frames with RSS every 20.
QUICK_OPTIONS = ReliabilityOptions(
    backend="cpu",
    flood_duration_s=2.0,
    flood_reliabilities=("reliable",),
    soak_frames=200,
    rss_every=20,
    max_points=4096,
    quick=True,
    damaged_bags=2,
)


@dataclass
class FloodStep:
    """One flood step: what was sent, what the node says it did, what came out."""

    reliability: str
    rate_hz: float
    sent: int
    sent_rate_hz: float | None
    outputs_observed: int
    #: frames sent whose output never arrived
    drops_observed: int
    lost_share: float
    alive: bool
    exit_code: int | None
    #: the node's counters settled after the flood (False: it crashed or stopped answering, and
    #: the counters below are None)
    settled: bool = False
    received: int | None = None
    processed: int | None = None
    dropped: int | None = None
    rejected: int | None = None
    lost: int | None = None
    lost_before_node: int | None = None
    #: ``dropped + rejected + lost``, as /diagnostics reports them
    drops_reported: int | None = None
    drops_match: bool = False
    #: /diagnostics levels of the report windows lying mostly in the flood
    window_levels: list[str] = field(default_factory=list)
    #: not OK while more than 10 % were lost (None: not judged, too few lost or too short)
    diagnostics_truthful: bool | None = None


@dataclass
class SoakResult:
    """The soak: frames sent one after the other's output, the node's RSS over them."""

    frames: int
    sent: int
    rate_hz: float
    crashed: bool
    exit_code: int | None
    hangs: int
    #: the node's counters over the soak (None when they did not settle)
    node_counters: dict[str, int] | None
    #: [frame, RSS MB] pairs
    rss_samples: list[list[float]]
    rss_peak_mb: float | None
    rss_slope_mb_per_1000_frames: float | None


@dataclass
class NodeSession:
    """One node process of the run: how it ended and the tracebacks it wrote."""

    reliability: str
    pid: int
    exit_code: int | None
    killed_for_memory: bool
    tracebacks: int
    first_traceback: str | None
    #: the node's log file (kept only with ``log_dir``)
    log: str | None


@dataclass
class ReliabilityReport:
    """``reliability.json``: the flood steps, the soak, the matrix, the nodes and the targets."""

    meta: RunMeta
    #: the :class:`ReliabilityOptions` of the run
    options: dict[str, Any]
    frame: str
    points: int
    domain_id: int
    node_command: list[str]
    flood: list[FloodStep]
    soak: SoakResult
    matrix: list[MatrixCaseResult]
    nodes: list[NodeSession]
    attack: AttackReport | None = None
    ransac: RansacResult | None = None
    targets: list[TargetCheck] = field(default_factory=list)
    passed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_reliability(options: ReliabilityOptions) -> ReliabilityReport:
    """Run the flood, the soak and the matrix against the node; the report, targets checked.

    Raises:
        BenchError: rclpy is missing, the frame cannot be read, or the node does not start.
    """
    try:
        import rclpy  # noqa: F401 - the probe and the node need the ROS 2 Python runtime
    except ImportError as error:
        raise BenchError(f"the reliability benchmark needs rclpy ({error})") from error
    from std_msgs.msg import Header

    from benchmarks.environment import python_command, run_metadata
    from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz
    from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message

    xyz, frame = load_frame(options)
    good = cloud_to_message(from_xyz(xyz), Header(frame_id="lidar"))
    domain_id = options.domain_id if options.domain_id is not None else private_domain_id()
    with _log_folder(options.log_dir) as folder:
        sessions = _Sessions(options, domain_id, folder)
        try:
            flood = []
            # Reliable last: its node goes on with the soak and the matrix.
            for reliability in sorted(options.flood_reliabilities, key="reliable".__eq__):
                for rate in options.flood_rates_hz:
                    flood.append(measure_flood(sessions.ensure(reliability), good, rate, options))
            soak = measure_soak(sessions.ensure("reliable"), good, options)
            matrix = run_matrix(
                lambda: sessions.ensure("reliable"),
                sessions.ensure("reliable"),
                good,
                xyz,
                options.hang_timeout_s,
            )
        finally:
            nodes = sessions.close_all()
        ransac = measure_ransac(options.backend, domain_id, folder, options.rss_limit_mb, good)
    attack = run_attack(*attack_inputs(options), domain_id=domain_id, backend=options.backend)
    # The nodes ran in processes of their own: a backend of the kind they reported, made here,
    # describes their device.
    backend = make_backend(sessions.backend() or options.backend)
    report = ReliabilityReport(
        meta=run_metadata(python_command(), backend),
        options=_json_ready(asdict(options)),
        frame=frame,
        points=len(xyz),
        domain_id=domain_id,
        node_command=node_command(options.backend, "reliable"),
        flood=flood,
        soak=soak,
        matrix=matrix,
        nodes=nodes,
        attack=attack,
        ransac=ransac,
    )
    report.targets = check_reliability(report)
    report.passed = all(c.status != "missed" for c in report.targets)
    return report


def load_frame(options: ReliabilityOptions) -> tuple[np.ndarray, str]:
    """The (N, 3) float32 points to send and their name.

    ``options.frame``; else kitti_000008.bin of ``$LIDAR_DATA_DIR`` (default ``../shared/data``
    of the working directory or of the repository); else a simulated sweep. ``max_points`` keeps
    every k-th point.
    """
    from benchmarks.node_bench import simulated_frame
    from gpu_euclidean_cluster.pointcloud_io import load_points

    path = options.frame or _default_frame()
    if path is not None and path.is_file():
        try:
            xyz, name = load_points(path).xyz, path.name
        except (OSError, ValueError) as error:
            raise BenchError(f"cannot read {path}: {error}") from error
    elif options.frame is not None:
        raise BenchError(f"frame {options.frame} not found")
    else:
        sensor = SIMULATED_SENSORS[options.quick]
        log.warning("%s not found: sending a simulated %s sweep instead", FRAME, sensor)
        xyz, name = simulated_frame(sensor), f"simulated-{sensor}"
    if options.max_points is not None and len(xyz) > options.max_points:
        stride = math.ceil(len(xyz) / options.max_points)
        xyz, name = xyz[::stride], f"{name}[::{stride}]"
    return np.ascontiguousarray(xyz, dtype=np.float32), name


def _default_frame(name: str = FRAME) -> Path | None:
    candidates = [data_dir() / name]
    if "LIDAR_DATA_DIR" not in os.environ:
        candidates.append(Path(__file__).resolve().parents[3] / "shared" / "data" / name)
    return next((p for p in candidates if p.is_file()), None)


def attack_inputs(
    options: ReliabilityOptions,
) -> tuple[np.ndarray, int, int, np.ndarray | None]:
    """What the hostile-input suite builds its cases from: the frame (whole, as a file holds it),
    its cluster count at 0.5 m (PCL's for kitti_000008, else union_find's), the damaged bags per
    storage, and kitti_000001 for the memory cases (None when not found)."""
    from gpu_euclidean_cluster import EuclideanClusterer
    from gpu_euclidean_cluster.core.config import ClusterConfig
    from gpu_euclidean_cluster.pointcloud_io import load_points

    xyz, name = load_frame(replace(options, max_points=None))
    if name == FRAME:
        clusters = PCL_KITTI_000008_AT_0_5
    else:
        config = ClusterConfig(d_th=0.5, method="union_find")
        clusters = EuclideanClusterer(config, backend="cpu").cluster(xyz).num_clusters
    large = _default_frame(LARGE_FRAME)
    return xyz, clusters, options.damaged_bags, None if large is None else load_points(large).xyz


@contextlib.contextmanager
def _log_folder(log_dir: Path | None) -> Iterator[Path]:
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        yield log_dir
    else:
        with tempfile.TemporaryDirectory(prefix="reliability-") as folder:
            yield Path(folder)


class _Sessions:
    """Every node session of a run, one open at a time, all closed at the end."""

    def __init__(self, options: ReliabilityOptions, domain_id: int, folder: Path) -> None:
        self.options, self.domain_id, self.folder = options, domain_id, folder
        self.opened: list[Session] = []
        self._ready = message(np.zeros(1, dtype=[(n, "<f4") for n in "xyz"]))

    def ensure(self, reliability: str) -> Session:
        """The latest session if its node runs with ``reliability`` and has not stopped
        answering; else a fresh node (the latest one stopped first)."""
        if self.opened:
            latest = self.opened[-1]
            if latest.reliability == reliability and latest.alive:
                return latest
            latest.close()
        log_path = self.folder / f"node-{len(self.opened) + 1}-{reliability}.log"
        session = Session(
            node_command(self.options.backend, reliability),
            self.domain_id,
            log_path,
            self.options.rss_limit_mb,
            reliability,
            self._ready,
        )
        self.opened.append(session)
        return session

    def backend(self) -> str | None:
        """The backend the nodes reported in /diagnostics."""
        ticks = (t for s in self.opened for t in s.probe.ticks)
        return next((t.values["backend"] for t in ticks if "backend" in t.values), None)

    def close_all(self) -> list[NodeSession]:
        """Stop every node; per node its log, exit status and the tracebacks it wrote."""
        nodes = []
        for session in self.opened:
            exit_code = session.close()
            text = session.node.log_since(0)
            nodes.append(
                NodeSession(
                    reliability=session.reliability,
                    pid=session.node.pid,
                    exit_code=exit_code,
                    killed_for_memory=session.node.killed_for_memory,
                    tracebacks=session.tracebacks(),
                    first_traceback=_first_traceback(text),
                    log=str(session.node.log_path) if self.options.log_dir else None,
                )
            )
        return nodes


def _first_traceback(text: str, lines: int = 30) -> str | None:
    start = text.find(TRACEBACK)
    return None if start < 0 else "\n".join(text[start:].splitlines()[:lines])


def measure_flood(
    session: Session, good: Message, rate_hz: float, options: ReliabilityOptions
) -> FloodStep:
    """One flood step: ``good`` at ``rate_hz`` for ``options.flood_duration_s`` seconds."""
    from gpu_euclidean_cluster.ros.node.node import DIAGNOSTICS_PERIOD_S

    probe = session.probe
    base = settled(session, options.hang_timeout_s)
    stamps = [probe.next_stamp() for _ in range(max(1, round(rate_hz * options.flood_duration_s)))]
    start = next_time = time.monotonic()
    for stamp in stamps:
        time.sleep(max(0.0, next_time - time.monotonic()))
        probe.publish(good, stamp)
        next_time += 1.0 / rate_hz
    end = time.monotonic()
    after = probe.settle(options.hang_timeout_s + 2.0) if session.alive else None
    sent = len(stamps)
    observed = sent - sum(1 for s in stamps if s in probe.outputs)
    step = FloodStep(
        reliability=session.reliability,
        rate_hz=rate_hz,
        sent=sent,
        sent_rate_hz=round((sent - 1) / (end - start), 2) if sent > 1 else None,
        outputs_observed=sent - observed,
        drops_observed=observed,
        lost_share=round(observed / sent, 4),
        alive=session.alive,
        exit_code=session.node.exit_code,
    )
    if after is None:  # crashed or stuck (then stopped, so the next step gets a fresh node)
        session.close()
    else:
        delta = {k: getattr(after, k) - getattr(base, k) for k in _COUNTERS}
        step.settled = True
        step.received, step.processed = delta["received"], delta["processed"]
        step.dropped, step.rejected, step.lost = delta["dropped"], delta["rejected"], delta["lost"]
        step.lost_before_node = sent - delta["received"]
        step.drops_reported = delta["dropped"] + delta["rejected"] + delta["lost"]
        step.drops_match = step.drops_reported == observed
    step.window_levels = _window_levels(probe.ticks, start, end)
    # Judged where the loss calls for a warning and the flood spans two report periods.
    long_enough = options.flood_duration_s >= 2 * DIAGNOSTICS_PERIOD_S
    judged = observed / sent > MAX_LOST_SHARE_WHILE_OK and long_enough
    levels = step.window_levels
    step.diagnostics_truthful = bool(levels) and "OK" not in levels if judged else None
    return step


_COUNTERS = ("received", "processed", "dropped", "rejected", "lost")


def _window_levels(ticks: list[Tick], start: float, end: float) -> list[str]:
    """Levels of the report windows (between consecutive ticks) lying mostly in [start, end]."""
    levels = []
    for before, tick in itertools.pairwise(ticks):
        window = tick.arrived - before.arrived
        overlap = min(tick.arrived, end) - max(before.arrived, start)
        if window > 0 and overlap >= WINDOW_OVERLAP * window:
            levels.append(tick.level_name)
    return levels


def measure_soak(session: Session, good: Message, options: ReliabilityOptions) -> SoakResult:
    """``options.soak_frames`` frames, each after the previous output.

    The node's RSS is sampled (its idle level:
    :meth:`~.harness.NodeProcess.idle_rss_mb`) after the first frame and every
    ``rss_every`` frames; the slope is fitted to the samples after the first.
    """
    probe, node = session.probe, session.node
    base = settled(session, options.hang_timeout_s)
    node.take_peak_mb()
    samples: list[list[float]] = []
    hangs = sent = 0
    start = time.monotonic()
    for index in range(1, options.soak_frames + 1):
        stamp = probe.next_stamp()
        probe.publish(good, stamp)
        sent += 1
        if probe.wait_output(stamp, options.hang_timeout_s) is None:
            hangs += 1
            if not session.alive or hangs >= SOAK_MAX_HANGS:
                break
        if index == 1 or index % options.rss_every == 0:
            rss = node.idle_rss_mb()
            if rss is not None:
                samples.append([index, round(rss, 2)])
    elapsed = time.monotonic() - start
    after = probe.settle(options.hang_timeout_s + 2.0) if session.alive else None
    crashed = not session.alive
    if after is None:  # crashed or stuck (then stopped, so the matrix gets a fresh node)
        session.close()
    return SoakResult(
        frames=options.soak_frames,
        sent=sent,
        rate_hz=round(sent / elapsed, 2),
        crashed=crashed,
        exit_code=node.exit_code,
        hangs=hangs,
        node_counters=(
            {k: getattr(after, k) - getattr(base, k) for k in _COUNTERS} if after else None
        ),
        rss_samples=samples,
        rss_peak_mb=node.take_peak_mb(),
        rss_slope_mb_per_1000_frames=_slope_per_1000(samples[1:]),
    )


def _slope_per_1000(samples: list[list[float]]) -> float | None:
    """Least-squares slope of RSS (MB) over frames, per 1000 frames (None under 2 samples)."""
    if len(samples) < 2:
        return None
    frames, rss = np.asarray(samples, dtype=np.float64).T
    return round(float(np.polyfit(frames, rss, 1)[0]) * 1000.0, 3)


def check_reliability(report: ReliabilityReport) -> list[TargetCheck]:
    """The reliability targets against a report of :func:`run_reliability`."""
    return [
        *_node_checks(report),
        *(check_ransac(report.ransac) if report.ransac else []),
        *(check_attack(report.attack) if report.attack else []),
    ]


def _node_checks(report: ReliabilityReport) -> list[TargetCheck]:
    matrix, soak, flood = report.matrix, report.soak, report.flood
    crashed = [c.name for c in matrix if not c.alive]
    traced = [c.name for c in matrix if c.traceback]
    unexpected = [f"{c.name} ({c.outcome})" for c in matrix if not c.as_expected]
    slope = soak.rss_slope_mb_per_1000_frames
    mismatched = [s for s in flood if not s.drops_match]
    judged = [s for s in flood if s.diagnostics_truthful is not None]
    untruthful = [s for s in judged if not s.diagnostics_truthful]
    return [
        _check("0 crashes over the malformed-message matrix", crashed, len(matrix)),
        _check("0 tracebacks over the malformed-message matrix", traced, len(matrix)),
        _check("every malformed case rejected with a one-line reason or accepted as valid",
               unexpected, len(matrix)),
        _check("soak: 0 crashes, 0 hangs",
               [f"{soak.hangs} hang(s)"] * bool(soak.hangs)
               + [f"exit {soak.exit_code}"] * soak.crashed, 1),
        TargetCheck(
            f"soak: RSS slope <= {MAX_RSS_SLOPE_MB_PER_1000:g} MB per 1000 frames",
            "not measured" if slope is None else
            "met" if slope <= MAX_RSS_SLOPE_MB_PER_1000 else "missed",
            "fewer than 3 RSS samples" if slope is None else
            f"{slope:+.3f} MB per 1000 frames over {soak.sent} frames",
        ),
        _check("flood: drops reported == drops observed",
               [f"{s.reliability} {s.rate_hz:g} Hz: reported {s.drops_reported}, "
                f"observed {s.drops_observed}" for s in mismatched], len(flood)),
        TargetCheck(
            f"flood: /diagnostics not OK when > {MAX_LOST_SHARE_WHILE_OK:.0%} of frames are lost",
            "not measured" if not judged else "missed" if untruthful else "met",
            "no flood step lost that many" if not judged else "; ".join(
                f"{s.reliability} {s.rate_hz:g} Hz, {s.lost_share:.0%} lost: "
                f"{'/'.join(s.window_levels) or 'no report'}" for s in judged
            ),
        ),
    ]  # fmt: skip


def check_attack(attack: AttackReport) -> list[TargetCheck]:
    """The hostile-input targets: 0 crashes, tracebacks, wrong outputs and refusals of valid
    input, and every case's peak RSS within 20 x its input + the allowance."""
    cases = attack.cases
    crashed = [f"{c.name} ({c.outcome})" for c in cases if c.outcome in ("crashed", "hung")]
    traced = [c.name for c in cases if c.traceback]
    wrong = [
        f"{c.name}: {c.wrong}" for c in cases if c.wrong and c.outcome not in ("crashed", "hung")
    ]
    refused = [f"{c.name}: {c.line}" for c in cases if c.refused_valid]
    over = [
        f"{c.name} ({c.peak_rss_mb:.0f} MB of {c.memory_bound_mb:.0f})"
        for c in cases
        if not c.within_memory
    ]
    memory = f"hostile input: peak RSS <= {MEMORY_FACTOR:g} x input + {attack.allowance_mb:g} MB"
    return [
        _check("hostile input: 0 crashes", crashed, len(cases)),
        _check("hostile input: 0 tracebacks", traced, len(cases)),
        _check("hostile input: 0 wrong outputs", wrong, len(cases)),
        _check("hostile input: 0 refusals of valid input", refused, len(cases)),
        _check(memory, over, len(cases)),
    ]


def _check(name: str, failures: list[str], total: int) -> TargetCheck:
    if not total:
        return TargetCheck(name, "not measured", "nothing ran")
    if failures:
        return TargetCheck(name, "missed", f"{len(failures)} of {total}: {', '.join(failures)}")
    return TargetCheck(name, "met", f"0 of {total}")


def format_reliability(report: ReliabilityReport) -> str:
    """A short human summary of a :func:`run_reliability` report, targets last."""
    soak = report.soak
    lines = [
        f"reliability: {report.meta.backend} backend, {report.frame} "
        f"({report.points} points), ROS_DOMAIN_ID {report.domain_id}"
    ]
    for s in report.flood:
        node = (
            f"received {s.received}, processed {s.processed}, dropped {s.dropped}, "
            f"rejected {s.rejected}"
            if s.settled
            else "node counters unknown"
        )
        lines.append(
            f"flood {s.reliability} {s.rate_hz:g} Hz: sent {s.sent} "
            f"({s.sent_rate_hz} Hz), {node}, never reached the node "
            f"{s.lost_before_node}, outputs {s.outputs_observed}; "
            f"drops reported {s.drops_reported} vs observed {s.drops_observed}; "
            f"/diagnostics {'/'.join(s.window_levels) or '-'}"
        )
    samples = soak.rss_samples
    rss = f"RSS {samples[0][1]:.1f} -> {samples[-1][1]:.1f} MB" if samples else "no RSS sample"
    lines.append(
        f"soak: {soak.sent} of {soak.frames} frames at {soak.rate_hz} Hz, {rss}, "
        f"slope {soak.rss_slope_mb_per_1000_frames} MB/1000 frames, "
        f"{'crashed' if soak.crashed else 'no crash'}, {soak.hangs} hang(s)"
    )
    matrix = report.matrix
    outcomes = sorted({c.outcome for c in matrix})
    counts = ", ".join(f"{sum(c.outcome == o for c in matrix)} {o}" for o in outcomes)
    lines.append(f"matrix: {len(matrix)} cases: {counts}")
    lines += [
        f"  {c.name}: {c.outcome} (expected {c.expected})"
        + (f": {c.reason}" if c.reason else "")
        + ("; traceback" if c.traceback else "")
        for c in matrix
        if not c.as_expected
    ]
    if report.ransac is not None:
        lines.append(format_ransac(report.ransac))
    if report.attack is not None:
        lines.append(format_attack(report.attack))
    lines.append(format_targets(report.targets))
    return "\n".join(lines)


def _json_ready(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v
        for k, v in values.items()
    }
