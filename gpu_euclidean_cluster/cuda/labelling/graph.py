"""Graph structures on the GPU from the ES or RS neighbour search (Sections 4.1-4.2, 4.4).

:class:`NeighbourSearch` launches the ``es_*`` or ``rs_*`` twin of a kernel (or, for the companion
papers' searches, the ``kd_*`` / ``sc_*`` twin of its structure: :func:`pair_search_structure`); on
top of it, :func:`build_adjacency_list` is Algorithm 1 and :func:`build_edge_set` its ``j > i``
variant.
"""

from __future__ import annotations

import cupy
import numpy as np

from ...core.config import PAIR_SEARCHES
from ...core.memory import StructureTooLargeError
from ...core.neighbour_rule import threshold_sq
from ...core.units import INT32_MAX, format_bytes
from ..module import CLUSTERING, ES_TILE, THREADS, blocks, get_kernel
from ..search.kdtree import GpuKdTree, build_kdtree
from ..search.scan_search import GpuScanBins, build_scan_bins
from .voxel_grid import GpuVoxelGrid, build_voxel_grid


def pair_search_structure(
    device_id: int, points: cupy.ndarray, d_th: float, search: str, rings: cupy.ndarray | None
) -> GpuKdTree | GpuScanBins:
    """The structure of ``search`` (``kdtree`` or ``scan``, with ``rings`` or None) over finite
    float32 (N, 3) ``points`` (N >= 1)."""
    if search == "kdtree":
        return build_kdtree(device_id, points, d_th)
    return build_scan_bins(device_id, points, d_th, rings)


class NeighbourSearch:
    """Runs neighbour-search kernels over ``points`` with exhaustive or range search.

    ``es_*`` kernels run blocks of ``ES_TILE`` threads (the exhaustive search needs exactly its
    tile), ``rs_*`` kernels blocks of ``THREADS``; both come from :data:`~..module.CLUSTERING`.
    ``kdtree`` and ``scan`` launch their structure's twins (``kd_*``, ``sc_*``); ``rings`` (one
    per point, or None) bins ``scan``.
    """

    def __init__(
        self,
        device_id: int,
        points: cupy.ndarray,
        d_th: float,
        search: str,
        rings: cupy.ndarray | None = None,
    ):
        self.device_id = device_id
        self.points = points
        self.n = int(points.shape[0])
        self.thr_sq = threshold_sq(d_th)
        self.grid: GpuVoxelGrid | None = (
            build_voxel_grid(device_id, points, d_th) if search == "range" else None
        )
        self.structure = (
            pair_search_structure(device_id, points, d_th, search, rings)
            if search in PAIR_SEARCHES
            else None
        )

    def launch(self, name: str, *args: object) -> None:
        """Launch ``es_<name>``, ``rs_<name>`` or the structure's twin: the search's leading
        arguments, then ``args``."""
        if self.structure is not None:
            self.structure.launch(name, *args)
            return
        n = np.int32(self.n)
        if self.grid is None:
            kernel = get_kernel(CLUSTERING, f"es_{name}", self.device_id)
            kernel(blocks(self.n, ES_TILE), (ES_TILE,), (self.points, n, self.thr_sq, *args))
        else:
            kernel = get_kernel(CLUSTERING, f"rs_{name}", self.device_id)
            kernel(blocks(self.n), (THREADS,), (*self.grid.search_args(), n, self.thr_sq, *args))


def _exclusive_scan(
    counts: cupy.ndarray, method: str, what: str, entry_bytes: int, budget: int | None
) -> tuple[cupy.ndarray, int]:
    """``S`` with ``S[0] = 0`` and ``S[i+1] = counts[0] + ... + counts[i]``, and the total.

    Raises:
        StructureTooLargeError: the ``total`` entries exceed the kernels' int32 indices or the
            free GPU memory (checked before the structure is allocated).
    """
    starts = cupy.zeros(counts.shape[0] + 1, dtype=cupy.int64)
    cupy.cumsum(counts, out=starts[1:])
    total = int(starts[-1])
    need = total * entry_bytes
    if total > INT32_MAX:
        raise StructureTooLargeError(
            method, f"{total} {what}", need, f"the kernels' int32 index range ({INT32_MAX})"
        )
    free = free_device_memory()
    limit, name = (free, "free GPU memory") if budget is None else (min(budget, free), "budget")
    if need > limit:
        raise StructureTooLargeError(
            method, f"{total} {what}", need, f"the {format_bytes(limit)} of {name}"
        )
    return starts.astype(cupy.int32), total


def free_device_memory() -> int:
    """Bytes the current device can still allocate: driver-free plus CuPy's cached free blocks."""
    free, _ = cupy.cuda.runtime.memGetInfo()
    return int(free) + int(cupy.get_default_memory_pool().free_bytes())


def build_adjacency_list(
    search: NeighbourSearch, budget: int | None = None
) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Algorithm 1: ``S`` (n + 1 starts) and ``N`` (neighbour indices) of the adjacency list.

    ``N``'s size is checked against ``budget`` (or the free memory) before it is allocated.
    """
    counts = cupy.empty(search.n, dtype=cupy.int32)
    search.launch("count_neighbours", counts, np.int32(0))
    starts, total = _exclusive_scan(counts, "vertex", "adjacency entries", 4, budget)
    neighbours = cupy.empty(total, dtype=cupy.int32)
    search.launch("write_neighbours", starts, neighbours)
    return starts, neighbours


def build_edge_set(search: NeighbourSearch, budget: int | None = None) -> cupy.ndarray:
    """Section 4.2.2: the (E, 2) int32 edge set (an int2 array on the device) with ``j > i``,
    its size checked against ``budget`` (or the free memory) before it is allocated."""
    counts = cupy.empty(search.n, dtype=cupy.int32)
    search.launch("count_neighbours", counts, np.int32(1))
    starts, total = _exclusive_scan(counts, "edge", "edges", 8, budget)
    edges = cupy.empty((total, 2), dtype=cupy.int32)
    search.launch("write_edges", starts, edges)
    return edges
