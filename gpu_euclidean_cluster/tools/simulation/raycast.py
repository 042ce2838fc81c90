"""Vectorised ray casting of a rotating multi-beam LiDAR against a :class:`~.scene.Scene`.

Rays start at the sensor origin and form a grid: one row per laser, one column per firing azimuth.
Each object is intersected only with the columns its horizontal bounding circle spans, so the cost
follows the objects' angular size, not rays x objects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .scene import GROUND_ID, Box, Cylinder, Scene

NO_HIT = np.inf


@dataclass(frozen=True)
class RayGrid:
    """Unit directions of a sweep: ``directions[b, a]`` for laser ``b`` at azimuth column ``a``."""

    directions: np.ndarray  # (B, A, 3) float64
    azimuth_step_rad: float

    @classmethod
    def from_angles(
        cls, elevations_deg: np.ndarray, azimuth_step_deg: float, columns: int
    ) -> RayGrid:
        elevation = np.radians(np.asarray(elevations_deg, dtype=np.float64))[:, None]
        azimuth = np.radians(azimuth_step_deg) * np.arange(columns, dtype=np.float64)[None, :]
        directions = np.stack(
            np.broadcast_arrays(
                np.cos(elevation) * np.cos(azimuth),
                np.cos(elevation) * np.sin(azimuth),
                np.sin(elevation),
            ),
            axis=-1,
        )
        return cls(directions, float(np.radians(azimuth_step_deg)))

    @property
    def columns(self) -> int:
        return self.directions.shape[1]

    def columns_facing(self, center_xy: tuple[float, float], radius: float) -> np.ndarray:
        """Column indices whose azimuth can hit a circle of ``radius`` around ``center_xy``."""
        distance = float(np.hypot(*center_xy))
        if distance <= radius:
            return np.arange(self.columns)
        half_width = float(np.arcsin(radius / distance))
        middle = float(np.arctan2(center_xy[1], center_xy[0]))
        first = int(np.floor((middle - half_width) / self.azimuth_step_rad))
        last = int(np.ceil((middle + half_width) / self.azimuth_step_rad))
        return np.unique(np.arange(first, last + 1) % self.columns)


@dataclass(frozen=True)
class Hits:
    """Nearest hit of every ray: range (``inf`` = none), object id and |cos(incidence)|."""

    range_m: np.ndarray  # (B, A) float64
    object_id: np.ndarray  # (B, A) int32, -1 where no hit
    cos_incidence: np.ndarray  # (B, A) float64


def _box_hits(box: Box, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry distance (``inf`` on a miss) and |cos incidence| of rays ``d`` (..., 3) on ``box``."""
    cos_yaw, sin_yaw = np.cos(box.yaw), np.sin(box.yaw)
    rotation = np.array([[cos_yaw, -sin_yaw, 0.0], [sin_yaw, cos_yaw, 0.0], [0.0, 0.0, 1.0]])
    origin = -rotation.T @ np.asarray(box.center, dtype=np.float64)  # sensor in the box frame
    local = d @ rotation  # directions in the box frame
    half = 0.5 * np.asarray(box.size, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = 1.0 / local
        t1 = (-half - origin) * inverse
        t2 = (half - origin) * inverse
    near = np.where(np.isnan(t1), -np.inf, np.minimum(t1, t2))
    far = np.where(np.isnan(t2), np.inf, np.maximum(t1, t2))
    entry = near.max(axis=-1)
    exit_ = far.min(axis=-1)
    hit = (entry <= exit_) & (entry > 0)
    axis = near.argmax(axis=-1)
    cos_incidence = np.abs(np.take_along_axis(local, axis[..., None], axis=-1)[..., 0])
    return np.where(hit, entry, NO_HIT), cos_incidence


def _cylinder_hits(cylinder: Cylinder, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry distance and |cos incidence| of rays ``d`` (..., 3) on the cylinder's side or top."""
    cx, cy = cylinder.center_xy
    dx, dy, dz = d[..., 0], d[..., 1], d[..., 2]
    a = dx * dx + dy * dy
    b = -2.0 * (dx * cx + dy * cy)
    c = cx * cx + cy * cy - cylinder.radius**2
    discriminant = b * b - 4.0 * a * c
    with np.errstate(invalid="ignore", divide="ignore"):
        t_side = (-b - np.sqrt(discriminant)) / (2.0 * a)
        z_side = t_side * dz
        side = (
            (discriminant >= 0)
            & (t_side > 0)
            & (z_side >= cylinder.z_min)
            & (z_side <= cylinder.z_max)
        )
        t_top = cylinder.z_max / dz
        top = (
            (dz < 0)
            & (t_top > 0)
            & ((t_top * dx - cx) ** 2 + (t_top * dy - cy) ** 2 <= cylinder.radius**2)
        )
        normal_x = (t_side * dx - cx) / cylinder.radius
        normal_y = (t_side * dy - cy) / cylinder.radius
    t_top = np.where(top, t_top, NO_HIT)
    t_side = np.where(side, t_side, NO_HIT)
    use_top = t_top < t_side
    distance = np.minimum(t_top, t_side)
    cos_incidence = np.where(use_top, np.abs(dz), np.abs(dx * normal_x + dy * normal_y))
    return distance, np.nan_to_num(cos_incidence)


def cast(scene: Scene, grid: RayGrid) -> Hits:
    """Intersect every ray of ``grid`` with ``scene``; keep the nearest hit per ray."""
    d = grid.directions
    with np.errstate(divide="ignore", invalid="ignore"):
        t_ground = np.where(d[..., 2] < 0, scene.ground_z / d[..., 2], NO_HIT)
    range_m = t_ground
    object_id = np.where(np.isfinite(t_ground), GROUND_ID, -1).astype(np.int32)
    cos_incidence = np.abs(d[..., 2]).copy()
    for obj in scene.objects:
        shape = obj.shape
        columns = grid.columns_facing(shape.center[:2], shape.bounding_radius)
        directions = d[:, columns]
        if isinstance(shape, Box):
            distance, cosine = _box_hits(shape, directions)
        else:
            distance, cosine = _cylinder_hits(shape, directions)
        nearer = distance < range_m[:, columns]
        if not nearer.any():
            continue
        rows, cols = np.nonzero(nearer)
        target = columns[cols]
        range_m[rows, target] = distance[rows, cols]
        object_id[rows, target] = obj.object_id
        cos_incidence[rows, target] = cosine[rows, cols]
    return Hits(range_m, object_id, cos_incidence)
