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

Where that grid cannot hold the cloud (T infinite or below 2^-100, a cloud more than 2^30 cells
wide: far outliers, or a key space of 2^61 cells or more), the twin uses a *gapped* grid of
clique cells (:func:`build_gapped_grid`): along each axis the sorted coordinates are cut into
slabs wherever two consecutive values are farther apart than any neighbour pair can be, each
slab has its own origin (so no scaled coordinate reaches 2^30 cells), and cell coordinates are
compressed (gaps wider than the stencil shortened). Its cell side and stencil radius come from
the float32 arithmetic itself (:func:`clique_geometry`), which covers subnormal and infinite
thresholds. It needs O(N) memory and O(N log N) time whatever the coordinates: ``auto`` runs
``union_find`` on every CPU cloud. ``search="exhaustive"`` compares all pairs ``j > i`` in
chunks and folds them into the same label array (O(N) memory, O(N²) time).

Both searches run over the cloud's *distinct positions* (:func:`distinct_positions`): for any
``T > 0`` two value-equal finite points are neighbours (``S = 0 < T``) with the same neighbours,
so copies of a position are one connected set and the partition of the positions, spread back
to every copy, is the partition of the points. A cell pair then costs at most one distance
test per pair of its distinct positions. Searched copy by copy, the sweep of a VLP-32C that does
not turn (461 000 points at 415 places) cost 1.7e9 tests, up to |A| x |B| for each pair of
neighbouring cells that holds no neighbour pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ...core.clique_cells import (
    FORWARD_OFFSETS,
    MAX_CELLS_PER_AXIS,
    PAD,
    clique_cell_side,
    forward_offsets,
    grid_extent,
)
from ...core.config import PAPER_SEARCHES
from ...core.neighbour_rule import CELL_MARGIN, squared_distance, threshold_sq

#: Candidate point pairs evaluated per vectorised step (about 170 MB of temporaries at most).
CHUNK_PAIRS = 1 << 21

#: Smallest slice of a cell pair's candidates tried per round (first-hit search).
MIN_SLICE = 64


#: Largest float32, the bound of a finite squared distance (the clique side where T = inf).
FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class CliqueGrid:
    """Points sorted by clique cell, over the cloud's bounding box.

    Attributes:
        order: int64 (N,) point indices sorted by cell key.
        starts: int64 (k + 1,) cell c holds ``order[starts[c]:starts[c + 1]]``.
        cell_of: int64 (N,) cell of every point, in point order.
        keys: int64 (k,) ascending cell keys ``x + nx * (y + ny * z)`` (padded coordinates).
        dims: int64 (3,) padded cells per axis.
    """

    order: np.ndarray
    starts: np.ndarray
    cell_of: np.ndarray
    keys: np.ndarray
    dims: np.ndarray

    @property
    def offsets(self) -> np.ndarray:
        """The 62 forward offsets of the 5 x 5 x 5 stencil, nearest first."""
        return FORWARD_OFFSETS

    def neighbours(self, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The occupied cells ``src`` whose cell at ``offset`` is occupied, and that cell."""
        nx, ny = int(self.dims[0]), int(self.dims[1])
        ox, oy, oz = (int(o) for o in offset)
        return _lookup(self.keys, self.keys + (ox + nx * (oy + ny * oz)))


@dataclass(frozen=True)
class GappedGrid:
    """Points sorted by clique cell, in compressed cell coordinates (:func:`build_gapped_grid`).

    Attributes:
        order, starts, cell_of: as :class:`CliqueGrid`'s.
        coords: int64 (k, 3) compressed coordinates of every cell, at least ``radius`` and at
            most ``extent - radius - 1`` per axis.
        keys: int64 (k,) ascending cell keys ``x + nx * yz``, ``yz`` the rank of the cell's
            ``y + ny * z`` in ``yz_keys``.
        yz_keys: int64 ascending distinct ``y + ny * z`` of the occupied cells.
        nx, ny: compressed extent along x and y.
        offsets: the forward offsets of the stencil, {-radius..radius}^3, nearest first.
    """

    order: np.ndarray
    starts: np.ndarray
    cell_of: np.ndarray
    coords: np.ndarray
    keys: np.ndarray
    yz_keys: np.ndarray
    nx: int
    ny: int
    offsets: np.ndarray = field(repr=False)

    def neighbours(self, offset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The occupied cells ``src`` whose cell at ``offset`` is occupied, and that cell."""
        ox, oy, oz = (int(o) for o in offset)
        has_yz, yz = _lookup(
            self.yz_keys, (self.coords[:, 1] + oy) + self.ny * (self.coords[:, 2] + oz)
        )
        src, dst = _lookup(self.keys, (self.coords[has_yz, 0] + ox) + self.nx * yz)
        return has_yz[src], dst


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The indices ``i`` of ``wanted`` found in the ascending ``keys``, and where they are."""
    if not len(keys):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = np.flatnonzero(keys[pos] == wanted)
    return found, pos[found]


def _cells(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, cell_of, cell_keys)`` of points grouped by equal ``keys``."""
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    first = np.flatnonzero(np.diff(sorted_keys)) + 1
    starts = np.concatenate(([0], first, [len(keys)])).astype(np.int64)
    cell_of = np.empty(len(keys), dtype=np.int64)
    cell_of[order] = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    return order, starts, cell_of, sorted_keys[starts[:-1]]


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
    order, starts, cell_of, keys = _cells(
        coords[:, 0] + dims[0] * (coords[:, 1] + dims[1] * coords[:, 2])
    )
    return CliqueGrid(order, starts, cell_of, keys, dims)


def clique_geometry(thr: np.float32) -> tuple[float, float]:
    """``(side, reach)`` of clique cells for any float32 threshold ``T > 0``, inf included,
    derived from the float32 arithmetic itself.

    ``side`` h: two float32 values less than ``h (1 + 2^-19)`` apart on every axis (what one
    cell holds: Lemma 1 of docs/union_find.md, whose precondition :func:`build_gapped_grid`
    keeps) give ``S < T``. Rounding is monotone, so it suffices that ``(m*m + m*m) + m*m`` in
    float32 is below T, with m the float32 at or above ``h (1 + 2^-18)``. h starts at
    ``sqrt(T / 3) (1 - CELL_MARGIN)`` (``FLT_MAX`` in place of an infinite T: a finite S is
    below it), which holds for ``T >= 2^-100`` (Lemma 2), and shrinks where subnormal rounding
    needs it.

    ``reach`` D: the smallest float32 whose square rounds to T or more. A neighbour pair has
    ``fl(dx*dx) <= S < T`` on every axis, hence ``|dx| < D`` and ``|p_x - q_x| < D``.
    """
    with np.errstate(over="ignore", under="ignore"):
        side = math.sqrt(min(float(thr), FLOAT32_MAX) / 3.0) * (1.0 - CELL_MARGIN)
        while not _largest_sum(_float32_at_or_above(side * (1.0 + 2.0**-18))) < thr:
            side *= 1.0 - 2.0**-6
        low, high = 0, 0x7F800000  # float32 bit patterns of +0 and +inf: order-preserving
        while high - low > 1:
            middle = (low + high) // 2
            value = np.array(middle, dtype=np.uint32).view(np.float32)[()]
            low, high = (low, middle) if value * value >= thr else (middle, high)
    return side, float(np.array(high, dtype=np.uint32).view(np.float32)[()])


def _float32_at_or_above(value: float) -> np.float32:
    with np.errstate(over="ignore"):
        rounded = np.float32(value)
    return rounded if float(rounded) >= value else np.nextafter(rounded, np.float32(np.inf))


def _largest_sum(m: np.float32) -> np.float32:
    """``(m*m + m*m) + m*m`` in float32: the largest S of differences at most m per axis."""
    square = m * m
    return (square + square) + square


def build_gapped_grid(points: np.ndarray, thr: np.float32) -> GappedGrid | None:
    """Clique cells of float32 (N, 3) ``points`` (N >= 1) for any ``T > 0``, whatever the
    coordinates, or None where a slab spans 2^30 cells (a chain of more than ~10^8 points).

    Cells have :func:`clique_geometry`'s side h; two points whose cells are more than
    ``radius = ceil(D / h + 2^-19)`` apart on an axis are not neighbours (Lemma 3 with D in
    place of sqrt(T)). Along each axis (:func:`_gapped_axis`) the sorted coordinates are cut
    into slabs where consecutive values are more than D apart (no neighbour pair crosses such
    a gap), cell coordinates are taken from each slab's own float32 minimum, and consecutive
    cells are renumbered with their distance kept up to ``radius`` and ``radius + 1`` for any
    larger one or a new slab: cells stay cells, and neighbour cells stay within the stencil.
    """
    side, reach = clique_geometry(thr)
    radius = math.ceil(reach / side * (1.0 + 2.0**-40) + 2.0**-19)
    coords = np.empty((len(points), 3), dtype=np.int64)
    for axis in range(3):
        column = _gapped_axis(points[:, axis], side, reach * (1.0 + 2.0**-48), radius)
        if column is None:
            return None
        coords[:, axis] = column
    nx = int(coords[:, 0].max()) + radius + 1
    ny = int(coords[:, 1].max()) + radius + 1
    yz_keys, yz = np.unique(coords[:, 1] + ny * coords[:, 2], return_inverse=True)
    order, starts, cell_of, keys = _cells(coords[:, 0] + nx * yz.reshape(-1))
    return GappedGrid(
        order,
        starts,
        cell_of,
        coords[order[starts[:-1]]],
        keys,
        yz_keys,
        nx,
        ny,
        forward_offsets(radius),
    )


def _gapped_axis(values: np.ndarray, side: float, gap: float, radius: int) -> np.ndarray | None:
    """Compressed cell coordinates (int64, from ``radius``) of float32 ``values``: cells of
    ``side`` from each slab's minimum, slabs cut where sorted values are more than ``gap``
    apart (in float64, which rounds a difference of float32 values by at most 2^-52 of it);
    None where a slab spans :data:`MAX_CELLS_PER_AXIS` cells."""
    order = np.argsort(values, kind="stable")
    ordered = values[order].astype(np.float64)
    slab_start = np.empty(len(ordered), dtype=bool)
    slab_start[0] = True
    slab_start[1:] = np.diff(ordered) > gap
    first = np.flatnonzero(slab_start)
    origin = np.repeat(ordered[first], np.diff(np.append(first, len(ordered))))
    scaled = np.floor((ordered - origin) * (1.0 / side))
    if not scaled.max() < MAX_CELLS_PER_AXIS:
        return None
    cell = scaled.astype(np.int64)
    step = np.empty(len(cell), dtype=np.int64)
    step[0] = radius
    step[1:] = np.where(slab_start[1:], radius + 1, np.minimum(np.diff(cell), radius + 1))
    compressed = np.empty(len(cell), dtype=np.int64)
    compressed[order] = np.cumsum(step)
    return compressed


def union_find_components(points: np.ndarray, d_th: float, search: str = "range") -> np.ndarray:
    """Connected components of the float32 neighbour graph: int32 (N,), equal ids iff connected.

    Args:
        points: finite float32 (N, 3).
        d_th: distance threshold; neighbours satisfy ``((dx*dx + dy*dy) + dz*dz) < float32(d_th²)``.
        search: ``"range"`` (clique cells: the bounding-box grid where it can hold the cloud,
            else the gapped grid) or ``"exhaustive"`` (all pairs, chunked).
    """
    if search not in PAPER_SEARCHES:
        raise ValueError(f"search must be one of {PAPER_SEARCHES}, not {search!r}")
    points = np.ascontiguousarray(points, dtype=np.float32).reshape(-1, 3)
    n = len(points)
    with np.errstate(over="ignore"):  # d_th**2 beyond float32: T = inf
        thr = threshold_sq(d_th)
    if n < 2 or not thr > 0:  # no pair can satisfy S < T when T <= 0 (or NaN)
        return np.arange(n, dtype=np.int32)
    first, position = distinct_positions(points)
    if len(first) == n:
        return _distinct_components(points, thr, search)
    return _distinct_components(points[first], thr, search)[position]


def distinct_positions(points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One point of each distinct position of float32 (N, 3) ``points``, and each point's
    position.

    Value-equal points share a position (``-0.0`` and ``+0.0`` alike: adding ``+0.0`` turns
    ``-0.0`` into ``+0.0`` before the bit patterns are compared); a point with a NaN or infinite
    coordinate is a position of its own, as it is nobody's neighbour, not even its copy's. Two
    sorts of 64-bit keys: the (x, y) bits, then their rank with the z bits.

    Returns:
        ``(first, position)``: int64 (k,) one index of each position, and int64 (N,) the
        position of every point, so that ``points[first][position]`` equals ``points``.
    """
    bits = (points + np.float32(0.0)).view(np.uint32).astype(np.uint64)
    xy = (bits[:, 0] << np.uint64(32)) | bits[:, 1]
    by_xy = np.argsort(xy)
    xy_rank = np.empty(len(points), dtype=np.uint64)
    xy_rank[by_xy] = np.cumsum(_run_starts(xy[by_xy])) - 1
    key = (xy_rank << np.uint64(32)) | bits[:, 2]
    order = np.argsort(key)
    starts = _run_starts(key[order])
    if not np.isfinite(points).all():
        starts |= ~np.isfinite(points[order]).all(axis=1)
    position = np.empty(len(points), dtype=np.int64)
    position[order] = np.cumsum(starts) - 1
    return order[starts], position


def _run_starts(ordered: np.ndarray) -> np.ndarray:
    """bool: where a value of the sorted (N >= 1) ``ordered`` differs from the one before."""
    starts = np.empty(len(ordered), dtype=bool)
    starts[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return starts


def _distinct_components(points: np.ndarray, thr: np.float32, search: str) -> np.ndarray:
    """:func:`union_find_components` of float32 (N, 3) ``points`` (N >= 1) for ``T > 0``."""
    if search == "exhaustive":
        return _link_exhaustive(points, thr)
    side = clique_cell_side(thr)
    grid = None if side is None else build_clique_grid(points, side)
    if grid is None:
        grid = build_gapped_grid(points, thr)
    if grid is None:  # a slab of 2^30 cells: a cloud of hundreds of millions of points
        return _link_exhaustive(points, thr)
    return _link_cells(points, thr, grid)


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


def _link_cells(points: np.ndarray, thr: np.float32, grid: CliqueGrid | GappedGrid) -> np.ndarray:
    """Union the clique cells over the grid's forward offsets, nearest first; labels per point."""
    sorted_points = points[grid.order]
    counts = np.diff(grid.starts)
    labels = np.arange(len(counts))
    for offset in grid.offsets:
        src, dst = grid.neighbours(offset)
        if src.size:
            labels = _connect(sorted_points, grid.starts, counts, src, dst, labels, thr)
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
