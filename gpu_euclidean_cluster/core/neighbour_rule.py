"""The neighbour rule both backends share: PCL's float32 test and the voxel size it implies.

Points *p* and *q* are neighbours when ``((dx*dx) + (dy*dy)) + (dz*dz)``, every operation rounded
to float32, is below ``float32(d_th**2)`` (Section 3 of the paper;
``pcl::EuclideanClusterExtraction``).
The CUDA kernels evaluate the same expression with the same rounding (``--fmad=false``), and the
range search of Section 4.4 (Algorithm 7) bins points into cubes of :func:`cell_size`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

#: Voxels are cubes of side ``d_th * (1 + CELL_MARGIN)``. Two points whose float32 squared distance
#: is below d_th² may be a hair farther apart than d_th in exact arithmetic; the margin keeps every
#: such pair within adjacent voxels, so the 27-voxel range search never misses a neighbour.
CELL_MARGIN = 1e-4


def threshold_sq(d_th: float) -> np.float32:
    """``d_th²`` as the float32 the comparison uses (squared in double, as PCL does; above
    float32's range it is inf, and every finite squared distance is below it)."""
    with np.errstate(over="ignore"):
        return np.float32(np.float64(d_th) ** 2)


def squared_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float32 squared distances of ``a`` and ``b`` (x, y, z on the last axis, broadcast over the
    others), summed in x, y, z order with float32 rounding."""
    with np.errstate(over="ignore"):  # overflow gives inf: not neighbours, as in float32 on the GPU
        d = np.subtract(a, b, dtype=np.float32)
        return (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]


#: Voxels per axis at most. Cell coordinates are clamped to ``[0, MAX_GRID_CELLS - 1]``: clamping
#: is monotone and never widens a gap, so two neighbours still fall in the same or adjacent voxels
#: and the search stays exact for coordinates anywhere in float32's range; clamped points merely
#: share boundary voxels (more candidates, each still tested by the exact rule). 2**20 per axis
#: keeps a linear voxel id below 2**60.
MAX_GRID_CELLS = 2**20


def cell_size(d_th: float) -> float:
    """Side of one voxel of the range search for threshold ``d_th``."""
    return float(d_th) * (1.0 + CELL_MARGIN)


def grid_window(
    low: np.ndarray, high: np.ndarray, cell: float, centre: Callable[[], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """Origin (float64) and voxels per axis (int64) of the range-search grid.

    Along an axis whose extent ``[low, high]`` spans at most :data:`MAX_GRID_CELLS` voxels the grid
    starts at ``low`` (Algorithm 7's bounding box). A wider axis (far outliers, garbage
    coordinates) gets a window of :data:`MAX_GRID_CELLS` voxels centred on ``centre()`` (e.g. the
    median, called only then), and points outside it are clamped into its boundary voxels.
    """
    low = np.asarray(low, dtype=np.float64)
    high = np.asarray(high, dtype=np.float64)
    with np.errstate(over="ignore"):
        span = np.floor((high - low) / cell) + 1.0  # may be inf for huge extents / tiny cells
    fits = span <= MAX_GRID_CELLS
    origin = low.copy()
    if not fits.all():
        middle = np.asarray(centre(), dtype=np.float64)
        origin[~fits] = middle[~fits] - (MAX_GRID_CELLS // 2) * cell
    dims = np.where(fits, np.minimum(span, MAX_GRID_CELLS), MAX_GRID_CELLS).astype(np.int64)
    return origin, dims


def voxel_coords(
    points: np.ndarray, origin: np.ndarray, cell: float, dims: np.ndarray
) -> np.ndarray:
    """(N, 3) int64 voxel coordinates, clamped to the grid (same arithmetic as the CUDA kernels:
    ``floor((double(p) - origin) / cell)`` in float64)."""
    with np.errstate(over="ignore"):
        scaled = np.floor((points.astype(np.float64) - origin) / cell)
    return np.clip(scaled, 0, dims - 1).astype(np.int64)
