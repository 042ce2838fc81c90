"""Difference-of-Normals filtering in NumPy: the CPU twin of ``cuda/stages/diffnormals.py``.

    >>> keep = difference_of_normals(points, mask, DiffNormalsSettings())  # (N,) bool

The rules are ``core/diffnormals.py``'s. The neighbour search is the regular grid of the
clustering (``core/neighbour_rule.py``: cells a hair larger than the radius, 27 cells per query):
candidates are sorted by cell, and for each of the 27 cell offsets every query's range of
candidates in that cell is expanded into pairs, about :data:`PAIRS_PER_BATCH` at a time; each
query's sums are differences of an int64 running sum over its pairs (exact). The covariance,
Jacobi sweeps and orientation are vectorised over the candidates.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ...core.diffnormals import (
    JACOBI_PAIRS,
    JACOBI_SWEEPS,
    MAX_CANDIDATES,
    DiffNormalsSettings,
    fixed_point_scale,
)
from ...core.neighbour_rule import (
    cell_size,
    grid_window,
    squared_distance,
    threshold_sq,
    voxel_coords,
)

#: Candidate pairs expanded per batch (each costs about 100 bytes of temporaries).
PAIRS_PER_BATCH = 1 << 20
#: Columns of the per-point sums (rule 3): count, sums of x, y, z, then the products in the
#: order of :data:`PRODUCTS`.
SUM_COLUMNS = 10
#: The six distinct products of the covariance: xx, xy, xz, yy, yz, zz.
PRODUCTS = ((0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2))


def difference_of_normals(points: Any, mask: Any, settings: DiffNormalsSettings) -> np.ndarray:
    """(N,) bool: the candidates (``mask``; None: every point) of the (N, 3) float32 ``points``
    that the filter keeps (rule 6 of ``core/diffnormals.py``)."""
    xyz = np.ascontiguousarray(np.asarray(points).reshape(-1, 3), dtype=np.float32)
    n = xyz.shape[0]
    candidates = np.arange(n) if mask is None else np.flatnonzero(mask)
    if candidates.size > MAX_CANDIDATES:
        raise ValueError(
            f"difference of normals takes at most {MAX_CANDIDATES} points, got {candidates.size}"
        )
    kept = np.zeros(n, dtype=bool)
    if candidates.size == 0:
        return kept
    cloud = xyz[candidates]
    small, small_valid = normals(cloud, settings.small_radius)
    large, large_valid = normals(cloud, settings.large_radius)
    half = (small - large) / 2.0
    length = np.sqrt(half[:, 0] * half[:, 0] + half[:, 1] * half[:, 1] + half[:, 2] * half[:, 2])
    kept[candidates] = small_valid & large_valid & (length > settings.threshold)
    return kept


def normals(cloud: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """(M, 3) float64 unit normals of the (M, 3) float32 ``cloud`` at ``radius`` (rules 2-5) and
    (M,) bool: the point has one (3 neighbours or more; elsewhere the row is 0)."""
    sums = neighbour_sums(cloud, radius)
    return normals_from_sums(sums)


def neighbour_sums(cloud: np.ndarray, radius: float) -> np.ndarray:
    """(M, :data:`SUM_COLUMNS`) int64 sums of rule 3 of every point of ``cloud``."""
    cell = cell_size(radius)
    origin, dims = grid_window(
        cloud.min(axis=0), cloud.max(axis=0), cell, lambda: np.median(cloud, axis=0)
    )
    coords = voxel_coords(cloud, origin, cell, dims)
    keys = (coords[:, 0] * dims[1] + coords[:, 1]) * dims[2] + coords[:, 2]
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_cloud, sorted_coords = keys[order], cloud[order], coords[order]
    wide = sorted_cloud.astype(np.float64)
    limit, scale = threshold_sq(radius), fixed_point_scale(radius)
    totals = np.zeros((len(cloud), SUM_COLUMNS), dtype=np.int64)
    for offset in itertools.product((-1, 0, 1), repeat=3):
        cells = sorted_coords + np.asarray(offset)
        inside = ((cells >= 0) & (cells < dims)).all(axis=1)
        cell_keys = (cells[:, 0] * dims[1] + cells[:, 1]) * dims[2] + cells[:, 2]
        starts = np.searchsorted(sorted_keys, cell_keys, side="left")
        counts = np.where(inside, np.searchsorted(sorted_keys, cell_keys, side="right") - starts, 0)
        for first, last in _batches(counts):
            span = counts[first:last]
            queries = np.repeat(np.arange(first, last), span)
            group_starts = np.cumsum(span) - span
            others = starts[queries] + (np.arange(len(queries)) - np.repeat(group_starts, span))
            near = squared_distance(sorted_cloud[others], sorted_cloud[queries]) < limit
            offsets = np.rint((wide[others] - wide[queries]) * scale).astype(np.int64)
            offsets[~near] = 0
            values = np.empty((len(queries), SUM_COLUMNS), dtype=np.int64)
            values[:, 0] = near
            values[:, 1:4] = offsets
            for column, (a, b) in enumerate(PRODUCTS, start=4):
                values[:, column] = offsets[:, a] * offsets[:, b]
            running = np.concatenate([np.zeros((1, SUM_COLUMNS), np.int64), values.cumsum(0)])
            bounds = np.concatenate([[0], np.cumsum(span)])
            totals[first:last] += running[bounds[1:]] - running[bounds[:-1]]
    sums = np.empty_like(totals)
    sums[order] = totals
    return sums


def _batches(counts: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive query ranges of about :data:`PAIRS_PER_BATCH` pairs (at least one query)."""
    ends = np.cumsum(counts)
    batches, first = [], 0
    while first < len(counts):
        before = ends[first - 1] if first else 0
        last = max(int(np.searchsorted(ends, before + PAIRS_PER_BATCH, side="right")), first + 1)
        if ends[last - 1] > before:
            batches.append((first, last))
        first = last
    return batches


def normals_from_sums(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit normals (M, 3) and validity (M,) of the sums of rule 3 (rules 4 and 5)."""
    count = sums[:, 0]
    valid = count >= 3
    k = np.where(valid, count, 1).astype(np.float64)
    mean = [sums[:, 1 + a].astype(np.float64) / k for a in range(3)]
    c = {}
    for column, (a, b) in enumerate(PRODUCTS, start=4):
        c[a, b] = c[b, a] = sums[:, column].astype(np.float64) / k - mean[a] * mean[b]
    v = {(a, b): np.full(len(sums), float(a == b)) for a in range(3) for b in range(3)}
    for _ in range(JACOBI_SWEEPS):
        for p, q in JACOBI_PAIRS:
            _rotate(c, v, p, q)
    diagonal = np.stack([c[0, 0], c[1, 1], c[2, 2]], axis=1)
    smallest = np.zeros(len(sums), dtype=np.int64)
    smallest[diagonal[:, 1] < diagonal[:, 0]] = 1
    smallest[diagonal[:, 2] < diagonal[np.arange(len(sums)), smallest]] = 2
    vector = np.stack([np.choose(smallest, [v[row, 0], v[row, 1], v[row, 2]]) for row in range(3)])
    nx, ny, nz = vector
    length = np.sqrt(nx * nx + ny * ny + nz * nz)
    normal = np.stack([nx / length, ny / length, nz / length], axis=1)
    flip = normal[:, 0] + normal[:, 1] + normal[:, 2] < 0
    normal[flip] = -normal[flip]
    normal[~valid] = 0.0
    return normal, valid


def _rotate(c: dict, v: dict, p: int, q: int) -> None:
    """One Jacobi rotation in the (p, q) plane of every point's covariance ``c`` and eigenvector
    matrix ``v`` (rule 5; both dicts of (M,) float64 arrays keyed by (row, column)), skipped
    where ``c[p, q] == 0``."""
    r = 3 - p - q
    app, aqq, apq, arp, arq = c[p, p], c[q, q], c[p, q], c[r, p], c[r, q]
    rotated = apq != 0
    safe = np.where(rotated, apq, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        theta = (aqq - app) / (safe + safe)
        t = 1.0 / (np.abs(theta) + np.sqrt(theta * theta + 1.0))
    t = np.where(theta < 0, -t, t)
    cos = 1.0 / np.sqrt(t * t + 1.0)
    sin = t * cos
    updates = {
        (p, p): app - t * apq,
        (q, q): aqq + t * apq,
        (p, q): np.zeros_like(apq),
        (r, p): cos * arp - sin * arq,
        (r, q): sin * arp + cos * arq,
    }
    for (a, b), value in updates.items():
        c[a, b] = c[b, a] = np.where(rotated, value, c[a, b])
    for row in range(3):
        vp, vq = v[row, p], v[row, q]
        v[row, p] = np.where(rotated, cos * vp - sin * vq, vp)
        v[row, q] = np.where(rotated, sin * vp + cos * vq, vq)
