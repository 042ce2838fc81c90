"""Canonical cluster numbering and the size filter, for NumPy and CuPy arrays alike.

Every backend and method produces arbitrary component ids; this module turns them into the
package's one numbering so that labels are identical across backends, not merely equivalent:
clusters 0..K-1 by size descending, ties broken by the smallest point index in the cluster,
-1 for clusters outside ``[min_size, max_size]``. A component id of -1 means "in no cluster"
(the ``voxel_grid`` algorithm's dropped voxels and thinned points): such points stay -1 and
count neither as a component nor towards any size.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def array_module(array: Any) -> Any:
    """``cupy`` for a CuPy array, ``numpy`` otherwise, without importing CuPy needlessly."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def canonical_labels(components: Any, min_size: int, max_size: int) -> tuple[Any, np.ndarray, int]:
    """Renumber component ids canonically and apply the size filter.

    Args:
        components: int array (NumPy or CuPy), one component id per point, in point order;
            -1: the point is in no component (it is labelled -1).
        min_size, max_size: inclusive bounds on the number of points in a kept cluster.

    Returns:
        ``(labels, sizes, num_components)``: int32 labels on the input's device, the int64
        NumPy array of kept cluster sizes in label order, and the component count before filtering.
    """
    xp = array_module(components)
    n = int(components.shape[0])
    if n == 0:
        return xp.empty(0, dtype=xp.int32), np.empty(0, dtype=np.int64), 0
    member = components >= 0
    # NumPy checks for -1 (cheap on the host); CuPy always compacts (no host synchronisation).
    if xp is not np or not bool(member.all()):
        # Compaction keeps the point order, so "smallest member index" orders alike.
        members = xp.flatnonzero(member)
        member_labels, sizes, num_components = _canonical(
            xp, components[members], min_size, max_size
        )
        labels = xp.full(n, -1, dtype=xp.int32)
        labels[members] = member_labels
        return labels, sizes, num_components
    return _canonical(xp, components, min_size, max_size)


def _canonical(
    xp: Any, components: Any, min_size: int, max_size: int
) -> tuple[Any, np.ndarray, int]:
    """:func:`canonical_labels` of ids that are all >= 0."""
    if int(components.shape[0]) == 0:
        return xp.empty(0, dtype=xp.int32), np.empty(0, dtype=np.int64), 0
    _, first_index, inverse, counts = xp.unique(
        components, return_index=True, return_inverse=True, return_counts=True
    )
    # Size descending, then smallest member index: lexsort's last key is the primary one.
    order = xp.lexsort(xp.stack((first_index, -counts)))
    sorted_counts = counts[order]
    kept = (sorted_counts >= min_size) & (sorted_counts <= max_size)
    kept_order = order[kept]
    rank = xp.full(counts.shape[0], -1, dtype=xp.int32)
    rank[kept_order] = xp.arange(kept_order.shape[0], dtype=xp.int32)
    labels = rank[inverse.reshape(-1)]
    sizes = sorted_counts[kept]
    sizes = sizes.get() if xp is not np else sizes
    return labels, np.asarray(sizes, dtype=np.int64), int(counts.shape[0])
