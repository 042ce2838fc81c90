"""diagnostic_msgs/DiagnosticArray of the node's frame statistics, and the node's /diagnostics."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

from ..transport import installed_profile
from .frame_stats import FrameStats, StatsSnapshot
from .loss_monitor import INPUT_REMAPS, SHORT_FIX, LossMonitor, fix_hint

if TYPE_CHECKING:
    from rclpy.node import Node
    from rclpy.subscription import Subscription

    from ...clusterer import Backend


def diagnostics_message(
    name: str,
    snapshot: StatsSnapshot,
    previous: StatsSnapshot | None,
    backend: str,
    device: str,
    stamp: Time,
    warn_share: float,
    silence: str = "",
    unmatched: str = "",
) -> DiagnosticArray:
    """One status named ``name`` about the window since ``previous``.

    ERROR when frames failed in the window and none was published; WARN when more than
    ``warn_share`` of the frames sent in the window were dropped, rejected or lost before the
    node, when any ran otherwise than configured (with ``union_find``, or on the CPU), when points
    were excluded as implausible, or when no frame arrived since a publisher matched
    (``silence``) or no publisher is matched on any input (``unmatched``); OK otherwise. The
    message names the latest reason of each problem (for frames lost before the node: the
    publisher's transport, and the fix; for no publisher: the remap).

    Args:
        name: status name, conventionally ``<node name>: <what>``.
        snapshot: the counters now.
        previous: the counters at the last report (None for the first).
        backend, device: the backend frames run on and the GPU's name (or ``cpu``).
        stamp: the report time.
        warn_share: the share of lost frames (dropped, rejected or lost before the node) that
            raises WARN.
        silence: why no frame arrived since a publisher matched ('' when that is not so;
            :class:`~.loss_monitor.LossMonitor`).
        unmatched: why no frame can arrive: no publisher on any input, and the remap to use (''
            when a publisher is matched).
    """
    level, message = window_level(snapshot, previous, warn_share, silence, unmatched)
    values = {
        "backend": backend,
        "device": device,
        "input_rate_hz": f"{snapshot.input_rate_hz:.2f}",
        "latency_p50_ms": _milliseconds(snapshot.latency_p50_ms),
        "latency_p99_ms": _milliseconds(snapshot.latency_p99_ms),
        **{
            f"stage_{stage}_{name}_ms": _milliseconds(value)
            for stage, values in snapshot.stage_ms.items()
            for name, value in zip(("p50", "p99"), values, strict=True)
        },
        "frames_received": str(snapshot.received),
        "frames_processed": str(snapshot.processed),
        "frames_dropped": str(snapshot.dropped),
        "frames_lost_before_node": str(snapshot.lost),
        "frames_rejected": str(snapshot.total_rejected),
        **{f"frames_rejected_{kind}": str(n) for kind, n in sorted(snapshot.rejected.items())},
        "last_rejection": snapshot.last_rejection,
        "fallbacks": str(snapshot.fallbacks),
        "cpu_fallbacks": str(snapshot.cpu_fallbacks),
        "last_fallback": snapshot.last_fallback,
        "implausible_points": str(snapshot.implausible_points),
        "last_implausible": snapshot.last_implausible,
    }
    status = DiagnosticStatus(
        level=level,
        name=name,
        message=message,
        hardware_id=device,
        values=[KeyValue(key=k, value=v) for k, v in values.items()],
    )
    return DiagnosticArray(header=Header(stamp=stamp), status=[status])


def window_level(
    snapshot: StatsSnapshot,
    previous: StatsSnapshot | None,
    warn_share: float,
    silence: str = "",
    unmatched: str = "",
) -> tuple[bytes, str]:
    """``(level, message)`` of the window between ``previous`` and ``snapshot`` (``silence``,
    ``unmatched``: see :func:`diagnostics_message`)."""

    def since(field: str) -> int:
        now = getattr(snapshot, field)
        return now - (getattr(previous, field) if previous else 0)

    received, processed, dropped = since("received"), since("processed"), since("dropped")
    lost = since("lost")
    rejected, fallbacks = since("total_rejected"), since("fallbacks")
    on_cpu = since("cpu_fallbacks")
    implausible = since("implausible_points")
    problems = []
    if rejected:
        problems.append(f"{rejected} frame(s) rejected: {snapshot.last_rejection}")
    if dropped:
        problems.append(f"{dropped} of {received} frame(s) dropped (processing slower than input)")
    if lost:
        problems.append(
            f"{lost} frame(s) lost before reaching the node ({lost} of {received + lost} sent; the "
            f"publisher's transport: a cloud over its Fast DDS shared-memory segment, 512 KB by "
            f"default, or a middleware queue); {SHORT_FIX}"
        )
    if silence and not received:
        problems.append(f"{silence}; {SHORT_FIX}")
    if unmatched:
        problems.append(unmatched)
    if fallbacks:
        where = f", {on_cpu} on the CPU" if on_cpu else ""
        problems.append(
            f"{fallbacks} frame(s) ran otherwise than configured{where}: {snapshot.last_fallback}"
        )
    if implausible:
        problems.append(f"{implausible} point(s) excluded: {snapshot.last_implausible}")
    if rejected and not processed:
        return DiagnosticStatus.ERROR, "every frame failed; " + "; ".join(problems)
    sent = received + lost
    lost_share = (dropped + rejected + lost) / sent if sent else 0.0
    if (
        lost_share > warn_share
        or fallbacks
        or implausible
        or (silence and not received)
        or unmatched
    ):
        return DiagnosticStatus.WARN, "; ".join(problems)
    if snapshot.received == 0:
        return DiagnosticStatus.OK, "waiting for input"
    return DiagnosticStatus.OK, "; ".join(["clustering", *problems])


def _milliseconds(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


class NodeDiagnostics:
    """A node's /diagnostics: each report about the window since the previous one, and a warning
    in the node's log when frames are lost before they reach it
    (:class:`~.loss_monitor.LossMonitor`, which names the fix for the publishing process)."""

    def __init__(
        self,
        node: Node,
        stats: FrameStats,
        backend: Backend,
        inputs: Sequence[Subscription],
        period_s: float,
    ) -> None:
        """Create the publisher and the timer of ``node``.

        Args:
            node: publishes, stamps and logs.
            stats: the node's frame counters.
            backend: the backend frames run on (its name and device are reported).
            inputs: the input subscriptions, ``input/points`` first (frames lost on their way
                to it are warned about), then ``input/packets`` where subscribed (the node warns
                when none of them has a publisher).
            period_s: seconds between two reports, on the steady clock (reports keep coming
                under ``use_sim_time`` even while /clock is paused).
        """
        from rclpy.clock import Clock, ClockType

        self._node, self._stats, self._backend = node, stats, backend
        self._inputs = inputs
        self._publisher = node.create_publisher(DiagnosticArray, "/diagnostics", 1)
        fix = fix_hint(installed_profile())
        names = {name: s.topic_name for name, s in zip(INPUT_REMAPS, inputs, strict=False)}
        self._loss = LossMonitor(inputs[0].topic_name, fix, time.monotonic(), names)
        self._reported: StatsSnapshot | None = None
        node.create_timer(period_s, self.publish, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def publish(self) -> None:
        """Report on the window since the previous report. The share of lost frames that raises
        WARN (:func:`diagnostics_message`) is the node's ``diagnostics_warn_share`` parameter
        now (it may be set live)."""
        warn_share = self._node.get_parameter("diagnostics_warn_share").value
        now = time.monotonic()
        snapshot = self._stats.snapshot(now)
        publishers = [s.get_publisher_count() for s in self._inputs]
        loss = self._loss.update(
            now, snapshot.received, snapshot.lost, publishers[0], warn_share, sum(publishers)
        )
        if loss.warning:
            self._node.get_logger().warning(loss.warning)
        self._publisher.publish(
            diagnostics_message(
                f"{self._node.get_name()}: clustering",
                snapshot,
                self._reported,
                self._backend.name,
                self._backend.device,
                self._node.get_clock().now().to_msg(),
                warn_share,
                loss.silence,
                loss.unmatched,
            )
        )
        self._reported = snapshot
