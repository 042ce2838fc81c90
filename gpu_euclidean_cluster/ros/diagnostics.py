"""diagnostic_msgs/DiagnosticArray of the node's frame statistics."""

from __future__ import annotations

import math

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

from .frame_stats import StatsSnapshot


def diagnostics_message(
    name: str,
    snapshot: StatsSnapshot,
    previous: StatsSnapshot | None,
    backend: str,
    device: str,
    stamp: Time,
) -> DiagnosticArray:
    """One status named ``name``: WARN when frames were rejected or fell back since ``previous``.

    Args:
        name: status name, conventionally ``<node name>: <what>``.
        snapshot: the counters now.
        previous: the counters at the last report (None for the first).
        backend, device: the backend frames run on and the GPU's name (or ``cpu``).
        stamp: the report time.
    """
    level, message = _level(snapshot, previous)
    values = {
        "backend": backend,
        "device": device,
        "input_rate_hz": f"{snapshot.input_rate_hz:.2f}",
        "latency_p50_ms": _milliseconds(snapshot.latency_p50_ms),
        "latency_p99_ms": _milliseconds(snapshot.latency_p99_ms),
        "frames_received": str(snapshot.received),
        "frames_processed": str(snapshot.processed),
        "frames_dropped": str(snapshot.dropped),
        "frames_rejected": str(snapshot.total_rejected),
        **{f"frames_rejected_{kind}": str(n) for kind, n in sorted(snapshot.rejected.items())},
        "last_rejection": snapshot.last_rejection,
        "cpu_fallbacks": str(snapshot.fallbacks),
        "last_fallback": snapshot.last_fallback,
    }
    status = DiagnosticStatus(
        level=level,
        name=name,
        message=message,
        hardware_id=device,
        values=[KeyValue(key=k, value=v) for k, v in values.items()],
    )
    return DiagnosticArray(header=Header(stamp=stamp), status=[status])


def _level(snapshot: StatsSnapshot, previous: StatsSnapshot | None) -> tuple[bytes, str]:
    rejected = snapshot.total_rejected - (previous.total_rejected if previous else 0)
    fallbacks = snapshot.fallbacks - (previous.fallbacks if previous else 0)
    problems = []
    if rejected:
        problems.append(f"{rejected} frame(s) rejected: {snapshot.last_rejection}")
    if fallbacks:
        problems.append(f"{fallbacks} frame(s) fell back to the CPU: {snapshot.last_fallback}")
    if problems:
        return DiagnosticStatus.WARN, "; ".join(problems)
    if snapshot.received == 0:
        return DiagnosticStatus.OK, "waiting for input"
    return DiagnosticStatus.OK, "clustering"


def _milliseconds(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"
