"""When to warn that frames are lost before they reach the node, and what to say. ROS-free.

Two symptoms, both usually of one cause: a publishing process (a LiDAR driver, ``ros2 bag play``)
with Fast DDS's default 512 KB shared-memory segment, which a large cloud does not fit (see
``ros/transport.py``; the node cannot change another process's segment):

- **gaps**: frames arrive, but the publishers' sequence numbers skip some
  (:meth:`.frame_stats.FrameStats.sequence`): more than ``warn_share`` of the frames sent in the
  last :data:`WINDOW_S` seconds never arrived. The window slides by a sample (a second): a
  burst of losses is judged whole, wherever it falls; after a warning the next window starts
  afresh, so a loss is warned about once and warnings come at most one window apart;
- **silence**: a publisher has been matched on the input topic for :data:`SILENT_S` seconds and
  no frame arrived since it matched (every frame lost; sequence gaps cannot show that; or the
  publisher is simply idle, so the message says "if one publishes"). Only since the match: once
  a frame has arrived the transport carries the publisher's frames, a pause afterwards is the
  publisher's, and frames lost after it show as gaps when the next one arrives. A publisher
  that (re)appears (the matched count rises) starts the count afresh.

And one of another cause: **no publisher** matched on any input for :data:`UNMATCHED_S` seconds
(the node listens on one topic, the data goes to another: the message names the remap to use).

:class:`LossMonitor` is fed the counters once a second (the node's diagnostics timer) and returns
the warning to log, throttled, plus the reason /diagnostics gives while silent.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from ..transport import ENV, LARGE_CLOUD_TRANSPORTS, PACKAGE, PROFILE_FILE

#: Seconds of counters a loss warning is about (one window after another).
WINDOW_S = 10.0
#: Seconds a matched publisher may stay silent before the node says so.
SILENT_S = 5.0
#: Least seconds between two warnings about the same silence (the publisher may just be idle)
#: or the same absence of publishers.
SILENT_REPEAT_S = 60.0
#: Seconds with no publisher matched on any input before the node says so (start-up included).
UNMATCHED_S = 5.0
#: Each input's relative name: the launch argument that remaps it
#: (``launch/gpu_euclidean_cluster.launch.py``) and a usual source, for the remap hint.
INPUT_REMAPS = {
    "input/points": ("input_topic", "/points_raw"),
    "input/packets": ("packets_topic", "/velodyne_packets"),
}
#: Fewest frames lost in a window that are warned about (a single gap is noise).
MIN_LOST = 2

TRANSPORT_FIX = f"export {ENV}={LARGE_CLOUD_TRANSPORTS}"
#: the short form of the fix, for /diagnostics
SHORT_FIX = (
    f"in the publishing process set {ENV}={LARGE_CLOUD_TRANSPORTS} "
    "(README: 'Large clouds between processes')"
)
#: where the installed profile is when the node cannot look it up
PROFILE_HINT = f"$(ros2 pkg prefix {PACKAGE})/share/{PACKAGE}/config/{PROFILE_FILE}"


def fix_hint(profile_path: str | None = None) -> str:
    """The one-line fix for the publishing process, naming the profile at ``profile_path`` (the
    installed file; default: how to find it)."""
    return (
        f"in the PUBLISHING process (driver, `ros2 bag play`), before starting it: "
        f"`{TRANSPORT_FIX}`, or `export FASTDDS_DEFAULT_PROFILES_FILE="
        f"{profile_path or PROFILE_HINT}` (README: 'Large clouds between processes')"
    )


@dataclass(frozen=True)
class LossCheck:
    """What one :meth:`LossMonitor.update` found.

    Attributes:
        warning: the line to log as a warning now (None: nothing, or throttled).
        silence: while a matched publisher is silent, the reason for /diagnostics ('' otherwise).
        unmatched: while no publisher is matched on any input, the reason for /diagnostics ('').
    """

    warning: str | None = None
    silence: str = ""
    unmatched: str = ""


@dataclass(frozen=True)
class _Sample:
    time: float
    received: int
    lost: int


class LossMonitor:
    """Decides, from counters sampled over time, when frames lost before the node are warned about.

    Args:
        topic: the input topic's resolved name (for the messages).
        fix: what to do about it (:func:`fix_hint`).
        start: monotonic time (s) at which counting began (counters 0).
        inputs: each subscribed input's relative name (a key of :data:`INPUT_REMAPS`) and resolved
            name (default: ``input/points`` on ``topic``).
        unmatched_s: seconds with no publisher on any input before the node says so.
    """

    def __init__(
        self,
        topic: str,
        fix: str,
        start: float,
        inputs: Mapping[str, str] | None = None,
        unmatched_s: float = UNMATCHED_S,
    ) -> None:
        self.topic = topic
        self.fix = fix
        self.inputs = dict(inputs or {"input/points": topic})
        self.unmatched_s = unmatched_s
        #: samples since the window's start (the last warning, or start-up), oldest first
        self._samples: deque[_Sample] = deque([_Sample(start, 0, 0)])
        #: when publishers last (re)appeared (or start-up) and the frames received by then
        self._matched_at = (start, 0)
        self._matched_before = 0  # publishers matched at the previous update
        self._silence_warned = -float("inf")
        self._any_matched = start  # last time a publisher was matched on an input, or start-up
        self._unmatched_warned = -float("inf")

    def update(
        self,
        now: float,
        received: int,
        lost: int,
        publishers: int,
        warn_share: float,
        input_publishers: int | None = None,
    ) -> LossCheck:
        """The counters at monotonic time ``now``: frames received and lost (sequence gaps) since
        start-up, publishers matched on the topic now, the share of lost frames that is warned
        about, and publishers matched on all inputs together (default: ``publishers``)."""
        warning = self._gaps(now, received, lost, warn_share)
        silence = self._silence(now, received, publishers)
        if silence and warning is None and now - self._silence_warned >= SILENT_REPEAT_S:
            self._silence_warned = now
            warning = f"{silence}; fix {self.fix}"
        unmatched = self._unmatched(
            now, publishers if input_publishers is None else input_publishers
        )
        if unmatched and warning is None and now - self._unmatched_warned >= SILENT_REPEAT_S:
            self._unmatched_warned = now
            warning = unmatched
        return LossCheck(warning, silence, unmatched)

    def _unmatched(self, now: float, publishers: int) -> str:
        if publishers:
            self._any_matched = now
            self._unmatched_warned = -float("inf")  # a new episode is warned about again
            return ""
        quiet_s = now - self._any_matched
        if quiet_s < self.unmatched_s:
            return ""
        topics = " or ".join(self.inputs.values())
        remaps = " or ".join(f"-r {name}:={INPUT_REMAPS[name][1]}" for name in self.inputs)
        arguments = " or ".join(f"{INPUT_REMAPS[name][0]}:=..." for name in self.inputs)
        return (
            f"no publisher on {topics} for {quiet_s:.0f} s: remap the input (e.g. --ros-args "
            f"{remaps}, or the launch argument {arguments})"
        )

    def _gaps(self, now: float, received: int, lost: int, warn_share: float) -> str | None:
        sample = _Sample(now, received, lost)
        while len(self._samples) > 1 and now - self._samples[1].time >= WINDOW_S:
            self._samples.popleft()  # the window's base: the latest sample WINDOW_S or more ago
        self._samples.append(sample)
        base = self._samples[0]
        if now - base.time < WINDOW_S:
            return None
        lost_now = lost - base.lost
        sent = lost_now + received - base.received
        if lost_now < MIN_LOST or lost_now <= warn_share * sent:
            return None
        self._samples = deque([sample])
        return (
            f"{lost_now} of {sent} frames ({100 * lost_now / sent:.0f} %) published on "
            f"{self.topic} in the last {now - base.time:.0f} s never reached the node (gaps in "
            f"the publishers' sequence numbers; a cloud larger than the publisher's Fast DDS "
            f"shared-memory segment, 512 KB by default, is lost between processes); fix {self.fix}"
        )

    def _silence(self, now: float, received: int, publishers: int) -> str:
        if publishers > self._matched_before:  # a publisher (re)appeared: a new episode
            self._matched_at = (now, received)
            self._silence_warned = -float("inf")
        self._matched_before = publishers
        since, received_then = self._matched_at
        quiet_s = now - since
        if not publishers or received != received_then or quiet_s < SILENT_S:
            return ""
        return (
            f"no frame arrived on {self.topic} in the {quiet_s:.0f} s since {publishers} "
            f"publisher(s) matched: if one publishes, its frames do not reach the node (a cloud "
            f"larger than the publisher's Fast DDS shared-memory segment, 512 KB by default, is "
            f"lost between processes)"
        )
