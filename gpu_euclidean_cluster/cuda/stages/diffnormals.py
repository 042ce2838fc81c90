"""Difference-of-Normals filtering on the GPU: the CUDA twin of ``cpu/stages/diffnormals.py``, bit
for bit.

    >>> kept = difference_of_normals(points, mask, DiffNormalsSettings())  # CuPy (N,) bool

The rules are ``core/diffnormals.py``'s; ``cuda/kernels/stages/diffnormals.cu`` says how the kernels
follow them. Per radius: a cell key per candidate, a sort by key (CuPy's radix sort) and a tile of
lanes per candidate (:data:`TILE_LANES`: more for the large radius, whose neighbourhoods hold
hundreds to thousands of points) that visits its 27 cells and computes its normal; then one
launch for the mask. Two host synchronisations: the candidates' number and their bounding box.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from ...core.diffnormals import (
    JACOBI_SWEEPS,
    MAX_CANDIDATES,
    DiffNormalsSettings,
    fixed_point_scale,
)
from ...core.neighbour_rule import cell_size, grid_window, threshold_sq
from ..module import THREADS, KernelSource, blocks, get_kernel

DIFFNORMALS = KernelSource(
    "diffnormals", ("stages/diffnormals.cu",), {"DON_JACOBI_SWEEPS": JACOBI_SWEEPS}
)
#: Lanes per candidate of ``don_normals`` at the small and the large radius (powers of two up to
#: 32, dividing :data:`~..module.THREADS`).
TILE_LANES = {"small": 8, "large": 32}


def difference_of_normals(points: Any, mask: Any, settings: DiffNormalsSettings) -> Any:
    """(N,) CuPy bool: the candidates (``mask``; None: every point) of the (N, 3) CuPy float32
    ``points`` that the filter keeps, on the points' device."""
    device_id = points.device.id
    with cupy.cuda.Device(device_id):
        xyz = cupy.ascontiguousarray(points.reshape(-1, 3), dtype=cupy.float32)
        n = xyz.shape[0]
        candidates = (
            cupy.arange(n, dtype=cupy.int64)
            if mask is None
            else cupy.flatnonzero(mask).astype(cupy.int64, copy=False)
        )
        m = int(candidates.shape[0])  # flatnonzero synchronised
        if m > MAX_CANDIDATES:
            raise ValueError(
                f"difference of normals takes at most {MAX_CANDIDATES} points, got {m}"
            )
        kept = cupy.zeros(n, dtype=cupy.bool_)
        if m == 0:
            return kept
        cloud = cupy.ascontiguousarray(xyz[candidates])
        bounds = cupy.stack([cloud.min(axis=0), cloud.max(axis=0)]).get()  # synchronises
        small, small_valid = _normals(
            cloud, settings.small_radius, device_id, bounds, TILE_LANES["small"]
        )
        large, large_valid = _normals(
            cloud, settings.large_radius, device_id, bounds, TILE_LANES["large"]
        )
        get_kernel(DIFFNORMALS, "don_keep", device_id)(
            blocks(m),
            (THREADS,),
            (
                small,
                small_valid,
                large,
                large_valid,
                candidates,
                np.int64(m),
                np.float64(settings.threshold),
                kept,
            ),
        )
        return kept


def _normals(
    cloud: Any, radius: float, device_id: int, bounds: np.ndarray, tile: int
) -> tuple[Any, Any]:
    """(M, 3) float64 normals and (M,) uint8 validity of the candidates ``cloud`` (whose
    per-axis minimum and maximum are the rows of ``bounds``) at ``radius``, ``tile`` lanes per
    candidate."""
    m = cloud.shape[0]
    cell = cell_size(radius)
    origin, dims = grid_window(bounds[0], bounds[1], cell, lambda: cupy.median(cloud, axis=0).get())
    grid = (
        np.float64(origin[0]),
        np.float64(origin[1]),
        np.float64(origin[2]),
        np.float64(cell),
        np.int64(dims[0]),
        np.int64(dims[1]),
        np.int64(dims[2]),
    )
    keys = cupy.empty(m, dtype=cupy.int64)
    get_kernel(DIFFNORMALS, "don_cells", device_id)(
        blocks(m), (THREADS,), (cloud, np.int64(m), *grid, keys)
    )
    order = cupy.argsort(keys)
    normals = cupy.empty((m, 3), dtype=cupy.float64)
    valid = cupy.empty(m, dtype=cupy.uint8)
    get_kernel(DIFFNORMALS, "don_normals", device_id)(
        blocks(m * tile),
        (THREADS,),
        (
            cupy.ascontiguousarray(cloud[order]),
            cupy.ascontiguousarray(keys[order]),
            order.astype(cupy.int64, copy=False),
            np.int64(m),
            *grid,
            np.float32(threshold_sq(radius)),
            np.float64(fixed_point_scale(radius)),
            np.int32(tile),
            normals,
            valid,
        ),
    )
    return normals, valid
