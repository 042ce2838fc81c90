"""Work known before it is spent: how many point pairs a method and search will examine.

The paper's methods and exhaustive search cost what the neighbour search examines: all pairs
``N (N - 1) / 2`` for exhaustive search (ES), and for the voxel-grid range search (RS, cells of
side ``d_th``, Algorithm 7) the pairs of points in the same or adjacent cells. A backend knows how
many such pairs it examines per second (``Backend.pairs_per_second``); a configuration whose
estimate exceeds ``ClusterConfig.max_work_s`` raises :class:`WorkTooLargeError` before any
search, naming the fast choice. ``auto`` and ``union_find`` with range search cost O(N) and are
never estimated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .neighbour_rule import cell_size, grid_window, voxel_coords
from .numbering import array_module

#: Offsets of the 27 cells around and including a voxel cell.
NEIGHBOUR_OFFSETS = tuple(
    (dx, dy, dz) for dx in (-1, 0, 1) for dy in (-1, 0, 1) for dz in (-1, 0, 1)
)


@dataclass(frozen=True)
class WorkEstimate:
    """What a run will examine, and about how long that takes on its backend.

    Attributes:
        method, search, backend: the configuration estimated.
        pairs: point pairs the neighbour search examines.
        seconds: ``pairs`` at the backend's measured rate (a rough figure: within a factor of
            a few).
    """

    method: str
    search: str
    backend: str
    pairs: int
    seconds: float

    def describe(self) -> str:
        search = "exhaustive search" if self.search == "exhaustive" else "the voxel grid"
        return (
            f"method {self.method} with {search} on the {self.backend} backend would examine "
            f"{self.pairs:.3g} point pairs (about {self.seconds:.3g} s)"
        )


class WorkTooLargeError(RuntimeError):
    """A configuration would take longer than ``max_work_s``; ``auto`` would not."""

    def __init__(self, estimate: WorkEstimate, limit_s: float) -> None:
        super().__init__(
            f"{estimate.describe()}, over max_work_s {limit_s:g} s; use method 'auto' "
            "(union_find with the voxel grid: O(N)) or raise max_work_s"
        )
        self.estimate = estimate
        self.limit_s = limit_s


def needs_estimate(method: str, search: str) -> bool:
    """False for the configurations whose cost follows the points, not the pairs."""
    return method != "auto" and not (method == "union_find" and search == "range")


def examined_pairs(points: Any, d_th: float, search: str) -> int:
    """Point pairs the neighbour search examines on finite ``points`` (NumPy or CuPy, (N, 3)).

    Exhaustive search: ``N (N - 1) / 2``. Range search: pairs of distinct points in the same or
    adjacent voxels of the search's own grid (Algorithm 7: cells of side ``cell_size(d_th)``
    over the bounding box, clamped to :func:`~.neighbour_rule.grid_window`'s window where the
    cloud is wider, so that far outliers or a tiny ``d_th`` pile points into the boundary
    voxels exactly as the search does), counted from the occupied voxels (one ``unique`` and
    27 ``searchsorted``).
    """
    n = int(points.shape[0])
    if search == "exhaustive" or n < 2:
        return n * (n - 1) // 2
    xp = array_module(points)
    cell = cell_size(d_th)
    origin, dims = grid_window(
        _host(points.min(axis=0)),
        _host(points.max(axis=0)),
        cell,
        lambda: _host(xp.median(points, axis=0)),
    )
    coords = voxel_coords(points, xp.asarray(origin), cell, xp.asarray(dims))
    # Padded by one voxel on every side, so that no neighbour key wraps around an axis.
    span = [int(d) + 2 for d in dims]
    strides = (span[1] * span[2], span[2], 1)
    keys = (coords[:, 0] + 1) * strides[0] + (coords[:, 1] + 1) * strides[1] + coords[:, 2] + 1
    occupied, counts = xp.unique(keys, return_counts=True)
    total = 0
    for dx, dy, dz in NEIGHBOUR_OFFSETS:
        wanted = occupied + (dx * strides[0] + dy * strides[1] + dz)
        at = xp.minimum(xp.searchsorted(occupied, wanted), occupied.shape[0] - 1)
        found = occupied[at] == wanted
        total += int((counts * xp.where(found, counts[at], 0)).sum())
    return (total - n) // 2


def _host(values: Any) -> np.ndarray:
    """A small NumPy or CuPy array on the host."""
    return values if isinstance(values, np.ndarray) else values.get()
