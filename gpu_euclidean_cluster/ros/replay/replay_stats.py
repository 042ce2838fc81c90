"""The counters of one ``replay`` run: its progress line's detail and its summary. ROS-free.

Two kinds of message are counted apart: frames (PointCloud2: the bag's own, the sweeps decoded
from its packet topics and the joined vehicle clouds) and packet messages (``VelodyneScan``
published as recorded). A bag without packets played as recorded reads as it always did:
``replay done: N frames in ...``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Flow:
    """The messages of one kind published: how many, when the first and the last went out
    (``time.monotonic()`` seconds)."""

    count: int = 0
    first: float = 0.0
    last: float = 0.0

    def record(self, now: float) -> None:
        """Count a message published at ``now``."""
        if self.count == 0:
            self.first = now
        self.last = now
        self.count += 1

    @property
    def rate_hz(self) -> float:
        """Achieved rate: intervals per second between the first and the last message."""
        span = self.last - self.first
        return (self.count - 1) / span if span > 0 else 0.0


@dataclass
class ReplayStats:
    """Counters of one replay run.

    Attributes:
        publishes_packets: packet messages are published as recorded (the summary and the
            progress line then count them beside the frames).
        frame_flow: PointCloud2 messages published, decoded sweeps included.
        packet_flow: ``VelodyneScan`` messages published as recorded.
        sweeps: the decoded sweeps among the frames.
        joined: the joined vehicle clouds among the frames (``--concatenate``).
    """

    publishes_packets: bool = False
    frame_flow: Flow = field(default_factory=Flow)
    packet_flow: Flow = field(default_factory=Flow)
    sweeps: int = 0
    joined: int = 0
    passes: int = 0
    elapsed_s: float = 0.0
    lag_sum_s: float = 0.0
    lag_max_s: float = 0.0
    interrupted: bool = False

    def record(
        self, lag_s: float, packet: bool = False, sweep: bool = False, joined: bool = False
    ) -> None:
        """Count a message published now, ``lag_s`` after its scheduled time: a packet message
        as recorded (``packet``), else a frame (``sweep``: a decoded one; ``joined``: a joined
        vehicle cloud)."""
        now = time.monotonic()
        if packet:
            self.packet_flow.record(now)
        else:
            self.frame_flow.record(now)
            self.sweeps += int(sweep)
            self.joined += int(joined)
        self.lag_sum_s += lag_s
        self.lag_max_s = max(self.lag_max_s, lag_s)

    @property
    def frames(self) -> int:
        """PointCloud2 messages published (decoded sweeps included)."""
        return self.frame_flow.count

    @property
    def packet_messages(self) -> int:
        """``VelodyneScan`` messages published as recorded."""
        return self.packet_flow.count

    @property
    def messages(self) -> int:
        """Every message published."""
        return self.frames + self.packet_messages

    @property
    def rate_hz(self) -> float:
        """Achieved frame rate (see :meth:`Flow.rate_hz`)."""
        return self.frame_flow.rate_hz

    @property
    def mean_lag_ms(self) -> float:
        return 1e3 * self.lag_sum_s / self.messages if self.messages else 0.0

    def summary(self) -> str:
        """The closing line: what was published, how fast, how late."""
        state = "stopped by user" if self.interrupted else "done"
        counts = [] if self.publishes_packets and not self.frames else [f"{self.frames} frames"]
        kinds = [f"{self.sweeps} decoded sweeps"] if self.sweeps else []
        kinds += [f"{self.joined} joined clouds"] if self.joined else []
        if kinds:
            counts[-1] += f" ({', '.join(kinds)})"
        rates = [f"{self.rate_hz:.1f} Hz"]
        if self.publishes_packets:
            counts.append(f"{self.packet_messages} packet messages")
            rates = [f"frames {self.rate_hz:.1f} Hz"] if self.frames else []
            rates.append(f"packets {self.packet_flow.rate_hz:.1f} Hz")
        return (
            f"replay {state}: {' and '.join(counts)} in {self.elapsed_s:.2f} s "
            f"({', '.join(rates)}, {self.passes} pass(es)), "
            f"lag mean {self.mean_lag_ms:.1f} ms max {1e3 * self.lag_max_s:.1f} ms"
        )

    def status(self, lag_s: float) -> str:
        """The progress line's detail: what was published, pass, achieved rate and the lag
        behind the schedule."""
        lag = f"lag {1e3 * lag_s:6.1f} ms"
        if not self.publishes_packets:
            return f"frames  pass {self.passes}  {self.rate_hz:5.1f} Hz  {lag}"
        return (
            f"messages ({self.frames} frames, {self.packet_messages} packets)  pass "
            f"{self.passes}  packets {self.packet_flow.rate_hz:5.1f} Hz  {lag}"
        )
