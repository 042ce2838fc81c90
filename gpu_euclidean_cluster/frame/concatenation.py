"""Sweeps of several LiDARs grouped as Autoware's ``concatenate_and_time_sync_node`` groups them,
without ROS, threads or sleeps: the caller passes the time in.

    >>> collector = SweepCollector(ConcatenationSettings(("top", "left", "right"), ...))
    >>> out = collector.add("top", stamp_ns, now_ns, cloud)   # on each sweep
    >>> out = collector.poll(now_ns)                           # from a timer: next_deadline_ns()
    >>> for group in out.groups: ...                           # join group.sweeps, in that order
    >>> for event in out.events: log.warning(event.message)

The rules are ``frame/time_sync.py``'s. A group is closed when every sensor arrived or at its
timeout with those that did; :class:`ConcatenationGroup` says which made it, each one's stamp,
the output stamp, whether Autoware would publish it, and its ``/diagnostics`` status. Joining is
the caller's: transform each sweep into ``output_frame`` and concatenate in ``group.sweeps``
order (Autoware's, rule 6), each source's first index and length going into the output's info.
What Autoware only warns about, or does without a word, comes back as a :class:`SyncEvent`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .time_sync import (
    Candidate,
    ConcatenationSettings,
    autoware_join_order,
    format_stamp,
    match,
    reference_for,
)

#: Event kinds: a sensor's second sweep in one group replaced the first; a sweep came after its
#: group closed without it; an open group was discarded to make room; a closed group was not
#: published, stamped before the newest published one; the clock went back; a sensor's stamp
#: did not advance.
DUPLICATE, LATE, COLLECTOR_DROPPED = "duplicate", "late", "collector_dropped"
DROPPED_LATE, CLOCK_BACKWARDS, OUT_OF_ORDER = "dropped_late", "clock_backwards", "out_of_order"
#: ``diagnostic_msgs/DiagnosticStatus`` levels Autoware uses here.
OK, ERROR = 0, 2


@dataclass(frozen=True)
class Sweep:
    """One sensor's sweep as it arrived: stamp and arrival in integer nanoseconds."""

    sensor: str
    stamp_ns: int
    arrival_ns: int
    payload: Any


@dataclass(frozen=True)
class SyncEvent:
    """Something to log: its kind, the sensors concerned and one line naming them."""

    kind: str
    sensors: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class ConcatenationGroup:
    """One closed group: the input of one concatenated cloud.

    Attributes:
        sensors: every configured sensor (``input_topics`` order).
        sweeps: the sweeps that made it, in Autoware's join order.
        trigger: ``complete`` (every sensor), ``timeout`` or ``flush``.
        outcome: ``published`` or ``dropped_late`` (stamped before the newest published group):
            only a published group is output, as in Autoware.
        empty: no point in any of its sweeps (published all the same, as Autoware 2025+
            publishes an empty cloud, its ``/diagnostics`` status an error).
        stamp_ns: the output stamp, the oldest of the sweeps' stamps.
        reference_ns, noise_window_ns: the matching reference and window (advanced); naive: the
            first arrival and 0.
        strategy: ``naive`` or ``advanced``.
        closed_ns: the time the group closed.
    """

    sensors: tuple[str, ...]
    sweeps: tuple[Sweep, ...]
    trigger: str
    outcome: str
    empty: bool
    stamp_ns: int
    reference_ns: int
    noise_window_ns: int
    strategy: str
    closed_ns: int

    @property
    def stamps(self) -> dict[str, int]:
        """Each present sensor's stamp, in ``sensors`` order."""
        by_sensor = {sweep.sensor: sweep.stamp_ns for sweep in self.sweeps}
        return {sensor: by_sensor[sensor] for sensor in self.sensors if sensor in by_sensor}

    @property
    def present(self) -> tuple[str, ...]:
        return tuple(self.stamps)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(sensor for sensor in self.sensors if sensor not in self.stamps)

    def diagnostic(
        self, processing_ms: float | None = None, now_ns: int | None = None
    ) -> tuple[int, str, tuple[tuple[str, str], ...]]:
        """``(level, message, key-value pairs)`` of Autoware's ``/diagnostics`` status for it,
        its keys in Autoware's order; the run-time ones (``Processing time (ms)``, ``Pipeline
        latency (ms)``, ``Latency (ms): <sensor>``) where ``processing_ms`` and ``now_ns`` are
        given (an offline tool has none, as Autoware's own ROS-free builder)."""
        values = [("Concatenated pointcloud timestamp", format_stamp(self.stamp_ns))]
        if self.strategy == "advanced":
            for key, sign in (("Minimum", -1), ("Maximum", 1)):
                edge = self.reference_ns + sign * self.noise_window_ns
                values.append((f"{key} reference timestamp", format_stamp(edge)))
        else:
            values.append(("First pointcloud arrival timestamp", format_stamp(self.reference_ns)))
        stamps = self.stamps
        latency = {}
        if now_ns is not None:
            latency = {sensor: (now_ns - stamp) / 1e6 for sensor, stamp in stamps.items()}
        if processing_ms is not None:
            values.append(("Processing time (ms)", f"{processing_ms:.9f}"))
        if latency:
            values.append(("Pipeline latency (ms)", f"{max(latency.values()):.9f}"))
        for sensor in self.sensors:
            values.append((f"Concatenated: {sensor}", str(sensor in stamps)))
            if sensor in stamps:
                values.append((f"Timestamp: {sensor}", format_stamp(stamps[sensor])))
                if latency:
                    values.append((f"Latency (ms): {sensor}", f"{latency[sensor]:.9f}"))
        missing = len(stamps) < len(self.sensors)
        values.append(("Pointcloud concatenation succeeded", str(not missing)))
        message = "OK"  # Autoware's diagnostics interface reports OK as "OK"
        if self.outcome == "dropped_late":
            reason = "due to missing topics and its" if missing else "due to its"
            message = f"{_DROPPED} {reason} timestamp is earlier than the latest published one"
        elif self.empty:
            message = "Concatenated pointcloud is empty"
        elif missing:
            message = "Concatenated pointcloud is published but misses some topics"
        level = ERROR if missing or self.empty or self.outcome != "published" else OK
        return level, message, tuple(values)


_DROPPED = "Concatenated pointcloud was dropped"


@dataclass(frozen=True)
class SyncOutput:
    """What one call produced: closed groups (in closing order) and events to log."""

    groups: tuple[ConcatenationGroup, ...] = ()
    events: tuple[SyncEvent, ...] = ()


@dataclass(eq=False)
class _OpenGroup:
    reference_ns: int
    noise_window_ns: int
    deadline_ns: int
    sweeps: dict[str, Sweep] = field(default_factory=dict)


class SweepCollector:
    """Groups sweeps by ``frame/time_sync.py``'s rules; the caller passes the time in.

    ``point_count(payload)``, when given, tells a group whose sweeps hold no point (published,
    ``empty``, its status an error, as in Autoware 2025+).
    """

    def __init__(
        self, settings: ConcatenationSettings, point_count: Callable[[Any], int] | None = None
    ) -> None:
        self.settings = settings
        self._point_count = point_count
        self._open: list[_OpenGroup] = []
        self._recent: deque[ConcatenationGroup] = deque(maxlen=settings.max_open_collectors)
        self._latest_published_ns = 0
        self._now_ns: int | None = None
        self._last_stamp_ns: dict[str, int] = {}
        self._events: list[SyncEvent] = []

    @property
    def open_groups(self) -> int:
        return len(self._open)

    def next_deadline_ns(self) -> int | None:
        """When :meth:`poll` next closes a group at its timeout (None: nothing open)."""
        return min((group.deadline_ns for group in self._open), default=None)

    def add(self, sensor: str, stamp_ns: int, arrival_ns: int, payload: Any) -> SyncOutput:
        """Take one sweep that arrived at ``arrival_ns`` (now); groups closed by it or before."""
        if sensor not in self.settings.sensors:
            raise ValueError(f"unknown sensor {sensor!r}; expected one of {self.settings.sensors}")
        for name, value in (("stamp_ns", stamp_ns), ("arrival_ns", arrival_ns)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an integer number of nanoseconds, got {value!r}")
        groups = self._advance(arrival_ns, sensor)
        previous = self._last_stamp_ns.get(sensor)
        self._last_stamp_ns[sensor] = stamp_ns
        if previous is not None and stamp_ns <= previous:
            text = f"sweep stamped {format_stamp(stamp_ns)} is not newer than the one before"
            self._note(OUT_OF_ORDER, (sensor,), f"{text} ({format_stamp(previous)})")
        sweep = Sweep(sensor, stamp_ns, arrival_ns, payload)
        candidates = [
            Candidate(g.reference_ns, g.noise_window_ns, sensor in g.sweeps) for g in self._open
        ]
        index = match(self.settings, candidates, sensor, stamp_ns, arrival_ns)
        group = self._open[index] if index is not None else self._open_group(sweep)
        if sensor in group.sweeps:
            text = f"{format_stamp(group.sweeps[sensor].stamp_ns)}, then {format_stamp(stamp_ns)}"
            self._note(DUPLICATE, (sensor,), f"two sweeps in one group ({text}); the newer kept")
        group.sweeps[sensor] = sweep
        if len(group.sweeps) == len(self.settings.sensors):
            self._open.remove(group)
            groups.append(self._close(group, "complete", arrival_ns))
        return self._output(groups)

    def poll(self, now_ns: int) -> SyncOutput:
        """Close the groups whose timeout has passed at ``now_ns``."""
        return self._output(self._advance(now_ns, None))

    def flush(self, now_ns: int) -> SyncOutput:
        """Close every open group now, with the sweeps it has (the end of a replay)."""
        groups = self._advance(now_ns, None)
        groups += [self._close(group, "flush", now_ns) for group in self._open]
        self._open = []
        return self._output(groups)

    def _advance(self, now_ns: int, sensor: str | None) -> list[ConcatenationGroup]:
        """Move the clock to ``now_ns`` and close the groups past their deadline (oldest first).
        A clock that went back keeps each open group's remaining time, as ROS timers do."""
        if self._now_ns is not None and now_ns < self._now_ns:
            jump = self._now_ns - now_ns
            for group in self._open:
                group.deadline_ns -= jump
            self._recent.clear()  # groups closed on the old timeline make no sweep late
            text = f"the clock went back {jump / 1e6:.3f} ms; open groups keep their remaining time"
            self._note(CLOCK_BACKWARDS, (sensor,) if sensor else (), text)
        self._now_ns = now_ns
        due = sorted((g for g in self._open if g.deadline_ns <= now_ns), key=_deadline)
        self._open = [group for group in self._open if group.deadline_ns > now_ns]
        return [self._close(group, "timeout", now_ns) for group in due]

    def _open_group(self, sweep: Sweep) -> _OpenGroup:
        settings = self.settings
        late = next((g for g in reversed(self._recent) if self._missed(g, sweep)), None)
        if late is not None:
            text = f"sweep stamped {format_stamp(sweep.stamp_ns)} came after its group"
            text += f" ({format_stamp(late.stamp_ns)}) closed without it; it starts its own group"
            self._note(LATE, (sweep.sensor,), text)
        if len(self._open) >= settings.max_open_collectors:
            lost = min(self._open, key=lambda group: group.reference_ns)
            self._open.remove(lost)
            names = tuple(name for name in settings.sensors if name in lost.sweeps)
            limit = settings.max_open_collectors
            text = f"an open group was discarded unpublished ({limit} open at most)"
            self._note(COLLECTOR_DROPPED, names, text)
        reference, window = reference_for(settings, sweep.sensor, sweep.stamp_ns, sweep.arrival_ns)
        group = _OpenGroup(reference, window, sweep.arrival_ns + settings.timeout_ns)
        self._open.append(group)
        return group

    def _missed(self, closed: ConcatenationGroup, sweep: Sweep) -> bool:
        """Whether ``sweep`` would have joined ``closed`` had it still been open."""
        if closed.trigger == "complete" or sweep.sensor in closed.stamps:
            return False
        if self.settings.strategy == "naive":
            return closed.closed_ns >= sweep.arrival_ns - self.settings.timeout_ns
        window = [Candidate(closed.reference_ns, closed.noise_window_ns, False)]
        return match(self.settings, window, sweep.sensor, sweep.stamp_ns, sweep.arrival_ns) == 0

    def _close(self, group: _OpenGroup, trigger: str, now_ns: int) -> ConcatenationGroup:
        settings = self.settings
        sweeps = group.sweeps
        stamp_ns = min(sweep.stamp_ns for sweep in sweeps.values())
        latest = self._latest_published_ns
        count = self._point_count
        empty = bool(count) and sum(count(s.payload) for s in sweeps.values()) == 0
        if (
            stamp_ns < latest
            and not settings.publish_previous_but_late
            and latest - stamp_ns <= settings.rosbag_length_ns
        ):
            outcome = "dropped_late"
            text = f"group stamped {format_stamp(stamp_ns)} dropped: the newest published one is"
            self._note(DROPPED_LATE, tuple(sweeps), f"{text} {format_stamp(latest)}")
        else:
            outcome = "published"
            self._latest_published_ns = stamp_ns
        closed = ConcatenationGroup(
            sensors=settings.sensors,
            sweeps=tuple(sweeps[name] for name in autoware_join_order(tuple(sweeps))),
            trigger=trigger,
            outcome=outcome,
            empty=empty,
            stamp_ns=stamp_ns,
            reference_ns=group.reference_ns,
            noise_window_ns=group.noise_window_ns,
            strategy=settings.strategy,
            closed_ns=now_ns,
        )
        self._recent.append(closed)
        return closed

    def _note(self, kind: str, sensors: tuple[str, ...], text: str) -> None:
        who = ", ".join(sensors) or "sweep collector"
        self._events.append(SyncEvent(kind, sensors, f"{who}: {text} (as Autoware does)"))

    def _output(self, groups: list[ConcatenationGroup]) -> SyncOutput:
        events, self._events = tuple(self._events), []
        return SyncOutput(tuple(groups), events)


def _deadline(group: _OpenGroup) -> int:
    return group.deadline_ns
