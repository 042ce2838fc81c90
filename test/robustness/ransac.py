"""The robustness suite's RANSAC case: ground removal at the largest ``ground_iterations``.

The node is started as a user starts it (:mod:`.harness`), with ``remove_ground`` on and
``ground_iterations`` at its largest allowed value (``core.ground.MAX_ITERATIONS``, 1 048 576:
minutes of plane fitting per frame on the CPU before the fit had a work bound), and sent the
suite's frame :data:`RANSAC_FRAMES` times, each once the previous one was answered. The targets:
every frame answered within :data:`RANSAC_DEADLINE_S` (the node's ``ground_max_work_s`` default is
1 s), each capped frame booked as a fallback in ``/diagnostics`` with the cap's line, that line in
the node's log (the warning is throttled, so at least once and at most once a frame), the node
alive and no traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.targets import TargetCheck
from gpu_euclidean_cluster.core.ground import MAX_ITERATIONS

from .harness import Session, node_command
from .matrix import Message, message, settled

#: Frames sent to the node, one after the other's answer.
RANSAC_FRAMES = 3
#: Seconds a frame's answer may take: the fit's bound (1 s by default) with room for the
#: clustering and a busy machine; without the bound a frame took minutes.
RANSAC_DEADLINE_S = 30.0
#: What the cap's line starts with (``core/ground.py``, ``bounded_settings``).
CAP_LINE = f"ground removal: {MAX_ITERATIONS} RANSAC hypotheses against "


@dataclass(frozen=True)
class RansacResult:
    """The RANSAC case: what was sent, how soon each frame was answered, what was reported."""

    iterations: int
    frames: int
    answered: int
    #: seconds from sending a frame to its output, per answered frame
    latencies_s: list[float]
    alive: bool
    exit_code: int | None
    #: the node's ``fallbacks`` counter after the frames (None: no settled report)
    fallbacks: int | None
    last_fallback: str
    #: lines of the node's log that carry the cap's line
    cap_warnings: int
    tracebacks: int


def ransac_command(backend: str) -> list[str]:
    """The node's command line with the ground removal at its largest ``ground_iterations``."""
    return [
        *node_command(backend, "reliable"),
        "-p", "remove_ground:=true",
        "-p", f"ground_iterations:={MAX_ITERATIONS}",
    ]  # fmt: skip


def measure_ransac(
    backend: str, domain_id: int, folder: Path, rss_limit_mb: float, good: Message
) -> RansacResult:
    """Start the node of :func:`ransac_command`, send ``good`` :data:`RANSAC_FRAMES` times, stop
    it; what it did (its log is ``folder/node-ransac.log``)."""
    ready = message(np.zeros(1, dtype=[(n, "<f4") for n in "xyz"]))  # too few points to fit
    session = Session(
        ransac_command(backend),
        domain_id,
        folder / "node-ransac.log",
        rss_limit_mb,
        "reliable",
        ready,
    )
    latencies: list[float] = []
    tick: Any = None
    try:
        probe = session.probe
        for _ in range(RANSAC_FRAMES):
            sent = probe.publish(good, stamp := probe.next_stamp())
            arrived = probe.wait_output(stamp, RANSAC_DEADLINE_S)
            if arrived is None:
                break
            latencies.append(round(arrived - sent, 3))
        if session.alive:
            tick = settled(session, RANSAC_DEADLINE_S)
    finally:
        alive = session.alive
        exit_code = session.close()
    log = session.node.log_since(0)
    return RansacResult(
        iterations=MAX_ITERATIONS,
        frames=RANSAC_FRAMES,
        answered=len(latencies),
        latencies_s=latencies,
        alive=alive,
        exit_code=exit_code,
        fallbacks=None if tick is None else tick.count("fallbacks"),
        last_fallback="" if tick is None else tick.values.get("last_fallback", ""),
        cap_warnings=sum(CAP_LINE in line for line in log.splitlines()),
        tracebacks=session.tracebacks(),
    )


def check_ransac(result: RansacResult) -> list[TargetCheck]:
    """The RANSAC case's targets."""
    slowest = max(result.latencies_s, default=None)
    answered = result.answered == result.frames and result.alive
    reported = (
        result.fallbacks == result.frames
        and result.last_fallback.startswith(CAP_LINE)
        and 1 <= result.cap_warnings <= result.frames
    )
    return [
        TargetCheck(
            f"RANSAC at ground_iterations {result.iterations}: every frame answered within "
            f"{RANSAC_DEADLINE_S:g} s",
            "met" if answered else "missed",
            f"{result.answered} of {result.frames} answered"
            + (f", slowest {slowest:g} s" if slowest is not None else "")
            + ("" if result.alive else f"; the node exited ({result.exit_code})"),
        ),
        TargetCheck(
            "RANSAC cap reported: a fallback per frame in /diagnostics, its line in the log",
            "met" if reported else "missed",
            f"{result.fallbacks} fallback(s), {result.cap_warnings} warning line(s); last: "
            f"{result.last_fallback or 'none'}",
        ),
        TargetCheck(
            "RANSAC case: 0 tracebacks",
            "met" if not result.tracebacks else "missed",
            f"{result.tracebacks} traceback(s)",
        ),
    ]


def format_ransac(result: RansacResult) -> str:
    """One line for the suite's summary."""
    return (
        f"RANSAC at ground_iterations {result.iterations}: {result.answered} of {result.frames} "
        f"frames answered in {', '.join(f'{s:g}' for s in result.latencies_s) or '-'} s, "
        f"{result.fallbacks} fallback(s) in /diagnostics, {result.cap_warnings} warning line(s)"
    )
