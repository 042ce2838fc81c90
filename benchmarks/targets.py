"""The project's performance targets, checked against the numbers a run measured.

Targets (set for an H100; meaningful only for ``backend=cuda`` rows):

1. every GPU method x search returns the oracle's partition on every case it can run;
2. every RS method beats the PCL-equivalent peer by >= 50x on kitti_000001 at 0.5 m;
3. the fastest method clusters kitti_000001 at 0.5 m (NumPy in -> labels out) in <= 5 ms median;
4. node end to end: p99 receive -> publish latency <= 20 ms for kitti_000001 at 10 Hz, no drops;
   4b. p99 <= 5 ms; 4c. publish -> ``output/labeled_points`` received by another process
   p99 <= 15 ms, node as its own process; 4d. no drops up to 100 Hz in-process.

Judged on the default configuration (``method="auto"``: ``RS-union_find``, and
``RS-union_find+dev`` with the points already on the GPU and the labels left there):

5. kitti_000001 at 0.5 m <= 1.5 ms median NumPy -> labels;
6. kitti_000001 at 0.5 m <= 1.0 ms median device-resident;
7. every real frame at 0.3 / 0.5 / 1.0 m <= 2.5 ms median NumPy -> labels;
8. ... and <= 0.6x ArborX FDBSCAN-DenseBox's copy-in + cluster + copy-back median of the same run;
9. ~15 k points at mean degree ~1 000 <= 1 ms; 10. ~70 k points at mean degree ~10 000 <= 3 ms;
11. dense stress cases (identical points, the 2 m cube, kitti_000001 at 100 m) <= 20 ms;
12. 2 M points (0.3 and 0.5 m) <= 15 ms;
13. peak GPU memory O(N) on every stress case (<= 256 bytes per point, whatever the degree);
14. union_find returns the oracle's partition on every frame, synthetic cloud and stress case
    (every stress case finishes, correct).

Each check says ``met``, ``missed`` (by how much, and which stage dominates), ``not measured``
(no row for it), or ``not judged``: the time, speed-up and memory targets on rows of a ``--quick``
run, whose tiny clouds on the CPU backend say nothing about them (correctness is still judged).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpu_euclidean_cluster.core.result import STAGES

from .arborx import DENSEBOX_ROW
from .cases import FRAME_THRESHOLDS
from .peers import BASELINE_PEER
from .rows import NodeReport, NodeStep, ResultRow
from .runner import DEFAULT_RESIDENT_VARIANT, DEFAULT_VARIANT
from .stress import REGIME_DEGREE_1K, REGIME_DEGREE_10K, REGIME_DENSE, REGIME_LARGE

TARGET_FRAME = "kitti_000001.bin"
TARGET_D_TH = 0.5
MIN_RS_SPEEDUP = 50.0
MAX_FASTEST_MEDIAN_MS = 5.0
MAX_NODE_P99_MS = 20.0
NODE_TARGET_RATE_HZ = 10.0
MAX_NODE_P99_TIGHT_MS = 5.0
MAX_CROSS_PROCESS_E2E_P99_MS = 15.0
NO_DROPS_UP_TO_HZ = 100.0
MAX_DEFAULT_MEDIAN_MS = 1.5
MAX_RESIDENT_MEDIAN_MS = 1.0
MAX_FRAME_MEDIAN_MS = 2.5
MAX_ARBORX_RATIO = 0.6
#: Median time limits of the default method per stress regime (see :mod:`.stress`).
STRESS_LIMITS_MS: dict[str, tuple[float, str]] = {
    REGIME_DEGREE_1K: (1.0, "~15 k points at mean degree ~1 000"),
    REGIME_DEGREE_10K: (3.0, "~70 k points at mean degree ~10 000"),
    REGIME_DENSE: (20.0, "dense stress cases (identical points, 2 m cube, d_th 100 m)"),
    REGIME_LARGE: (15.0, "2 M points (kitti_000001 tiled 17x)"),
}
MAX_BYTES_PER_POINT = 256.0
#: The rows of the fused method (each must equal the oracle wherever it runs).
UNION_FIND_ROWS = ("RS-union_find", "ES-union_find", DEFAULT_RESIDENT_VARIANT)


@dataclass(frozen=True)
class TargetCheck:
    """The outcome of one target."""

    name: str
    status: str  # "met", "missed", "not measured" or "not judged"
    detail: str

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


NOT_JUDGED = "not judged"
#: Why the time, speed-up and memory targets are not judged on a ``--quick`` run's rows.
QUICK_DETAIL = (
    "--quick run: tiny clouds on the CPU backend; the target is set for the full-size clouds "
    "on the GPU"
)


def check_targets(rows: list[ResultRow], node: NodeReport | None = None) -> list[TargetCheck]:
    """Every check, from the rows of the results files and the node benchmark's report."""
    target_rows = [
        r
        for r in rows
        if r.frame == TARGET_FRAME and r.d_th == TARGET_D_TH and r.kind == "gpu-method"
    ]
    host_rows = [r for r in target_rows if not r.device_resident]
    frame_rows = [r for r in rows if r.experiment == "frames"]
    stress_rows = [r for r in rows if r.experiment == "stress"]
    return [
        _oracle_check(rows),
        _speedup_check(host_rows),
        _latency_check(host_rows),
        _node_check(node),
        _node_latency_check(node),
        _cross_process_check(node),
        _node_rate_check(node),
        _default_time_check(target_rows, DEFAULT_VARIANT, MAX_DEFAULT_MEDIAN_MS, "NumPy -> labels"),
        _default_time_check(
            target_rows, DEFAULT_RESIDENT_VARIANT, MAX_RESIDENT_MEDIAN_MS, "device-resident"
        ),
        _frames_time_check(frame_rows),
        _arborx_ratio_check(frame_rows),
        *(_stress_time_check(stress_rows, regime) for regime in STRESS_LIMITS_MS),
        _memory_check(stress_rows),
        _union_find_oracle_check(rows),
    ]


def format_targets(checks: list[TargetCheck]) -> str:
    """The ``targets`` section printed at the end of a run."""
    lines = ["targets:"]
    lines += [f"  [{c.status:^12}] {c.name}: {c.detail}" for c in checks]
    return "\n".join(lines)


def dominant_stage(row: ResultRow) -> str:
    """``build 71% of 6.2 ms``: the stage taking the largest share of the row's total."""
    times = {s: row.stage_ms(s) or 0.0 for s in STAGES}
    total = sum(times.values())
    if not total:
        return "no stage breakdown"
    stage = max(times, key=times.__getitem__)
    return f"{stage} {100 * times[stage] / total:.0f}% of {total:.2f} ms"


def _oracle_check(rows: list[ResultRow]) -> TargetCheck:
    name = "every GPU method x search returns the oracle's partition"
    checked = [r for r in rows if r.kind == "gpu-method" and r.ok]
    judged = [r for r in checked if r.matches_oracle is not None]
    if not judged:
        return TargetCheck(name, "not measured", "no GPU method row with an oracle")
    wrong = [r for r in judged if not r.matches_oracle]
    not_run = sum(1 for r in rows if r.kind == "gpu-method" and not r.ok)
    tail = f"; {not_run} method-case pair(s) could not run (see status/reason)" if not_run else ""
    if wrong:
        listed = ", ".join(f"{r.impl} on {r.case}" for r in wrong[:5])
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        return TargetCheck(
            name, "missed", f"{len(wrong)} of {len(judged)} differ: {listed}{more}{tail}"
        )
    return TargetCheck(name, "met", f"{len(judged)} of {len(judged)} runs match{tail}")


def _judged(name: str, rows: list[ResultRow]) -> tuple[list[ResultRow], TargetCheck | None]:
    """The rows a time, speed-up or memory target is judged on (those of full runs), and the
    ``not judged`` check when only ``--quick`` rows are there."""
    full = [r for r in rows if not r.quick]
    if rows and not full:
        return full, TargetCheck(name, NOT_JUDGED, QUICK_DETAIL)
    return full, None


def _speedup_check(target_rows: list[ResultRow]) -> TargetCheck:
    name = f"RS methods >= {MIN_RS_SPEEDUP:g}x over pcl-kdtree on {TARGET_FRAME} at {TARGET_D_TH} m"
    rs = [
        r
        for r in target_rows
        if r.impl.startswith("RS-") and r.ok and r.speedup_over(BASELINE_PEER)
    ]
    rs, quick = _judged(name, rs)
    if quick:
        return quick
    if not rs:
        return TargetCheck(name, "not measured", "no RS row with a pcl-kdtree speedup")
    parts, missed = [], False
    for row in rs:
        speedup = row.speedup_over(BASELINE_PEER) or 0.0
        if speedup >= MIN_RS_SPEEDUP:
            parts.append(f"{row.impl} {speedup:.1f}x")
        else:
            missed = True
            parts.append(
                f"{row.impl} {speedup:.1f}x (missed by {MIN_RS_SPEEDUP / speedup:.2f}x; "
                f"{dominant_stage(row)})"
            )
    return TargetCheck(name, "missed" if missed else "met", _on(rs[0]) + "; ".join(parts))


def _latency_check(target_rows: list[ResultRow]) -> TargetCheck:
    name = (
        f"fastest method <= {MAX_FASTEST_MEDIAN_MS:g} ms median on {TARGET_FRAME} "
        f"at {TARGET_D_TH} m"
    )
    ok, quick = _judged(name, [r for r in target_rows if r.ok and r.median_ms is not None])
    if quick:
        return quick
    if not ok:
        return TargetCheck(name, "not measured", f"no GPU method row for {TARGET_FRAME}")
    best = min(ok, key=_median)
    detail = f"{_on(best)}{best.impl} {_median(best):.2f} ms median"
    if _median(best) <= MAX_FASTEST_MEDIAN_MS:
        return TargetCheck(name, "met", detail)
    over = _median(best) - MAX_FASTEST_MEDIAN_MS
    return TargetCheck(name, "missed", f"{detail}, missed by {over:.2f} ms; {dominant_stage(best)}")


def _median(row: ResultRow) -> float:
    return row.median_ms if row.median_ms is not None else float("nan")


def _node_check(node: NodeReport | None) -> TargetCheck:
    name = f"node p99 <= {MAX_NODE_P99_MS:g} ms at {NODE_TARGET_RATE_HZ:g} Hz, no drops"
    step = _node_step(node.steps if node else [])
    if step is None:
        return TargetCheck(name, "not measured", f"no node run of {TARGET_FRAME} at 10 Hz")
    p99 = step.latency_p99_ms
    drops = step.dropped
    detail = (
        f"backend {step.backend}: node receive->publish p99 {p99} ms (publish->clusters "
        f"p99 {step.e2e_p99_ms} ms), {drops} dropped of {step.sent}"
    )
    problems = []
    if p99 is None:
        problems.append("no frame came back")
    elif p99 > MAX_NODE_P99_MS:
        problems.append(f"p99 missed by {p99 - MAX_NODE_P99_MS:.2f} ms")
    if drops:
        problems.append(f"{drops} frame(s) dropped")
    if problems:
        return TargetCheck(name, "missed", f"{detail}; {', '.join(problems)}")
    return TargetCheck(name, "met", detail)


def _node_step(steps: list[NodeStep]) -> NodeStep | None:
    """The 10 Hz step of kitti_000001 among ``steps``, or None."""
    found = [s for s in steps if s.rate_hz == NODE_TARGET_RATE_HZ and s.frame == TARGET_FRAME]
    return found[0] if found else None


def _stages(step: NodeStep) -> str:
    return ", ".join(f"{k} p50 {v[0]} / p99 {v[1]} ms" for k, v in step.stages_ms.items())


def _node_latency_check(node: NodeReport | None) -> TargetCheck:
    name = f"node receive -> publish p99 <= {MAX_NODE_P99_TIGHT_MS:g} ms at 10 Hz (in-process)"
    step = _node_step(node.steps if node else [])
    if step is None or step.latency_p99_ms is None:
        return TargetCheck(name, "not measured", f"no node run of {TARGET_FRAME} at 10 Hz")
    p99 = step.latency_p99_ms
    detail = f"backend {step.backend}: p99 {p99} ms ({_stages(step)})"
    if p99 > MAX_NODE_P99_TIGHT_MS:
        over = p99 - MAX_NODE_P99_TIGHT_MS
        return TargetCheck(name, "missed", f"{detail}; missed by {over:.2f} ms")
    return TargetCheck(name, "met", detail)


def _cross_process_check(node: NodeReport | None) -> TargetCheck:
    name = (
        f"publish -> output/labeled_points in another process p99 <= "
        f"{MAX_CROSS_PROCESS_E2E_P99_MS:g} ms at 10 Hz (node as its own process)"
    )
    step = _node_step(node.cross_process_steps if node else [])
    if step is None or step.e2e_p99_ms is None:
        return TargetCheck(name, "not measured", "no cross-process node run at 10 Hz")
    p99 = step.e2e_p99_ms
    detail = (
        f"backend {step.backend}: e2e p50 {step.e2e_p50_ms} / p99 {p99} ms, node "
        f"p99 {step.latency_p99_ms} ms, {step.dropped} dropped of {step.sent}"
    )
    over = p99 - MAX_CROSS_PROCESS_E2E_P99_MS
    if over > 0 or step.dropped:
        return TargetCheck(name, "missed", f"{detail}; missed by {max(over, 0):.2f} ms")
    return TargetCheck(name, "met", detail)


def _node_rate_check(node: NodeReport | None) -> TargetCheck:
    name = f"no drops up to {NO_DROPS_UP_TO_HZ:g} Hz (in-process node)"
    steps = [s for s in (node.steps if node else []) if s.frame == TARGET_FRAME]
    if not steps:
        return TargetCheck(name, "not measured", f"no node run of {TARGET_FRAME}")
    clean = [s.rate_hz for s in steps if not s.dropped]
    best = max(clean, default=0.0)
    rates = ", ".join(f"{s.rate_hz:g}" for s in steps)
    detail = f"highest clean rate {best:g} Hz of the steps {rates} Hz"
    if best < NO_DROPS_UP_TO_HZ:
        return TargetCheck(name, "missed", detail)
    return TargetCheck(name, "met", detail)


def _on(row: ResultRow) -> str:
    """``[cpu backend] `` when the row was not measured on the GPU the targets are set for."""
    return "" if row.backend == "cuda" else f"[{row.backend} backend] "


def _default_time_check(
    target_rows: list[ResultRow], impl: str, limit_ms: float, what: str
) -> TargetCheck:
    name = f"{impl} <= {limit_ms:g} ms median {what} on {TARGET_FRAME} at {TARGET_D_TH} m"
    rows, quick = _judged(name, [r for r in target_rows if r.impl == impl])
    if quick:
        return quick
    if not rows:
        return TargetCheck(name, "not measured", f"no {impl} row for {TARGET_FRAME}")
    return _time_verdict(name, rows[:1], limit_ms)


def _frames_time_check(frame_rows: list[ResultRow]) -> TargetCheck:
    name = (
        f"{DEFAULT_VARIANT} <= {MAX_FRAME_MEDIAN_MS:g} ms median NumPy -> labels on every real "
        f"frame at {' / '.join(f'{d:g}' for d in FRAME_THRESHOLDS)} m"
    )
    chosen, quick = _judged(name, [r for r in frame_rows if r.impl == DEFAULT_VARIANT])
    if quick:
        return quick
    if not chosen:
        return TargetCheck(name, "not measured", f"no {DEFAULT_VARIANT} frame row")
    return _time_verdict(name, chosen, MAX_FRAME_MEDIAN_MS)


def _arborx_ratio_check(frame_rows: list[ResultRow]) -> TargetCheck:
    name = (
        f"{DEFAULT_VARIANT} <= {MAX_ARBORX_RATIO:g}x ArborX FDBSCAN-DenseBox (copies included on "
        "both sides, same run) on every real frame and d_th"
    )
    peers, quick = _judged(name, [r for r in frame_rows if r.impl == DENSEBOX_ROW])
    if quick:
        return quick
    if not peers:
        return TargetCheck(name, "not measured", "no ArborX row")
    not_ok = [r for r in peers if not r.ok]
    if len(not_ok) == len(peers):
        return TargetCheck(name, "not measured", f"ArborX {not_ok[0].reason}")
    ours = {r.case: r for r in frame_rows if r.impl == DEFAULT_VARIANT and not r.quick}
    parts, missed, unmeasured = [], [], []
    for peer in peers:
        row = ours.get(peer.case)
        ratio = row.ratio_to_arborx_densebox if row else None
        label = _case_label(peer)
        if row is None or ratio is None:
            unmeasured.append(label)
            continue
        parts.append(f"{label} {_median(row):.2f} / {_median(peer):.2f} ms = {ratio:.2f}x")
        if ratio > MAX_ARBORX_RATIO:
            missed.append(f"{label} by {ratio / MAX_ARBORX_RATIO:.2f}x")
    detail = _on(peers[0] if not ours else next(iter(ours.values()))) + "; ".join(parts)
    if unmeasured:
        detail += f"; not measured: {', '.join(unmeasured)}"
    if missed:
        return TargetCheck(name, "missed", f"{detail}; missed: {', '.join(missed)}")
    if unmeasured:
        return TargetCheck(name, "not measured", detail)
    return TargetCheck(name, "met", detail)


def _stress_time_check(stress_rows: list[ResultRow], regime: str) -> TargetCheck:
    limit_ms, what = STRESS_LIMITS_MS[regime]
    name = f"{what}: {DEFAULT_VARIANT} <= {limit_ms:g} ms median"
    chosen, quick = _judged(
        name, [r for r in stress_rows if r.regime == regime and r.impl == DEFAULT_VARIANT]
    )
    if quick:
        return quick
    if not chosen:
        return TargetCheck(name, "not measured", f"no {DEFAULT_VARIANT} row of that stress case")
    return _time_verdict(name, chosen, limit_ms)


def _memory_check(stress_rows: list[ResultRow]) -> TargetCheck:
    name = (
        f"peak GPU memory O(N): {DEFAULT_VARIANT} <= {MAX_BYTES_PER_POINT:g} bytes per point on "
        "every stress case"
    )
    measured = [
        r for r in stress_rows if r.impl == DEFAULT_VARIANT and r.bytes_per_point is not None
    ]
    chosen, quick = _judged(name, measured)
    if quick:
        return quick
    if not chosen:
        return TargetCheck(name, "not measured", "no GPU memory measured (stress on backend cuda)")
    parts = [
        f"{_case_label(r)} {r.bytes_per_point:.0f} B/pt ({(r.peak_gpu_bytes or 0) / 2**20:.1f} "
        f"MiB, degree {r.mean_degree})"
        for r in chosen
    ]
    over = [r for r in chosen if (r.bytes_per_point or 0.0) > MAX_BYTES_PER_POINT]
    detail = "; ".join(parts)
    if over:
        worst = max(over, key=lambda r: r.bytes_per_point or 0.0)
        by = (worst.bytes_per_point or 0.0) / MAX_BYTES_PER_POINT
        return TargetCheck(name, "missed", f"{detail}; worst {_case_label(worst)} by {by:.2f}x")
    return TargetCheck(name, "met", detail)


def _union_find_oracle_check(rows: list[ResultRow]) -> TargetCheck:
    name = (
        "union_find returns the oracle's partition on every frame, synthetic cloud and stress "
        "case (every stress case finishes)"
    )
    chosen = [r for r in rows if r.impl in UNION_FIND_ROWS]
    if not chosen:
        return TargetCheck(name, "not measured", "no union_find row")
    judged = [r for r in chosen if r.ok and r.matches_oracle is not None]
    wrong = [r for r in judged if not r.matches_oracle]
    unfinished = [
        r for r in chosen if r.impl == DEFAULT_VARIANT and r.status not in ("ok", "skipped")
    ]
    ran = [r for r in chosen if r.ok]
    no_oracle = len(ran) - len(judged)
    problems = [f"{r.impl} on {r.case} differs" for r in wrong[:5]]
    problems += [f"{r.impl} on {r.case}: {r.reason}" for r in unfinished[:5]]
    tail = f"; {no_oracle} run(s) without an oracle" if no_oracle else ""
    detail = f"{_on(chosen[0])}{len(judged) - len(wrong)} of {len(judged)} runs match{tail}"
    if problems:
        return TargetCheck(name, "missed", f"{detail}; {'; '.join(problems)}")
    if not judged:
        return TargetCheck(name, "not measured", "no union_find row with an oracle")
    return TargetCheck(name, "met", detail)


def _time_verdict(name: str, rows: list[ResultRow], limit_ms: float) -> TargetCheck:
    """``met`` when every row ran and its median is within ``limit_ms``; else ``missed``, naming
    each row over the limit by how much and its dominant stage."""
    parts, problems = [], []
    for row in rows:
        label = _case_label(row)
        if not row.ok:
            problems.append(f"{label}: {row.status} ({row.reason})")
            continue
        median_ms = _median(row)
        degree = f", degree {row.mean_degree:g}" if row.mean_degree is not None else ""
        p99_text = f" (p99 {row.p99_ms:.2f})" if row.p99_ms is not None else ""
        parts.append(f"{label} {median_ms:.2f} ms{p99_text}{degree}")
        if median_ms > limit_ms:
            problems.append(
                f"{label} by {median_ms - limit_ms:.2f} ms ({median_ms / limit_ms:.1f}x; "
                f"{dominant_stage(row)})"
            )
    detail = _on(rows[0]) + "; ".join(parts)
    if problems:
        return TargetCheck(name, "missed", f"{detail}; missed: {'; '.join(problems)}")
    return TargetCheck(name, "met", detail)


def _case_label(row: ResultRow) -> str:
    """``kitti_000001 0.5 m`` / ``cube 0.5 m (200000 pts)``."""
    if row.experiment == "stress":
        return f"{row.stress_case} {row.d_th:g} m ({row.points} pts)"
    frame = str(row.frame or row.case).split(".")[0]
    return f"{frame} {row.d_th:g} m"
