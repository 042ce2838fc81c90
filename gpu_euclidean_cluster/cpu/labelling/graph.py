"""Graph structures on the CPU from the ES or RS neighbour search (Sections 4.1-4.2, 4.4).

Twin of ``cuda/labelling/graph.py``: every pair closer than ``d_th`` under the neighbour rule of
:mod:`~gpu_euclidean_cluster.core.neighbour_rule`, as the ``i < j`` edge set of Section 4.2, and
Algorithm 1's adjacency list built from it. Two searches, as in Section 4.4 of the paper:
exhaustive search (ES) over all pairs, in blocks, and range search (RS) over the 27 voxels around
each point of the :class:`VoxelGrid`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from scipy.sparse import csr_matrix

from ...core.memory import StructureTooLargeError, host_memory_budget
from ...core.neighbour_rule import squared_distance, threshold_sq
from ...core.units import format_bytes
from .voxel_grid import VoxelGrid, build_voxel_grid

#: Candidate pairs evaluated per vectorised step: every chunked pass (the exact count, the edge
#: searches) holds the temporaries of at most this many (:data:`CANDIDATE_BYTES` each).
CHUNK_PAIRS = 1 << 20

#: The 13 neighbour offsets with a positive first non-zero component: with the voxel itself,
#: each unordered pair of adjacent voxels is visited once.
FORWARD_OFFSETS = np.array(
    [
        (dx, dy, dz)
        for dz in (-1, 0, 1)
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
        if (dz, dy, dx) > (0, 0, 0)
    ],
    dtype=np.int64,
)

#: Peak bytes per neighbour pair while a CPU method builds and labels its graph (measured with
#: tracemalloc: 66 and 33; ``test/core/test_memory_bounds.py`` checks the bound): the int32 edge set
#: (8), for ``vertex`` the symmetric CSR adjacency list (10, and up to 40 while it is sorted),
#: and the float64 CSR copy and transpose SciPy's ``connected_components`` makes (24 per stored
#: entry; ``vertex`` stores each pair twice).
EDGE_BYTES = {"vertex": 72, "edge": 40, "matrix": 40}
#: Peak bytes per point besides the edges (measured: 161 on 200 000 sparse points): the voxel
#: grid and its temporaries, SciPy's per-vertex arrays, the labels.
POINT_BYTES = 200
#: Temporaries per candidate pair of a chunk (measured: 93): indices, gathered coordinates,
#: squared distances, hits.
CANDIDATE_BYTES = 128


def graph_bytes(method: str, points: int, edges: int, candidates: int) -> int:
    """Peak bytes of ``method``'s CPU graph for ``points`` points and ``edges`` neighbour pairs
    found among ``candidates`` compared pairs: every structure and temporary counted."""
    chunk = CANDIDATE_BYTES * min(candidates, CHUNK_PAIRS)
    return POINT_BYTES * points + EDGE_BYTES[method] * edges + chunk


def neighbour_edges(
    points: np.ndarray, d_th: float, search: str, method: str, budget: int | None = None
) -> np.ndarray:
    """The ``i < j`` edge set by ES or RS, after checking that the method's graph fits ``budget``.

    The number of candidate pairs (all pairs for ES; pairs of points in the same or adjacent
    voxels for RS) bounds the edges; only when that bound is over budget are the edges counted,
    in bounded memory (:data:`CHUNK_PAIRS` candidates at a time) and only until they are known
    not to fit, before any is stored.

    Raises:
        StructureTooLargeError: the graph (:func:`graph_bytes`) would need more than ``budget``
            bytes (default :func:`~gpu_euclidean_cluster.core.memory.host_memory_budget`).
    """
    budget = host_memory_budget() if budget is None else budget
    limit = f"the CPU memory budget of {format_bytes(budget)}"
    n = len(points)
    grid_bytes = graph_bytes(method, n, 0, 0)
    if grid_bytes > budget:
        raise StructureTooLargeError(method, f"the grid of {n} points", grid_bytes, limit)
    grid = build_voxel_grid(points, d_th) if search == "range" else None
    bound = n * (n - 1) // 2 if grid is None else _candidate_count(grid)
    if graph_bytes(method, n, bound, bound) > budget:
        working = graph_bytes(method, n, 0, bound)
        if working > budget:
            raise StructureTooLargeError(method, f"searching {n} points", working, limit)
        room = (budget - working) // EDGE_BYTES[method]
        pairs = _all_pairs(n) if grid is None else _candidate_pairs(grid)
        found = count_neighbour_pairs(points, d_th, pairs, stop_above=room)
        if found > room:
            raise StructureTooLargeError(
                method,
                f"at least {found} neighbour pairs",
                graph_bytes(method, n, found, bound),
                limit,
            )
    return exhaustive_edges(points, d_th) if grid is None else range_edges(points, d_th, grid)


def count_neighbour_pairs(
    points: np.ndarray,
    d_th: float,
    pairs: Iterator[tuple[np.ndarray, np.ndarray]],
    stop_above: int,
) -> int:
    """Neighbour pairs among the candidate ``pairs``, counted chunk by chunk; the count stops
    at the first chunk that takes it over ``stop_above`` (the caller only needs to know that)."""
    thr = threshold_sq(d_th)
    found = 0
    for a, b in pairs:
        found += int(np.count_nonzero(squared_distance(points[a], points[b]) < thr))
        if found > stop_above:
            break
    return found


def _candidate_count(grid: VoxelGrid) -> int:
    """Point pairs the range search compares: within each voxel and with its forward voxels."""
    counts = np.diff(grid.starts)
    total = int((counts * (counts - 1) // 2).sum())
    for src, dst in _forward_voxel_pairs(grid):
        total += int((counts[src] * counts[dst]).sum())
    return total


def _all_pairs(n: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every pair ``i < j``, at most about :data:`CHUNK_PAIRS` at a time."""
    rows = max(1, CHUNK_PAIRS // max(n, 1))
    for start in range(0, n, rows):
        i, j = np.nonzero(np.arange(n)[None, :] > np.arange(start, min(start + rows, n))[:, None])
        yield i + start, j


def exhaustive_edges(points: np.ndarray, d_th: float) -> np.ndarray:
    """ES: compare every pair ``i < j``; returns an (E, 2) int32 edge set."""
    n = len(points)
    thr = threshold_sq(d_th)
    rows = max(1, CHUNK_PAIRS // max(n, 1))
    parts = []
    for start in range(0, n, rows):
        i = np.arange(start, min(start + rows, n))
        sq = squared_distance(points[i, None, :], points[None, :, :])
        hit_i, hit_j = np.nonzero((sq < thr) & (np.arange(n)[None, :] > i[:, None]))
        parts.append(_edge_part(i[hit_i], hit_j))
    return _concat_edges(parts)


def range_edges(points: np.ndarray, d_th: float, grid: VoxelGrid | None = None) -> np.ndarray:
    """RS: compare only pairs in the same or adjacent voxels; returns an (E, 2) int32 edge set."""
    grid = grid or build_voxel_grid(points, d_th)
    thr = threshold_sq(d_th)
    parts = []
    for a, b in _candidate_pairs(grid):
        hit = squared_distance(points[a], points[b]) < thr
        a, b = a[hit], b[hit]
        parts.append(_edge_part(np.minimum(a, b), np.maximum(a, b)))
    return _concat_edges(parts)


def _candidate_pairs(grid: VoxelGrid) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Point index pairs of each voxel with itself (a < b) and with its forward neighbours."""
    counts = np.diff(grid.starts)
    voxels = np.arange(len(counts))
    # Pairs inside one voxel.
    yield from _pairs_between(grid, voxels, voxels, counts, counts, same_voxel=True)
    # Pairs between a voxel and each of its 13 forward neighbours.
    for src, dst in _forward_voxel_pairs(grid):
        yield from _pairs_between(grid, src, dst, counts[src], counts[dst], same_voxel=False)


def _forward_voxel_pairs(grid: VoxelGrid) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """For each of the 13 forward offsets, the (voxel, neighbour voxel) index pairs that exist."""
    coords = grid.point_voxels[grid.pid[grid.starts[:-1]]]
    for offset in FORWARD_OFFSETS:
        other = coords + offset
        inside = np.all((other >= 0) & (other < grid.dims), axis=1)
        found = np.full(len(coords), -1, dtype=np.int64)
        found[inside] = grid.find(grid.linear_id(other[inside]))
        src = np.flatnonzero(found >= 0)
        yield src, found[src]


def _pairs_between(
    grid: VoxelGrid,
    src: np.ndarray,
    dst: np.ndarray,
    src_count: np.ndarray,
    dst_count: np.ndarray,
    same_voxel: bool,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """All (point of src voxel, point of dst voxel) pairs as point indices, at most
    :data:`CHUNK_PAIRS` candidates at a time: the candidates of all voxel pairs are numbered in
    one sequence, which is cut in slices, so a voxel pair with more candidates than a chunk
    (a dense voxel) is split across chunks."""
    sizes = src_count * dst_count
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    total = int(bounds[-1])
    for begin in range(0, total, CHUNK_PAIRS):
        end = min(begin + CHUNK_PAIRS, total)
        # The voxel pairs whose candidates overlap [begin, end), and how many each has there.
        first = int(np.searchsorted(bounds, begin, "right")) - 1
        last = int(np.searchsorted(bounds, end, "left"))
        sel = np.arange(first, last)
        taken = np.minimum(bounds[sel + 1], end) - np.maximum(bounds[sel], begin)
        owner = np.repeat(sel, taken)
        k = np.arange(begin, end) - bounds[owner]  # candidate number within its voxel pair
        a_pos = grid.starts[src[owner]] + k // dst_count[owner]
        b_pos = grid.starts[dst[owner]] + k % dst_count[owner]
        if same_voxel:
            keep = a_pos < b_pos
            a_pos, b_pos = a_pos[keep], b_pos[keep]
        yield grid.pid[a_pos], grid.pid[b_pos]


def _edge_part(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """One chunk's edges as an (E, 2) int32 array (half the bytes of the int64 indices)."""
    part = np.empty((len(low), 2), dtype=np.int32)
    part[:, 0] = low
    part[:, 1] = high
    return part


def _concat_edges(parts: list[np.ndarray]) -> np.ndarray:
    if not parts:
        return np.empty((0, 2), dtype=np.int32)
    return np.concatenate(parts)


def adjacency_list(edges: np.ndarray, n: int) -> csr_matrix:
    """Algorithm 1's ``S`` (exclusive scan of neighbour counts) and ``N`` as a CSR matrix."""
    both = np.concatenate((edges, edges[:, ::-1]))
    counts = np.bincount(both[:, 0], minlength=n)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    neighbours = both[np.argsort(both[:, 0], kind="stable"), 1]
    data = np.ones(len(neighbours), dtype=np.int8)
    return csr_matrix((data, neighbours, starts), shape=(n, n))
