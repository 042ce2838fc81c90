"""Ray casting from anywhere: rays with their own origins against a :class:`~.scene.Scene`.

:func:`~.raycast.cast` casts a level sensor's grid from the scene's origin; a vehicle's LiDARs
sit elsewhere, tilted, and fire along the directions their decoder will report
(``tools/simulation/vehicle.py``). Here each ray is ``origin + t * direction`` (float64; the
direction need not have unit length: ``t`` is in its units), and the hit is the smallest ``t >
0`` at which it enters the ground plane (from above), a box (through a face, from outside) or a
cylinder (its side or its top, from outside). An object is tested only against the rays that
pass within its bounding sphere.
"""

from __future__ import annotations

import numpy as np

from .raycast import NO_HIT, Hits
from .scene import GROUND_ID, Box, Cylinder, Scene


def cast_rays(scene: Scene, origins: np.ndarray, directions: np.ndarray) -> Hits:
    """The nearest hit of each ray ``origins[i] + t * directions[i]`` ((N, 3) float64 each):
    ``range_m`` is ``t`` (``inf``: no hit), ``object_id`` the object's id (0 the ground, -1
    none) and ``cos_incidence`` the absolute cosine between the ray and the surface normal."""
    origins = np.asarray(origins, np.float64).reshape(-1, 3)
    directions = np.asarray(directions, np.float64).reshape(-1, 3)
    length = np.linalg.norm(directions, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        below = (directions[:, 2] < 0) & (origins[:, 2] > scene.ground_z)
        t_ground = np.where(below, (scene.ground_z - origins[:, 2]) / directions[:, 2], NO_HIT)
        cos_incidence = np.abs(directions[:, 2]) / length
    range_m = t_ground
    object_id = np.where(np.isfinite(t_ground), GROUND_ID, -1).astype(np.int32)
    unit = directions / length[:, None]
    for obj in scene.objects:
        shape = obj.shape
        candidates = _near_sphere(origins, unit, *_bounding_sphere(shape))
        if candidates.size == 0:
            continue
        o, d = origins[candidates], directions[candidates]
        if isinstance(shape, Box):
            distance, cosine = _box_hits(shape, o, d)
        else:
            distance, cosine = _cylinder_hits(shape, o, d)
        nearer = distance < range_m[candidates]
        target = candidates[nearer]
        range_m[target] = distance[nearer]
        object_id[target] = obj.object_id
        cos_incidence[target] = cosine[nearer] / length[target]
    return Hits(range_m, object_id, cos_incidence)


def _bounding_sphere(shape: Box | Cylinder) -> tuple[np.ndarray, float]:
    """Centre and radius of a sphere holding the shape."""
    if isinstance(shape, Box):
        return np.asarray(shape.center, np.float64), 0.5 * float(np.linalg.norm(shape.size))
    half_height = 0.5 * (shape.z_max - shape.z_min)
    return np.asarray(shape.center, np.float64), float(np.hypot(shape.radius, half_height))


def _near_sphere(
    origins: np.ndarray, unit: np.ndarray, center: np.ndarray, radius: float
) -> np.ndarray:
    """Indices of the rays (unit directions) that pass within ``radius`` of ``center`` ahead of
    their origin (with a millimetre to spare)."""
    to_center = center - origins
    along = np.einsum("ij,ij->i", to_center, unit)
    across2 = np.einsum("ij,ij->i", to_center, to_center) - along * along
    reach = radius + 1e-3
    return np.flatnonzero((across2 <= reach * reach) & (along > -reach))


def _box_hits(box: Box, origins: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry ``t`` (``inf`` on a miss) and ``|d . normal|`` of rays on an oriented box."""
    cos_yaw, sin_yaw = np.cos(box.yaw), np.sin(box.yaw)
    rotation = np.array([[cos_yaw, -sin_yaw, 0.0], [sin_yaw, cos_yaw, 0.0], [0.0, 0.0, 1.0]])
    start = (origins - np.asarray(box.center, np.float64)) @ rotation  # in the box's frame
    local = d @ rotation
    half = 0.5 * np.asarray(box.size, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = 1.0 / local
        t1 = (-half - start) * inverse
        t2 = (half - start) * inverse
    near = np.where(np.isnan(t1), -np.inf, np.minimum(t1, t2))
    far = np.where(np.isnan(t2), np.inf, np.maximum(t1, t2))
    entry = near.max(axis=1)
    hit = (entry <= far.min(axis=1)) & (entry > 0)
    axis = near.argmax(axis=1)
    cosine = np.abs(np.take_along_axis(local, axis[:, None], axis=1)[:, 0])
    return np.where(hit, entry, NO_HIT), cosine


def _cylinder_hits(
    cylinder: Cylinder, origins: np.ndarray, d: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Entry ``t`` and ``|d . normal|`` of rays on a vertical cylinder's side or top."""
    px = origins[:, 0] - cylinder.center_xy[0]
    py = origins[:, 1] - cylinder.center_xy[1]
    oz = origins[:, 2]
    dx, dy, dz = d[:, 0], d[:, 1], d[:, 2]
    radius2 = cylinder.radius**2
    a = dx * dx + dy * dy
    b = 2.0 * (px * dx + py * dy)
    c = px * px + py * py - radius2
    discriminant = b * b - 4.0 * a * c
    with np.errstate(invalid="ignore", divide="ignore"):
        t_side = (-b - np.sqrt(discriminant)) / (2.0 * a)
        z_side = oz + t_side * dz
        side = (
            (discriminant >= 0)
            & (c > 0)
            & (t_side > 0)
            & (z_side >= cylinder.z_min)
            & (z_side <= cylinder.z_max)
        )
        t_top = (cylinder.z_max - oz) / dz
        top_x, top_y = px + t_top * dx, py + t_top * dy
        top = (dz < 0) & (oz > cylinder.z_max) & (top_x * top_x + top_y * top_y <= radius2)
        normal_x = (px + t_side * dx) / cylinder.radius
        normal_y = (py + t_side * dy) / cylinder.radius
    t_top = np.where(top, t_top, NO_HIT)
    t_side = np.where(side, t_side, NO_HIT)
    use_top = t_top < t_side
    cosine = np.where(use_top, np.abs(dz), np.abs(dx * normal_x + dy * normal_y))
    return np.minimum(t_top, t_side), np.nan_to_num(cosine)
