"""Graph structures on the GPU from the ES or RS neighbour search (Sections 4.1-4.2, 4.4).

:class:`NeighbourSearch` launches the ``es_*`` or ``rs_*`` twin of a kernel; on top of it,
:func:`build_adjacency_list` is Algorithm 1 and :func:`build_edge_set` its ``j > i`` variant.
"""

from __future__ import annotations

import cupy
import numpy as np

from ..core.neighbour_rule import threshold_sq
from ..core.units import INT32_MAX
from .module import THREADS, blocks
from .voxel_grid import GpuVoxelGrid, build_voxel_grid

#: Exhaustive-search tile: threads per block of the ``es_*`` kernels (ES_TILE in common.cuh).
ES_TILE = 256


class NeighbourSearch:
    """Runs neighbour-search kernels over ``points`` with exhaustive or range search."""

    def __init__(self, module: cupy.RawModule, points: cupy.ndarray, d_th: float, search: str):
        self.module = module
        self.points = points
        self.n = int(points.shape[0])
        self.thr_sq = threshold_sq(d_th)
        self.grid: GpuVoxelGrid | None = (
            build_voxel_grid(module, points, d_th) if search == "range" else None
        )

    def launch(self, name: str, *args: object) -> None:
        """Launch ``es_<name>`` or ``rs_<name>``: the search's leading arguments, then ``args``."""
        n = np.int32(self.n)
        if self.grid is None:
            kernel = self.module.get_function(f"es_{name}")
            kernel(blocks(self.n, ES_TILE), (ES_TILE,), (self.points, n, self.thr_sq, *args))
        else:
            kernel = self.module.get_function(f"rs_{name}")
            kernel(blocks(self.n), (THREADS,),
                   (*self.grid.search_args(), n, self.thr_sq, *args))


def _exclusive_scan(counts: cupy.ndarray, what: str) -> tuple[cupy.ndarray, int]:
    """``S`` with ``S[0] = 0`` and ``S[i+1] = counts[0] + ... + counts[i]``, and the total."""
    starts = cupy.zeros(counts.shape[0] + 1, dtype=cupy.int64)
    cupy.cumsum(counts, out=starts[1:])
    total = int(starts[-1])
    if total > INT32_MAX:
        raise MemoryError(f"{total} {what} exceed the int32 index range; lower d_th")
    return starts.astype(cupy.int32), total


def build_adjacency_list(search: NeighbourSearch) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Algorithm 1: ``S`` (n + 1 starts) and ``N`` (neighbour indices) of the adjacency list."""
    counts = cupy.empty(search.n, dtype=cupy.int32)
    search.launch("count_neighbours", counts, np.int32(0))
    starts, total = _exclusive_scan(counts, "adjacency entries")
    neighbours = cupy.empty(total, dtype=cupy.int32)
    search.launch("write_neighbours", starts, neighbours)
    return starts, neighbours


def build_edge_set(search: NeighbourSearch) -> cupy.ndarray:
    """Section 4.2.2: the (E, 2) int32 edge set (an int2 array on the device) with ``j > i``."""
    counts = cupy.empty(search.n, dtype=cupy.int32)
    search.launch("count_neighbours", counts, np.int32(1))
    starts, total = _exclusive_scan(counts, "edges")
    edges = cupy.empty((total, 2), dtype=cupy.int32)
    search.launch("write_edges", starts, edges)
    return edges
