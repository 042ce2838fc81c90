"""The neighbour rule both backends share: PCL's float32 test and the voxel size it implies.

Points *p* and *q* are neighbours when ``((dx*dx) + (dy*dy)) + (dz*dz)``, every operation rounded
to float32, is below ``float32(d_th**2)`` (Section 3 of the paper;
``pcl::EuclideanClusterExtraction``).
The CUDA kernels evaluate the same expression with the same rounding (``--fmad=false``), and the
range search of Section 4.4 (Algorithm 7) bins points into cubes of :func:`cell_size`.
"""

from __future__ import annotations

import numpy as np

#: Voxels are cubes of side ``d_th * (1 + CELL_MARGIN)``. Two points whose float32 squared distance
#: is below d_th² may be a hair farther apart than d_th in exact arithmetic; the margin keeps every
#: such pair within adjacent voxels, so the 27-voxel range search never misses a neighbour.
CELL_MARGIN = 1e-4


def threshold_sq(d_th: float) -> np.float32:
    """``d_th²`` as the float32 the comparison uses (squared in double, as PCL does)."""
    return np.float32(np.float64(d_th) ** 2)


def squared_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise float32 squared distances, summed in x, y, z order with float32 rounding."""
    d = np.subtract(a, b, dtype=np.float32)
    return (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + d[:, 2] * d[:, 2]


def cell_size(d_th: float) -> float:
    """Side of one voxel of the range search for threshold ``d_th``."""
    return float(d_th) * (1.0 + CELL_MARGIN)
