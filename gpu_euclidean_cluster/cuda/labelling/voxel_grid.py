"""Algorithm 7 on the GPU: the voxel grid of the range search, built by sort and scan.

Same structure and voxel size as the CPU twin
``gpu_euclidean_cluster.cpu.labelling.voxel_grid.VoxelGrid`` (cubes of ``d_th * (1 +
CELL_MARGIN)``), plus the points gathered in voxel order (``sorted_points``) so the range-search
kernels read candidates contiguously.
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy
import numpy as np

from ...core.neighbour_rule import cell_size, grid_window
from ..module import CLUSTERING, THREADS, blocks, get_kernel


@dataclass
class GpuVoxelGrid:
    """``pid``, ``V`` (``voxel_ids``) and ``S`` (``starts``) of Algorithm 7, on the device."""

    pid: cupy.ndarray
    voxel_ids: cupy.ndarray
    starts: cupy.ndarray
    sorted_points: cupy.ndarray
    grid_args: tuple

    @property
    def num_voxels(self) -> int:
        return int(self.voxel_ids.shape[0])

    def search_args(self) -> tuple:
        """The leading arguments of every ``rs_*`` kernel."""
        return (
            self.sorted_points,
            self.pid,
            self.voxel_ids,
            self.starts,
            np.int32(self.num_voxels),
            *self.grid_args,
        )


def build_voxel_grid(device_id: int, points: cupy.ndarray, d_th: float) -> GpuVoxelGrid:
    """Build the grid over finite (N, 3) float32 ``points`` (N >= 1) on ``device_id`` (current)."""
    n = points.shape[0]
    cell = cell_size(d_th)
    # Steps 1-2: bounding box by parallel reduction, number of voxels per axis (clamped window).
    low = points.min(axis=0).get()
    high = points.max(axis=0).get()
    origin, dims = grid_window(low, high, cell, lambda: cupy.median(points, axis=0).get())
    grid_args = (*(np.float64(v) for v in origin), np.float64(cell), *(np.int64(v) for v in dims))
    # Steps 3-5: voxel id per point, pid = 0..N-1, sort by key.
    vid = cupy.empty(n, dtype=cupy.int64)
    pid = cupy.empty(n, dtype=cupy.int32)
    get_kernel(CLUSTERING, "compute_voxel_ids", device_id)(
        blocks(n), (THREADS,), (points, np.int32(n), *grid_args, vid, pid)
    )
    order = cupy.argsort(vid)
    vid = vid[order]
    pid = pid[order]
    # Steps 6-8: mark the last point of each voxel, exclusive scan of the marks.
    is_end = cupy.empty(n, dtype=cupy.int32)
    sorted_points = cupy.empty_like(points)
    get_kernel(CLUSTERING, "mark_voxel_ends", device_id)(
        blocks(n), (THREADS,), (vid, pid, points, np.int32(n), is_end, sorted_points)
    )
    inclusive = cupy.cumsum(is_end, dtype=cupy.int32)
    k = int(inclusive[-1])
    scanned = inclusive - is_end
    # Steps 9-10: V and S.
    voxel_ids = cupy.empty(k, dtype=cupy.int64)
    starts = cupy.zeros(k + 1, dtype=cupy.int32)
    get_kernel(CLUSTERING, "fill_voxels", device_id)(
        blocks(n), (THREADS,), (vid, is_end, scanned, np.int32(n), voxel_ids, starts)
    )
    return GpuVoxelGrid(pid, voxel_ids, starts, sorted_points, grid_args)
