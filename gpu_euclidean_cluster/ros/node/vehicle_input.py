"""The node's ``sensor_kit`` input: every LiDAR of a vehicle, joined in its base frame.

With the ``sensor_kit`` parameter set (a kit file, or the name of one shipped in ``config/``:
``sample_sensor_kit``), the node subscribes each sensor's own topic as the kit names it
(absolute: ``/sensing/lidar/top/velodyne_packets``), decodes each packets sensor with its own
settings and calibration, brings every sweep into the kit's base frame through its crop boxes
(and Autoware's ring outlier filter with ``ring_outlier_filter``), groups the sweeps as
Autoware's ``concatenate_and_time_sync_node`` does (the kit's ``concatenation`` block) and
clusters each joined cloud like a received one (:class:`~...frame.vehicle.VehicleSweeps`).

What is not Autoware's usual run is said, never hidden: a group closed at its timeout without a
sensor (a warning naming the sensors missing, at most every 5 s), a sweep late for its group, a
duplicate or out-of-order sweep, a group not published (each a warning with the sensor's name);
each closed group's status as Autoware's node reports it goes to ``/diagnostics``
(``<node>: concatenation``); a sensor's refused message is counted as the packet input counts
it. The group timeout runs on the node's clock (``use_sim_time`` follows ``/clock``). The joined
cloud itself (``PointXYZIRC`` in the base frame, Autoware's concatenated cloud) is published on
``output/concatenated/pointcloud`` while that topic has a subscriber.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ...core.config import ConfigError
from ...core.ring_outlier import RingOutlierSettings
from ...frame.packets import SweepCloud
from ...frame.vehicle import VehicleOutput, VehicleSweeps
from ...pointcloud_io.pointcloud2 import from_cdr, on_host
from ...pointcloud_io.sensor_kit import SensorKitError, load_sensor_kit
from ...pointcloud_io.velodyne import CalibrationError
from ...pointcloud_io.velodyne.sweeps import PacketsRefusedError
from ..messages.cloud_messages import cloud_to_message
from ..parameters.velodyne_options import (
    CHECKOUT_CALIBRATION_DIR,
    calibration_dirs,
    kit_calibration,
)
from .packet_input import velodyne_scan_type

#: The joined cloud (Autoware's ``/sensing/lidar/concatenated/pointcloud``), published while it
#: has a subscriber.
CONCATENATED_TOPIC = "output/concatenated/pointcloud"
#: Seconds between two checks of the open groups' timeouts.
POLL_PERIOD_S = 0.01
#: Seconds between two warnings of one kind.
WARNING_PERIOD_S = 5.0


def vehicle_sweeps(values: dict[str, Any], backend: Any = None) -> VehicleSweeps | None:
    """The vehicle input the node's parameter ``values`` ask for, or None without ``sensor_kit``.

    Raises:
        ConfigError: the kit cannot be read, or a calibration or setting in it is wrong; also
            ``sensor_kit`` with ``sensor_model`` (one input or the other).
    """
    given = values["sensor_kit"]
    if not given:
        return None
    if values["sensor_model"]:
        raise ConfigError(
            "sensor_kit and sensor_model exclude each other: a kit names each sensor's model"
        )
    path = kit_file(given)
    rings = RingOutlierSettings() if values["ring_outlier_filter"] else None
    try:
        kit = load_sensor_kit(path)
        return VehicleSweeps(
            kit,
            backend,
            calibration_file=lambda sensor: kit_calibration(kit, sensor),
            ring_outlier=rings,
        )
    except (SensorKitError, ConfigError, CalibrationError, OSError, ValueError) as error:
        raise ConfigError(f"sensor_kit {path}: {error}") from None


def kit_file(given: str) -> Path:
    """``given`` as a path, or the shipped kit of that name (``sample_sensor_kit[.yaml]``)."""
    path = Path(given).expanduser()
    if path.is_file() or "/" in given:
        return path
    name = given if given.endswith(".yaml") else f"{given}.yaml"
    for folder in (CHECKOUT_CALIBRATION_DIR.parent, *(d.parent for d in calibration_dirs())):
        if (folder / name).is_file():
            return folder / name
    return path


def subscribe_vehicle(
    node: Any,
    vehicle: VehicleSweeps,
    qos: Any,
    on_sweep: Callable[[SweepCloud, float], None],
    on_error: Callable[[str, str], None],
    clock: Callable[[], float],
) -> list[Any]:
    """Subscribe ``node`` to every sensor's topic and poll the groups' timeouts; each joined
    cloud goes to ``on_sweep`` with its arrival time (``clock()``), each refused message to
    ``on_error`` (kind, one line). Returns the subscriptions.

    Raises:
        ConfigError: a packets sensor and no ``velodyne_msgs``.
    """
    reporter = _Reporter(node)
    concatenated = node.create_publisher(PointCloud2, CONCATENATED_TOPIC, qos)

    def handle(output: VehicleOutput, started: float) -> None:
        """``output`` of a call that began at ``time.perf_counter()`` ``started``."""
        received = clock()
        processing_ms = (time.perf_counter() - started) * 1e3
        reporter.report(output, processing_ms, node.get_clock().now().nanoseconds)
        for joined in output.clouds:
            sweep = SweepCloud(joined.cloud, joined.stamp_ns, joined.frame_id)
            on_sweep(sweep, received)
            if concatenated.get_subscription_count():
                sec, nanosec = divmod(joined.stamp_ns, 1_000_000_000)
                header = Header(frame_id=joined.frame_id)
                header.stamp.sec, header.stamp.nanosec = sec, nanosec
                concatenated.publish(cloud_to_message(on_host(joined.cloud), header))

    def receive(sensor: str, packets: bool) -> Callable[[bytes], None]:
        def take(cdr: bytes) -> None:
            started, now = time.perf_counter(), node.get_clock().now().nanoseconds
            try:
                if packets:
                    handle(vehicle.feed_packets(sensor, cdr, now), started)
                else:
                    cloud, header = from_cdr(cdr)
                    stamp = header.stamp.sec * 1_000_000_000 + header.stamp.nanosec
                    handle(vehicle.feed_cloud(sensor, cloud, stamp, now), started)
            except PacketsRefusedError as error:
                on_error(error.kind, f"sensor {sensor}: VelodyneScan refused: {error}")
            except ValueError as error:
                on_error("malformed", f"sensor {sensor}: {error}")
            except Exception as error:  # one message never stops the node
                reason = " ".join(str(error).split()) or "no message"
                on_error("decode_error", f"sensor {sensor}: {type(error).__name__}: {reason}")

        return take

    subscriptions = []
    for sensor in vehicle.kit.sensors:
        packets = sensor.input.decoder is not None
        kind = velodyne_scan_type(sensor.input.decoder.model) if packets else PointCloud2
        take = receive(sensor.name, packets)
        subscriptions.append(
            node.create_subscription(kind, sensor.input.topic, take, qos, raw=True)
        )

    def poll() -> None:
        started = time.perf_counter()
        try:
            handle(vehicle.poll(node.get_clock().now().nanoseconds), started)
        except Exception as error:  # a timer never stops the node either
            reason = " ".join(str(error).split()) or "no message"
            on_error("processing_error", f"concatenation: {type(error).__name__}: {reason}")

    node.create_timer(POLL_PERIOD_S, poll)
    if vehicle.notice:
        node.get_logger().warning(vehicle.notice)
    return subscriptions


class _Reporter:
    """Each closed group's status on ``/diagnostics`` and each event in the log (throttled per
    kind), as the node's other warnings."""

    def __init__(self, node: Any) -> None:
        self._node = node
        self._publisher = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._name = f"{node.get_name()}: concatenation"
        self._events: Counter[str] = Counter()
        self._next_warning: dict[str, float] = {}

    def report(self, output: VehicleOutput, processing_ms: float, now_ns: int) -> None:
        """Log ``output``'s events and groups missing sensors; publish each group's status
        (Autoware's keys, with the call's ``processing_ms`` and the latencies at ``now_ns``)."""
        for event in output.events:
            self._events[event.kind] += 1
            self._warn(event.kind, f"concatenation: {event.message}")
        for joined in output.clouds:
            group = joined.group
            level, message, values = group.diagnostic(processing_ms, now_ns)
            if group.missing:
                missing = ", ".join(group.missing)
                self._warn("missing", f"concatenation: joined without {missing} ({message})")
            counts = [(f"events_{kind}", str(n)) for kind, n in sorted(self._events.items())]
            status = DiagnosticStatus(
                level=bytes([level]),
                name=self._name,
                message=message,
                hardware_id=self._node.get_name(),
                values=[KeyValue(key=k, value=v) for k, v in (*values, *counts)],
            )
            stamp = self._node.get_clock().now().to_msg()
            self._publisher.publish(DiagnosticArray(header=Header(stamp=stamp), status=[status]))

    def _warn(self, kind: str, line: str) -> None:
        now = time.monotonic()
        if now >= self._next_warning.get(kind, float("-inf")):
            self._next_warning[kind] = now + WARNING_PERIOD_S
            self._node.get_logger().warning(line)
