"""The project's performance targets, checked against the numbers a run measured.

Targets (set for an H100; meaningful only for ``backend=cuda`` rows):

1. every GPU method x search returns the oracle's partition on every case it can run;
2. every RS method beats the PCL-equivalent peer by >= 50x on kitti_000001 at 0.5 m;
3. the fastest method clusters kitti_000001 at 0.5 m (NumPy in -> labels out) in <= 5 ms median;
4. node end to end: p99 receive -> publish latency <= 20 ms for kitti_000001 at 10 Hz, no drops.

Each check says ``met``, ``missed`` (by how much, and which stage dominates) or ``not measured``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.result import STAGES
from .runner import BASELINE_COLUMN

TARGET_FRAME = "kitti_000001.bin"
TARGET_D_TH = 0.5
MIN_RS_SPEEDUP = 50.0
MAX_FASTEST_MEDIAN_MS = 5.0
MAX_NODE_P99_MS = 20.0
NODE_TARGET_RATE_HZ = 10.0


@dataclass(frozen=True)
class TargetCheck:
    """The outcome of one target."""

    name: str
    status: str  # "met", "missed" or "not measured"
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


def check_targets(
    rows: list[dict[str, Any]], node: dict[str, Any] | None = None
) -> list[TargetCheck]:
    """All four checks from the synthetic and frame ``rows`` and the node result ``node``."""
    target_rows = [
        r
        for r in rows
        if r.get("frame") == TARGET_FRAME
        and r.get("d_th") == TARGET_D_TH
        and r.get("kind") == "gpu-method"
    ]
    return [
        _oracle_check(rows),
        _speedup_check(target_rows),
        _latency_check(target_rows),
        _node_check(node),
    ]


def format_targets(checks: list[TargetCheck]) -> str:
    """The ``targets`` section printed at the end of a run."""
    lines = ["targets:"]
    lines += [f"  [{c.status:^12}] {c.name}: {c.detail}" for c in checks]
    return "\n".join(lines)


def dominant_stage(row: dict[str, Any]) -> str:
    """``build 71% of 6.2 ms``: the stage taking the largest share of the row's total."""
    times = {s: row.get(f"{s}_ms") or 0.0 for s in STAGES}
    total = sum(times.values())
    if not total:
        return "no stage breakdown"
    stage = max(times, key=times.__getitem__)
    return f"{stage} {100 * times[stage] / total:.0f}% of {total:.2f} ms"


def _oracle_check(rows: list[dict[str, Any]]) -> TargetCheck:
    name = "every GPU method x search returns the oracle's partition"
    checked = [r for r in rows if r.get("kind") == "gpu-method" and r.get("status") == "ok"]
    judged = [r for r in checked if r.get("matches_oracle") is not None]
    if not judged:
        return TargetCheck(name, "not measured", "no GPU method row with an oracle")
    wrong = [r for r in judged if not r["matches_oracle"]]
    not_run = sum(1 for r in rows if r.get("kind") == "gpu-method" and r.get("status") != "ok")
    tail = f"; {not_run} method-case pair(s) could not run (see status/reason)" if not_run else ""
    if wrong:
        listed = ", ".join(f"{r['impl']} on {r['case']}" for r in wrong[:5])
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        return TargetCheck(
            name, "missed", f"{len(wrong)} of {len(judged)} differ: {listed}{more}{tail}"
        )
    return TargetCheck(name, "met", f"{len(judged)} of {len(judged)} runs match{tail}")


def _speedup_check(target_rows: list[dict[str, Any]]) -> TargetCheck:
    name = f"RS methods >= {MIN_RS_SPEEDUP:g}x over pcl-kdtree on {TARGET_FRAME} at {TARGET_D_TH} m"
    rs = [
        r
        for r in target_rows
        if r["impl"].startswith("RS-") and r.get("status") == "ok" and r.get(BASELINE_COLUMN)
    ]
    if not rs:
        return TargetCheck(name, "not measured", "no RS row with a pcl-kdtree speedup")
    parts, missed = [], False
    for row in rs:
        speedup = row[BASELINE_COLUMN]
        if speedup >= MIN_RS_SPEEDUP:
            parts.append(f"{row['impl']} {speedup:.1f}x")
        else:
            missed = True
            parts.append(
                f"{row['impl']} {speedup:.1f}x (missed by {MIN_RS_SPEEDUP / speedup:.2f}x; "
                f"{dominant_stage(row)})"
            )
    return TargetCheck(name, "missed" if missed else "met", _on(rs[0]) + "; ".join(parts))


def _latency_check(target_rows: list[dict[str, Any]]) -> TargetCheck:
    name = (
        f"fastest method <= {MAX_FASTEST_MEDIAN_MS:g} ms median on {TARGET_FRAME} "
        f"at {TARGET_D_TH} m"
    )
    ok = [r for r in target_rows if r.get("status") == "ok"]
    if not ok:
        return TargetCheck(name, "not measured", f"no GPU method row for {TARGET_FRAME}")
    best = min(ok, key=lambda r: r["median_ms"])
    detail = f"{_on(best)}{best['impl']} {best['median_ms']:.2f} ms median"
    if best["median_ms"] <= MAX_FASTEST_MEDIAN_MS:
        return TargetCheck(name, "met", detail)
    over = best["median_ms"] - MAX_FASTEST_MEDIAN_MS
    return TargetCheck(name, "missed", f"{detail}, missed by {over:.2f} ms; {dominant_stage(best)}")


def _node_check(node: dict[str, Any] | None) -> TargetCheck:
    name = f"node p99 <= {MAX_NODE_P99_MS:g} ms at {NODE_TARGET_RATE_HZ:g} Hz, no drops"
    steps = [
        s
        for s in (node or {}).get("steps", [])
        if s.get("rate_hz") == NODE_TARGET_RATE_HZ and s.get("frame") == TARGET_FRAME
    ]
    if not steps:
        return TargetCheck(name, "not measured", f"no node run of {TARGET_FRAME} at 10 Hz")
    step = steps[0]
    p99 = step.get("latency_p99_ms")
    drops = step.get("dropped", 0)
    detail = (
        f"backend {step.get('backend')}: node receive->publish p99 {p99} ms (publish->clusters "
        f"p99 {step.get('e2e_p99_ms')} ms), {drops} dropped of {step.get('sent')}"
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


def _on(row: dict[str, Any]) -> str:
    """``[cpu backend] `` when the row was not measured on the GPU the targets are set for."""
    return "" if row.get("backend") == "cuda" else f"[{row.get('backend')} backend] "
