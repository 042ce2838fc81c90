"""The clique-cell rule of the ``union_find`` method, shared by its CPU and CUDA twins.

A clique cell is a cube of side ``h = sqrt(T / 3) * (1 - CELL_MARGIN)`` (``T = float32(d_th**2)``):
any two points in one cell satisfy the float32 neighbour rule, rounding included, so a cell is
connected before any distance is computed (FDBSCAN-DenseBox's dense boxes, Prokopenko et al.,
ICPP'23). Every neighbour pair lies within the 5 x 5 x 5 stencil of cells around a point; the
proofs are in ``docs/union_find.md``.
"""

from __future__ import annotations

import math

import numpy as np

from .neighbour_rule import CELL_MARGIN

#: Cells of padding around the bounding box, so that every stencil offset stays inside it.
PAD = 2

#: The grid is used while the cloud spans fewer than 2^30 cells per axis (the clique proof's
#: bound on the rounding of the scaled coordinates) and fewer than 2^61 cells in all (int64 keys).
MAX_CELLS_PER_AXIS = 2.0**30
MAX_KEYS = 2.0**61

#: ``gap`` test of ``union_find.cu`` (``uf_may_reach``): a point whose squared distance to a cell,
#: in cell units and less a 2^-19 slack per axis, reaches this bound has no neighbour in the cell.
GAP_LIMIT = 3.0 * (1.0 + 2.0**-18) / (1.0 - CELL_MARGIN) ** 2


def forward_offsets(radius: int = 2) -> np.ndarray:
    """The offsets of {-radius..radius}^3 whose first non-zero of (dz, dy, dx) is positive,
    nearest first: 62 for the 5 x 5 x 5 stencil of clique cells.

    Each unordered pair of cells at most ``radius`` cells apart per axis is visited once. The
    order (smallest possible gap, then length) matches the table in ``union_find.cu``.
    """
    span = range(-radius, radius + 1)
    offsets = [
        (dx, dy, dz) for dz in span for dy in span for dx in span if (dz, dy, dx) > (0, 0, 0)
    ]
    offsets.sort(
        key=lambda o: (sum(max(abs(a) - 1, 0) ** 2 for a in o), sum(a * a for a in o), o[::-1])
    )
    return np.array(offsets, dtype=np.int64)


FORWARD_OFFSETS = forward_offsets()


#: Smallest T for which the grid is used. Below it the rounding terms of the proof
#: (docs/union_find.md) are not small against T, in IEEE arithmetic (subnormal products) and in
#: the GPU's flush-to-zero arithmetic (CuPy compiles with -ftz=true) alike; such thresholds
#: (d_th < 8.9e-16) use ES.
MIN_GRID_THRESHOLD = 2.0**-100


def clique_cell_side(thr_sq: np.float32) -> float | None:
    """Side of a clique cell for the float32 threshold ``thr_sq``, or None to disable the grid.

    ``sqrt(T / 3) * (1 - CELL_MARGIN)``: any two points in one such cell satisfy the float32 rule.
    None when T is not finite or below ``MIN_GRID_THRESHOLD`` (zero, subnormal, tiny, inf, NaN),
    where the rounding argument of the proof does not hold.
    """
    t = float(thr_sq)
    if not (math.isfinite(t) and t >= MIN_GRID_THRESHOLD):
        return None
    return math.sqrt(t / 3.0) * (1.0 - CELL_MARGIN)


def grid_extent(low: np.ndarray, high: np.ndarray, side: float) -> np.ndarray | None:
    """Cells per axis (float64, before padding) of the clique grid over ``[low, high]``, or None
    when the grid cannot hold the cloud (:data:`MAX_CELLS_PER_AXIS`, :data:`MAX_KEYS`).

    Scaled coordinates are ``fl(fl(x - origin) * (1 / side))`` in float64 with the float32
    bounding-box minimum as origin, exactly as ``uf_scaled`` in ``union_find.cu``.
    """
    origin = np.asarray(low, dtype=np.float64)
    with np.errstate(over="ignore"):
        ext = np.floor((np.asarray(high, dtype=np.float64) - origin) * (1.0 / side))
    pad = 2.0 * PAD + 1.0
    fits = bool(np.all(ext < MAX_CELLS_PER_AXIS)) and (
        (float(ext[0]) + pad) * (float(ext[1]) + pad) * (float(ext[2]) + pad) < MAX_KEYS
    )
    return ext if fits else None
