"""Voxel-grid downsampling before clustering, as Autoware.ai had it (ROS-free).

Autoware.ai's ``lidar_euclidean_cluster_detect`` (``downsample_cloud``, ``leaf_size``, 0.1 m by
default) thinned the cloud with PCL's ``VoxelGrid`` at a leaf ``(L, L, L)`` and clustered the
voxel centroids. Here (``ClusterConfig.downsample_leaf_size``):

1. **Grid** (PCL ``VoxelGrid`` with ``min_points_per_voxel`` 1): the float32 inverse leaf
   ``float32(1) / float32(L)`` per axis (:func:`inverse_leaf`); a point's cell
   ``floor(float32(x * inv)) - float32(floor(float32(min_x * inv)))`` in float32 per axis, the
   minima taken over the cloud clustered (the finite, unmasked points); the linear index
   ``i + j * Di + k * Di * Dj``; the voxels numbered 0..V-1 by ascending linear index (PCL's
   output order). Every occupied voxel is kept.
2. **PCL's overflow guard**: where PCL's extent estimate ``Dx * Dy * Dz`` (``Dx = int64(float32(
   max_x - min_x) * inv) + 1``) exceeds INT32_MAX, PCL warns and returns the input unchanged;
   here likewise every point is then its own voxel (V = N, in point order, the centroid the point
   itself), i.e. the cloud is clustered as if not downsampled.
3. **Centroids**: per voxel the float64 sums of its points' x, y and z, added sequentially in the
   twins' fixed order (the points sorted by linear index, then by a 32-bit hash of the point
   index; ``cpu/labelling/autoware_voxel.py``), divided by the count in float64, rounded to float32.
   PCL sums in float32 in an order its sort leaves undefined: the two can differ in the last bits.
4. **Clusters of centroids**: the (V, 3) float32 centroids are clustered exactly, in 3-D, with
   ``d_th`` (or the range bands of ``clustering_ranges``, a centroid's band by its own range)
   by the backend's own ``label``, then merged by ``cluster_merge_threshold`` on the centroids
   (each cluster's centroid is the mean of its voxel centroids, as Autoware.ai merged clusters
   of the downsampled cloud).
5. **Points back**: every input point takes its voxel's cluster (as Autoware Universe's voxel
   variant maps points back); ``min_cluster_size`` and ``max_cluster_size`` count these input
   points. Autoware.ai counted the downsampled points (voxels), so the same limits keep more
   clusters here: divide by the points per voxel to compare.

A leaf small enough that no two points share a voxel gives the plain clustering's partition (the
centroids are then the points, bit for bit); a leaf that merges points can join or split
clusters relative to the plain clustering, since a centroid moves up to a half-diagonal of its
voxel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .voxel_split import Z_LEAF

#: A voxel's edges in metres along x, y and z.
Leaf = tuple[float, float, float]


def autoware_leaf(size: float) -> Leaf:
    """Autoware Universe's voxel_grid leaf: ``size`` in x and y, :data:`~.voxel_split.Z_LEAF` in z
    (two layers, split at z = 0)."""
    return (float(size), float(size), Z_LEAF)


def cube_leaf(size: float) -> Leaf:
    """Autoware.ai's downsampling leaf: ``size`` along every axis."""
    return (float(size), float(size), float(size))


def as_leaf(leaf: float | Sequence[float]) -> Leaf:
    """A leaf per axis: a triple as given, a single number as Autoware Universe's
    (:func:`autoware_leaf`)."""
    if isinstance(leaf, (int, float, np.floating, np.integer)):
        return autoware_leaf(float(leaf))
    x, y, z = (float(value) for value in leaf)
    return (x, y, z)


def inverse_leaf(leaf: float | Sequence[float]) -> np.ndarray:
    """PCL's float32 inverse leaf sizes ``float32(1) / float32(L)`` per axis, (3,) float32."""
    one = np.float32(1.0)
    return np.array([one / np.float32(size) for size in as_leaf(leaf)], dtype=np.float32)
