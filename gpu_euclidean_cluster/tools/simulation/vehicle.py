"""A vehicle's LiDARs in a street scene, as the raw Velodyne packets they send (ROS-free).

    >>> scene = vehicle_street_scene(seed=0, duration_s=0.4)
    >>> stream = SensorStream(sensor, lambda frame: scene.at(frame / 10.0), rate_hz=10.0)
    >>> for sweep in stream.sweeps(3):
    ...     sweep.message.packets, sweep.object_id      # one VelodyneScan, its points' objects

The scene (:func:`vehicle_street_scene`) is :func:`~.scene.street_scene` in the vehicle's base
frame: the ground at z = 0, the vehicle at the origin facing +x, and no object that comes
within :data:`EGO_CLEARANCE` of it while the simulation runs (a car of the street's traffic
would drive through it). The vehicle itself is not in the scene.

Each sensor (:class:`SimulatedSensor`: its pose in the base frame, its packet encoder,
:mod:`~gpu_euclidean_cluster.pointcloud_io.velodyne.encoder`) turns continuously at the rate
from its scan phase, its first firing at its ``start_ns``. Every (firing, position) is cast in
float64 along the ray its decoder will put the return on, from the sensor's pose
(:func:`~.rays.cast_rays`): the decoded point lies on the surface hit, within the range
quantisation. No range noise, no dropout; the intensity byte is ``255 * reflectivity *
|cos incidence|`` rounded.

**Frames.** The scene is frozen for each frame: ``scene_at(n)``. Sweep ``n`` of a sensor is the
``n``-th sweep its decoder (:class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.SweepDecoder`,
the sensor's settings) completes from the stream, and every return it holds is cast in frame
``n``'s scene, exactly: message ``n`` (a ``VelodyneScan``, as nebula's driver publishes it) runs
from the packet after the previous completing packet to the next completing one (rule 1 of
:mod:`~gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps`); its returns are cast in frame
``n``, except the ones the decoder will move on to sweep ``n + 1`` (rule 2: the kept points
after the message's last kept point that stays), which are cast in frame ``n + 1``. (Should
no point of a whole message stay, rule 2 carries the sweep on whole: its points then come from
the frames before; the object ids stay right.) The decoder's points of sweep ``n`` are
:attr:`SensorSweep.object_id`'s, in the decoder's order: the returns carried over from message
``n - 1``, then message ``n``'s in packet, block and slot order.

**Stamps.** Each packet is stamped with its first firing's time; a message's header with its
first packet's (nebula's driver); the message is recorded at its last packet's stamp (when the
driver publishes it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ...pointcloud_io.sensor_kit import Pose
from ...pointcloud_io.velodyne.bags import VelodyneScanMessage
from ...pointcloud_io.velodyne.encoder import (
    FiringGeometry,
    PacketLayout,
    Rotation,
    VelodyneEncoder,
)
from ...pointcloud_io.velodyne.sweeps import completing_packets, trailing_moves
from .rays import cast_rays
from .scene import GROUND_ID, Box, Scene, street_scene

NS_PER_S = 1_000_000_000
#: The ground around the vehicle no object of the scene may enter, ``(x, y)`` minimum and
#: maximum in metres: Autoware's sample vehicle (x -1.1 to 3.79, y +-0.948, mirrors to +-1.4)
#: with half a metre around it.
EGO_CLEARANCE = ((-1.6, -1.9), (4.3, 1.9))
#: Metres an object may move between two looks of the clearance test.
CLEARANCE_STEP_M = 0.1


def vehicle_street_scene(seed: int, duration_s: float) -> Scene:
    """:func:`~.scene.street_scene` around a vehicle at the origin of its base frame (the
    module docstring): the ground at 0, no object within :data:`EGO_CLEARANCE` from 0 to
    ``duration_s`` seconds."""
    street = street_scene(seed=seed, ground_z=0.0)
    kept = tuple(obj for obj in street.objects if not _enters_clearance(obj, duration_s))
    return Scene(kept, ground_z=0.0, ground_reflectivity=street.ground_reflectivity)


def _enters_clearance(obj, duration_s: float) -> bool:
    """Whether the object's bounding circle meets :data:`EGO_CLEARANCE` at any time from 0 to
    ``duration_s`` (looked at every :data:`CLEARANCE_STEP_M` of its travel)."""
    speed = math.hypot(*obj.velocity_xy)
    looks = max(2, math.ceil(speed * duration_s / CLEARANCE_STEP_M) + 1)
    (low_x, low_y), (high_x, high_y) = EGO_CLEARANCE
    for t in np.linspace(0.0, duration_s, looks):
        shape = obj.at(float(t)).shape
        x, y = shape.center[0], shape.center[1]
        dx = max(low_x - x, 0.0, x - high_x)
        dy = max(low_y - y, 0.0, y - high_y)
        if math.hypot(dx, dy) <= shape.bounding_radius:
            return True
    return False


def ground_truth_objects(scenes: list[Scene]) -> dict[str, np.ndarray]:
    """The objects of each frame's scene as arrays, one row per object and frame: ``frame``,
    ``id``, ``kind``, ``shape`` (``box`` or ``cylinder``), ``center`` (x y z of the volume's
    centre), ``size`` (length along the heading, width, height; a cylinder's 2r, 2r, height),
    ``yaw`` (radians; 0 for a cylinder), ``radius`` (a cylinder's; 0 for a box),
    ``velocity`` (x y, m/s)."""
    rows = [(frame, obj) for frame, scene in enumerate(scenes) for obj in scene.objects]
    table: dict[str, list] = {name: [] for name in ("frame", "id", "kind", "shape", "center")}
    table.update(size=[], yaw=[], radius=[], velocity=[])
    for frame, obj in rows:
        shape = obj.shape
        table["frame"].append(frame)
        table["id"].append(obj.object_id)
        table["kind"].append(obj.kind)
        table["center"].append(shape.center)
        table["velocity"].append(obj.velocity_xy)
        if isinstance(shape, Box):
            table["shape"].append("box")
            table["size"].append(shape.size)
            table["yaw"].append(shape.yaw)
            table["radius"].append(0.0)
        else:
            table["shape"].append("cylinder")
            diameter = 2.0 * shape.radius
            table["size"].append((diameter, diameter, shape.z_max - shape.z_min))
            table["yaw"].append(0.0)
            table["radius"].append(shape.radius)
    kinds = {"frame": np.int32, "id": np.int32, "kind": str, "shape": str}
    widths = {"center": 3, "size": 3, "velocity": 2}
    return {
        name: np.array(values, dtype=kinds.get(name, np.float64)).reshape(
            (len(rows), widths[name]) if name in widths else (len(rows),)
        )
        for name, values in table.items()
    }


@dataclass(frozen=True)
class SimulatedSensor:
    """One LiDAR of the vehicle.

    Attributes:
        name: its name (the sensor kit's).
        frame_id: the frame its messages are stamped in.
        topic: its ``VelodyneScan`` topic.
        pose: its pose in the base frame (``p_base = R p_sensor + t``).
        encoder: its packets' encoder (model, calibration, decoder settings).
        start_ns: the time of its first firing, at its scan phase.
    """

    name: str
    frame_id: str
    topic: str
    pose: Pose
    encoder: VelodyneEncoder
    start_ns: int


@dataclass(frozen=True)
class SensorSweep:
    """One message of a sensor and the truth of the sweep its decoder makes.

    Attributes:
        frame: the frame (sweep) index.
        message: the ``VelodyneScan``, its ``bag_time_ns`` when it is recorded.
        object_id: (N,) int32 the object each point of the decoded sweep ``frame`` hit (0 the
            ground), in the decoder's order.
        carried: how many of those (the first) the decoder carries over from the message
            before (rule 2's overflow).
    """

    frame: int
    message: VelodyneScanMessage
    object_id: np.ndarray
    carried: int


def packets_per_turn(layout: PacketLayout, rate_hz: float) -> float:
    """Packets a sensor sends in one turn at ``rate_hz``."""
    return NS_PER_S / rate_hz / layout.packet_ns


class SensorStream:
    """One sensor's packets, message by message, its scene frozen per frame (``scene_at``)."""

    def __init__(
        self, sensor: SimulatedSensor, scene_at: Callable[[int], Scene], rate_hz: float
    ) -> None:
        self.sensor = sensor
        self.scene_at = scene_at
        self.rate_hz = rate_hz
        encoder = sensor.encoder
        self.layout = encoder.layout
        self.rotation = Rotation(rate_hz, float(encoder.settings.phase_centidegrees))
        self.rotation_matrix = np.array(sensor.pose.rotation, np.float64)
        self.translation = np.array(sensor.pose.translation, np.float64)

    def sweeps(self, frames: int) -> Iterator[SensorSweep]:
        """The messages of sweeps 0 to ``frames - 1`` with their truth (the module docstring)."""
        encoder = self.sensor.encoder
        per_packet = self.layout.firings_per_packet
        carried = np.zeros(0, np.int32)
        first_packet = 0
        for frame in range(frames):
            count = self._message_packets(first_packet)
            rotation = self.rotation.azimuths(
                self.layout, count * per_packet, first_packet * per_packet
            )
            geometry = encoder.geometry(rotation)
            everything = np.ones(geometry.azimuth_index.shape, bool)
            raw, intensity, object_id = self._cast(geometry, frame, everything)
            kept = encoder.kept(raw, geometry)
            moves = trailing_moves(geometry.point_azimuth, encoder.settings, np)
            staying = np.flatnonzero((~moves & kept).ravel())
            last_stay = int(staying[-1]) if staying.size else -1
            order = np.arange(kept.size).reshape(kept.shape)
            tail = moves & (order > last_stay)
            if tail.any():  # moved on to the next sweep: the next frame's scene
                raw[tail], intensity[tail], object_id[tail] = (
                    part[tail] for part in self._cast(geometry, frame + 1, tail)
                )
                kept = encoder.kept(raw, geometry)
            first_ns = self.sensor.start_ns + first_packet * self.layout.packet_ns
            packets, stamps = encoder.packets(rotation, raw, intensity, first_ns)
            ids, kept, tail = object_id.ravel(), kept.ravel(), tail.ravel()
            message = self._message(packets, stamps)
            if last_stay < 0:  # nothing stays: the whole sweep moves on (rule 2)
                sweep = SensorSweep(frame, message, np.zeros(0, np.int32), 0)
                carried = np.concatenate([carried, ids[kept & tail]])
            else:
                truth = np.concatenate([carried, ids[kept & ~tail]])
                sweep = SensorSweep(frame, message, truth, carried.size)
                carried = ids[kept & tail]
            yield sweep
            first_packet += count

    def _message_packets(self, first_packet: int) -> int:
        """How many packets from ``first_packet`` on make one message: up to and including the
        first that completes a sweep (``first_packet`` opens one)."""
        encoder = self.sensor.encoder
        per_packet = self.layout.firings_per_packet
        window = math.ceil(packets_per_turn(self.layout, self.rate_hz)) + 2
        rotation = self.rotation.azimuths(
            self.layout, window * per_packet, first_packet * per_packet
        )
        silent = np.zeros((rotation.size, self.layout.positions), np.int64)
        headers, _ = encoder.packets(rotation, silent, silent.astype(np.uint8), 0)
        phase = encoder.settings.phase_centidegrees
        done = np.flatnonzero(completing_packets(headers, phase))
        return int(done[0]) + 1

    def _cast(
        self, geometry: FiringGeometry, frame: int, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Raw counts, intensity bytes and object ids ((F, positions) each) of the rays
        ``mask`` selects, cast in frame ``frame``'s scene; elsewhere no return."""
        scene = self.scene_at(frame)
        origins = geometry.origin[mask] @ self.rotation_matrix.T + self.translation
        directions = geometry.direction[mask] @ self.rotation_matrix.T
        hits = cast_rays(scene, origins, directions)
        reflectivity = _reflectivity(scene)[np.maximum(hits.object_id, 0)]
        shape = geometry.azimuth_index.shape
        raw = np.zeros(shape, np.int64)
        intensity = np.zeros(shape, np.uint8)
        object_id = np.full(shape, -1, np.int32)
        lasers = np.broadcast_to(geometry.laser, shape)[mask]
        raw[mask] = self.sensor.encoder.raw_distance(hits.range_m, lasers)
        level = np.clip(255.0 * reflectivity * hits.cos_incidence, 0.0, 255.0)
        intensity[mask] = np.where(hits.object_id >= 0, np.rint(level), 0).astype(np.uint8)
        object_id[mask] = hits.object_id
        return raw, intensity, object_id

    def _message(self, packets: np.ndarray, stamps: np.ndarray) -> VelodyneScanMessage:
        sensor = self.sensor
        return VelodyneScanMessage(
            topic=sensor.topic,
            bag_time_ns=int(stamps[-1]),
            stamp_ns=int(stamps[0]),
            frame_id=sensor.frame_id,
            packets=packets,
            stamp_sec=stamps // NS_PER_S,
            stamp_nanosec=stamps % NS_PER_S,
        )


def _reflectivity(scene: Scene) -> np.ndarray:
    """Reflectivity by object id (index), the ground at 0."""
    table = np.zeros(max((o.object_id for o in scene.objects), default=0) + 1)
    table[GROUND_ID] = scene.ground_reflectivity
    for obj in scene.objects:
        table[obj.object_id] = obj.reflectivity
    return table
