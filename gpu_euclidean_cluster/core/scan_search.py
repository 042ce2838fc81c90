"""The scan-structured search (``search: scan``): bins, windows and the proof that it is exact.

After the scan paper ("Parallel Nearest Neighbor Search for Velodyne LiDAR Point Clouds",
``../shared/paper/parallel_nn_search_velodyne.md``): a sweep's points are binned by laser ring and
azimuth sector (the paper's sectors of 2.5 degrees: :data:`SECTORS`), and a point looks for its
neighbours only in the bins around its own. The paper accepted missing 1 % of nearest
neighbours; clustering may miss none, so the window of bins is derived from the geometry below
and holds every neighbour, and the points for which no window can be derived search a voxel
grid instead.

Bins. A point's azimuth is ``atan2(y, x)``, its horizontal range ``rho = sqrt(x**2 + y**2)``,
its range ``R = sqrt(rho**2 + z**2)`` and its elevation ``atan2(z, rho)``, all in float64 from
its float32 coordinates, about the origin of the cloud's frame (the sensor's, for a sweep). Its
sector is ``floor((azimuth + pi) * SECTORS / (2 pi)) mod SECTORS``; its ring is the one given
(a Velodyne ``ring``/``channel`` field) or, without rings, its elevation band of
:data:`VIRTUAL_RING_DEG` degrees. Points are sorted by bin ``ring * SECTORS + sector``, so each
ring's sectors lie one after the other. Each ring records the lowest and highest elevation of
its points: rings are only names for groups of points, and nothing below assumes that a ring's
points share an elevation, or that rings are ordered by it (a ring spread over many elevations
only makes windows longer).

Window, and why it holds every neighbour. Let ``r`` be :func:`~.kdtree.search_radius`: every
pair the float32 rule accepts is closer than ``r``. Take a point ``p`` with ``rho_p > r`` and a
neighbour ``q``, ``|q - p| < r``.

* Azimuth: the horizontal projections are at most as far apart, ``|q' - p'| < r < rho_p``, so
  ``q'`` lies in the disc of radius ``r`` around ``p'``, which does not hold the origin; seen
  from the origin that disc spans the azimuths within ``alpha = asin(r / rho_p)`` of ``p``'s
  (the tangent lines). The window is the sectors from ``floor((az_p - alpha' + pi) * S / 2 pi)``
  to ``floor((az_p + alpha' + pi) * S / 2 pi)``, taken mod ``S`` (all ``S`` when that is ``S``
  or more), with ``alpha' = alpha + ANGLE_MARGIN``.
* Elevation: ``R_p >= rho_p > r``, so ``q`` lies in the ball of radius ``r`` around ``p``, which
  does not hold the origin and is seen within the angle ``beta = asin(r / R_p)`` of ``p``'s
  direction; an elevation (a latitude on the unit sphere) differs from ``p``'s by at most the
  angle between the directions, so ``|el_q - el_p| <= beta``. The window holds the rings whose
  ``[lowest, highest]`` elevation meets ``[el_p - beta', el_p + beta']``,
  ``beta' = beta + ANGLE_MARGIN``; ``q``'s ring holds ``q``, so it is one of them.
* Rounding: the angles and ``asin`` are computed in float64, a few units in the last place off
  (CUDA's ``atan2``/``asin`` are within 2 ulp), i.e. below 1e-15 rad, and ``floor`` is monotone;
  :data:`ANGLE_MARGIN` (1e-9 rad, also the margin of the sector's product with ``S / 2 pi``)
  covers that many times over. A sector number computed for ``q`` and a window computed for
  ``p`` may disagree at a boundary only by that rounding, which the margin absorbs, on the CPU
  and on the GPU alike (each compares values it computed itself with the same formulas).

So ``q`` is in a bin of ``p``'s window: the bins of the window, and so the candidates, hold
every neighbour of ``p``, and each candidate is tested with the float32 rule itself.

Fallback. A point with ``rho <= r * AXIS_FACTOR`` (near the vertical axis through the origin,
where its neighbours may lie at any azimuth: ``alpha`` is undefined) is an *axis point*; it
searches a voxel grid (Section 4.4's range search, cells of ``d_th * (1 + CELL_MARGIN)``) built
over the *collar*: the points with ``rho <= r * COLLAR_FACTOR``, which hold every neighbour of an
axis point (``rho_q <= rho_p + |q - p| < r * AXIS_FACTOR + r``). Every other point uses its
window. So every point visits every one of its neighbours, exactly once (bins do not overlap,
and a window never repeats a sector); a pair is found from both of its points, as with the
voxel grid and the kd-tree, so every labelling method consumes it alike. An infinite ``r``
(``d_th**2`` beyond float32) makes every point an axis point.
"""

from __future__ import annotations

import math
from typing import Any

from .numbering import array_module

#: Azimuth sectors per turn: the scan paper's 2.5 degrees.
SECTORS = 144

#: ``SECTORS / (2 pi)``: a sector number is ``floor((azimuth + pi) * SECTOR_SCALE) mod SECTORS``.
SECTOR_SCALE = SECTORS / (2.0 * math.pi)

#: Radians added to each half-window (azimuth and elevation): far above float64's rounding of
#: the angles, far below a sector.
ANGLE_MARGIN = 1e-9

#: A point is an axis point (searches the voxel grid) when ``rho <= r * AXIS_FACTOR``; beyond, its
#: azimuth half-window ``asin(r / rho)`` stays below pi / 2.
AXIS_FACTOR = 1.0 + 1e-6

#: The collar, whose voxel grid the axis points search: ``rho <= r * COLLAR_FACTOR`` (above
#: ``AXIS_FACTOR + 1`` by far more than the rounding of ``rho``).
COLLAR_FACTOR = 2.0 + 1e-5

#: Without rings, a point's ring is its elevation band: ``floor((elevation + pi / 2) /
#: band)`` with bands of 0.4 degrees (an HDL-64E's spacing), :data:`VIRTUAL_RINGS` of them.
VIRTUAL_RING_DEG = 0.4
VIRTUAL_RING_RAD = math.radians(VIRTUAL_RING_DEG)
VIRTUAL_RINGS = math.ceil(180.0 / VIRTUAL_RING_DEG)

#: Ring ids must be below this (a bin table of rings x sectors is allocated).
MAX_RINGS = 4096


def check_rings(rings: Any, n: int) -> Any:
    """``rings`` as int32 (NumPy or CuPy, as given) after checking them: shape (n,), integers,
    each in ``[0, MAX_RINGS)``.

    Raises:
        ValueError: a wrong shape or dtype, or a ring id out of range (the message says which).
    """
    xp = array_module(rings)
    rings = xp.asarray(rings)
    if rings.shape != (n,):
        raise ValueError(f"rings must have shape ({n},), one per point; got {rings.shape}")
    if rings.dtype.kind not in "iu":
        raise ValueError(f"rings must be integers (a ring or channel field); got {rings.dtype}")
    if n:
        low, high = int(rings.min()), int(rings.max())
        if low < 0 or high >= MAX_RINGS:
            raise ValueError(f"ring ids must lie in [0, {MAX_RINGS}); got ids from {low} to {high}")
    return rings.astype(xp.int32, copy=False)


def ring_count(rings: Any | None) -> int:
    """Rings of the bin table: the largest id + 1 of checked ``rings`` (at least 1), or
    :data:`VIRTUAL_RINGS` without them."""
    if rings is None:
        return VIRTUAL_RINGS
    return int(rings.max()) + 1 if rings.shape[0] else 1
