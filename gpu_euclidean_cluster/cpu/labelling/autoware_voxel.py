"""Autoware's ``voxel_grid_based_euclidean_cluster`` with NumPy: the CPU twin of the ``voxel_grid``
algorithm (``cuda/labelling/autoware_voxel.py`` is the CUDA twin; their labels are identical bit for
bit).

The rules, as Autoware runs them on PCL (``ClusterConfig``'s docstring gives the parameters):

1. **Voxel grid** (PCL ``VoxelGrid``, leaf ``(L, L, 100000)``): ``inv = float32(1) / float32(L)``
   per axis; a point's cell is ``floor(float32(x * inv)) - float32(min cell)`` in float32, where
   the minimum cell is that of the cloud's smallest coordinate (so z has two layers, split at
   z = 0); the linear index is ``i + j * Di + k * Di * Dj``. Voxels with fewer than
   ``min_points_per_voxel`` points are dropped; the others are numbered 0..V-1 by ascending linear
   index. Where ``Dx * Dy * Dz`` (PCL's extent estimate ``int64(float32(max - min) * inv) + 1``)
   exceeds INT32_MAX, PCL returns the cloud unchanged: every point is then its own voxel, in
   point order, and none is dropped.
2. **Centroids**: per voxel the float64 sum of its points' coordinates, in the order of step 5's
   key (sequential), divided by the count in float64, rounded to float32. PCL sums in float32 in
   an order its unstable sort leaves undefined: the two can differ in the last bit.
3. **Clusters of centroids**: the centroids flattened to ``(x, y, 0)`` are clustered exactly
   with ``d_th`` by the backend's own ``label`` (strict float32 ``dx^2 + dy^2 < d_th^2``, PCL's
   FLANN rule), by ``method`` and ``search``.
4. **Split** of components over ``max_voxels_per_cluster`` voxels: ``core/voxel_split.py``.
5. **Points back** through their voxel to its piece. Pieces of more than
   ``large_cluster_voxel_count_threshold`` voxels keep, per voxel, the
   ``large_cluster_max_points_per_voxel`` points with the smallest key ``(hash32(i), i)``, ``i``
   the point's index in the array clustered (the finite points, in order) and ``hash32`` the
   bijective 32-bit mix below: a deterministic choice spread over the voxel, where Autoware keeps
   the first points of a shuffle whose random state persists from frame to frame. The kept
   *count* per voxel, ``min(n_v, cap)``, is Autoware's.

The result is one piece id per point, -1 for a point of a dropped voxel or thinned away; the
front door's canonical numbering then applies ``min_cluster_size`` (points after thinning).

Steps 1 and 2 take a leaf per axis: :func:`downsample` runs them with Autoware.ai's cube
``(L, L, L)`` and every voxel kept, for ``ClusterConfig.downsample_leaf_size``
(``core/downsample.py`` states those rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...core.downsample import Leaf, cube_leaf, inverse_leaf
from ...core.timing import StageClock
from ...core.units import INT32_MAX
from ...core.voxel_split import HASH_MUL_1, HASH_MUL_2, split_oversized


def hash32(index: np.ndarray) -> np.ndarray:
    """The 32-bit mix of each point index (uint32; a bijection, so keys never tie)."""
    x = np.asarray(index).astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(HASH_MUL_1)
    x ^= x >> np.uint32(15)
    x *= np.uint32(HASH_MUL_2)
    x ^= x >> np.uint32(16)
    return x


def extent_overflows(low: np.ndarray, high: np.ndarray, inv: np.ndarray) -> bool:
    """PCL's guard: the grid's cell count estimate exceeds INT32_MAX (the cloud is then returned
    unchanged). ``low``, ``high``: float32 (3,) minima and maxima of the cloud."""
    with np.errstate(over="ignore", invalid="ignore"):
        span = (high.astype(np.float32) - low.astype(np.float32)) * inv
    if not np.isfinite(span).all():
        return True
    d = [int(v) + 1 for v in span.astype(np.float64)]
    return d[0] * d[1] * d[2] > INT32_MAX


def linear_index(points: np.ndarray, leaf: float | Leaf) -> np.ndarray | None:
    """Each point's PCL voxel linear index (int64), or None where PCL's guard returns the cloud
    unchanged. ``points``: finite (N, 3) float32, N > 0; ``leaf``: the edges per axis, or one
    number for Autoware Universe's ``(L, L, Z_LEAF)`` (``core/downsample.py``)."""
    inv = inverse_leaf(leaf)
    low = points.min(axis=0)
    high = points.max(axis=0)
    if extent_overflows(low, high, inv):
        return None
    scaled = np.floor(points * inv)  # float32 products, float32 floors
    low_cell = np.floor(low * inv)
    cells = (scaled - low_cell).astype(np.int64)  # float32 subtraction, as PCL
    div = (np.floor(high * inv) - low_cell).astype(np.int64) + 1
    return cells[:, 0] + cells[:, 1] * div[0] + cells[:, 2] * (div[0] * div[1])


@dataclass
class VoxelGrid:
    """The voxels of a cloud.

    Attributes:
        order: int64 (N,): the points sorted by (linear index, hash32, index).
        voxel_sorted: int64 (N,): the voxel number of ``order``'s points, -1 where dropped.
        rank_sorted: int64 (N,): each sorted point's rank within its voxel.
        counts: int64 (V,): points per kept voxel.
        centroids: float32 (V, 3).
    """

    order: np.ndarray
    voxel_sorted: np.ndarray
    rank_sorted: np.ndarray
    counts: np.ndarray
    centroids: np.ndarray

    def voxel_of_points(self) -> np.ndarray:
        """int64 (N,): each point's voxel number (PCL's output order), -1 where dropped."""
        voxel = np.empty_like(self.voxel_sorted)
        voxel[self.order] = self.voxel_sorted
        return voxel


def voxel_grid(points: np.ndarray, leaf: float | Leaf, min_points_per_voxel: int) -> VoxelGrid:
    """Step 1 and 2 of the module's rules for finite (N, 3) float32 ``points`` (``leaf`` as in
    :func:`linear_index`)."""
    n = int(points.shape[0])
    index = np.arange(n, dtype=np.int64)
    linear = linear_index(points, leaf) if n else index
    if linear is None:  # PCL returns the cloud unchanged: one voxel per point
        linear, min_points_per_voxel = index, 1
    key = (linear.astype(np.uint64) << np.uint64(32)) | hash32(index).astype(np.uint64)
    order = np.argsort(key, kind="stable")
    sorted_linear = linear[order]
    fresh = np.ones(n, dtype=bool)
    fresh[1:] = sorted_linear[1:] != sorted_linear[:-1]
    segment = np.cumsum(fresh) - 1
    starts = np.flatnonzero(fresh)
    seg_counts = np.diff(np.append(starts, n))
    kept = seg_counts >= min_points_per_voxel
    voxel_of_segment = np.where(kept, np.cumsum(kept) - 1, -1)
    sums = np.stack(
        [np.bincount(segment, points[order, a].astype(np.float64)) for a in range(3)], axis=1
    )
    centroids = (sums[kept] / seg_counts[kept, None]).astype(np.float32)
    return VoxelGrid(
        order=order,
        voxel_sorted=voxel_of_segment[segment] if n else index,
        rank_sorted=index - starts[segment] if n else index,
        counts=seg_counts[kept],
        centroids=centroids.reshape(-1, 3),
    )


def downsample(points: np.ndarray, leaf_size: float) -> tuple[np.ndarray, np.ndarray]:
    """PCL ``VoxelGrid`` at ``(L, L, L)`` on finite (N, 3) float32 ``points``
    (``core/downsample.py``): int32 (N,) each point's voxel, float32 (V, 3) the centroids."""
    grid = voxel_grid(points, cube_leaf(leaf_size), 1)
    return grid.voxel_of_points().astype(np.int32), grid.centroids


def flat_centroids(centroids: np.ndarray) -> np.ndarray:
    """The centroids as ``(x, y, 0)`` float32, the cloud Autoware clusters."""
    flat = np.zeros_like(centroids, dtype=np.float32)
    flat[:, :2] = centroids[:, :2]
    return flat


def voxel_grid_components(
    points: np.ndarray,
    leaf: float,
    min_points_per_voxel: int,
    max_voxels_per_cluster: int,
    large_threshold: int,
    large_cap: int,
    label_centroids: Callable[[np.ndarray], np.ndarray],
    clock: StageClock | None = None,
) -> np.ndarray:
    """int32 (N,): each point's piece (ids in [0, V)), -1 where dropped or thinned away.

    ``label_centroids`` takes the flattened (V, 3) float32 centroids and returns their
    component ids (the backend's exact clustering at ``d_th``, which times itself); the grid,
    the split and the points' pieces are timed as ``build`` on ``clock``.
    """
    stage = clock or StageClock(lambda: None)
    n = int(points.shape[0])
    if n == 0:
        return np.empty(0, dtype=np.int32)
    with stage("build"):
        grid = voxel_grid(points, leaf, min_points_per_voxel)
        flat = flat_centroids(grid.centroids)
    if flat.shape[0] == 0:
        return np.full(n, -1, dtype=np.int32)
    components = np.asarray(label_centroids(flat))
    with stage("build"):
        return _pieces_of_points(
            grid, components, max_voxels_per_cluster, large_threshold, large_cap
        )


def _pieces_of_points(
    grid: VoxelGrid,
    components: np.ndarray,
    max_voxels_per_cluster: int,
    large_threshold: int,
    large_cap: int,
) -> np.ndarray:
    """Steps 4 and 5: split, points back to their pieces, thinning."""
    n = int(grid.order.shape[0])
    piece = np.unique(components, return_inverse=True)[1].reshape(-1).astype(np.int32)
    if np.bincount(piece).max() > max(1, max_voxels_per_cluster):
        cx, cy = grid.centroids[:, 0], grid.centroids[:, 1]
        piece = split_oversized(piece, cx, cy, max_voxels_per_cluster)
    large = np.bincount(piece) > large_threshold
    voxel = grid.voxel_sorted
    in_voxel = voxel >= 0
    piece_sorted = np.where(in_voxel, piece[np.where(in_voxel, voxel, 0)], -1)
    thinned = in_voxel & large[np.maximum(piece_sorted, 0)] & (grid.rank_sorted >= large_cap)
    out = np.empty(n, dtype=np.int32)
    out[grid.order] = np.where(thinned, -1, piece_sorted)
    return out
