"""Autoware.ai's centroid merging on the GPU: the CUDA twin of ``core/merging.py``.

    >>> merged = merge_components_gpu(device_id, points, components, threshold=1.5)

The rules are ``core/merging.py``'s (centroids in ``core.cluster_stats``' summation order, links
``sqrt(dx*dx + dy*dy) <= threshold`` in float64, their transitive closure, :data:`MERGE_PASSES`
passes); ``kernels/merging.cu`` says how the kernels follow them. Per pass: one sort of the
points by component, one scan, one sort of the centroids by x and six launches, all queued with
no host synchronisation. Every pass runs (the CPU twin stops after a pass that merges nothing,
after which a further pass changes nothing either), so the host never waits for a count.
"""

from __future__ import annotations

from functools import cache

import cupy
import numpy as np

from ..core.cluster_stats import SUM_LEAF
from ..core.merging import MERGE_PASSES
from .module import THREADS, KernelSource, blocks, get_kernel

#: Threads per block of ``merge_centroids`` (one block per component).
MERGE_THREADS = 128
#: The centroid sweep looks this far along x, in thresholds (``merging.cu`` says why it is safe).
MERGE_SWEEP_SLACK = 1.0 + 2.0**-20
#: Blocks of ``merge_centroids`` per SM (a grid-stride loop covers the components).
_CENTROID_BLOCKS_PER_SM = 16

MERGING = KernelSource(
    "merging",
    ("merging.cu",),
    {
        "MERGE_THREADS": MERGE_THREADS,
        "MERGE_SUM_LEAF": SUM_LEAF,
        "MERGE_SWEEP_SLACK": MERGE_SWEEP_SLACK,
    },
)


@cache
def _sm_count(device_id: int) -> int:
    return int(cupy.cuda.Device(device_id).attributes["MultiProcessorCount"])


def merge_components_gpu(
    device_id: int,
    points: cupy.ndarray,
    components: cupy.ndarray,
    threshold: float,
    passes: int = MERGE_PASSES,
) -> cupy.ndarray:
    """``core.merging.merge_components`` on ``device_id`` (current during the call).

    Args:
        points: (M, 3) float32 finite coordinates (only x and y are read).
        components: (M,) int component ids >= 0 (any values below 2**31).
        threshold: merge distance in metres; 0 or less: nothing merges.
        passes: merging passes.

    Returns:
        (M,) int32 ids on the device, equal for the points of one merged group (the ids are
        arbitrary; the partition is the CPU twin's).
    """
    m = int(points.shape[0])
    ids = cupy.ascontiguousarray(components, dtype=cupy.int32)
    if m == 0 or threshold <= 0:
        return ids
    xyz = cupy.ascontiguousarray(points, dtype=cupy.float32)
    m32 = np.int32(m)
    grid = blocks(m)
    keys = cupy.empty(m, dtype=cupy.uint64)
    head = cupy.empty(m, dtype=cupy.int32)
    starts = cupy.empty(m, dtype=cupy.int32)
    parent = cupy.empty(m, dtype=cupy.int32)
    count = cupy.empty(1, dtype=cupy.int32)
    sums = cupy.empty((2, m), dtype=cupy.float64)
    centroids = cupy.empty((2, m), dtype=cupy.float64)
    centroid_grid = (min(m, _CENTROID_BLOCKS_PER_SM * _sm_count(device_id)),)
    for _ in range(passes):
        get_kernel(MERGING, "merge_keys", device_id)(grid, (THREADS,), (ids, m32, keys))
        keys.sort()
        get_kernel(MERGING, "merge_heads", device_id)(
            grid, (THREADS,), (keys, m32, head, centroids[0], parent)
        )
        ordinal = cupy.cumsum(head, dtype=cupy.int32)
        get_kernel(MERGING, "merge_starts", device_id)(
            grid, (THREADS,), (head, ordinal, m32, starts, count)
        )
        get_kernel(MERGING, "merge_centroids", device_id)(
            centroid_grid,
            (MERGE_THREADS,),
            (xyz, keys, starts, count, m32, sums[0], sums[1], centroids[0], centroids[1]),
        )
        order = cupy.argsort(centroids[0])
        get_kernel(MERGING, "merge_links", device_id)(
            grid,
            (THREADS,),
            (centroids[0], centroids[1], order, count, np.float64(threshold), parent),
        )
        merged = cupy.empty(m, dtype=cupy.int32)
        get_kernel(MERGING, "merge_relabel", device_id)(
            grid, (THREADS,), (keys, ordinal, m32, parent, merged)
        )
        ids = merged
    return ids
