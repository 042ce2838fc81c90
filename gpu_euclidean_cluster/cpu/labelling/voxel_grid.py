"""The voxel grid of the paper's range search (Section 4.4, Algorithm 7), built with NumPy.

The CUDA backend builds the same structure on the GPU (``cuda/labelling/voxel_grid.py``); both
follow Algorithm 7 step by step: bounding box by reduction, one voxel id per point, sort of (vid,
pid), mark the last point of each voxel, exclusive scan of the marks, then ``V`` (the ids of the
non-empty voxels) and ``S`` (where each voxel's points start in ``pid``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.neighbour_rule import cell_size, grid_window, voxel_coords


@dataclass(frozen=True)
class VoxelGrid:
    """A grid of ``cell``-sized cubes over the cloud's bounding box (Algorithm 7's outputs).

    Attributes:
        origin: (3,) float64 minimum corner of the grid (the bounding box's, unless clamped).
        cell: side of a voxel in metres.
        dims: (3,) int64 number of voxels along x, y, z.
        pid: int64 (N,) point indices sorted by voxel id.
        voxel_ids: int64 (k,) the ids ``V`` of the non-empty voxels, ascending.
        starts: int64 (k + 1,) ``S``: voxel ``voxel_ids[v]`` holds ``pid[starts[v]:starts[v+1]]``.
        point_voxels: int64 (N, 3) integer voxel coordinates of every point.
    """

    origin: np.ndarray
    cell: float
    dims: np.ndarray
    pid: np.ndarray
    voxel_ids: np.ndarray
    starts: np.ndarray
    point_voxels: np.ndarray

    def linear_id(self, coords: np.ndarray) -> np.ndarray:
        """Voxel ids of integer voxel coordinates (x fastest)."""
        return coords[..., 0] + self.dims[0] * (coords[..., 1] + self.dims[1] * coords[..., 2])

    def find(self, ids: np.ndarray) -> np.ndarray:
        """Index into ``voxel_ids`` of each id, or -1 where that voxel is empty."""
        pos = np.searchsorted(self.voxel_ids, ids)
        pos = np.minimum(pos, len(self.voxel_ids) - 1)
        return np.where(self.voxel_ids[pos] == ids, pos, -1)


def build_voxel_grid(points: np.ndarray, d_th: float) -> VoxelGrid:
    """Algorithm 7 on the CPU for finite float32 ``points`` of shape (N, 3)."""
    cell = cell_size(d_th)
    n = len(points)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return VoxelGrid(
            np.zeros(3),
            cell,
            np.ones(3, np.int64),
            empty,
            empty,
            np.zeros(1, np.int64),
            np.empty((0, 3), np.int64),
        )
    # Steps 1-3: bounding box by reduction, number of voxels, voxel id of every point (the grid
    # window is clamped so that any finite coordinates give exact, overflow-free voxel ids).
    origin, dims = grid_window(
        points.min(axis=0), points.max(axis=0), cell, lambda: np.median(points, axis=0)
    )
    coords = voxel_coords(points, origin, cell, dims)
    grid = VoxelGrid(
        origin,
        cell,
        dims,
        np.empty(0, np.int64),
        np.empty(0, np.int64),
        np.empty(0, np.int64),
        coords,
    )
    vid = grid.linear_id(coords)
    # Steps 4-5: pid = 0..N-1, sorted with vid as the key.
    pid = np.argsort(vid, kind="stable")
    vid = vid[pid]
    # Steps 6-8: mark[i] = 1 where vid[i] < vid[i+1] (and for the last point); exclusive scan.
    mark = np.empty(n, dtype=bool)
    mark[:-1] = vid[:-1] < vid[1:]
    mark[-1] = True
    last = np.flatnonzero(mark)
    # Steps 9-10: V[mark[i]] = vid[i], S[mark[i] + 1] = i + 1.
    starts = np.zeros(len(last) + 1, dtype=np.int64)
    starts[1:] = last + 1
    return VoxelGrid(origin, cell, dims, pid, vid[last], starts, coords)
