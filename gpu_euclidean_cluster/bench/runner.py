"""Measure every implementation on every case: GPU methods, CPU peers, oracle check, speedups.

One row per (case, implementation) with status ``ok``, ``oom`` (the method cannot run the case:
out of memory), ``skipped`` (a CPU implementation beyond the configured size limits) or
``error``; rows are never dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..clusterer import Backend, EuclideanClusterer
from ..core.config import LABELLING_METHODS, SEARCHES, UNLIMITED_CLUSTER_SIZE, ClusterConfig
from ..core.numbering import canonical_labels
from ..core.result import STAGES, ClusterResult
from ..cuda.matrix_memory import MatrixMemoryError, format_bytes
from .cases import Case, CaseData
from .peers import BASELINE_PEER, Peer, cpu_backend_labels
from .stats import median, p99, time_calls


@dataclass(frozen=True)
class Variant:
    """A GPU method as measured: the paper's method x search, and whether pointer jumping is on."""

    method: str
    search: str
    pointer_jumping: bool = False

    @property
    def name(self) -> str:
        """``RS-matrix``, ``ES-vertex`` (the paper's naming); ``+pj`` with pointer jumping."""
        return f"{SEARCH_ABBREV[self.search]}-{self.method}{'+pj' if self.pointer_jumping else ''}"


SEARCH_ABBREV = {"exhaustive": "ES", "range": "RS"}

#: The fused union-find and the paper's six combinations as written (ES and RS each), then the
#: vertex and edge methods with pointer jumping (the matrix method has no such option).
GPU_VARIANTS: tuple[Variant, ...] = (
    *(Variant(m, s) for s in SEARCHES for m in LABELLING_METHODS),
    *(Variant(m, s, pointer_jumping=True) for s in SEARCHES for m in ("vertex", "edge")),
)

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

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class CaseRunner:
    """Runs the GPU methods on one backend and the CPU peers on each case."""

    def __init__(
        self,
        backend: Backend,
        methods: list[Variant],
        peers: list[Peer],
        settings: Settings,
    ) -> None:
        self.backend = backend
        self.methods = methods
        self.peers = peers
        self.settings = settings

    def implementations(self) -> list[str]:
        """Names of what is measured on each case, peers first (they provide the oracle)."""
        return [p.name for p in self.peers] + [v.name for v in self.methods]

    def run(self, case: Case, on_step: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
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
        if oracle is None:
            oracle, oracle_name = self._untimed_oracle(case, data)
        rows = []
        for row, labels in peer_runs:
            row["matches_oracle"] = _matches(labels, oracle)
            rows.append(row)
        for variant in self.methods:
            if on_step:
                on_step(f"{case.key} {variant.name}")
            rows.append(self._run_method(case, data, variant, oracle))
        for row in rows:
            row["oracle"] = oracle_name
        _add_speedups(rows)
        return rows

    def _run_peer(
        self, case: Case, data: CaseData, peer: Peer
    ) -> tuple[dict[str, Any], np.ndarray | None]:
        row = _base_row(case, data, peer.name, "cpu-peer", "cpu")
        row["device"] = "cpu"
        reason = self._cpu_skip_reason(case, data, exhaustive=False)
        if reason:
            row.update(status="skipped", reason=reason)
            return row, None
        s = self.settings
        try:
            timed = time_calls(
                lambda: peer.cluster(data.points, data.d_th), s.peer_warmup, s.repeats, s.budget_s
            )
        except Exception as error:  # a peer's failure is recorded, the run goes on
            row.update(_failure_fields(error))
            return row, None
        labels = _canonical(timed.value)
        row.update(_timing_fields(timed.samples_ms, timed.warmup_runs))
        row.update(status="ok", clusters=int(labels.max(initial=-1)) + 1)
        return row, labels

    def _run_method(
        self, case: Case, data: CaseData, variant: Variant, oracle: np.ndarray | None
    ) -> dict[str, Any]:
        row = _base_row(case, data, variant.name, "gpu-method", self.backend.name)
        row["pointer_jumping"] = variant.pointer_jumping
        if self.backend.name == "cpu":
            reason = self._cpu_skip_reason(case, data, exhaustive=variant.search == "exhaustive")
            if reason:
                row.update(status="skipped", reason=reason)
                return row
        config = ClusterConfig(
            d_th=data.d_th,
            method=variant.method,  # type: ignore[arg-type]
            search=variant.search,  # type: ignore[arg-type]
            pointer_jumping=variant.pointer_jumping,
        )
        clusterer = EuclideanClusterer(config, backend=self.backend)
        results: list[ClusterResult] = []

        def call() -> ClusterResult:
            result = clusterer.cluster(data.points)
            results.append(result)
            return result

        s = self.settings
        try:
            timed = time_calls(call, s.warmup, s.repeats, s.budget_s)
        except Exception as error:  # recorded (out of memory or other), never dropped
            row.update(_failure_fields(error))
            return row
        finally:
            row["pool_bytes"] = _release_device_memory(self.backend)
        measured = results[timed.warmup_runs :]
        row.update(_timing_fields(timed.samples_ms, timed.warmup_runs))
        row.update(_result_fields(measured))
        row.update(status="ok", matches_oracle=_matches(timed.value.labels, oracle))
        return row

    def _untimed_oracle(self, case: Case, data: CaseData) -> tuple[np.ndarray | None, str | None]:
        """The CPU backend's labels, not timed, where no peer or ground truth gave an oracle."""
        if self._cpu_skip_reason(case, data, exhaustive=False):
            return None, None
        return cpu_backend_labels(data.points, data.d_th), f"{ORACLE_PEER} (untimed)"

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


def _base_row(case: Case, data: CaseData, impl: str, kind: str, backend: str) -> dict[str, Any]:
    return {
        "case": case.key,
        "experiment": case.experiment,
        "variable": case.variable,
        "value": case.value,
        **case.params,
        "points": len(data.points),
        "d_th": data.d_th,
        "impl": impl,
        "kind": kind,
        "backend": backend,
    }


def _timing_fields(samples_ms: list[float], warmup_runs: int) -> dict[str, Any]:
    return {
        "warmup": warmup_runs,
        "repeats": len(samples_ms),
        "median_ms": round(median(samples_ms), 4),
        "p99_ms": round(p99(samples_ms), 4),
        "min_ms": round(min(samples_ms), 4),
    }


def _result_fields(results: list[ClusterResult]) -> dict[str, Any]:
    """Median stage times, loop iterations and memory of the measured runs."""
    last = results[-1]
    fields: dict[str, Any] = {
        f"{stage}_ms": round(median([r.timings_ms[stage] for r in results]), 4)
        for stage in (*STAGES, "total")
    }
    peaks = [r.peak_bytes for r in results if r.peak_bytes is not None]
    fields.update(
        clusters=last.num_clusters,
        iterations=last.iterations,
        num_edges=last.num_edges,
        num_labels_after_initial=last.num_labels_after_initial,
        peak_bytes=max(peaks) if peaks else None,
        device=last.device,
    )
    return fields


def _failure_fields(error: Exception) -> dict[str, Any]:
    """``oom`` with "out of memory (need X, free Y)" where the device ran out, else ``error``."""
    if isinstance(error, MatrixMemoryError):
        need, free = format_bytes(error.need_bytes), format_bytes(error.free_bytes)
        return {"status": "oom", "reason": f"out of memory (need {need}, free {free})"}
    if isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError":
        return {"status": "oom", "reason": f"out of memory ({error})"}
    return {"status": "error", "reason": f"{type(error).__name__}: {error}"}


def _release_device_memory(backend: Backend) -> int | None:
    """Return CuPy's pooled blocks so the next method sees all free memory.

    Returns the bytes the pool held before (its high-water mark over the method's runs, since
    the pool keeps every block it allocated until freed), or None off the GPU.
    """
    if backend.name != "cuda":
        return None
    import cupy

    pool = cupy.get_default_memory_pool()
    held = int(pool.total_bytes())
    pool.free_all_blocks()
    return held


def _truth_oracle(data: CaseData) -> tuple[np.ndarray | None, str | None]:
    if data.truth is None:
        return None, None
    return _canonical(data.truth), "ground-truth"


def _canonical(component_ids: np.ndarray) -> np.ndarray:
    """Canonical labels (clusters by size, min size 1) of arbitrary ids; -1 stays -1."""
    ids = np.asarray(component_ids)
    labels = np.full(len(ids), -1, dtype=np.int32)
    valid = ids >= 0
    labels[valid], _, _ = canonical_labels(ids[valid], 1, UNLIMITED_CLUSTER_SIZE)
    return labels


def _matches(labels: Any, oracle: np.ndarray | None) -> bool | None:
    """Same partition as the oracle (canonical labels make that plain equality); None: no oracle."""
    if labels is None or oracle is None:
        return None
    return bool(np.array_equal(np.asarray(labels), oracle))


def _add_speedups(rows: list[dict[str, Any]]) -> None:
    """``speedup_vs_<peer>``: the peer's median time over the row's, both measured in this run."""
    for peer in _ok_rows(rows, "cpu-peer"):
        column = f"speedup_vs_{peer['impl'].replace('-', '_')}"
        for row in _ok_rows(rows, None):
            row[column] = round(peer["median_ms"] / row["median_ms"], 3)


def _ok_rows(rows: list[dict[str, Any]], kind: str | None) -> Iterator[dict[str, Any]]:
    return (r for r in rows if r.get("status") == "ok" and kind in (None, r["kind"]))


BASELINE_COLUMN = f"speedup_vs_{BASELINE_PEER.replace('-', '_')}"
