"""Cluster merging by centroid distance, as Autoware.ai had it (ROS-free; NumPy, the CPU twin).

Autoware.ai's ``lidar_euclidean_cluster_detect`` (``checkAllForMerge``, ``checkClusterMerge`` and
``mergeClusters`` in ``nodes/lidar_euclidean_cluster_detect/lidar_euclidean_cluster_detect.cpp``)
merges clusters whose centroids are close: ``checkClusterMerge`` walks, depth first, from one
cluster to every not yet visited cluster whose centroid lies within ``cluster_merge_threshold``
(``sqrt(dx**2 + dy**2) <= threshold``: x-y only, inclusive), so a merge is transitive, and
``segmentByDistance`` calls ``checkAllForMerge`` twice, the second time on the merged clusters
with their new centroids. This module's rule (``ClusterConfig.cluster_merge_threshold``):

1. centroid of each component: the float64 sums of its points' x and y in the package's fixed
   summation order (:func:`~.cluster_stats.cluster_sums`: the component's points in index order,
   leaves of ``SUM_LEAF`` points added left to right, the leaf sums pairwise up a tree), each
   divided by its point count (one correctly rounded division);
2. two components are linked when ``sqrt(dx*dx + dy*dy) <= threshold`` for the difference of
   their centroids (float64); the groups are the connected components of these links (the
   transitive closure), found with a grid of cells no smaller than the threshold and a union-find;
3. that is done :data:`MERGE_PASSES` times, each pass on the groups of the one before (centroids
   recomputed from the points); a pass that merges nothing ends it (a further pass would see the
   same centroids and merge nothing either, so the GPU twin, which does not look, runs them all).

Where it differs from Autoware.ai:

* Autoware.ai's ``checkAllForMerge`` leaves the cluster a search starts from out of the merged
  cluster: it marks it visited, merges only the clusters found from it, and emits the start
  cluster on its own (its second pass often merges it back). Here a group is merged whole, which
  makes the result independent of the clusters' order.
* Autoware.ai's centroids are float32 sums (``pcl::PointXYZ``) divided in float32; here float64.
* Autoware.ai filters clusters by ``cluster_size_min``/``cluster_size_max`` in each band before
  merging (PCL's ``EuclideanClusterExtraction``), so a dropped small cluster never merges, and does
  not filter merged clusters again. Here every component takes part in merging and the size
  filter (``ClusterConfig.min_cluster_size``/``max_cluster_size``) applies to the merged clusters.

The CPU backend runs this module (``CpuBackend.merge_components``), the CUDA backend its twin on
the device (``cuda/stages/merging.py``, ``CudaBackend.merge_components``: the same sums in the same
order, the same float64 link test). Both get the same points and components that are equal up to
their ids; every step depends only on the partition and the points, never on the ids' values, so the
merged partition is identical on both.
"""

from __future__ import annotations

import numpy as np

from .cluster_stats import cluster_sums

#: Passes of merging: Autoware.ai's ``segmentByDistance`` calls ``checkAllForMerge`` twice.
MERGE_PASSES = 2

#: Cells per axis the centroid grid stays within (the cell side grows past the threshold on
#: clouds wider than this many thresholds), so that cell keys fit int64.
_MAX_CELLS_PER_AXIS = 2**20

#: Half of the 3 x 3 neighbourhood, the cell itself included: each pair of neighbouring cells is
#: searched once.
_FORWARD_CELLS = ((0, 0), (1, -1), (1, 0), (1, 1), (0, 1))


def merge_components(
    xy: np.ndarray, components: np.ndarray, threshold: float, passes: int = MERGE_PASSES
) -> np.ndarray:
    """Component ids after merging those with centroids within ``threshold`` in x-y.

    Args:
        xy: (N, 2) or (N, 3) host coordinates (only x and y are read), finite.
        components: (N,) host int component ids >= 0, any values.
        threshold: merge distance in metres; 0 or less: nothing merges.
        passes: merging passes (each on the groups of the one before).

    Returns:
        (N,) int32 ids: one of the group's input ids for every point of a merged group (the ids
        themselves are arbitrary; only the partition is specified).
    """
    ids = np.asarray(components).astype(np.int64, copy=True)
    n = ids.shape[0]
    if n == 0 or threshold <= 0:
        return ids.astype(np.int32)
    if int(ids.max()) >= 4 * n + 1024:  # sparse ids: keep the per-id tables O(N)
        ids = np.unique(ids, return_inverse=True)[1].reshape(-1).astype(np.int64)
    plane = np.asarray(xy)[:, :2]
    for _ in range(passes):
        counts = np.bincount(ids)
        present = np.flatnonzero(counts)
        dense = np.zeros(counts.shape[0], dtype=np.int64)
        dense[present] = np.arange(present.shape[0])
        sums = cluster_sums(plane, dense[ids], present.shape[0])
        cx = sums[:, 0] / counts[present]
        cy = sums[:, 1] / counts[present]
        root = centroid_groups(cx, cy, threshold)
        if (root == np.arange(present.shape[0])).all():
            break  # nothing merged: a further pass would see the same centroids
        lookup = np.zeros(counts.shape[0], dtype=np.int64)
        lookup[present] = present[root]
        ids = lookup[ids]
    return ids.astype(np.int32)


def centroid_groups(cx: np.ndarray, cy: np.ndarray, threshold: float) -> np.ndarray:
    """Per centroid, the smallest index of its group: the connected components of "within
    ``threshold``" (``sqrt(dx*dx + dy*dy) <= threshold``, float64) over the (K,) centroids."""
    a, b = close_pairs(cx, cy, threshold)
    return union_find(cx.shape[0], a, b)


def close_pairs(cx: np.ndarray, cy: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Index pairs ``(a, b)`` of centroids within ``threshold`` of each other, each pair at least
    once, found through a grid of square cells with a side of at least ``threshold``."""
    k = cx.shape[0]
    empty = np.empty(0, dtype=np.int64)
    if k < 2:
        return empty, empty
    x0, y0 = cx.min(), cy.min()
    span = max(cx.max() - x0, cy.max() - y0)
    # A little over the threshold, so that rounding in the division cannot split a pair at
    # exactly the threshold by two cells.
    side = max(float(threshold), span / _MAX_CELLS_PER_AXIS) * (1.0 + 2.0**-20)
    gx = np.floor((cx - x0) / side).astype(np.int64) + 1
    gy = np.floor((cy - y0) / side).astype(np.int64) + 1
    width = int(gy.max()) + 2
    key = gx * width + gy
    order = np.argsort(key, kind="stable")
    cells, start, count = np.unique(key[order], return_index=True, return_counts=True)
    found_a, found_b = [], []
    for dx, dy in _FORWARD_CELLS:
        wanted = key + (dx * width + dy)
        pos = np.minimum(np.searchsorted(cells, wanted), cells.shape[0] - 1)
        hit = np.flatnonzero(cells[pos] == wanted)
        if hit.shape[0] == 0:
            continue
        per = count[pos[hit]]
        first = start[pos[hit]]
        a = np.repeat(hit, per)
        rank = np.arange(int(per.sum())) - np.repeat(np.cumsum(per) - per, per)
        b = order[np.repeat(first, per) + rank]
        if (dx, dy) == (0, 0):
            keep = a < b
            a, b = a[keep], b[keep]
        ddx = cx[a] - cx[b]
        ddy = cy[a] - cy[b]
        close = np.sqrt(ddx * ddx + ddy * ddy) <= threshold
        found_a.append(a[close])
        found_b.append(b[close])
    if not found_a:
        return empty, empty
    return np.concatenate(found_a), np.concatenate(found_b)


def union_find(k: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components of ``k`` nodes linked by the pairs ``(a[i], b[i])``: per node, the
    smallest node of its component (hooking roots onto smaller roots, then full path
    compression, until every pair shares a root)."""
    parent = np.arange(k, dtype=np.int64)
    while True:
        pa, pb = parent[a], parent[b]
        differ = pa != pb
        if not differ.any():
            return parent
        # Roots only point to smaller roots, so the forest stays acyclic and each group's
        # smallest node stays its root.
        lo = np.minimum(pa[differ], pb[differ])
        np.minimum.at(parent, np.maximum(pa[differ], pb[differ]), lo)
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped
