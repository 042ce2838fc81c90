"""The scan-structured search on the GPU (``search: scan``): ring x sector bins through CuPy.

``core/scan_search.py`` has the bins, the windows and the proof that they hold every neighbour;
``cuda/kernels/search/scan_search.cu`` the kernels; ``cpu/search/scan_search.py`` the NumPy twin.

Build: ``sc_bin`` (bin, rank in the bin, zone, ring elevation ranges), an exclusive scan of the bin
counts, ``sc_scatter`` (points in bin order); then, where there are axis points, the voxel grid of
the collar (``voxel_grid.build_voxel_grid``) and each axis point's position in it. Host
synchronisations: the largest ring id (when rings are given) and the collar's size.

Queries: :meth:`GpuScanBins.launch` runs the ``sc_`` twin of
:class:`~..labelling.graph.NeighbourSearch`'s kernels and :meth:`GpuScanBins.components` unites
every pair found (``union_find`` over the bins).
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy
import numpy as np

from ...core.kdtree import search_radius
from ...core.neighbour_rule import threshold_sq
from ...core.scan_search import (
    ANGLE_MARGIN,
    AXIS_FACTOR,
    COLLAR_FACTOR,
    SECTOR_SCALE,
    SECTORS,
    VIRTUAL_RING_RAD,
    check_rings,
    ring_count,
)
from ..labelling.voxel_grid import GpuVoxelGrid, build_voxel_grid
from ..module import THREADS, blocks, get_kernel
from .kdtree import STRUCTURES, link_components

#: Zones ``sc_bin`` writes: off the axis, collar only, axis point.
ZONE_AXIS = 2


@dataclass
class GpuScanBins:
    """A cloud binned by ring and sector on the device, with the axis points' voxel grid.

    Attributes:
        device_id: the CUDA device holding it (current while it is used).
        n: points.
        thr_sq: ``float32(d_th**2)``.
        args: the leading arguments of every ``sc_`` search kernel (``SCAN_ARGS`` of
            ``scan_search.cu``).
        points: float32 (N, 3) the points in their own order (``uf_finish`` reads them).
    """

    device_id: int
    n: int
    thr_sq: np.float32
    args: tuple
    points: cupy.ndarray

    def launch(self, name: str, *args: object) -> None:
        """Launch ``sc_<name>`` over every point (``graph.cu``'s searches: the bins' leading
        arguments, ``n`` and ``thr_sq``, then ``args``)."""
        kernel = get_kernel(STRUCTURES, f"sc_{name}", self.device_id)
        kernel(blocks(self.n), (THREADS,), (*self.args, np.int32(self.n), self.thr_sq, *args))

    def components(self) -> cupy.ndarray:
        """int32 (N,) component ids (root point indices) of the neighbour graph."""
        return link_components(
            self.device_id, self.points, lambda parent: self.launch("link", parent)
        )


def build_scan_bins(
    device_id: int, points: cupy.ndarray, d_th: float, rings: cupy.ndarray | None = None
) -> GpuScanBins:
    """Bin finite float32 (N, 3) ``points`` (N >= 1) by ring (``rings``, or elevation bands) and
    azimuth sector on ``device_id`` (current)."""
    points = cupy.ascontiguousarray(points, dtype=cupy.float32)
    n = int(points.shape[0])
    if rings is not None:
        rings = cupy.ascontiguousarray(check_rings(rings, n))
    num_rings = ring_count(rings)
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    radius = search_radius(thr)
    bins = num_rings * SECTORS
    bin_of = cupy.empty(n, dtype=cupy.int32)
    rank = cupy.empty(n, dtype=cupy.int32)
    counts = cupy.zeros(bins, dtype=cupy.int32)
    zone = cupy.empty(n, dtype=cupy.uint8)
    ring_low = cupy.full(num_rings, -1, dtype=cupy.int64).view(cupy.uint64)  # all ones: empty
    ring_high = cupy.zeros(num_rings, dtype=cupy.uint64)
    get_kernel(STRUCTURES, "sc_bin", device_id)(
        blocks(n),
        (THREADS,),
        (
            points,
            np.int32(n),
            bin_of if rings is None else rings,  # not read without rings
            np.int32(rings is not None),
            np.int32(num_rings),
            np.float64(VIRTUAL_RING_RAD),
            np.int32(SECTORS),
            np.float64(SECTOR_SCALE),
            np.float64(radius * AXIS_FACTOR),
            np.float64(radius * COLLAR_FACTOR),
            bin_of,
            rank,
            counts,
            zone,
            ring_low,
            ring_high,
        ),
    )
    starts = cupy.zeros(bins + 1, dtype=cupy.int32)
    cupy.cumsum(counts, out=starts[1:])
    sorted_points = cupy.empty((n, 4), dtype=cupy.int32)  # float32 bits and the index
    get_kernel(STRUCTURES, "sc_scatter", device_id)(
        blocks(n), (THREADS,), (points, np.int32(n), bin_of, rank, starts, sorted_points)
    )
    collar = cupy.flatnonzero(zone > 0).astype(cupy.int32)
    slot = cupy.full(n, -1, dtype=cupy.int32)
    grid = _collar_grid(device_id, points, d_th, collar, zone, slot)
    args = (
        sorted_points,
        starts,
        ring_low,
        ring_high,
        np.int32(num_rings),
        np.int32(SECTORS),
        np.float64(SECTOR_SCALE),
        np.float64(radius),
        np.float64(ANGLE_MARGIN),
        slot,
        *_grid_args(grid, collar),
    )
    return GpuScanBins(device_id, n, thr, args, points)


def _collar_grid(
    device_id: int,
    points: cupy.ndarray,
    d_th: float,
    collar: cupy.ndarray,
    zone: cupy.ndarray,
    slot: cupy.ndarray,
) -> GpuVoxelGrid | None:
    """The voxel grid of the collar points, and in ``slot`` each axis point's position in it
    (None, ``slot`` left at -1, without a collar)."""
    m = int(collar.shape[0])
    if not m:
        return None
    grid = build_voxel_grid(device_id, points[collar], d_th)
    position = cupy.empty(m, dtype=cupy.int32)
    position[grid.pid] = cupy.arange(m, dtype=cupy.int32)
    axis = zone[collar] == ZONE_AXIS
    slot[collar[axis]] = position[axis]
    return grid


def _grid_args(grid: GpuVoxelGrid | None, collar: cupy.ndarray) -> tuple:
    """``CSP, cpid, CV, CS, ck, collar`` and ``GRID_ARGS`` of ``scan_search.cu`` (a one-cell
    grid over nothing where there is no collar: no axis point reads it)."""
    if grid is None:
        empty32 = cupy.zeros(1, dtype=cupy.int32)
        return (
            cupy.zeros(3, dtype=cupy.float32),
            empty32,
            cupy.zeros(1, dtype=cupy.int64),
            empty32,
            np.int32(0),
            empty32,
            *(np.float64(0.0) for _ in range(3)),
            np.float64(1.0),
            *(np.int64(1) for _ in range(3)),
        )
    k = np.int32(grid.voxel_ids.shape[0])
    return (grid.sorted_points, grid.pid, grid.voxel_ids, grid.starts, k, collar, *grid.grid_args)
