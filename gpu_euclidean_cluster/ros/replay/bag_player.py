"""Replay PointCloud2 messages of an open bag through an rclpy node on the recorded schedule.

Messages are published as serialized CDR: ROS 2 bags already hold CDR, so the stored bytes go to
``Publisher.publish`` unchanged (no copy of the point payload); ROS 1 messages are converted at
byte level (``header.seq`` dropped) by
:class:`~gpu_euclidean_cluster.pointcloud_io.bags.PointCloudBag`. Velodyne packet topics
(``velodyne_msgs/msg/VelodyneScan``) are played by :mod:`.packet_player` as ``--packets`` says:
their recorded messages, each at its bag time, and/or the PointCloud2 sweeps decoded from them, a
sweep at the bag time of the packet message that completed it; all merged in time order with the
PointCloud2 messages; Hesai packet topics (``pandar_msgs/msg/PandarScan``) alike. With a sensor
kit (``--sensor-kit``) each packet topic is decoded with its sensor's settings, and
``--concatenate`` puts the joined vehicle clouds into the same stream, each at the bag time its
group closed (:mod:`.sensor_kit_player`). A bag whose ``metadata.yaml``
rosbags refuses is read through its storage files (:mod:`.bag_files`). Before anything is
published, the bag's messages (not its claims) say where the schedule starts, which messages are
skipped, and whether each topic holds the type it declares (:mod:`.bag_checks`).

Timing: message ``i`` is published at ``wall_start + (t_i - t_first) / rate``, with ``t`` the bag
timestamp, or at ``wall_start + i / rate_hz`` with a fixed rate (``--rate-hz``; a one-message
segment played more than once uses :data:`ONE_INSTANT_HZ`); a decoded sweep counts as a message
of its own there, unless the packet message that completed it is published too: then it goes out
right after that message, in its slot; a joined cloud goes out in the slot of the message that
closed its group, and takes a slot of its own when its timeout or the end of a pass closed it.
The lag is how late the publish call returns after the target. ``/clock`` (optional) carries the
bag time of the playback clock, for nodes with ``use_sim_time``. A wait of more than
:data:`LONG_WAIT_NOTE_S` for the next message (a gap in the bag's stamps, or a slow ``--rate``)
is announced with a note, so that a player that waits is never silent.
"""

from __future__ import annotations

import heapq
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
from ...tools.progress import ProgressBar
from ..qos import reliability_policy
from .bag_checks import check_declared_types, negative_stamp_notes, plan_segment, spans_instant
from .bag_files import BagFiles
from .packet_player import (
    PACKET_TYPES,
    PacketMessage,
    PacketPlan,
    PacketStream,
    SweepMessage,
    decoded_topic,
    packet_plan,
)
from .replay_options import CONCATENATED_TOPIC, ReplayOptions
from .replay_stats import ReplayStats
from .sensor_kit_player import Concatenation, JoinedMessage, KitPlan, load_kit, plan_kit

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
#: A wait for the next message longer than this (seconds) is announced with a note.
LONG_WAIT_NOTE_S = 60.0


#: One message of a pass: a PointCloud2 of the bag, a packet message as recorded, a decoded
#: sweep, a joined vehicle cloud (``--concatenate``).
Message = BagMessage | PacketMessage | SweepMessage | JoinedMessage
#: What a publisher plays: ``(kind, bag topic)``, the kind one of :data:`CLOUD`, :data:`PACKETS`,
#: :data:`SWEEPS` and :data:`JOINED` (whose topic is :data:`CONCATENATED_TOPIC`).
OutputKey = tuple[str, str]
CLOUD, PACKETS, SWEEPS, JOINED = "cloud", "packets", "sweeps", "joined"


def select_topics(bag: BagFiles, requested: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The PointCloud2 and the packet topics (VelodyneScan or PandarScan) to play; default: all
    of those types.

    Raises:
        BagError: a requested topic is absent (the message lists those present) or of another
            type, the bag holds none of the types, or the packet topics are of both sensor
            lines (one replay plays one).
    """
    topics = bag.topics
    listing = ", ".join(f"{t.name} ({t.msgtype})" for t in topics.values()) or "none"
    playable = (POINTCLOUD2, *PACKET_TYPES)
    if not requested:
        chosen = [name for name, topic in topics.items() if topic.msgtype in playable]
        if not chosen:
            raise BagError(
                f"no {POINTCLOUD2} topic (nor {' nor '.join(PACKET_TYPES)}) in {bag.path}; "
                f"topics: {listing}"
            )
    else:
        chosen = list(dict.fromkeys(requested))
        for name in chosen:
            if name not in topics:
                raise BagError(f"topic {name} is not in {bag.path}; topics: {listing}")
            if topics[name].msgtype not in playable:
                raise BagError(
                    f"topic {name} has type {topics[name].msgtype}, not {POINTCLOUD2} "
                    f"(or {' or '.join(PACKET_TYPES)})"
                )
    clouds = [name for name in chosen if topics[name].msgtype == POINTCLOUD2]
    packets = [name for name in chosen if topics[name].msgtype in PACKET_TYPES]
    if len({topics[name].msgtype for name in packets}) > 1:
        raise BagError(
            f"packet topics of both {' and '.join(PACKET_TYPES)}: play one sensor line at a time "
            "(--topics)"
        )
    return clouds, packets


class BagPlayer:
    """Publishes the PointCloud2 messages of an open bag, and its Velodyne packet topics as
    ``options.packets`` says, through ``node`` on a timed schedule; ``note`` takes the one-line
    notes of the messages it does not decode and of long waits.

    Raises:
        BagError: a topic refused (absent, of another type, its first message not of its
            declared type), ``--start`` past the end, bad packet settings, a sensor kit that
            cannot be read or does not fit the bag (:func:`.sensor_kit_player.plan_kit`), bad
            remaps.
    """

    def __init__(
        self, node: Node, bag: BagFiles, options: ReplayOptions, note: Callable[[str], None] = print
    ) -> None:
        self.node = node
        self.bag = bag
        self.options = options
        self.note = note
        self.cloud_topics, self.packet_topics = select_topics(bag, options.topics)
        #: every topic played, as in the bag: PointCloud2 first, then the packet topics
        self.topics = [*self.cloud_topics, *self.packet_topics]
        check_declared_types(bag, self.cloud_topics, self.packet_topics)
        #: how the sensor kit (``--sensor-kit``) plays the bag; None without one
        self.kit_plan: KitPlan | None = None
        #: the sensors joined (``--concatenate``); None: not joined
        self.concatenation: Concatenation | None = None
        if options.sensor_kit is not None:
            try:
                kit, path = load_kit(str(options.sensor_kit))
                bag_types = {name: topic.msgtype for name, topic in bag.topics.items()}
                self.kit_plan = plan_kit(kit, path, bag_types, self.topics)
                if options.concatenate:
                    self.concatenation = Concatenation(self.kit_plan, note)
            except ValueError as error:
                raise BagError(str(error)) from None
        self.plan: PacketPlan | None = None
        self.packets: PacketStream | None = None
        if self.packet_topics:
            msgtype = bag.topics[self.packet_topics[0]].msgtype
            kit_decodings = None if self.kit_plan is None else self.kit_plan.decodings
            try:
                self.plan = packet_plan(options, self.packet_topics, kit_decodings, msgtype)
                self.packets = PacketStream(
                    bag.path, self.packet_topics, self.plan.raw, self.plan.decodings, note, msgtype
                )
            except BagError:
                raise
            except ValueError as error:
                raise BagError(f"{', '.join(self.packet_topics)} ({msgtype}): {error}") from None
        #: output name and message type of each publisher, in the order of the start-up line
        self.outputs = self._outputs()
        #: the notes on the messages skipped (stamped before bag time 0)
        self.skipped = negative_stamp_notes(bag, self.topics)
        segment = plan_segment(bag, self.topics, options.start_s, options.duration_s)
        self.start_ns, self.stop_ns = segment.start_ns, segment.stop_ns
        #: seconds between messages on a fixed schedule; None: the recorded timing
        self.interval_s: float | None = None
        if options.rate_hz is not None:
            self.interval_s = 1.0 / options.rate_hz
        elif (options.loop or options.repeat > 1) and spans_instant(
            bag, self.topics, segment, MIN_LOOP_SPAN_NS
        ):
            self.interval_s = 1.0 / ONE_INSTANT_HZ
        qos = QoSProfile(
            history=QoSHistoryPolicy.KEEP_LAST,
            depth=options.qos_depth,
            reliability=reliability_policy(options.qos_reliability),
            durability=QoSDurabilityPolicy.VOLATILE,
        )
        self.publishers: dict[OutputKey, Publisher] = {
            key: node.create_publisher(message_type, name, qos)
            for key, (name, message_type) in self.outputs.items()
        }
        self.clock_publisher = (
            node.create_publisher(Clock, "/clock", 10) if options.clock_hz > 0 else None
        )
        self._wall_start = 0.0

    def _outputs(self) -> dict[OutputKey, tuple[str, type]]:
        """Each publisher's topic name (``--remap`` applied) and message type.

        A packets topic's recorded messages go out under its own name; its sweeps under
        :func:`decoded_topic`'s; the joined cloud under :data:`CONCATENATED_TOPIC`. ``--remap``
        renames each by its default name; with the sweeps alone (``--packets decoded``) the
        packets topic's name renames them too.

        Raises:
            BagError: a remap of a topic not played, or two message types on one name.
        """
        remap = self.options.remap
        outputs: dict[OutputKey, tuple[str, type]] = {
            (CLOUD, topic): (remap.get(topic, topic), PointCloud2) for topic in self.cloud_topics
        }
        renamable = set(self.cloud_topics)
        replayed = list(self.cloud_topics)
        plan = self.plan
        for topic in self.packet_topics:
            assert plan is not None
            decoded = decoded_topic(topic)
            if plan.raw:
                assert plan.scan_type is not None
                outputs[PACKETS, topic] = (remap.get(topic, topic), plan.scan_type)
                renamable.add(topic)
            if not plan.decodings:
                replayed.append(f"{topic} (as recorded)")
                continue
            name = remap.get(decoded, decoded)
            renamable.add(decoded)
            if not plan.raw:  # the sweeps alone: the packets topic's name renames them too
                name = remap.get(topic, name)
                renamable.add(topic)
            outputs[SWEEPS, topic] = (name, PointCloud2)
            how = "as recorded, and decoded to" if plan.raw else "decoded to"
            replayed.append(f"{topic} ({how} {decoded})")
        if self.concatenation is not None:
            name = remap.get(CONCATENATED_TOPIC, CONCATENATED_TOPIC)
            outputs[JOINED, CONCATENATED_TOPIC] = (name, PointCloud2)
            renamable.add(CONCATENATED_TOPIC)
            replayed.append(f"{CONCATENATED_TOPIC} (joined)")
        unknown = sorted(set(remap) - renamable)
        if unknown:
            raise BagError(
                f"cannot remap {', '.join(unknown)}: not replayed (replayed topics: "
                f"{', '.join(replayed)})"
            )
        types: dict[str, type] = {}
        for name, message_type in outputs.values():
            other = types.setdefault(name, message_type)
            if other is not message_type:
                raise BagError(
                    f"{name} would carry both {_type_name(other)} and {_type_name(message_type)} "
                    "messages: --remap one of them to another name"
                )
        return outputs

    def wait_for_acks(self) -> bool:
        """Wait (up to ACK_TIMEOUT_S) until reliable subscribers acknowledged every message,
        so that the last frames are not lost when the process exits right after publishing."""
        timeout = Duration(seconds=ACK_TIMEOUT_S)
        return all(p.wait_for_all_acked(timeout) for p in self.publishers.values())

    def output_topics(self) -> list[str]:
        """Topic names as published (after remapping), one per publisher."""
        return [publisher.topic_name for publisher in self.publishers.values()]

    def wait_for_subscribers(self, stop: threading.Event) -> bool:
        """Wait up to ``wait_for_subscribers_s`` until every output topic (packets and decoded
        clouds alike) has ``min_subscribers``.

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

    def notes(self) -> tuple[str, ...]:
        """The one-line notes on how packet topics play, where the default could not be kept,
        on the kit's sensors that never arrive, and on the messages skipped."""
        kit_notes = () if self.kit_plan is None else self.kit_plan.notes
        return (*(() if self.plan is None else self.plan.notes), *kit_notes, *self.skipped)

    def play(self, stop: threading.Event, stream: TextIO = sys.stderr) -> ReplayStats:
        """Replay (``repeat`` passes, or until ``stop`` with ``loop``); return the statistics."""
        stats = ReplayStats(publishes_packets=self.plan is not None and self.plan.raw)
        total = self._messages_per_pass()
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
                slots = 0  # places on the schedule taken this pass (see the module docstring)
                for message in self._messages(restart_clock=stats.passes == 1):
                    if not self._rides_along(message):
                        slots += 1
                    target = self._wall_start + self._offset_s(message, slots - 1)
                    self._note_long_wait(message, target)
                    if not self._sleep_until(target, stop):
                        break
                    self._publish(message)
                    lag = max(0.0, time.monotonic() - target)
                    stats.record(
                        lag,
                        packet=isinstance(message, PacketMessage),
                        sweep=isinstance(message, SweepMessage),
                        joined=isinstance(message, JoinedMessage),
                    )
                    stats.elapsed_s = time.monotonic() - wall_first
                    progress.show(self._done_this_pass(stats, total), stats.status(lag))
                    first_ns = message.timestamp_ns if slots == 1 else first_ns
                    last_ns = message.timestamp_ns
                if slots == 0 or not (self.options.loop or stats.passes < self.options.repeat):
                    break
                if self.interval_s is not None:
                    self._wall_start += slots * self.interval_s
                    continue
                # the next pass starts one mean message period after this pass's last message
                period_ns = (last_ns - first_ns) / (slots - 1) if slots > 1 else 0.0
                self._wall_start += (last_ns - self.start_ns + period_ns) / (
                    self.options.rate * NS_PER_S
                )
        finally:
            stats.elapsed_s = time.monotonic() - wall_first
            stats.interrupted = stop.is_set()
            progress.show(self._done_this_pass(stats, total), stats.status(lag), force=True)
            progress.close()
        return stats

    def _note_long_wait(self, message: Message, target: float) -> None:
        """A note when ``message`` is due more than :data:`LONG_WAIT_NOTE_S` from now."""
        wait_s = target - time.monotonic()
        if wait_s > LONG_WAIT_NOTE_S:
            self.note(
                f"note: the next message ({message.topic}, bag time {message.timestamp_ns} ns) is "
                f"due in {wait_s:.0f} s at rate {self.options.rate:g}: a gap in the bag's stamps; "
                "waiting (Ctrl-C stops)"
            )

    def _rides_along(self, message: Message) -> bool:
        """A decoded sweep whose completing packet message is published too, or a joined cloud
        whose group the message before it closed: it goes out right after that message, in its
        place on the schedule."""
        if isinstance(message, JoinedMessage):
            return message.with_message
        return isinstance(message, SweepMessage) and self.plan is not None and self.plan.raw

    def _messages(self, restart_clock: bool) -> Iterator[Message]:
        """One pass: the PointCloud2 messages and the packet topics' messages and sweeps,
        merged in bag-time order, and with ``--concatenate`` the joined clouds (a fresh vehicle
        each pass).

        ``restart_clock``: the first message (a decoded sweep takes tens of ms) is read before
        the schedule starts, so that it is not late; later ones are read while the previous
        message's gap runs.
        """
        streams: list[Iterator[Message]] = []
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
            if self.concatenation is not None:
                merged = self.concatenation.messages(merged)
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

    def describe_decoding(self) -> list[str]:
        """The start-up lines on packet decoding (which topic with which settings; with a
        sensor kit, which sensor's) and on the joined cloud."""
        lines = []
        if self.kit_plan is not None:
            lines += self.kit_plan.describe()
        elif self.plan is not None and self.plan.decodings:
            decoding = next(iter(self.plan.decodings.values()))  # the options': one for all
            lines.append(f"decoding {', '.join(self.packet_topics)}: {decoding.describe()}")
        if self.concatenation is not None:
            output = self.outputs[JOINED, CONCATENATED_TOPIC][0]
            lines.append(self.concatenation.describe(output))
            if self.concatenation.notice:
                lines.append(f"note: {self.concatenation.notice}")
        return lines

    def _offset_s(self, message: Message, slot: int) -> float:
        """When ``message``, in place ``slot`` of a pass's schedule, is due: seconds after the
        pass starts."""
        if self.interval_s is not None:
            return slot * self.interval_s
        return (message.timestamp_ns - self.start_ns) / (self.options.rate * NS_PER_S)

    @staticmethod
    def _done_this_pass(stats: ReplayStats, total: int | None) -> int:
        return stats.messages if total is None else stats.messages - (stats.passes - 1) * total

    def _messages_per_pass(self) -> int | None:
        """Messages per pass when known without reading the bag: no --start/--duration, no
        decoded packet topic (its sweeps are counted by decoding), no joined clouds."""
        if self.concatenation is not None or (self.plan is not None and self.plan.decodings):
            return None
        if self.options.start_s == 0 and self.options.duration_s is None:
            return sum(self.bag.topics[t].count for t in self.topics)
        return None

    def _publish(self, message: Message) -> None:
        if isinstance(message, PacketMessage):
            key = (PACKETS, message.topic)
        elif isinstance(message, SweepMessage):
            key = (SWEEPS, message.topic)
        elif isinstance(message, JoinedMessage):
            key = (JOINED, message.topic)
        else:
            key = (CLOUD, message.topic)
        self.publishers[key].publish(message.cdr)

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
            player = BagPlayer(node, bag, options, lambda line: print(line, file=stream))
            print(
                f"replaying {', '.join(player.topics)} -> {', '.join(player.output_topics())} "
                f"from {options.bag}: {player.schedule()}",
                file=stream,
            )
            for line in player.notes():
                print(line, file=stream)
            for line in player.describe_decoding():
                print(line, file=stream)
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


def _type_name(message_type: type) -> str:
    """``pkg/msg/Name`` of a ROS 2 message class."""
    return f"{message_type.__module__.split('.')[0]}/msg/{message_type.__name__}"
