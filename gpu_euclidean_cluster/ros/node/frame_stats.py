"""Thread-safe counters of what happened to incoming frames, for diagnostics. ROS-free.

The subscription callback records arrivals and drops, the worker records published frames
(with their receive-to-publish latency), rejections (a frame not published: its message could
not be decoded, or its processing failed) and fallbacks (a frame published, but run otherwise
than configured); the diagnostics timer reads a :class:`StatsSnapshot`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass

import numpy as np

#: Latencies kept for the percentiles (the most recent frames).
LATENCY_WINDOW = 1000
#: Stages of a processed frame: decode and output build (everything around the clustering),
#: clustering (the library's total), publishing the clouds and object messages, then markers.
STAGES = ("decode_build", "cluster", "publish", "markers")
#: Arrival times kept for the input rate.
RATE_WINDOW = 50
#: Arrivals older than this many seconds do not count towards the input rate.
RATE_HORIZON_S = 5.0


@dataclass(frozen=True)
class StatsSnapshot:
    """Counters since start-up plus rate and latency over the recent window.

    Attributes:
        received: frames taken from the subscription.
        processed: frames clustered and published.
        dropped: frames overwritten by a newer one before the worker took them.
        lost: frames a publisher sent that never reached the node (gaps in its publication
            sequence numbers: a cloud larger than the publisher's Fast DDS shared-memory segment,
            or middleware queues overflowing while the node was busy; see
            :mod:`~.loss_monitor`).
        rejected: rejected frames per kind (``malformed``, ``missing_fields``, ...).
        fallbacks: frames that ran otherwise than configured, and were published: on the CPU
            because the GPU ran out of memory, or with ``union_find`` because a paper's method
            would need more memory (``StructureTooLargeError``) or time
            (``WorkTooLargeError``) than allowed. Never counted as rejected.
        cpu_fallbacks: those of ``fallbacks`` that ran on the CPU instead of the GPU.
        implausible_points: finite points excluded because a coordinate exceeded the node's
            ``max_coordinate`` (sensor glitches, bad transforms, wrong byte order).
        last_implausible: what the latest such exclusion was ('' if none).
        last_rejection: the reason of the latest rejection ('' if none).
        last_fallback: the reason of the latest fallback ('' if none).
        input_rate_hz: arrival rate over the last :data:`RATE_WINDOW` frames that arrived within
            :data:`RATE_HORIZON_S` seconds (0 when input has stopped).
        latency_p50_ms, latency_p99_ms: receive-to-publish latency percentiles (NaN if none):
            from the message's arrival to the publication of both output clouds.
        stage_ms: per stage of a processed frame (:data:`STAGES`), ``(p50, p99)`` in ms over the
            recent frames.
    """

    received: int
    processed: int
    dropped: int
    lost: int
    rejected: dict[str, int]
    fallbacks: int
    cpu_fallbacks: int
    implausible_points: int
    last_implausible: str
    last_rejection: str
    last_fallback: str
    input_rate_hz: float
    latency_p50_ms: float
    latency_p99_ms: float
    stage_ms: dict[str, tuple[float, float]]

    @property
    def total_rejected(self) -> int:
        """Rejected frames of every kind."""
        return sum(self.rejected.values())


class FrameStats:
    """Counts frames; every method may be called from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arrivals: deque[float] = deque(maxlen=RATE_WINDOW)
        self._latencies_ms: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._stage_ms = {stage: deque(maxlen=LATENCY_WINDOW) for stage in STAGES}
        self._received = 0
        self._processed = 0
        self._dropped = 0
        self._lost = 0
        self._last_sequence: dict[bytes, int] = {}
        self._rejected: Counter[str] = Counter()
        self._fallbacks = 0
        self._cpu_fallbacks = 0
        self._implausible_points = 0
        self._last_implausible = ""
        self._last_rejection = ""
        self._last_fallback = ""

    def received(self, when: float) -> None:
        """A frame arrived at monotonic time ``when`` (seconds)."""
        with self._lock:
            self._received += 1
            self._arrivals.append(when)

    def sequence(self, publisher: bytes, number: int) -> None:
        """A frame arrived with publication sequence ``number`` of ``publisher``: count the
        frames missing since that publisher's previous one (none for its first, or after it
        restarted)."""
        with self._lock:
            previous = self._last_sequence.get(publisher)
            if previous is not None and number > previous + 1:
                self._lost += number - previous - 1
            self._last_sequence[publisher] = number

    def dropped(self) -> None:
        """A waiting frame was overwritten by a newer one."""
        with self._lock:
            self._dropped += 1

    def rejected(self, kind: str, reason: str) -> None:
        """A frame was rejected; ``kind`` groups the counts, ``reason`` is kept for display."""
        with self._lock:
            self._rejected[kind] += 1
            self._last_rejection = reason

    def fell_back(self, reason: str, on_cpu: bool) -> None:
        """A frame ran otherwise than configured (see :attr:`StatsSnapshot.fallbacks`);
        ``on_cpu``: on the CPU instead of the GPU."""
        with self._lock:
            self._fallbacks += 1
            self._cpu_fallbacks += on_cpu
            self._last_fallback = reason

    def excluded_implausible(self, count: int, reason: str) -> None:
        """``count`` points of a frame were excluded as implausible (``reason`` kept)."""
        with self._lock:
            self._implausible_points += count
            self._last_implausible = reason

    def published(self, latency_s: float) -> None:
        """A frame was published ``latency_s`` seconds after it was received."""
        with self._lock:
            self._processed += 1
            self._latencies_ms.append(latency_s * 1e3)

    def stages(self, milliseconds: dict[str, float]) -> None:
        """A processed frame's time per stage of :data:`STAGES`."""
        with self._lock:
            for stage, value in milliseconds.items():
                self._stage_ms[stage].append(value)

    def snapshot(self, now: float | None = None) -> StatsSnapshot:
        """The counters at monotonic time ``now`` (default: the current time)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            arrivals = list(self._arrivals)
            p50, p99 = _percentiles(self._latencies_ms)
            return StatsSnapshot(
                received=self._received,
                processed=self._processed,
                dropped=self._dropped,
                lost=self._lost,
                rejected=dict(self._rejected),
                fallbacks=self._fallbacks,
                cpu_fallbacks=self._cpu_fallbacks,
                implausible_points=self._implausible_points,
                last_implausible=self._last_implausible,
                last_rejection=self._last_rejection,
                last_fallback=self._last_fallback,
                input_rate_hz=_rate([t for t in arrivals if t > now - RATE_HORIZON_S]),
                latency_p50_ms=p50,
                latency_p99_ms=p99,
                stage_ms={stage: _percentiles(values) for stage, values in self._stage_ms.items()},
            )


def _percentiles(values: deque[float]) -> tuple[float, float]:
    """``(p50, p99)`` of ``values`` (NaN, NaN when empty)."""
    if not values:
        return (np.nan, np.nan)
    p50, p99 = np.percentile(np.array(values), (50, 99))
    return float(p50), float(p99)


def _rate(arrivals: list[float]) -> float:
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
        return 0.0
    return (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
