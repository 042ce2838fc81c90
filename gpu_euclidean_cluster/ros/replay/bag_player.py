"""Replay PointCloud2 messages of an open bag through an rclpy node on the recorded schedule.

Messages are published as serialized CDR: ROS 2 bags already hold CDR, so the stored bytes go to
``Publisher.publish`` unchanged (no copy of the point payload); ROS 1 messages are converted at
byte level (``header.seq`` dropped) by
:class:`~gpu_euclidean_cluster.pointcloud_io.bags.PointCloudBag`. Velodyne packet topics
(``velodyne_msgs/msg/VelodyneScan``) are decoded into PointCloud2 sweeps by :mod:`.packet_player`;
a sweep counts as a message at the bag time of the packet message that completed it, merged in
time order with the PointCloud2 messages. A bag whose ``metadata.yaml`` rosbags refuses is read
through its storage files (:mod:`.bag_files`).

Timing: message ``i`` is published at ``wall_start + (t_i - t_first) / rate``, with ``t`` the bag
timestamp, or at ``wall_start + i / rate_hz`` with a fixed rate (``--rate-hz``; a one-message
segment played more than once uses :data:`ONE_INSTANT_HZ`); the lag is how late the publish call
returns after that target. ``/clock`` (optional)
carries the bag time of the playback clock, for nodes with ``use_sim_time``.
"""

from __future__ import annotations

import heapq
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TextIO

import rclpy
from rclpy.context import Context
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import QoSDurabilityPolicy, QoSHistoryPolicy, QoSProfile
from rclpy.signals import SignalHandlerOptions
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import PointCloud2

from ...core.units import NS_PER_S
from ...pointcloud_io.bags import POINTCLOUD2, BagError, BagMessage
from ...pointcloud_io.velodyne.bags import VELODYNE_SCAN
from ...tools.progress import ProgressBar
from ..qos import reliability_policy
from .bag_files import BagFiles
from .packet_player import PacketStream, SweepMessage, decoded_topic
from .replay_options import ReplayOptions

DISCOVERY_SETTLE_S = 0.3
PROGRESS_PERIOD_S = 0.1
ACK_TIMEOUT_S = 5.0
LINGER_S = 0.5
#: A segment shorter than this has no timing of its own to repeat (one message, or a burst) ...
MIN_LOOP_SPAN_NS = 1_000_000
#: ... and plays at this rate when it loops or repeats without ``--rate-hz``.
ONE_INSTANT_HZ = 10.0
#: Longest single wait: a slow rate can put the next message years away, beyond what a wait
#: call accepts (``threading.TIMEOUT_MAX``); the player waits in slices.
MAX_WAIT_S = 1.0


@dataclass
class ReplayStats:
    """Counters of one replay run."""

    frames: int = 0
    passes: int = 0
    elapsed_s: float = 0.0
    lag_sum_s: float = 0.0
    lag_max_s: float = 0.0
    interrupted: bool = False
    first_publish: float = 0.0
    last_publish: float = 0.0

    def record(self, lag_s: float) -> None:
        """Count a frame published now, ``lag_s`` after its scheduled time."""
        self.last_publish = time.monotonic()
        if self.frames == 0:
            self.first_publish = self.last_publish
        self.frames += 1
        self.lag_sum_s += lag_s
        self.lag_max_s = max(self.lag_max_s, lag_s)

    @property
    def rate_hz(self) -> float:
        """Achieved publishing rate: frame intervals per second between first and last frame."""
        span = self.last_publish - self.first_publish
        return (self.frames - 1) / span if span > 0 else 0.0

    @property
    def mean_lag_ms(self) -> float:
        return 1e3 * self.lag_sum_s / self.frames if self.frames else 0.0

    def summary(self) -> str:
        state = "stopped by user" if self.interrupted else "done"
        return (
            f"replay {state}: {self.frames} frames in {self.elapsed_s:.2f} s "
            f"({self.rate_hz:.1f} Hz, {self.passes} pass(es)), "
            f"lag mean {self.mean_lag_ms:.1f} ms max {1e3 * self.lag_max_s:.1f} ms"
        )


def select_topics(bag: BagFiles, requested: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The PointCloud2 and the VelodyneScan topics to play; default: all of either type.

    Raises:
        BagError: a requested topic is absent (the message lists those present) or of another
            type, or the bag holds neither type.
    """
    topics = bag.topics
    listing = ", ".join(f"{t.name} ({t.msgtype})" for t in topics.values()) or "none"
    playable = (POINTCLOUD2, VELODYNE_SCAN)
    if not requested:
        chosen = [name for name, topic in topics.items() if topic.msgtype in playable]
        if not chosen:
            raise BagError(
                f"no {POINTCLOUD2} topic (nor {VELODYNE_SCAN}) in {bag.path}; topics: {listing}"
            )
    else:
        chosen = list(dict.fromkeys(requested))
        for name in chosen:
            if name not in topics:
                raise BagError(f"topic {name} is not in {bag.path}; topics: {listing}")
            if topics[name].msgtype not in playable:
                raise BagError(
                    f"topic {name} has type {topics[name].msgtype}, not {POINTCLOUD2} "
                    f"(or {VELODYNE_SCAN})"
                )
    clouds = [name for name in chosen if topics[name].msgtype == POINTCLOUD2]
    packets = [name for name in chosen if topics[name].msgtype == VELODYNE_SCAN]
    return clouds, packets


class BagPlayer:
    """Publishes the PointCloud2 messages of an open bag, and the sweeps decoded from its Velodyne
    packet topics, through ``node`` on a timed schedule."""

    def __init__(self, node: Node, bag: BagFiles, options: ReplayOptions) -> None:
        self.node = node
        self.bag = bag
        self.options = options
        self.cloud_topics, self.packet_topics = select_topics(bag, options.topics)
        #: every topic played, as in the bag: PointCloud2 first, then the packet topics
        self.topics = [*self.cloud_topics, *self.packet_topics]
        names = {topic: topic for topic in self.cloud_topics}
        names.update({decoded_topic(topic): topic for topic in self.packet_topics})
        unknown = sorted(set(options.remap) - set(names) - set(self.topics))
        if unknown:
            replayed = [*self.cloud_topics] + [
                f"{t} (decoded to {decoded_topic(t)})" for t in self.packet_topics
            ]
            raise BagError(
                f"cannot remap {', '.join(unknown)}: not replayed (replayed topics: "
                f"{', '.join(replayed)})"
            )
        #: output name of each played topic
        self.output_names = {topic: options.remap.get(topic, topic) for topic in self.cloud_topics}
        for topic in self.packet_topics:
            default = decoded_topic(topic)
            self.output_names[topic] = options.remap.get(topic, options.remap.get(default, default))
        self.packets: PacketStream | None = None
        if self.packet_topics:
            try:
                decoding = options.velodyne.resolve()
                self.packets = PacketStream(bag.path, self.packet_topics, decoding)
            except BagError:
                raise
            except ValueError as error:
                raise BagError(
                    f"{', '.join(self.packet_topics)} ({VELODYNE_SCAN}): {error}"
                ) from None
        self.start_ns = bag.start_ns + round(options.start_s * NS_PER_S)
        if self.start_ns >= bag.end_ns:
            length = (bag.end_ns - bag.start_ns) / NS_PER_S
            raise BagError(
                f"--start {options.start_s} s is past the end of the bag ({length:.3f} s long)"
            )
        self.stop_ns = (
            None
            if options.duration_s is None
            else self.start_ns + round(options.duration_s * NS_PER_S)
        )
        span_ns = (bag.end_ns if self.stop_ns is None else min(self.stop_ns, bag.end_ns)) - (
            self.start_ns
        )
        #: seconds between messages on a fixed schedule; None: the recorded timing
        self.interval_s: float | None = None
        if options.rate_hz is not None:
            self.interval_s = 1.0 / options.rate_hz
        elif (options.loop or options.repeat > 1) and span_ns < MIN_LOOP_SPAN_NS:
            self.interval_s = 1.0 / ONE_INSTANT_HZ
        qos = QoSProfile(
            history=QoSHistoryPolicy.KEEP_LAST,
            depth=options.qos_depth,
            reliability=reliability_policy(options.qos_reliability),
            durability=QoSDurabilityPolicy.VOLATILE,
        )
        self.publishers: dict[str, Publisher] = {
            topic: node.create_publisher(PointCloud2, self.output_names[topic], qos)
            for topic in self.topics
        }
        self.clock_publisher = (
            node.create_publisher(Clock, "/clock", 10) if options.clock_hz > 0 else None
        )
        self._wall_start = 0.0

    def wait_for_acks(self) -> bool:
        """Wait (up to ACK_TIMEOUT_S) until reliable subscribers acknowledged every message,
        so that the last frames are not lost when the process exits right after publishing."""
        timeout = Duration(seconds=ACK_TIMEOUT_S)
        return all(p.wait_for_all_acked(timeout) for p in self.publishers.values())

    def output_topics(self) -> list[str]:
        """Topic names as published (after remapping)."""
        return [publisher.topic_name for publisher in self.publishers.values()]

    def wait_for_subscribers(self, stop: threading.Event) -> bool:
        """Wait up to ``wait_for_subscribers_s`` until every topic has ``min_subscribers``.

        Discovery is not symmetric: the publisher can see a subscriber before the subscriber
        has matched the publisher, and a message sent then arrives late (after a reliable
        retransmission) or not at all. A short settle time after the match avoids that.
        """
        deadline = time.monotonic() + self.options.wait_for_subscribers_s
        while not stop.is_set():
            wanted = self.options.min_subscribers
            if all(p.get_subscription_count() >= wanted for p in self.publishers.values()):
                stop.wait(DISCOVERY_SETTLE_S)
                return True
            if time.monotonic() >= deadline:
                return False
            stop.wait(0.05)
        return False

    def schedule(self) -> str:
        """How messages are timed, for the start-up line."""
        passes = "until stopped" if self.options.loop else f"{self.options.repeat} pass(es)"
        if self.interval_s is None:
            return f"recorded timing at rate {self.options.rate:g}, {passes}"
        given = " (one-message segment)" if self.options.rate_hz is None else ""
        return f"{1.0 / self.interval_s:g} Hz{given}, {passes}"

    def play(self, stop: threading.Event, stream: TextIO = sys.stderr) -> ReplayStats:
        """Replay (``repeat`` passes, or until ``stop`` with ``loop``); return the statistics."""
        stats = ReplayStats()
        total = self._frames_per_pass()
        progress = ProgressBar(
            total,
            stream,
            width=24,
            enabled=self.options.progress,
            log_when_piped=False,
            min_period_s=PROGRESS_PERIOD_S,
        )
        wall_first = self._wall_start = time.monotonic()
        lag = 0.0
        try:
            while not stop.is_set():
                stats.passes += 1
                first_ns = last_ns = self.start_ns
                count = 0
                for message in self._messages(restart_clock=stats.passes == 1):
                    target = self._wall_start + self._offset_s(message, count)
                    if not self._sleep_until(target, stop):
                        break
                    self._publish(message)
                    lag = max(0.0, time.monotonic() - target)
                    stats.record(lag)
                    stats.elapsed_s = time.monotonic() - wall_first
                    progress.show(self._done_this_pass(stats, total), _status(stats, lag))
                    first_ns = message.timestamp_ns if count == 0 else first_ns
                    last_ns = message.timestamp_ns
                    count += 1
                if count == 0 or not (self.options.loop or stats.passes < self.options.repeat):
                    break
                if self.interval_s is not None:
                    self._wall_start += count * self.interval_s
                    continue
                # the next pass starts one mean message period after this pass's last message
                period_ns = (last_ns - first_ns) / (count - 1) if count > 1 else 0.0
                self._wall_start += (last_ns - self.start_ns + period_ns) / (
                    self.options.rate * NS_PER_S
                )
        finally:
            stats.elapsed_s = time.monotonic() - wall_first
            stats.interrupted = stop.is_set()
            progress.show(self._done_this_pass(stats, total), _status(stats, lag), force=True)
            progress.close()
        return stats

    def _messages(self, restart_clock: bool) -> Iterator[BagMessage | SweepMessage]:
        """One pass: the PointCloud2 messages and the decoded sweeps, merged in bag-time order.

        ``restart_clock``: the first message (a decoded sweep takes tens of ms) is read before
        the schedule starts, so that it is not late; later ones are read while the previous
        message's gap runs.
        """
        streams: list[Iterator[BagMessage | SweepMessage]] = []
        if self.cloud_topics:
            streams.append(self.bag.messages(self.cloud_topics, self.start_ns, self.stop_ns))
        if self.packets is not None:
            streams.append(self.packets.messages(self.start_ns, self.stop_ns))
        try:
            merged = (
                streams[0]
                if len(streams) == 1
                else heapq.merge(*streams, key=lambda message: message.timestamp_ns)
            )
            first = next(merged, None)
            if restart_clock:
                self._wall_start = time.monotonic()
            if first is None:
                return
            yield first
            yield from merged
        finally:
            for stream in streams:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()

    def describe_decoding(self) -> str | None:
        """The start-up line on packet decoding, None without packet topics."""
        if self.packets is None:
            return None
        return f"decoding {', '.join(self.packet_topics)}: {self.packets.decoding.describe()}"

    def _offset_s(self, message: BagMessage | SweepMessage, index: int) -> float:
        """When message number ``index`` of a pass is due, in seconds after the pass starts."""
        if self.interval_s is not None:
            return index * self.interval_s
        return (message.timestamp_ns - self.start_ns) / (self.options.rate * NS_PER_S)

    @staticmethod
    def _done_this_pass(stats: ReplayStats, total: int | None) -> int:
        return stats.frames if total is None else stats.frames - (stats.passes - 1) * total

    def _frames_per_pass(self) -> int | None:
        """Messages per pass when known without reading the bag (no --start/--duration, no
        packet topic: their sweeps are counted by decoding)."""
        if self.packets is None and self.options.start_s == 0 and self.options.duration_s is None:
            return sum(self.bag.topics[t].count for t in self.topics)
        return None

    def _publish(self, message: BagMessage | SweepMessage) -> None:
        self.publishers[message.topic].publish(message.cdr)

    def bag_time_ns(self) -> int:
        """Bag time of the playback clock now."""
        elapsed = time.monotonic() - self._wall_start
        return self.start_ns + round(elapsed * self.options.rate * NS_PER_S)

    def _publish_clock(self) -> None:
        if self.clock_publisher is None:
            return
        now = self.bag_time_ns()
        clock = Clock()
        clock.clock.sec, clock.clock.nanosec = divmod(now, NS_PER_S)
        self.clock_publisher.publish(clock)

    def _sleep_until(self, target: float, stop: threading.Event) -> bool:
        """Sleep until monotonic time ``target``, publishing /clock; False when stopped."""
        period = 1.0 / self.options.clock_hz if self.clock_publisher else math.inf
        next_clock = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= next_clock:
                self._publish_clock()
                next_clock = now + period
            remaining = target - now
            if remaining <= 0:
                return not stop.is_set()
            if stop.wait(min(remaining, next_clock - now, MAX_WAIT_S)):
                return False


def replay_bag(
    options: ReplayOptions,
    stop: threading.Event | None = None,
    *,
    context: Context | None = None,
    stream: TextIO = sys.stderr,
    transport: Callable[[], str] | None = None,
) -> ReplayStats:
    """Open the bag, create a ``replay`` node in a fresh rclpy context and play it.

    Args:
        options: what to replay.
        stop: set it (from another thread or a signal handler) to stop; a fresh event if None.
        context: an uninitialised rclpy context to use; a new one if None.
        stream: where the progress bar and messages go.
        transport: called once the bag is open, before the first participant, to choose this
            process's Fast DDS transport (``ros.transport.configure_transport``); its line is
            printed. None: the process keeps its settings (a library caller).

    Raises:
        BagError: bad bag, topic or remap (before anything is published).
    """
    stop = stop or threading.Event()
    context = context or Context()
    with BagFiles(options.bag, note=lambda line: print(line, file=stream)) as bag:
        transport_line = transport() if transport is not None else None
        rclpy.init(
            args=list(options.rcl_args) or ["replay"],  # never sys.argv: OLD:=NEW is ours
            context=context,
            signal_handler_options=SignalHandlerOptions.NO,
        )
        try:
            node = rclpy.create_node("replay", context=context)
            player = BagPlayer(node, bag, options)
            print(
                f"replaying {', '.join(player.topics)} -> {', '.join(player.output_topics())} "
                f"from {options.bag}: {player.schedule()}",
                file=stream,
            )
            decoding = player.describe_decoding()
            if decoding:
                print(decoding, file=stream)
            if transport_line:
                print(transport_line, file=stream)
            waited = options.wait_for_subscribers_s
            if waited > 0 and not player.wait_for_subscribers(stop) and not stop.is_set():
                print(
                    f"fewer than {options.min_subscribers} subscriber(s) after {waited:g} s; "
                    "replaying anyway",
                    file=stream,
                )
            stats = player.play(stop, stream)
            if not stop.is_set() and not player.wait_for_acks():
                print(f"some messages unacknowledged after {ACK_TIMEOUT_S:g} s", file=stream)
            # Best-effort readers acknowledge nothing: let them take the last samples before
            # the publishers go away with the context.
            stop.wait(LINGER_S)
            return stats
        finally:
            context.try_shutdown()


def _status(stats: ReplayStats, lag_s: float) -> str:
    """The progress line's detail: pass, achieved rate and lag behind the schedule."""
    return f"frames  pass {stats.passes}  {stats.rate_hz:5.1f} Hz  lag {1e3 * lag_s:6.1f} ms"
