"""``replay --sensor-kit``: a vehicle's bag played as its sensor kit says, and ``--concatenate``.

A sensor kit (``docs/sensor_kit.md``) names each LiDAR's topic, model, calibration and decoder
settings. :func:`plan_kit` matches it against the bag: each packets topic a kit sensor names is
decoded with that sensor's own settings and calibration (its sweeps in the sensor's frame, on
the topic's ``pointcloud_raw_ex`` as any decoded topic); a packets topic played that no sensor
names is refused (``--topics`` may leave it out), as is a kit topic the bag holds with another
type; a sensor whose topic is not in the bag, or not played, is a note: it never arrives.

:class:`Concatenation` (``--concatenate``) joins the sensors' sweeps as Autoware's
``concatenate_and_time_sync_node`` does, through the frame layer's CPU
:class:`~...frame.vehicle.VehicleSweeps` (into the kit's base frame, cropped, grouped by the kit's
``concatenation`` block, joined as ``PointXYZIRC``), in **bag time**: a decoded sweep arrives at
the bag time of the packet message that completed it (a points sensor's cloud at its own), the
groups' timeouts run on the bag's clock (every open group whose timeout passes before the next
message closes at its deadline), and what is still open when a pass ends closes then (``flush``).
So the joined clouds are the same on every run, whatever the rate or the load. Each goes out as a
``sensor_msgs/PointCloud2`` (CDR bytes, :func:`~..messages.serialized.publishable_cloud`)
stamped with its group's stamp, in the base frame, on :data:`CONCATENATED_TOPIC`, due at the bag
time its group closed (:class:`JoinedMessage`). Every pass starts a fresh vehicle, as it starts
fresh decoders. The concatenation's events (late, duplicate, dropped sweeps) and the groups
joined without a sensor are notes, at most :data:`CONCATENATION_NOTES` a pass, then their count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ...core.units import NS_PER_S
from ...frame.vehicle import JoinedCloud, VehicleOutput, VehicleSweeps
from ...pointcloud_io.bags import POINTCLOUD2, BagMessage
from ...pointcloud_io.pointcloud2 import from_cdr, on_host
from ...pointcloud_io.sensor_kit import Sensor, SensorKit, load_sensor_kit
from ...pointcloud_io.sensor_kit.model import PACKETS
from ...pointcloud_io.velodyne.bags import VELODYNE_SCAN
from ..messages.serialized import publishable_cloud
from ..node.vehicle_input import kit_file
from ..parameters.option_values import one_line
from ..parameters.velodyne_options import PacketDecoding, kit_calibration
from .packet_player import PacketMessage, SweepMessage, nebula_stamp_ns
from .replay_options import CONCATENATED_TOPIC

#: Concatenation notes said one by one in a pass; the rest are counted at its end.
CONCATENATION_NOTES = 5
#: A message of a pass before the joined clouds are put in: a PointCloud2 of the bag, a packet
#: message as recorded, a decoded sweep.
Played = BagMessage | PacketMessage | SweepMessage


@dataclass(frozen=True)
class KitPlan:
    """How a sensor kit plays a bag (see :func:`plan_kit`).

    Attributes:
        kit: the kit.
        path: its file.
        sensors: each played topic a kit sensor names (packets or points), its sensor.
        decodings: each played packets topic's decoding: its sensor's settings and calibration.
        notes: one line for each sensor that never arrives (its topic not in the bag, or not
            played).
    """

    kit: SensorKit
    path: Path
    sensors: Mapping[str, Sensor]
    decodings: Mapping[str, PacketDecoding]
    notes: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        """The start-up lines: which topic is decoded with which sensor's settings."""
        return [
            f"decoding {topic} with sensor {self.sensors[topic].name}'s settings of kit "
            f"{self.kit.name}: {decoding.describe()}"
            for topic, decoding in self.decodings.items()
        ]


def load_kit(given: str) -> tuple[SensorKit, Path]:
    """The kit ``given`` names: a file, or a kit shipped in ``config/`` (``sample_sensor_kit``).

    Raises:
        ValueError: it cannot be read or is not a valid kit; one line.
    """
    path = kit_file(given)
    if not path.exists() and "/" not in given:
        raise ValueError(
            f"--sensor-kit {given}: neither a file nor the name of a kit shipped in config/ "
            "(sample_sensor_kit)"
        )
    try:
        return load_sensor_kit(path), path
    except (ValueError, OSError) as error:  # SensorKitError: one line per problem
        problems = "; ".join(str(error).splitlines()) or type(error).__name__
        raise ValueError(f"--sensor-kit {given}: {problems}") from None


def plan_kit(
    kit: SensorKit, path: Path, bag_types: Mapping[str, str], played: Sequence[str]
) -> KitPlan:
    """Match ``kit`` against a bag whose topics have ``bag_types`` (name -> message type), of
    which ``played`` are played.

    Raises:
        ValueError: a played packets topic no kit sensor names (the line lists the kit's packets
            topics), or a kit topic the bag holds with another type than the sensor reads.
    """
    wanted = {PACKETS: VELODYNE_SCAN}
    sensors: dict[str, Sensor] = {}
    notes: list[str] = []
    for sensor in kit.sensors:
        topic, kind = sensor.input.topic, sensor.input.kind
        expected = wanted.get(kind, POINTCLOUD2)
        held = bag_types.get(topic)
        where = f"sensor {sensor.name} of kit {kit.name}"
        if held is None or topic not in played:
            why = "is not in the bag" if held is None else "is not played (--topics)"
            notes.append(f"note: {where}: its topic {topic} {why}; it never arrives")
        elif held != expected:
            raise ValueError(
                f"{where} reads {expected} on {topic}, but the bag's {topic} is {held}"
            )
        else:
            sensors[topic] = sensor
    kit_packets = [s.input.topic for s in kit.sensors if s.input.kind == PACKETS]
    unnamed = [t for t in played if bag_types.get(t) == VELODYNE_SCAN and t not in sensors]
    if unnamed:
        which = "it" if len(unnamed) == 1 else "them"
        raise ValueError(
            f"{', '.join(unnamed)}: not among the packets topics of sensor kit {kit.name} "
            f"({path}): {', '.join(kit_packets) or 'none'}; leave {which} out with --topics"
        )
    decodings = {
        topic: PacketDecoding(sensor.input.decoder, kit_calibration(kit, sensor))
        for topic, sensor in sensors.items()
        if sensor.input.decoder is not None
    }
    return KitPlan(kit, path, sensors, decodings, tuple(notes))


@dataclass(frozen=True)
class JoinedMessage:
    """A joined vehicle cloud due for publishing.

    Attributes:
        topic: :data:`CONCATENATED_TOPIC` (its name before ``--remap``).
        timestamp_ns: the bag time its group closed.
        cdr: what to publish: its PointCloud2 as CDR bytes (or the message object, see
            :func:`~..messages.serialized.publishable_cloud`).
        joined: the joined cloud.
        with_message: its group was closed by the message of the same bag time (the sweep or
            cloud that completed it); False: at its timeout or at the end of a pass.
    """

    topic: str
    timestamp_ns: int
    cdr: bytes | PointCloud2
    joined: JoinedCloud
    with_message: bool


def joined_message(joined: JoinedCloud) -> bytes | PointCloud2:
    """What to publish for ``joined``: its ``PointXYZIRC`` PointCloud2, stamped with its group's
    stamp, in the base frame."""
    header = Header(frame_id=joined.frame_id)
    header.stamp.sec, header.stamp.nanosec = divmod(joined.stamp_ns, NS_PER_S)
    return publishable_cloud(on_host(joined.cloud), header)


class Concatenation:
    """The kit's sensors joined, pass by pass, in bag time (see the module docstring).

    Args:
        plan: the kit's plan for the bag: which played topic is which sensor's.
        note: takes the one-line notes (throttled per pass).

    Raises:
        ValueError: the kit's concatenation block, a pose or a calibration is not usable (checked
            here, before anything is played); one line.
    """

    def __init__(self, plan: KitPlan, note: Callable[[str], None] = print) -> None:
        self.kit = plan.kit
        self.note = note
        #: the sensor of each played topic
        self.sensor_of = {topic: sensor.name for topic, sensor in plan.sensors.items()}
        vehicle = self._vehicle()
        self.settings = vehicle.settings
        #: a line to show at start-up where the kit asks for what is not done, else None
        self.notice = vehicle.notice

    def _vehicle(self) -> VehicleSweeps:
        try:
            kit = self.kit
            calibration = lambda sensor: kit_calibration(kit, sensor)  # noqa: E731
            return VehicleSweeps(kit, None, calibration_file=calibration)
        except (ValueError, OSError) as error:  # SensorKitError, ConfigError, CalibrationError
            raise ValueError(
                f"--concatenate: sensor kit {self.kit.name}: {one_line(error)}"
            ) from None

    def describe(self, output: str) -> str:
        """The start-up line on the joined cloud, published on ``output``."""
        settings = self.settings
        return (
            f"joining {', '.join(settings.sensors)} into {settings.output_frame} -> {output}: "
            f"{settings.strategy} matching, timeout {settings.timeout_ns / NS_PER_S:g} s of "
            "bag time"
        )

    def messages(self, stream: Iterable[Played]) -> Iterator[Played | JoinedMessage]:
        """``stream`` (one pass's messages, in bag-time order) with the joined clouds put in:
        each right after the message that closed its group, or before the first message past
        its timeout, or at the end."""
        vehicle = self._vehicle()
        notes = _PassNotes(self.note)
        last_ns = None
        for message in stream:
            now_ns = message.timestamp_ns
            while (deadline := vehicle.next_deadline_ns()) is not None and deadline <= now_ns:
                yield from self._joined(vehicle.poll(deadline), deadline, False, notes)
            yield message
            last_ns = now_ns
            output = self._feed(vehicle, message, notes)
            if output is not None:
                yield from self._joined(output, now_ns, True, notes)
        if last_ns is not None:
            yield from self._joined(vehicle.flush(last_ns), last_ns, False, notes)
        notes.close()

    def _feed(
        self, vehicle: VehicleSweeps, message: Played, notes: _PassNotes
    ) -> VehicleOutput | None:
        """Feed a kit sensor's decoded sweep or recorded cloud; None for any other message."""
        if isinstance(message, PacketMessage):
            return None
        sensor = self.sensor_of.get(message.topic)
        if sensor is None:
            return None
        now_ns = message.timestamp_ns
        if isinstance(message, SweepMessage):
            sweep = message.sweep
            stamp_ns = nebula_stamp_ns(sweep.stamp)  # the stamp its published cloud carries
            return vehicle.feed_sweep(sensor, sweep.points, stamp_ns, now_ns)
        if isinstance(message, BagMessage):
            try:
                cloud, header = from_cdr(message.cdr)
                stamp_ns = header.stamp.sec * NS_PER_S + header.stamp.nanosec
                return vehicle.feed_cloud(sensor, cloud, stamp_ns, now_ns)
            except ValueError as error:
                notes.add(
                    "refused",
                    f"note: {message.topic} at bag time {now_ns} ns not joined: {one_line(error)}",
                )
        return None

    def _joined(
        self, output: VehicleOutput, now_ns: int, with_message: bool, notes: _PassNotes
    ) -> Iterator[JoinedMessage]:
        for event in output.events:
            notes.add(event.kind, f"note: concatenation at bag time {now_ns} ns: {event.message}")
        for joined in output.clouds:
            group = joined.group
            if group.missing:
                _, status, _ = group.diagnostic()
                notes.add(
                    "missing",
                    f"note: joined cloud closed at bag time {now_ns} ns ({group.trigger}) "
                    f"without {', '.join(group.missing)}: {status}",
                )
            cdr = joined_message(joined)
            yield JoinedMessage(CONCATENATED_TOPIC, now_ns, cdr, joined, with_message)


class _PassNotes:
    """One pass's concatenation notes: the first :data:`CONCATENATION_NOTES` said, the rest
    counted by kind and said in one line when the pass ends."""

    def __init__(self, note: Callable[[str], None]) -> None:
        self._note = note
        self._said = 0
        self._held: Counter[str] = Counter()

    def add(self, kind: str, line: str) -> None:
        if self._said < CONCATENATION_NOTES:
            self._said += 1
            self._note(line)
        else:
            self._held[kind] += 1

    def close(self) -> None:
        if self._held:
            kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(self._held.items()))
            total = sum(self._held.values())
            self._note(f"note: {total} more concatenation notes in this pass ({kinds})")
