"""Work known before it is spent: how many point pairs a method and search will examine.

The paper's methods and exhaustive search cost what the neighbour search examines: all pairs
``N (N - 1) / 2`` for exhaustive search (ES), and for the voxel-grid range search (RS, cells of
side ``d_th``, Algorithm 7) the pairs of points in the same or adjacent cells. A backend knows how
many such pairs it examines per second (``Backend.pairs_per_second``); a configuration whose
estimate exceeds ``ClusterConfig.max_work_s`` raises :class:`WorkTooLargeError` before any
search, naming the fast choice. ``auto`` and ``union_find`` with range search cost O(N) and are
never estimated. The companion papers' searches (``kdtree``, ``scan``) test about the neighbour
pairs themselves, which the voxel grid's candidate pairs bound: they are estimated as range search
is, ``union_find`` included (it has no clique cells there).

The RANSAC ground fit (``core/ground.py``) costs what it tests: every hypothesis's plane against
every point it scores. Its twins declare how many distance tests they run per second and which
points they score (``estimate_work`` in ``cpu/stages/ground.py`` and ``cuda/stages/ground.py``);
:class:`GroundWorkEstimate` is their answer, known before any hypothesis is drawn, and
:func:`affordable_hypotheses` the most hypotheses a time bound allows (the frame stage,
``frame/ground.py``, fits with that many where the settings ask for more).
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
        search = {"exhaustive": "exhaustive search", "range": "the voxel grid"}.get(
            self.search, f"the {self.search} search"
        )
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


#: What one RANSAC hypothesis costs besides its distance tests (drawing three points, its plane,
#: its slope test, its score's bookkeeping), in distance tests: about 250-600 ns a hypothesis on the
#: CPU twin, measured with 10 candidates.
HYPOTHESIS_TESTS = 64


@dataclass(frozen=True)
class GroundWorkEstimate:
    """What a RANSAC ground fit will test, and about how long that takes on its backend.

    Attributes:
        hypotheses: plane hypotheses the settings ask for.
        points: points each hypothesis is tested against (the candidates on the CPU, every point
            of the frame on the GPU, whose kernel scores the mask's points among all).
        backend: the twin's backend (``cpu`` or ``cuda``).
        tests_per_second: the twin's declared rate.
        tests: ``hypotheses * (points + HYPOTHESIS_TESTS)``: an upper bound (a plane rejected by
            the slope limit is not scored), so the time is never under-estimated on that account;
            0 where there are fewer than 3 candidates (no hypothesis is drawn then, rule 6 of
            ``core/ground.py``).
        seconds: ``tests`` at the twin's rate (rough: within a factor of a few).
    """

    hypotheses: int
    points: int
    backend: str
    tests_per_second: float
    tests: int
    seconds: float

    def describe(self) -> str:
        return (
            f"{self.hypotheses} RANSAC hypotheses against {self.points} points on the "
            f"{self.backend} backend would take about {self.seconds:.3g} s ({self.tests:.3g} "
            "distance tests)"
        )


def ground_work(
    hypotheses: int, points: int, candidates: int, backend: str, tests_per_second: float
) -> GroundWorkEstimate:
    """The estimate of ``hypotheses`` scored against ``points`` points at ``tests_per_second``,
    for a fit among ``candidates`` points (fewer than 3: nothing is drawn)."""
    tests = hypotheses * (points + HYPOTHESIS_TESTS) if candidates >= 3 else 0
    return GroundWorkEstimate(
        hypotheses, points, backend, tests_per_second, tests, tests / tests_per_second
    )


def affordable_hypotheses(estimate: GroundWorkEstimate, limit_s: float) -> int:
    """The most hypotheses of ``estimate`` that fit in ``limit_s`` seconds at its rate: at least
    one (a single hypothesis costs as much as reading the points once) and at most all of them."""
    per_hypothesis = estimate.points + HYPOTHESIS_TESTS
    affordable = int(limit_s * estimate.tests_per_second // per_hypothesis)
    return max(1, min(estimate.hypotheses, affordable))


def needs_estimate(method: str, search: str) -> bool:
    """False for the configurations whose cost follows the points, not the pairs."""
    return method != "auto" and not (method == "union_find" and search == "range")


def examined_pairs(points: Any, d_th: float, search: str) -> int:
    """Point pairs the neighbour search examines on finite ``points`` (NumPy or CuPy, (N, 3)).

    Exhaustive search: ``N (N - 1) / 2``. Range search (and, as their bound, the kd-tree and
    scan searches): pairs of distinct points in the same or adjacent voxels of the search's own
    grid (Algorithm 7: cells of side ``cell_size(d_th)`` over the bounding box, clamped to
    :func:`~.neighbour_rule.grid_window`'s window where the cloud is wider, so that far outliers
    or a tiny ``d_th`` pile points into the boundary voxels exactly as the search does), counted
    from the occupied voxels (one ``unique`` and 27 ``searchsorted``).
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
