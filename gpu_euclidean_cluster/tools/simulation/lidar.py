"""Simulated LiDAR sweeps: ray casting plus the sensor's range limits, noise and dropout."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...core.units import NS_PER_S
from .beams import BeamModel
from .raycast import RayGrid, cast
from .scene import Scene

INTENSITY_SCALE = 255.0
#: the sweep period the beam models' azimuth steps are given for (10 Hz)
DEFAULT_PERIOD_NS = NS_PER_S // 10
#: nebula's ``ReturnType`` STRONGEST: the simulated sensor has one return per ray, labelled as a
#: Velodyne in its factory-default single-return mode (Strongest) is by nebula
SIMULATED_RETURN_TYPE = 3
SCAN_DTYPE = np.dtype(
    [
        ("x", "<f4"),
        ("y", "<f4"),
        ("z", "<f4"),
        ("intensity", "<f4"),
        ("ring", "<u2"),
        ("object_id", "<i4"),
    ]
)
"""Layout of :meth:`Scan.structured` (``xyzir``): the Autoware fields plus the ground-truth object
id."""


@dataclass(frozen=True)
class Scan:
    """One sweep: points in firing order (azimuth column by column, lasers in id order).

    Attributes:
        xyz: (N, 3) float32 points in the sensor frame.
        intensity: (N,) float32 in [0, 255]: reflectivity x |cos incidence| x 255.
        ring: (N,) uint16 ring of the laser (0 = lowest beam).
        object_id: (N,) int32 ground-truth object (0 = ground, ids of :class:`~.scene.Scene`).
        stamp_ns: time of the sweep (its first azimuth column).
        firing_ns: (N,) uint32 nominal firing time of each point after ``stamp_ns``: azimuth column
            ``k`` of ``K`` fires at ``k * period / K`` (the sensor turns counter-clockwise from
            +x). The scene itself is frozen at ``stamp_ns`` for the whole sweep. None when not
            known (a Scan built by hand).
    """

    xyz: np.ndarray
    intensity: np.ndarray
    ring: np.ndarray
    object_id: np.ndarray
    stamp_ns: int
    firing_ns: np.ndarray | None = None

    def __len__(self) -> int:
        return self.xyz.shape[0]

    def autoware_points(self) -> np.ndarray:
        """Structured x y z intensity (float32) ring (uint16) array, for bags."""
        from ...pointcloud_io.bags import autoware_points  # rosbags only when a bag is written

        return autoware_points(self.xyz, self.intensity, self.ring)

    def points(self, layout: str = "xyzir") -> np.ndarray:
        """The sweep in one of ``pointcloud_io.bags.LAYOUTS``, for bags.

        ``xyzirc``/``xyzircaedt``: intensity rounded to uint8, ``channel`` = ring,
        ``return_type`` = :data:`SIMULATED_RETURN_TYPE`; ``xyzircaedt`` adds azimuth, elevation,
        distance from x y z (``bags.polar_fields``) and ``time_stamp`` = :attr:`firing_ns`.
        """
        from ...pointcloud_io.bags import layout_points  # rosbags only when a bag is written

        if layout == "xyzircaedt" and self.firing_ns is None:
            raise ValueError("this scan has no firing times; xyzircaedt needs them")
        return layout_points(
            layout,
            self.xyz,
            self.intensity,
            self.ring,
            return_type=SIMULATED_RETURN_TYPE,
            time_stamp=self.firing_ns,
        )

    def structured(self, layout: str = "xyzir") -> np.ndarray:
        """Structured array of every field, ground truth included: :data:`SCAN_DTYPE` for
        ``xyzir``, else :meth:`points` of ``layout`` followed by ``object_id`` (int32)."""
        if layout == "xyzir":
            points = np.empty(len(self), dtype=SCAN_DTYPE)
            points["x"], points["y"], points["z"] = self.xyz.T
            points["intensity"] = self.intensity
            points["ring"] = self.ring
            points["object_id"] = self.object_id
            return points
        fields = self.points(layout)
        names = fields.dtype.names or ()
        dtype = np.dtype(
            {
                "names": [*names, "object_id"],
                "formats": [*(fields.dtype.fields[n][0] for n in names), "<i4"],
                "offsets": [*(fields.dtype.fields[n][1] for n in names), fields.dtype.itemsize],
                "itemsize": fields.dtype.itemsize + 4,
            }
        )
        points = np.zeros(len(self), dtype=dtype)
        for name in names:
            points[name] = fields[name]
        points["object_id"] = self.object_id
        return points


class LidarSimulator:
    """Casts the beams of ``sensor`` into scenes; ``seed`` fixes noise and dropout."""

    def __init__(self, sensor: BeamModel, seed: int = 0) -> None:
        self.sensor = sensor
        self.rng = np.random.default_rng(seed)
        self.grid = RayGrid.from_angles(
            np.asarray(sensor.elevations_deg), sensor.azimuth_step_deg, sensor.azimuths_per_sweep
        )
        self._rings = np.broadcast_to(sensor.rings[:, None], self.grid.directions.shape[:2])

    def scan(self, scene: Scene, stamp_ns: int = 0, period_ns: int = DEFAULT_PERIOD_NS) -> Scan:
        """One sweep of ``scene`` (the whole sweep sees the scene at one instant); ``period_ns``
        (the sweep period) times the firings (:attr:`Scan.firing_ns`)."""
        hits = cast(scene, self.grid)
        range_m = hits.range_m + self.rng.normal(0.0, self.sensor.range_noise_m, hits.range_m.shape)
        keep = (
            np.isfinite(hits.range_m)
            & (range_m >= self.sensor.min_range_m)
            & (range_m <= self.sensor.max_range_m)
            & (self.rng.random(range_m.shape) >= self.sensor.dropout)
        )
        # firing order: transpose to (azimuth, laser) before selecting
        keep_t = keep.T
        column = np.nonzero(keep_t)[0]  # azimuth column of each kept point, in firing order
        firing_ns = (column * int(period_ns)) // self.grid.columns
        distance = range_m.T[keep_t]
        xyz = (self.grid.directions.transpose(1, 0, 2)[keep_t] * distance[:, None]).astype(
            np.float32
        )
        reflectivity = self._reflectivity(scene)[hits.object_id.T[keep_t]]
        intensity = np.clip(
            INTENSITY_SCALE * reflectivity * hits.cos_incidence.T[keep_t], 0, INTENSITY_SCALE
        ).astype(np.float32)
        return Scan(
            xyz=xyz,
            intensity=intensity,
            ring=self._rings.T[keep_t].astype(np.uint16),
            object_id=hits.object_id.T[keep_t].astype(np.int32),
            stamp_ns=int(stamp_ns),
            firing_ns=firing_ns.astype(np.uint32),
        )

    @staticmethod
    def _reflectivity(scene: Scene) -> np.ndarray:
        """Reflectivity by object id (index), the ground at 0."""
        table = np.zeros(max((o.object_id for o in scene.objects), default=0) + 1)
        table[0] = scene.ground_reflectivity
        for obj in scene.objects:
            table[obj.object_id] = obj.reflectivity
        return table

    def sequence(
        self, scene: Scene, frames: int, rate_hz: float = 10.0, start_ns: int = 0
    ) -> Iterator[Scan]:
        """``frames`` sweeps at ``rate_hz``, moving objects advancing between them."""
        if frames < 1:
            raise ValueError(f"frames must be >= 1, got {frames}")
        if not rate_hz > 0:
            raise ValueError(f"rate_hz must be > 0, got {rate_hz}")
        period_ns = round(NS_PER_S / rate_hz)
        for index in range(frames):
            yield self.scan(
                scene.at(index * period_ns / NS_PER_S), start_ns + index * period_ns, period_ns
            )
