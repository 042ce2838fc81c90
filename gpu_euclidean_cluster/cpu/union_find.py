"""CPU twin of the ``union_find`` labelling method: same clique-cell grid, same partition.

The voxel grid of the paper's Section 4.4 (Algorithm 7) with cells of side
``h = sqrt(T / 3) * (1 - CELL_MARGIN)`` (``T = float32(d_th**2)``): any two points of a cell are
neighbours under the float32 rule (proof in docs/union_find.md), so every cell is one connected
set from the start (the dense boxes of FDBSCAN-DenseBox, Prokopenko et al., ICPP'23) and the
union-find runs over cells. Two cells at one of the 62 forward offsets of the 5 x 5 x 5 stencil
are merged at their first neighbour pair; the search over their point pairs goes in bounded
slices (at most ``CHUNK_PAIRS`` candidates in memory), and a cell pair is dropped as soon as both
cells share a component. Components are kept as a flat label array, merged with SciPy's
connected_components on (component, component) pairs: O(N + CHUNK_PAIRS) memory whatever the
degree, no edge list.

When the grid cannot be used (T infinite or below 2^-100, a cloud more than 2^30 cells wide,
or a key space of 2^61 cells or more) and for ``search="exhaustive"``, all pairs ``j > i`` are
compared in chunks and folded into the same label array.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..core.clique_cells import FORWARD_OFFSETS, PAD, clique_cell_side, grid_extent
from ..core.config import PAPER_SEARCHES
from ..core.neighbour_rule import squared_distance, threshold_sq

#: Candidate point pairs evaluated per vectorised step (about 170 MB of temporaries at most).
CHUNK_PAIRS = 1 << 21

#: Smallest slice of a cell pair's candidates tried per round (first-hit search).
MIN_SLICE = 64


@dataclass(frozen=True)
class CliqueGrid:
    """Points sorted by clique cell.

    Attributes:
        order: int64 (N,) point indices sorted by cell key.
        starts: int64 (k + 1,) cell c holds ``order[starts[c]:starts[c + 1]]``.
        keys: int64 (k,) ascending cell keys ``x + nx * (y + ny * z)`` (padded coordinates).
        dims: int64 (3,) padded cells per axis.
        cell_of: int64 (N,) cell of every point, in point order.
    """

    order: np.ndarray
    starts: np.ndarray
    keys: np.ndarray
    dims: np.ndarray
    cell_of: np.ndarray


def build_clique_grid(points: np.ndarray, side: float) -> CliqueGrid | None:
    """The clique-cell grid of float32 (N, 3) ``points`` (N >= 1), or None if it cannot be used.

    Scaled coordinates as in :func:`~gpu_euclidean_cluster.core.clique_cells.grid_extent`.
    """
    inv_h = 1.0 / side
    origin = points.min(axis=0).astype(np.float64)
    ext = grid_extent(origin, points.max(axis=0), side)
    if ext is None:
        return None
    dims = ext.astype(np.int64) + 2 * PAD + 1
    coords = np.floor((points.astype(np.float64) - origin) * inv_h).astype(np.int64) + PAD
    keys = coords[:, 0] + dims[0] * (coords[:, 1] + dims[1] * coords[:, 2])
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = np.flatnonzero(np.diff(sorted_keys)) + 1
    starts = np.concatenate(([0], first, [len(points)])).astype(np.int64)
    cell_sorted = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    cell_of = np.empty(len(points), dtype=np.int64)
    cell_of[order] = cell_sorted
    return CliqueGrid(order, starts, sorted_keys[starts[:-1]], dims, cell_of)


def grid_fits(points: np.ndarray, d_th: float) -> bool:
    """True when the clique-cell grid can hold ``points`` at ``d_th`` (else ``union_find`` falls
    back to the exhaustive search: far outliers, or a threshold without clique cells)."""
    side = clique_cell_side(threshold_sq(d_th))
    if side is None or len(points) == 0:
        return side is not None
    return grid_extent(points.min(axis=0), points.max(axis=0), side) is not None


def union_find_components(points: np.ndarray, d_th: float, search: str = "range") -> np.ndarray:
    """Connected components of the float32 neighbour graph: int32 (N,), equal ids iff connected.

    Args:
        points: finite float32 (N, 3).
        d_th: distance threshold; neighbours satisfy ``((dx*dx + dy*dy) + dz*dz) < float32(d_th²)``.
        search: ``"range"`` (clique-cell grid) or ``"exhaustive"`` (all pairs, chunked).
    """
    if search not in PAPER_SEARCHES:
        raise ValueError(f"search must be one of {PAPER_SEARCHES}, not {search!r}")
    points = np.ascontiguousarray(points, dtype=np.float32).reshape(-1, 3)
    n = len(points)
    with np.errstate(over="ignore"):  # d_th**2 beyond float32: T = inf
        thr = threshold_sq(d_th)
    if n < 2 or not thr > 0:  # no pair can satisfy S < T when T <= 0 (or NaN)
        return np.arange(n, dtype=np.int32)
    side = clique_cell_side(thr)
    if search == "range" and side is not None:
        grid = build_clique_grid(points, side)
        if grid is not None:
            return _link_cells(points, thr, grid)
    return _link_exhaustive(points, thr)


def _merge(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Relabel ``labels`` (one flat label per node) so that nodes a[i] and b[i] share a label."""
    la, lb = labels[a], labels[b]
    differ = la != lb
    if not differ.any():
        return labels
    k = len(labels)
    graph = coo_matrix(
        (np.ones(int(differ.sum()), dtype=np.int8), (la[differ], lb[differ])), shape=(k, k)
    )
    _, merged = connected_components(graph, directed=False)
    return merged[labels]


def _link_cells(points: np.ndarray, thr: np.float32, grid: CliqueGrid) -> np.ndarray:
    """Union the clique cells over the 62 forward offsets, nearest first; labels per point."""
    sorted_points = points[grid.order]
    counts = np.diff(grid.starts)
    labels = np.arange(len(counts))
    nx, ny = int(grid.dims[0]), int(grid.dims[1])
    for ox, oy, oz in FORWARD_OFFSETS:
        target = grid.keys + (int(ox) + nx * (int(oy) + ny * int(oz)))
        pos = np.minimum(np.searchsorted(grid.keys, target), len(grid.keys) - 1)
        src = np.flatnonzero(grid.keys[pos] == target)
        if src.size:
            labels = _connect(sorted_points, grid.starts, counts, src, pos[src], labels, thr)
    return labels[grid.cell_of].astype(np.int32)


def _connect(
    sp: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    cell_a: np.ndarray,
    cell_b: np.ndarray,
    labels: np.ndarray,
    thr: np.float32,
) -> np.ndarray:
    """Merge each cell pair (cell_a[i], cell_b[i]) that holds a neighbour pair.

    Rounds: every pair still open (different labels, candidates left) contributes its next slice
    of candidates, at most CHUNK_PAIRS in all; a pair is closed at its first neighbour pair.
    """
    total = counts[cell_a] * counts[cell_b]
    cursor = np.zeros(len(cell_a), dtype=np.int64)
    open_ = np.arange(len(cell_a))
    while open_.size:
        open_ = open_[labels[cell_a[open_]] != labels[cell_b[open_]]]
        if not open_.size:
            break
        per = max(MIN_SLICE, CHUNK_PAIRS // open_.size)
        take = np.minimum(per, total[open_] - cursor[open_])
        cum = np.cumsum(take)
        m = max(1, int(np.searchsorted(cum, CHUNK_PAIRS, side="right")))
        sel, take, cum = open_[:m], take[:m], cum[:m]
        owner = np.repeat(np.arange(m), take)
        k = cursor[sel][owner] + np.arange(int(cum[-1])) - np.repeat(cum - take, take)
        nb = counts[cell_b[sel]][owner]
        a = starts[cell_a[sel]][owner] + k // nb
        b = starts[cell_b[sel]][owner] + k % nb
        with np.errstate(over="ignore", invalid="ignore"):
            hit = np.unique(owner[squared_distance(sp[a], sp[b]) < thr])
        cursor[sel] += take
        if hit.size:
            labels = _merge(labels, cell_a[sel[hit]], cell_b[sel[hit]])
        done = cursor[sel] >= total[sel]
        done[hit] = True
        open_ = np.concatenate((open_[m:], sel[~done]))
    return labels


def _link_exhaustive(points: np.ndarray, thr: np.float32) -> np.ndarray:
    """Every pair j > i, a block of rows at a time, folded into per-point labels."""
    n = len(points)
    labels = np.arange(n)
    start = 0
    while start < n:
        rows = max(1, CHUNK_PAIRS // (n - start))
        stop = min(n, start + rows)
        sq = squared_distance(points[start:stop, None, :], points[None, start:, :])
        i, j = np.nonzero(sq < thr)
        i += start
        j += start
        keep = j > i
        labels = _merge(labels, i[keep], j[keep])
        start = stop
    return labels.astype(np.int32)
