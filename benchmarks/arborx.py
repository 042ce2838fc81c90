"""ArborX's DBSCAN (FDBSCAN, FDBSCAN-DenseBox) as GPU peer rows, run on the same points.

The peer is a prebuilt program (``../shared/peers/arborx/``; ``$ARBORX_EC`` after
``source .device/env.sh``): ``arborx_ec LABELS_PREFIX|- REPS FILE.xyz...``. For every file, every
eps of :data:`ARBORX_EPS` and both implementations it prints one row::

    frame N eps impl dev_med dev_min dev_max e2e_med h2d_med clusters multi single

(ms; ``dev``: points already on the GPU; ``e2e``: copy in, cluster, labels back; medians of REPS
after 2 warm-ups) and, with a prefix, writes ``PREFIX_<impl>.i32``: the int32 labels of every
(file, eps) in order, -1 for the points of clusters of one.

Its eps values are fixed, so a case's cloud is written scaled (:func:`arborx_scaling`): by a power
of two where ``d_th`` times it is one of them (exact in float32: the same partition), else by
``1/d_th`` onto eps 1.0 (rounded to float32: boundary pairs may differ; ``arborx_exact_scaling``
says which). Its rule is ``sqrt(d^2) <= eps``, this package's ``d^2 < d_th^2``, so the rows compare
partitions, not only cluster counts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .peers import canonical_partition
from .rows import Outcome, ResultRow

#: Environment variable naming the peer program.
ARBORX_ENV = "ARBORX_EC"
#: The eps values the program runs, in its order.
ARBORX_EPS: tuple[float, ...] = (0.3, 0.5, 1.0)
#: Its implementations, in its order, and the names of their rows here.
ARBORX_IMPLS: tuple[str, ...] = ("FDBSCAN", "FDBSCAN-DenseBox")
ROW_NAMES: dict[str, str] = {impl: f"arborx-{impl}" for impl in ARBORX_IMPLS}
#: The implementation the targets compare against.
DENSEBOX = "FDBSCAN-DenseBox"
DENSEBOX_ROW = ROW_NAMES[DENSEBOX]
#: Warm-up runs the program makes before its REPS timed ones (fixed in the program).
ARBORX_WARMUP = 2


@dataclass(frozen=True)
class ArborxRow:
    """One row of the program's output."""

    frame: str
    n: int
    eps: float
    impl: str
    dev_med: float
    dev_min: float
    dev_max: float
    e2e_med: float
    h2d_med: float
    clusters: int
    multi: int
    single: int


def parse_output(text: str) -> list[ArborxRow]:
    """The result rows of the program's output; the header and any other line are skipped."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 12 or parts[3] not in ARBORX_IMPLS:
            continue
        try:
            rows.append(
                ArborxRow(
                    parts[0], int(parts[1]), float(parts[2]), parts[3],
                    *(float(v) for v in parts[4:9]), *(int(v) for v in parts[9:12]),
                )
            )  # fmt: skip
        except ValueError:
            continue
    return rows


@dataclass(frozen=True)
class Scaling:
    """How a cloud is handed to the program: coordinates times ``scale``, row ``eps``."""

    scale: float
    eps: float
    exact: bool


def arborx_scaling(d_th: float) -> Scaling:
    """The scaling for ``d_th``: a power of two onto the largest eps it reaches exactly, else
    ``1/d_th`` onto eps 1.0 (the largest eps: the program's other two runs are then the cheaper
    ones)."""
    for eps in sorted(ARBORX_EPS, reverse=True):
        for k in range(-20, 21):
            if d_th * 2.0**k == eps:
                return Scaling(2.0**k, eps, True)
    return Scaling(1.0 / d_th, 1.0, False)


def covers(scale: float, d_th: float) -> float | None:
    """The program's eps that equals ``d_th`` on a cloud scaled by the power of two ``scale``."""
    for eps in ARBORX_EPS:
        if d_th * scale == eps and math.log2(scale).is_integer():
            return eps
    return None


@dataclass
class ArborxRun:
    """One invocation of the program on one cloud: its rows, its labels, what went wrong."""

    scale: float
    exact: bool
    rows: list[ArborxRow] = field(default_factory=list)
    labels: dict[tuple[str, float], np.ndarray] = field(default_factory=dict)
    problem: str | None = None  # "timeout after 60 s", "exit status 1: ...", ...
    wall_s: float = 0.0


def scaled_points(points: np.ndarray, scale: float) -> np.ndarray:
    """``points * scale`` as float32: exact for a power of two, else rounded once from float64."""
    if math.log2(scale).is_integer():
        return (points * np.float32(scale)).astype(np.float32)
    return (points.astype(np.float64) * scale).astype(np.float32)


def run_program(
    binary: str, points: np.ndarray, scale: float, reps: int, timeout_s: float
) -> ArborxRun:
    """Write ``points * scale`` as raw float32 xyz, run the program on it, parse rows and labels.

    On a timeout the process is killed and the rows it printed (it flushes each) are kept.
    """
    run = ArborxRun(scale=scale, exact=bool(math.log2(scale).is_integer()))
    n = len(points)
    with tempfile.TemporaryDirectory(prefix="arborx-") as tmp:
        cloud = Path(tmp) / "cloud.xyz"
        scaled_points(points, scale).tofile(cloud)
        prefix = str(Path(tmp) / "labels")
        log_path = Path(tmp) / "stdout.txt"
        start = time.perf_counter()
        with log_path.open("w") as out:
            try:
                process = subprocess.Popen(
                    [binary, prefix, str(reps), str(cloud)], stdout=out, stderr=subprocess.STDOUT
                )
            except OSError as error:
                run.problem = f"could not start {binary}: {error}"
                return run
            try:
                status = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()  # the process this call started, by its id
                process.wait()
                status = None
                run.problem = f"timeout after {timeout_s:g} s"
        run.wall_s = time.perf_counter() - start
        text = log_path.read_text(errors="replace")
        run.rows = parse_output(text)
        if status not in (0, None):
            tail = " ".join(text.strip().splitlines()[-2:])[-300:]
            run.problem = f"exit status {status}: {tail}"
        for impl in ARBORX_IMPLS:
            path = Path(f"{prefix}_{impl}.i32")
            if not path.is_file():
                continue
            data = np.fromfile(path, dtype=np.int32)
            for index, eps in enumerate(ARBORX_EPS):
                if len(data) >= (index + 1) * n:
                    run.labels[(impl, eps)] = data[index * n : (index + 1) * n].copy()
    return run


def component_ids(labels: np.ndarray) -> np.ndarray:
    """The program's labels as component ids: each -1 (a cluster of one) gets an id of its own."""
    ids = labels.astype(np.int64)
    single = ids < 0
    ids[single] = ids.max(initial=-1) + 1 + np.arange(int(single.sum()))
    return ids


class ArborxPeer:
    """Runs the program per cloud (one run serves every ``d_th`` it covers) and makes the rows.

    ``binary`` None: every row is ``not run`` with ``reason`` (e.g. "$ARBORX_EC not set").
    """

    def __init__(
        self,
        binary: str | None,
        reps: int = 10,
        timeout_s: float = 120.0,
        reason: str | None = None,
    ) -> None:
        self.binary = binary
        self.reps = reps
        self.timeout_s = timeout_s
        self.reason = reason or f"${ARBORX_ENV} not set"
        self._cloud: str | None = None
        self._runs: list[ArborxRun] = []

    @classmethod
    def from_environment(cls, reps: int, timeout_s: float) -> ArborxPeer:
        """The peer named by ``$ARBORX_EC`` (rows ``not run`` when it is unset or no program)."""
        binary = os.environ.get(ARBORX_ENV)
        if not binary:
            return cls(None, reps, timeout_s)
        if not os.access(binary, os.X_OK):
            return cls(None, reps, timeout_s, f"${ARBORX_ENV}={binary} is not an executable")
        return cls(binary, reps, timeout_s)

    @property
    def names(self) -> list[str]:
        return [ROW_NAMES[impl] for impl in ARBORX_IMPLS]

    def settings(self) -> dict[str, Any]:
        return {"arborx": self.binary or f"not run: {self.reason}", "arborx_reps": self.reps,
                "arborx_timeout_s": self.timeout_s}  # fmt: skip

    def rows(
        self, points: np.ndarray, d_th: float, oracle: np.ndarray | None, base: ResultRow
    ) -> list[ResultRow]:
        """The two peer rows for ``points`` at ``d_th`` (``base``: a row with the case's fields);
        ``oracle``: canonical labels to compare partitions with."""
        rows = [
            dataclasses.replace(base, impl=ROW_NAMES[impl], kind="gpu-peer", backend="arborx")
            for impl in ARBORX_IMPLS
        ]
        if self.binary is None:
            for row in rows:
                row.fail(Outcome("not run", f"not run: {self.reason}"))
            return rows
        finite = np.isfinite(points).all(axis=1)
        run, eps = self._run_for(np.ascontiguousarray(points[finite]), d_th)
        for impl, row in zip(ARBORX_IMPLS, rows, strict=True):
            self._fill(row, run, eps, impl, finite, oracle)
        return rows

    def _run_for(self, points: np.ndarray, d_th: float) -> tuple[ArborxRun, float]:
        """A run of this cloud that covers ``d_th`` exactly, or a new one."""
        digest = hashlib.blake2b(points.tobytes(), digest_size=16).hexdigest()
        if digest != self._cloud:
            self._cloud, self._runs = digest, []
        for run in self._runs:
            eps = covers(run.scale, d_th)
            if eps is not None:
                return run, eps
        plan = arborx_scaling(d_th)
        assert self.binary is not None
        run = run_program(self.binary, points, plan.scale, self.reps, self.timeout_s)
        self._runs.append(run)
        return run, plan.eps

    def _fill(
        self,
        row: ResultRow,
        run: ArborxRun,
        eps: float,
        impl: str,
        finite: np.ndarray,
        oracle: np.ndarray | None,
    ) -> None:
        """Fill ``row`` with what ``run`` printed and wrote for ``impl`` at ``eps``."""
        row.device = "cuda (ArborX program)"
        row.arborx_eps = eps
        row.arborx_scale = run.scale
        row.arborx_exact_scaling = run.exact
        row.arborx_wall_s = round(run.wall_s, 3)
        found = [r for r in run.rows if r.impl == impl and abs(r.eps - eps) < 1e-9]
        if not found:
            why = run.problem or "the program printed no row for it"
            row.fail(Outcome("error", f"ArborX {impl} at eps {eps:g}: {why}"))
            return
        printed = found[0]
        row.status = "ok"
        row.warmup = ARBORX_WARMUP
        row.repeats = self.reps
        row.median_ms = printed.e2e_med  # copy in + cluster + labels back: NumPy in -> labels out
        row.device_median_ms = printed.dev_med
        row.device_min_ms = printed.dev_min
        row.device_max_ms = printed.dev_max
        row.h2d_median_ms = printed.h2d_med
        row.clusters = printed.clusters
        labels = run.labels.get((impl, eps))
        if labels is not None:
            full = np.full(len(finite), -1, dtype=np.int64)
            full[finite] = component_ids(labels)
            partition = canonical_partition(full)
            row.clusters = int(partition.max(initial=-1)) + 1
            row.matches_oracle = None if oracle is None else bool(np.array_equal(partition, oracle))
        if oracle is not None:
            row.clusters_match_oracle = printed.clusters == int(oracle.max(initial=-1)) + 1
        if not run.exact:
            row.note = (
                f"coordinates scaled by 1/d_th onto eps {eps:g} and rounded to float32: boundary "
                "pairs may differ"
            )
