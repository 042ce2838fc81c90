"""Measure every implementation on every case: GPU methods, CPU and GPU peers, oracle check,
speedups, GPU memory.

One row per (case, implementation) with status ``ok``, ``refused`` (a paper's method whose graph
structure would not fit: ``StructureTooLargeError``, reason "refused: ..." naming ``union_find``),
``oom`` (the device ran out of memory), ``skipped`` (beyond the configured size limits, or known
to be hopeless on the case), ``not run`` (a peer that is not available here) or ``error``; rows
are never dropped.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu_euclidean_cluster.clusterer import Backend, EuclideanClusterer
from gpu_euclidean_cluster.core.config import (
    LABELLING_METHODS,
    PAIR_SEARCHES,
    PAPER_SEARCHES,
    ClusterConfig,
)
from gpu_euclidean_cluster.core.memory import StructureTooLargeError
from gpu_euclidean_cluster.core.result import STAGES, ClusterResult

from .arborx import DENSEBOX_ROW, ArborxPeer
from .cases import Case, CaseData
from .peers import BASELINE_PEER, Peer, canonical_partition, cpu_backend_labels
from .rows import Outcome, ResultRow, speedup_column
from .stage_split import cluster_graph_split
from .stats import median, p99, time_calls


@dataclass(frozen=True)
class Variant:
    """A GPU method as measured: the method x search, whether pointer jumping is on, whether
    the points are already on the device (and the labels left there), and whether the call runs
    stage by stage instead of as the backend's whole-call graph."""

    method: str
    search: str
    pointer_jumping: bool = False
    device_resident: bool = False
    staged: bool = False

    @property
    def name(self) -> str:
        """``RS-matrix``, ``ES-vertex`` (the paper's naming); ``+pj`` with pointer jumping;
        ``+staged`` stage by stage (``whole_call=False``); ``+dev`` device-resident (CuPy
        points in, CuPy labels out: no host copies timed)."""
        pj = "+pj" if self.pointer_jumping else ""
        staged = "+staged" if self.staged else ""
        dev = "+dev" if self.device_resident else ""
        return f"{SEARCH_ABBREV[self.search]}-{self.method}{pj}{staged}{dev}"


SEARCH_ABBREV = {"exhaustive": "ES", "range": "RS", "kdtree": "KD", "scan": "SC"}

#: The fused union-find and the paper's six combinations as written (ES and RS each), then the
#: vertex and edge methods with pointer jumping (the matrix method has no such option), then the
#: default configuration (``auto`` = union_find, range search) device-resident, then both of its
#: rows stage by stage (the whole call's graph against the stages, in the same run); then every
#: method with the companion papers' searches, the kd-tree (``KD-``) and the scan bins (``SC-``:
#: rings from the case where it has them, else elevation bands).
GPU_VARIANTS: tuple[Variant, ...] = (
    *(Variant(m, s) for s in PAPER_SEARCHES for m in LABELLING_METHODS),
    *(Variant(m, s, pointer_jumping=True) for s in PAPER_SEARCHES for m in ("vertex", "edge")),
    Variant("union_find", "range", device_resident=True),
    Variant("union_find", "range", staged=True),
    Variant("union_find", "range", device_resident=True, staged=True),
    *(Variant(m, s) for s in PAIR_SEARCHES for m in LABELLING_METHODS),
)

#: Timed repeats of the stage split of a graph row (``stage_split.cluster_graph_split``).
STAGE_SPLIT_REPEATS = 10

#: The row of what the library runs by default (``method="auto"``, range search, on CUDA), and
#: the same with the points already on the GPU: the rows the default-method time targets are
#: judged on.
DEFAULT_VARIANT = "RS-union_find"
DEFAULT_RESIDENT_VARIANT = "RS-union_find+dev"

#: The peer every row's ``matches_oracle`` is judged against when it ran (else the ground truth).
ORACLE_PEER = "cpu-backend"


@dataclass(frozen=True)
class Settings:
    """How each implementation is measured on each case."""

    warmup: int = 2
    repeats: int = 10
    budget_s: float = 2.0
    peer_warmup: int = 0
    cpu_max_points: int = 262144
    cpu_max_pairs: int = 10_000_000
    cpu_es_max_points: int = 20000
    #: Exhaustive search on the GPU only up to this many points (0: no limit).
    gpu_es_max_points: int = 0
    #: ``ClusterConfig.memory_budget`` of every run (bytes the paper's methods may spend on their
    #: graph structure; None: the backend's default, the free GPU memory / half the host's).
    memory_budget: int | None = None
    #: The CPU backend's method for the untimed oracle (``edge``: independent of union_find;
    #: ``union_find``: its CPU twin, for clouds too dense for an edge list).
    oracle_method: str = "edge"
    #: Largest cloud the untimed oracle runs on (0: ``cpu_max_points``).
    oracle_max_points: int = 0
    #: A ``--quick`` run: tiny clouds on the CPU backend (rows say so; their time and memory
    #: targets are not judged).
    quick: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class CaseRunner:
    """Runs the GPU methods on one backend, the CPU peers and the GPU peer (ArborX, when given)
    on each case."""

    def __init__(
        self,
        backend: Backend,
        methods: list[Variant],
        peers: list[Peer],
        settings: Settings,
        arborx: ArborxPeer | None = None,
    ) -> None:
        self.backend = backend
        self.methods = methods
        self.peers = peers
        self.settings = settings
        self.arborx = arborx
        #: the backend has device memory of its own: the GPU limits apply, not the CPU ones
        self.on_device = backend.describe().memory_bytes is not None

    def implementations(self) -> list[str]:
        """Names of what is measured on each case, peers first (they provide the oracle)."""
        arborx = self.arborx.names if self.arborx else []
        return [p.name for p in self.peers] + [v.name for v in self.methods] + arborx

    def run(self, case: Case, on_step: Callable[[str], None] | None = None) -> list[ResultRow]:
        """Rows for ``case``: one per peer and one per method, with speedups filled in."""
        data = case.load()
        oracle, oracle_name = _truth_oracle(data)
        peer_runs = []
        for peer in self.peers:
            if on_step:
                on_step(f"{case.key} {peer.name}")
            row, labels = self._run_peer(case, data, peer)
            if peer.name == ORACLE_PEER and labels is not None:
                oracle, oracle_name = labels, ORACLE_PEER
            peer_runs.append((row, labels))
        oracle_ms = None
        if oracle is None:
            start = time.perf_counter()
            oracle, oracle_name = self._untimed_oracle(case, data)
            if oracle is not None:
                oracle_ms = round((time.perf_counter() - start) * 1e3, 1)
        rows = []
        for row, labels in peer_runs:
            row.matches_oracle = _matches(labels, oracle)
            rows.append(row)
        for variant in self.methods:
            if on_step:
                on_step(f"{case.key} {variant.name}")
            rows.append(self._run_method(case, data, variant, oracle))
        if self.arborx is not None:
            if on_step:
                for name in self.arborx.names:
                    on_step(f"{case.key} {name}")
            self.backend.release_memory()  # the peer's process gets the free memory
            base = self._base_row(case, data, "", "", "")
            rows += self.arborx.rows(data.points, data.d_th, oracle, base)
        for row in rows:
            row.oracle = oracle_name
            row.oracle_ms = oracle_ms
        _add_speedups(rows)
        _add_arborx_ratios(rows)
        return rows

    def _base_row(
        self, case: Case, data: CaseData, impl: str, kind: str, backend: str
    ) -> ResultRow:
        """A row of ``case`` for ``impl``, before it is measured (``case.params`` and
        ``data.extra`` name fields of :class:`ResultRow`)."""
        return ResultRow(
            case=case.key,
            experiment=case.experiment,
            variable=case.variable,
            value=case.value,
            points=len(data.points),
            d_th=data.d_th,
            **case.params,
            **data.extra,
            quick=self.settings.quick,
            impl=impl,
            kind=kind,
            backend=backend,
        )

    def _run_peer(
        self, case: Case, data: CaseData, peer: Peer
    ) -> tuple[ResultRow, np.ndarray | None]:
        row = self._base_row(case, data, peer.name, "cpu-peer", "cpu")
        row.device = "cpu"
        reason = self._cpu_skip_reason(case, data, exhaustive=False)
        if reason:
            row.fail(Outcome("skipped", reason))
            return row, None
        s = self.settings
        try:
            timed = time_calls(
                lambda: peer.cluster(data.points, data.d_th), s.peer_warmup, s.repeats, s.budget_s
            )
        except Exception as error:  # a peer's failure is recorded, the run goes on
            row.fail(_failure(error))
            return row, None
        labels = canonical_partition(timed.value)
        _set_timings(row, timed.samples_ms, timed.warmup_runs)
        row.status = "ok"
        row.clusters = int(labels.max(initial=-1)) + 1
        return row, labels

    def _run_method(
        self, case: Case, data: CaseData, variant: Variant, oracle: np.ndarray | None
    ) -> ResultRow:
        row = self._base_row(case, data, variant.name, "gpu-method", self.backend.name)
        row.pointer_jumping = variant.pointer_jumping
        row.device_resident = variant.device_resident
        row.staged = variant.staged
        reason = self._method_skip_reason(case, data, variant)
        if reason:
            row.fail(Outcome("skipped", reason))
            return row
        config = ClusterConfig(
            d_th=data.d_th,
            method=variant.method,  # type: ignore[arg-type]
            search=variant.search,  # type: ignore[arg-type]
            pointer_jumping=variant.pointer_jumping,
            memory_budget=self.settings.memory_budget,
            max_work_s=None,  # the benchmark's own caps (--cpu-es-max-points ...) decide
        )
        clusterer = EuclideanClusterer(config, backend=self.backend, whole_call=not variant.staged)
        results: list[ClusterResult] = []
        self.backend.release_memory()
        # device-resident: the points are copied to the device once, untimed; labels stay there
        points = self.backend.to_device(data.points) if variant.device_resident else data.points
        rings = data.rings if variant.search == "scan" else None

        def call() -> ClusterResult:
            result = clusterer.cluster(points, rings=rings)
            # Kept without its labels: holding every call's labels made each new NumPy array
            # of a large cloud fault in fresh pages (13 ms for 8 M labels against 2.4 ms).
            results.append(dataclasses.replace(result, labels=None))
            return result

        s = self.settings
        graphs = None if variant.staged else getattr(self.backend, "graphs", None)
        try:
            if graphs is not None:
                graphs.last_call = None
            start = time.perf_counter()
            call()  # the first call: a graph row captures its bucket's graph here
            row.first_call_ms = round((time.perf_counter() - start) * 1e3, 4)
            if graphs is not None and graphs.last_call is not None:
                row.capture_ms = round(graphs.last_call.capture_ms, 4)
            timed = time_calls(call, s.warmup, s.repeats, s.budget_s)
            measured = results[1 + timed.warmup_runs :]
            labels = _host(timed.value.labels)
            if graphs is not None and graphs.last_call is not None:
                _set_graph_counts(row, graphs.last_call)
                split = cluster_graph_split(graphs, points, config, STAGE_SPLIT_REPEATS)
                row.stage_split_ms = {k: round(v, 4) for k, v in split.items()} if split else None
        except Exception as error:  # recorded (refused, out of memory or other), never dropped
            del results[:]
            row.fail(_failure(error))
            row.pool_bytes = self.backend.release_memory()
            return row
        del results[:]
        try:
            _set_peak_memory(row, self.backend, call, len(data.points))
        except Exception as error:  # the timings stand; only the memory figure is missing
            row.memory_note = f"peak GPU memory not measured: {type(error).__name__}: {error}"
        finally:
            del results[:]
            row.pool_bytes = self.backend.release_memory()
        _set_timings(row, timed.samples_ms, timed.warmup_runs)
        _set_result(row, measured)
        row.status = "ok"
        row.matches_oracle = _matches(labels, oracle)
        return row

    def _method_skip_reason(self, case: Case, data: CaseData, variant: Variant) -> str | None:
        if variant.name in case.skip:
            return case.skip[variant.name]
        exhaustive = variant.search == "exhaustive"
        if not self.on_device:
            return self._cpu_skip_reason(case, data, exhaustive=exhaustive)
        limit = self.settings.gpu_es_max_points
        if exhaustive and limit and len(data.points) > limit:
            return (
                f"exhaustive search on the GPU: {len(data.points)} points > --gpu-es-max-points "
                f"{limit}"
            )
        return None

    def _untimed_oracle(self, case: Case, data: CaseData) -> tuple[np.ndarray | None, str | None]:
        """The CPU backend's labels, not timed, where no peer or ground truth gave an oracle."""
        s = self.settings
        if s.oracle_max_points:
            if len(data.points) > s.oracle_max_points:
                return None, None
        elif self._cpu_skip_reason(case, data, exhaustive=False):
            return None, None
        labels = cpu_backend_labels(data.points, data.d_th, s.oracle_method)
        method = "" if s.oracle_method == "edge" else f" {s.oracle_method}"
        return labels, f"{ORACLE_PEER}{method} (untimed)"

    def _cpu_skip_reason(self, case: Case, data: CaseData, exhaustive: bool) -> str | None:
        n = len(data.points)
        s = self.settings
        if n > s.cpu_max_points:
            return f"{n} points > --cpu-max-points {s.cpu_max_points}"
        if case.expected_pairs is not None and case.expected_pairs > s.cpu_max_pairs:
            return f"~{case.expected_pairs} neighbour pairs > --cpu-max-pairs {s.cpu_max_pairs}"
        if exhaustive and n > s.cpu_es_max_points:
            return (
                f"exhaustive search on the CPU: {n} points > --cpu-es-max-points "
                f"{s.cpu_es_max_points}"
            )
        return None


def _set_graph_counts(row: ResultRow, call: Any) -> None:
    """Launches, copies and synchronisations of a graph call (``cuda/graphs/cluster_graphs.py``'s
    ``GraphCall``)."""
    row.graph_launches = call.graph_launches
    row.graph_kernels = call.kernel_nodes
    row.graph_copies = call.copy_nodes
    row.outside_copies = call.outside_copies
    row.host_syncs = call.host_syncs


def _set_timings(row: ResultRow, samples_ms: list[float], warmup_runs: int) -> None:
    row.warmup = warmup_runs
    row.repeats = len(samples_ms)
    row.median_ms = round(median(samples_ms), 4)
    row.p99_ms = round(p99(samples_ms), 4)
    row.min_ms = round(min(samples_ms), 4)


def _set_result(row: ResultRow, results: list[ClusterResult]) -> None:
    """Median stage times, loop iterations and memory of the measured runs."""
    last = results[-1]
    for stage in (*STAGES, "total"):
        setattr(row, f"{stage}_ms", round(median([r.timings_ms[stage] for r in results]), 4))
    peaks = [r.peak_bytes for r in results if r.peak_bytes is not None]
    row.clusters = last.num_clusters
    row.iterations = last.iterations
    row.num_edges = last.num_edges
    row.num_labels_after_initial = last.num_labels_after_initial
    row.peak_bytes = max(peaks) if peaks else None
    row.device = last.device


def _failure(error: Exception) -> Outcome:
    """``refused`` where a method sized its structure and found it would not fit (its message
    names the need, the limit and ``union_find``), ``oom`` where the device ran out anyway, else
    ``error``."""
    if isinstance(error, StructureTooLargeError):
        return Outcome("refused", f"refused: {error}")
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return Outcome("oom", f"out of memory ({error})")
    return Outcome("error", f"{type(error).__name__}: {error}")


def _host(labels: Any) -> np.ndarray:
    """Labels as a NumPy array (device-resident runs return CuPy labels; copied here, untimed)."""
    return labels.get() if hasattr(labels, "get") else np.asarray(labels)


def _set_peak_memory(
    row: ResultRow, backend: Backend, call: Callable[[], ClusterResult], points: int
) -> None:
    """Device memory of one more (untimed) run of ``call``, measured by the backend from an
    empty pool: the most bytes held at once (a device-resident run's input was allocated before
    and is not counted), per point, and the drop of the driver's free memory over the run.
    Backends without device memory measure nothing (``call`` is not run)."""
    peak = backend.measure_peak_memory(call)
    if peak is None:
        return
    row.peak_gpu_bytes = peak.peak_bytes
    row.bytes_per_point = round(peak.peak_bytes / points, 1) if points else None
    row.mem_info_delta_bytes = peak.free_drop_bytes


def _truth_oracle(data: CaseData) -> tuple[np.ndarray | None, str | None]:
    if data.truth is None:
        return None, None
    return canonical_partition(data.truth), data.truth_name or "ground-truth"


def _matches(labels: Any, oracle: np.ndarray | None) -> bool | None:
    """Same partition as the oracle (canonical labels make that plain equality); None: no oracle."""
    if labels is None or oracle is None:
        return None
    return bool(np.array_equal(np.asarray(labels), oracle))


def _add_speedups(rows: list[ResultRow]) -> None:
    """``speedup_vs_<peer>``: the peer's median time over the row's, both measured in this run."""
    for peer in _ok_rows(rows, "cpu-peer"):
        for row in _ok_rows(rows, None):
            assert peer.median_ms is not None and row.median_ms
            row.speedups[peer.impl.replace("-", "_")] = round(peer.median_ms / row.median_ms, 3)


def _add_arborx_ratios(rows: list[ResultRow]) -> None:
    """``ratio_to_arborx_densebox``: a GPU method's median over ArborX FDBSCAN-DenseBox's, both of
    this run: NumPy in -> labels out against its copy-in + cluster + copy-back (``median_ms``), and
    a device-resident row against its points-on-the-GPU time (``device_median_ms``)."""
    peer = next((r for r in _ok_rows(rows, "gpu-peer") if r.impl == DENSEBOX_ROW), None)
    if peer is None:
        return
    for row in _ok_rows(rows, "gpu-method"):
        reference = peer.device_median_ms if row.device_resident else peer.median_ms
        if reference and row.median_ms is not None:
            row.ratio_to_arborx_densebox = round(row.median_ms / reference, 3)


def _ok_rows(rows: list[ResultRow], kind: str | None) -> Iterator[ResultRow]:
    return (r for r in rows if r.ok and kind in (None, r.kind))


BASELINE_COLUMN = speedup_column(BASELINE_PEER)
