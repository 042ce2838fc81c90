"""The scan-structured search on the CPU: NumPy twin of ``cuda/search/scan_search.py``.

``core/scan_search.py`` has the bins, the windows and the proof that they hold every neighbour.
Here the points are binned by (ring, azimuth sector) with one stable sort, every point off the
axis gathers the candidates of its window (one or two runs of the sorted array per ring whose
elevations its window meets) in bounded chunks and tests them with the float32 rule, and the axis
points search the voxel grid of the collar (``graph.range_edges``). Pairs come out once each,
from their smaller index, as chunks for ``kdtree.collect_edges`` / ``kdtree.fold_components``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...core.kdtree import search_radius
from ...core.neighbour_rule import squared_distance, threshold_sq
from ...core.scan_search import (
    ANGLE_MARGIN,
    AXIS_FACTOR,
    COLLAR_FACTOR,
    SECTOR_SCALE,
    SECTORS,
    VIRTUAL_RING_RAD,
    VIRTUAL_RINGS,
    check_rings,
    ring_count,
)
from ..labelling.graph import range_edges
from .kdtree import CHUNK_PAIRS, PairChunk

#: Points whose windows are gathered per step (their (point, ring) table is points x rings).
POINTS_PER_STEP = 4096


@dataclass(frozen=True)
class ScanBins:
    """A cloud binned by ring and azimuth sector.

    Attributes:
        order: int64 (N,) point indices sorted by bin ``ring * SECTORS + sector``.
        starts: int64 (K * SECTORS + 1,) bin ``b`` holds ``order[starts[b]:starts[b + 1]]``.
        ring_low, ring_high: float64 (K,) lowest and highest elevation of each ring's points
            (+inf and -inf for a ring with none).
        azimuth, elevation, rho, range_: float64 (N,) each point's angles and ranges.
    """

    order: np.ndarray
    starts: np.ndarray
    ring_low: np.ndarray
    ring_high: np.ndarray
    azimuth: np.ndarray
    elevation: np.ndarray
    rho: np.ndarray
    range_: np.ndarray


def sector_coordinate(azimuth: np.ndarray) -> np.ndarray:
    """``(azimuth + pi) * SECTOR_SCALE``: sectors are the integer parts, mod :data:`SECTORS`."""
    return (azimuth + np.pi) * SECTOR_SCALE


def bin_points(points: np.ndarray, rings: np.ndarray | None) -> ScanBins:
    """Bin finite float32 ``points`` by ring (checked ids, or elevation bands without) and
    sector."""
    p = points.astype(np.float64)
    rho = np.sqrt(p[:, 0] * p[:, 0] + p[:, 1] * p[:, 1])
    range_ = np.sqrt(rho * rho + p[:, 2] * p[:, 2])
    azimuth = np.arctan2(p[:, 1], p[:, 0])
    elevation = np.arctan2(p[:, 2], rho)
    count = ring_count(rings)
    if rings is None:
        band = np.floor((elevation + np.pi / 2) / VIRTUAL_RING_RAD)
        rings = np.clip(band, 0, VIRTUAL_RINGS - 1).astype(np.int64)
    sector = np.floor(sector_coordinate(azimuth)).astype(np.int64) % SECTORS
    bins = rings.astype(np.int64) * SECTORS + sector
    order = np.argsort(bins, kind="stable")
    starts = np.zeros(count * SECTORS + 1, dtype=np.int64)
    np.cumsum(np.bincount(bins, minlength=count * SECTORS), out=starts[1:])
    ring_low = np.full(count, np.inf)
    ring_high = np.full(count, -np.inf)
    np.minimum.at(ring_low, rings, elevation)
    np.maximum.at(ring_high, rings, elevation)
    return ScanBins(order, starts, ring_low, ring_high, azimuth, elevation, rho, range_)


def scan_pair_chunks(
    points: np.ndarray, d_th: float, rings: np.ndarray | None = None
) -> Iterator[PairChunk]:
    """Every neighbour pair of finite float32 ``points`` under the float32 rule at ``d_th``, in
    chunks, found through the scan bins (``rings``: one id per point, or None for elevation
    bands)."""
    points = np.ascontiguousarray(points, dtype=np.float32).reshape(-1, 3)
    n = len(points)
    if rings is not None:
        rings = check_rings(rings, n)
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    if n < 2 or not thr > 0:
        return
    yield from query_pairs(points, bin_points(points, rings), d_th)


def query_pairs(points: np.ndarray, bins: ScanBins, d_th: float) -> Iterator[PairChunk]:
    """The neighbour pairs of the binned ``points`` (each pair once, from its smaller index):
    windows off the axis, the collar's voxel grid on it."""
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    radius = search_radius(thr)
    axis = bins.rho <= radius * AXIS_FACTOR
    scanned = np.flatnonzero(~axis)
    for first in range(0, len(scanned), POINTS_PER_STEP):
        owner, start, length = _window_runs(bins, scanned[first : first + POINTS_PER_STEP], radius)
        for who, position in _run_chunks(owner, start, length):
            yield from _tested(points, thr, who, bins.order[position])
    if axis.any():
        yield from _axis_pairs(points, d_th, bins.rho <= radius * COLLAR_FACTOR, axis)


def _window_runs(
    bins: ScanBins, query: np.ndarray, radius: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The runs of sorted positions in the windows of the points ``query`` (off the axis):
    ``(owner, start, length)``, one or two runs per (point, ring) whose elevations meet."""
    beta = np.arcsin(np.minimum(1.0, radius / bins.range_[query])) + ANGLE_MARGIN
    alpha = np.arcsin(np.minimum(1.0, radius / bins.rho[query])) + ANGLE_MARGIN
    elevation = bins.elevation[query]
    meets = (bins.ring_high[None, :] >= (elevation - beta)[:, None]) & (
        bins.ring_low[None, :] <= (elevation + beta)[:, None]
    )
    row, ring = np.nonzero(meets)
    azimuth = bins.azimuth[query][row]
    low = np.floor(sector_coordinate(azimuth - alpha[row])).astype(np.int64)
    high = np.floor(sector_coordinate(azimuth + alpha[row])).astype(np.int64)
    whole = high - low + 1 >= SECTORS
    first, last = low % SECTORS, high % SECTORS
    wraps = ~whole & (first > last)
    base = ring * SECTORS
    # Run 1: the whole ring, or first..last, or first..end of the ring when the window wraps.
    start1 = bins.starts[base + np.where(whole, 0, first)]
    stop1 = bins.starts[base + np.where(whole | wraps, SECTORS, last + 1)]
    # Run 2 (wrapping windows only): the ring's start..last.
    start2 = bins.starts[base[wraps]]
    stop2 = bins.starts[base[wraps] + last[wraps] + 1]
    owner = np.concatenate((query[row], query[row[wraps]]))
    start = np.concatenate((start1, start2))
    length = np.concatenate((stop1 - start1, stop2 - start2))
    keep = length > 0
    return owner[keep], start[keep], length[keep]


def _run_chunks(
    owner: np.ndarray, start: np.ndarray, length: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(owner, position)`` for every position of every run, at most about CHUNK_PAIRS at a
    time (a run longer than that is cut into pieces first)."""
    pieces = -(-length // CHUNK_PAIRS)
    if (pieces > 1).any():
        run = np.repeat(np.arange(len(length)), pieces)
        piece = np.arange(len(run)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        owner, start = owner[run], start[run] + piece * CHUNK_PAIRS
        length = np.minimum(CHUNK_PAIRS, length[run] - piece * CHUNK_PAIRS)
    bounds = np.concatenate(([0], np.cumsum(length)))
    first = 0
    while first < len(length):
        last = int(np.searchsorted(bounds, bounds[first] + CHUNK_PAIRS, "right")) - 1
        last = min(max(first + 1, last), len(length))
        reps = length[first:last]
        offset = np.arange(int(reps.sum())) - np.repeat(bounds[first:last] - bounds[first], reps)
        yield np.repeat(owner[first:last], reps), np.repeat(start[first:last], reps) + offset
        first = last


def _tested(
    points: np.ndarray, thr: np.float32, i: np.ndarray, j: np.ndarray
) -> Iterator[PairChunk]:
    """The pairs ``(i, j)`` with ``i < j`` that the float32 rule accepts."""
    with np.errstate(over="ignore", invalid="ignore"):
        hit = (j > i) & (squared_distance(points[i], points[j]) < thr)
    if hit.any():
        yield i[hit], j[hit]


def _axis_pairs(
    points: np.ndarray, d_th: float, collar: np.ndarray, axis: np.ndarray
) -> Iterator[PairChunk]:
    """The pairs whose smaller index is an axis point, from the voxel grid of the collar (the
    pairs whose smaller index is off the axis come from that point's window)."""
    members = np.flatnonzero(collar)
    edges = range_edges(points[members], d_th).astype(np.int64)
    i, j = members[edges[:, 0]], members[edges[:, 1]]  # members ascend: i < j
    keep = axis[i]
    if keep.any():
        yield i[keep], j[keep]
