"""A vehicle's LiDARs into one cloud in its base frame, as Autoware joins them (ROS-free).

    >>> vehicle = VehicleSweeps(kit, backend, calibration_file=resolve)
    >>> out = vehicle.feed_packets("top", cdr, now_ns)      # each VelodyneScan as it arrives
    >>> out = vehicle.poll(now_ns)                           # at vehicle.next_deadline_ns()
    >>> for joined in out.clouds: pipeline.process(joined.cloud, config, window)
    >>> for event in out.events: log.warning(event.message)

Per sensor of a sensor kit (``pointcloud_io/sensor_kit/``), each sweep goes through Autoware's
per-LiDAR chain, then the sensors' sweeps are joined as ``concatenate_and_time_sync_node`` joins
them:

1. **Sweeps**: packet inputs are decoded and cut with the sensor's own nebula settings and
   calibration (:class:`~.packets.PacketSweeps`, on the backend's device); point inputs take
   nebula's ``PointXYZIRCAEDT`` clouds (a recorded ``pointcloud_raw_ex``).
2. **Into the base frame and cropped** (``core/vehicle_frame.py``'s rules, the backend's twin):
   the sensor's pose from the kit, its self and mirror boxes.
3. **Ring outlier filter** (optional, ``core/ring_outlier.py``): on the kept points, in the
   sensor's frame (azimuth, distance, channel as decoded), which also puts them ring by ring as
   Autoware's filter writes them.
4. **Grouped** by :class:`~.concatenation.SweepCollector` (``frame/time_sync.py``'s rules, the
   kit's ``concatenation`` block): one sweep per sensor matched by stamp, a group closed when
   every sensor arrived or at the timeout with those that did.
5. **Joined**: the group's sweeps concatenated in Autoware's join order, each point as Autoware's
   concatenated cloud holds it, ``PointXYZIRC`` (:data:`JOINED_DTYPE`: x y z in the base frame,
   then intensity, return_type and channel as decoded), stamped with the group's stamp, in the
   kit's base frame; which sensors made it and where each one's points start.

Distortion correction (motion compensation) is not done: it needs the vehicle's twist, which a
sensor kit does not give; :attr:`VehicleSweeps.notice` says so when the kit asks for it.
On the CUDA backend every array stays on the device; the joined cloud's payload is a device
array the frame codec reads there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..clusterer import Backend
from ..core.numbering import array_module
from ..core.ring_outlier import RingOutlierSettings
from ..core.vehicle_frame import CropBoxSettings, VehicleFrameSettings
from ..pointcloud_io.pointcloud2 import RawCloud, from_structured, to_structured
from ..pointcloud_io.sensor_kit import Pose, Sensor, SensorKit, sensor_poses
from ..pointcloud_io.sensor_kit.model import PACKETS
from ..pointcloud_io.velodyne import POINT_DTYPE
from .concatenation import ConcatenationGroup, SweepCollector, SyncEvent
from .packets import PacketSweeps
from .time_sync import ConcatenationSettings, motion_compensation_notice
from .twins import twin

#: The joined cloud's point: Autoware's ``PointXYZIRC``, the first 16 bytes of a decoded
#: ``PointXYZIRCAEDT`` point with x y z in the base frame.
JOINED_DTYPE = np.dtype(
    {
        "names": ["x", "y", "z", "intensity", "return_type", "channel"],
        "formats": ["<f4", "<f4", "<f4", "u1", "u1", "<u2"],
        "offsets": [0, 4, 8, 12, 13, 14],
        "itemsize": 16,
    }
)
SWEEP_ROW_BYTES = POINT_DTYPE.itemsize
JOINED_BYTES = JOINED_DTYPE.itemsize


@dataclass(frozen=True)
class JoinedCloud:
    """One vehicle sweep: the sensors' points in the base frame, joined.

    Attributes:
        cloud: :data:`JOINED_DTYPE` points, one row (the payload on the backend's device).
        stamp_ns: the group's stamp (the oldest sweep's: Autoware's output stamp).
        frame_id: the kit's base frame.
        group: the group: which sensors made it, their stamps, its ``/diagnostics`` status.
        sources: ``(sensor, first point, points)`` of each sensor, in join order.
    """

    cloud: RawCloud
    stamp_ns: int
    frame_id: str
    group: ConcatenationGroup
    sources: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class VehicleOutput:
    """What one call produced: joined clouds (in order) and the events to log."""

    clouds: tuple[JoinedCloud, ...] = ()
    events: tuple[SyncEvent, ...] = ()


class VehicleSweeps:
    """A sensor kit's sweeps into joined base-frame clouds (see the module docstring)."""

    def __init__(
        self,
        kit: SensorKit,
        backend: Backend | None = None,
        *,
        calibration_file: Callable[[Sensor], Path],
        poses: Mapping[str, Pose] | None = None,
        ring_outlier: RingOutlierSettings | None = None,
    ) -> None:
        """Load every calibration and check every setting now, so that a bad kit fails at
        start-up.

        Args:
            kit: the sensor kit.
            backend: where sweeps are decoded, moved and joined; None: NumPy.
            calibration_file: the calibration file of a packets sensor (front ends resolve the
                kit's names: a path beside the kit, or a file shipped with the package).
            poses: each sensor's pose in the base frame; None: from the kit's pose source
                (``sensor_poses``; a ``tf_static`` source without a bag needs them given).
            ring_outlier: Autoware's ring outlier filter's settings, or None to skip it.

        Raises:
            SensorKitError: the poses cannot be resolved.
            ConfigError: the kit's concatenation or a sensor's boxes are not valid settings.
            CalibrationError: a calibration file is missing or not its model's.
        """
        self.kit = kit
        self.ring_outlier = ring_outlier
        poses = dict(sensor_poses(kit) if poses is None else poses)
        self.frames = {s.name: _frame_settings(poses[s.name], s) for s in kit.sensors}
        self.packets = {
            s.name: PacketSweeps(calibration_file(s), s.input.decoder, backend)
            for s in kit.sensors
            if s.input.kind == PACKETS
        }
        self.settings = concatenation_settings(kit)
        self.collector = SweepCollector(self.settings, point_count=_point_count)
        self.notice = motion_compensation_notice(self.settings, twist_available=False)
        self._backend = backend

    def topics(self) -> dict[str, str]:
        """Each sensor's input topic, by sensor name."""
        return {s.name: s.input.topic for s in self.kit.sensors}

    def feed_packets(self, sensor: str, cdr: bytes | memoryview, now_ns: int) -> VehicleOutput:
        """One serialized ``VelodyneScan`` of ``sensor``, arrived at ``now_ns``.

        Raises:
            VelodyneCdrError, PacketsRefusedError: as :meth:`.packets.PacketSweeps.feed`.
            KeyError: ``sensor`` has no packets input.
        """
        groups, events = [], []
        for sweep in self.packets[sensor].feed(cdr):
            rows = _rows(sweep.cloud.data)
            out = self.collector.add(sensor, sweep.stamp_ns, now_ns, self._in_base(sensor, rows))
            groups += out.groups
            events += out.events
        return self._joined(groups, events)

    def feed_sweep(self, sensor: str, points: Any, stamp_ns: int, now_ns: int) -> VehicleOutput:
        """One sweep of ``sensor`` decoded elsewhere (a player that publishes each sensor's
        sweeps too): :data:`~..pointcloud_io.velodyne.POINT_DTYPE` points, or the GPU sweep
        decoder's ``(N, 32)`` uint8 rows, stamped ``stamp_ns`` (nebula's sweep stamp).
        """
        rows = (
            np.ascontiguousarray(points).view(np.uint8)
            if isinstance(points, np.ndarray)
            else points
        )
        out = self.collector.add(sensor, stamp_ns, now_ns, self._in_base(sensor, _rows(rows)))
        return self._joined(list(out.groups), list(out.events))

    def feed_cloud(self, sensor: str, cloud: RawCloud, stamp_ns: int, now_ns: int) -> VehicleOutput:
        """One ``PointXYZIRCAEDT`` cloud of ``sensor`` (nebula's ``pointcloud_raw_ex``).

        Raises:
            ValueError: the cloud is not in nebula's ``PointXYZIRCAEDT`` layout.
        """
        points = to_structured(cloud)
        if points.dtype != POINT_DTYPE:
            raise ValueError(
                f"sensor {sensor}: a points input takes nebula's PointXYZIRCAEDT clouds "
                f"(x y z intensity return_type channel azimuth elevation distance time_stamp, "
                f"32 bytes), got {points.dtype}"
            )
        rows = np.ascontiguousarray(points).view(np.uint8).reshape(-1, SWEEP_ROW_BYTES)
        if self._backend is not None:
            rows = self._backend.to_device(rows)
        out = self.collector.add(sensor, stamp_ns, now_ns, self._in_base(sensor, rows))
        return self._joined(list(out.groups), list(out.events))

    def poll(self, now_ns: int) -> VehicleOutput:
        """The groups whose timeout has passed at ``now_ns``, joined."""
        out = self.collector.poll(now_ns)
        return self._joined(list(out.groups), list(out.events))

    def flush(self, now_ns: int) -> VehicleOutput:
        """Every open group closed now, joined (the end of a recording)."""
        out = self.collector.flush(now_ns)
        return self._joined(list(out.groups), list(out.events))

    def next_deadline_ns(self) -> int | None:
        """When :meth:`poll` next has a group to close (None: nothing open)."""
        return self.collector.next_deadline_ns()

    def _in_base(self, sensor: str, rows: Any) -> tuple[Any, Any]:
        """Steps 2-3 on one sweep's ``(N, 32)`` uint8 rows: ``(buffer, count)``, the buffer's
        first ``count`` rows its kept points in the base frame in Autoware's order (the other
        fields as decoded), ``count`` a 0-d int64 array on the rows' device (no host
        synchronisation here without the ring filter)."""
        xp = array_module(rows)
        buffer = xp.empty_like(rows)
        if self.ring_outlier is None:
            into = twin(rows, "stages.vehicle_rows", "transform_rows_into")
            return buffer, into(rows, self.frames[sensor], buffer, 0)
        xyz = xp.ascontiguousarray(rows[:, :12]).view(xp.float32)
        moved = twin(xyz, "stages.vehicle_frame", "to_vehicle_frame")(xyz, self.frames[sensor])
        kept = xp.flatnonzero(moved.keep)
        subset = rows[kept]
        points = subset.view(POINT_DTYPE).reshape(-1) if xp is np else subset
        rings = twin(subset, "stages.ring_outlier", "filter_rings")(points, self.ring_outlier)
        kept = kept[rings.order]
        count = int(kept.shape[0])
        buffer[:count] = rows[kept]
        buffer[:count, :12] = moved.xyz[kept].view(xp.uint8).reshape(-1, 12)
        return buffer, xp.asarray(count, dtype=xp.int64)

    def _joined(self, groups: list[ConcatenationGroup], events: list[SyncEvent]) -> VehicleOutput:
        clouds = tuple(self._join(group) for group in groups if group.outcome == "published")
        return VehicleOutput(clouds, tuple(events))

    def _join(self, group: ConcatenationGroup) -> JoinedCloud:
        """The group's sweeps in its order, each point's first 16 bytes (``PointXYZIRC``): one
        copy of the counts to the host for the whole group."""
        buffers = [sweep.payload[0] for sweep in group.sweeps]
        xp = array_module(buffers[0])
        counts = xp.stack([sweep.payload[1] for sweep in group.sweeps])
        counts = [int(c) for c in (counts.get() if xp is not np else counts)]
        parts = [
            buffer[:count, :JOINED_BYTES] for buffer, count in zip(buffers, counts, strict=True)
        ]
        rows = xp.ascontiguousarray(xp.concatenate(parts))
        sources, first = [], 0
        for sweep, count in zip(group.sweeps, counts, strict=True):
            sources.append((sweep.sensor, first, count))
            first += count
        cloud = joined_cloud(rows)
        return JoinedCloud(cloud, group.stamp_ns, self.kit.base_frame, group, tuple(sources))


def concatenation_settings(kit: SensorKit) -> ConcatenationSettings:
    """The kit's ``concatenation`` block as Autoware's parameters (``inputs`` for
    ``input_topics``); without one, Autoware's defaults with the sensors in the kit's order and
    no offsets (advanced matching needs them: naive then).

    Raises:
        ConfigError: a value Autoware's node would refuse.
    """
    given = dict(kit.concatenation)
    names = given.pop("inputs", None) or [s.name for s in kit.sensors]
    if "matching_strategy" not in given:
        given["matching_strategy"] = {"type": "naive"}
    return ConcatenationSettings.from_autoware_parameters(
        {**given, "input_topics": names, "output_frame": kit.base_frame}
    )


def joined_cloud(rows: Any) -> RawCloud:
    """A cloud of ``(K, 16)`` uint8 :data:`JOINED_DTYPE` rows (NumPy or CuPy: the payload is
    the array itself, no copy)."""
    empty = from_structured(np.zeros(0, JOINED_DTYPE), is_dense=True)
    width = int(rows.shape[0])
    return replace(empty, width=width, row_step=width * JOINED_BYTES, data=rows.reshape(-1))


def _frame_settings(pose: Pose, sensor: Sensor) -> VehicleFrameSettings:
    boxes = tuple(
        CropBoxSettings(box.minimum, box.maximum, box.negative, box.in_sensor_frame)
        for box in sensor.crop_boxes
    )
    return VehicleFrameSettings(pose.rotation, pose.translation, boxes)


def _rows(data: Any) -> Any:
    """A sweep cloud's payload as ``(N, 32)`` uint8 rows (host bytes or the device array)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = np.frombuffer(data, np.uint8)
    return data.reshape(-1, SWEEP_ROW_BYTES)


def _point_count(payload: tuple[Any, Any]) -> int:
    """A sweep's kept points (the collector's test for a group without any)."""
    return int(payload[1])
