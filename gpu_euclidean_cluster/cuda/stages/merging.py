"""Autoware.ai's centroid merging on the GPU: the CUDA twin of ``core/merging.py``.

    >>> merged = merge_components_gpu(device_id, points, components, threshold=1.5)

The rules are ``core/merging.py``'s (centroids in ``core.cluster_stats``' summation order, links
``sqrt(dx*dx + dy*dy) <= threshold`` in float64, their transitive closure, :data:`MERGE_PASSES`
passes); ``cuda/kernels/stages/merging.cu`` says how the kernels follow them. Per pass: three
memsets, one sort of the points by component and four launches (components, centroids and their grid
cells, links, new ids), all queued with no host synchronisation. Every pass runs (the CPU twin stops
after a pass that merges nothing, after which a further pass changes nothing either), so the host
never waits for a count.
"""

from __future__ import annotations

from functools import cache

import cupy
import numpy as np

from ...core.cluster_stats import SUM_LEAF
from ...core.merging import MERGE_PASSES
from ..module import THREADS, KernelSource, blocks, get_kernel

#: Threads per block of ``merge_centroids`` (one block per component).
MERGE_THREADS = 128
#: The centroid grid's cell side, in thresholds (a little over one: ``merging.cu`` says why).
MERGE_CELL_SLACK = 1.0 + 2.0**-20
#: Cell coordinates are clamped to +-this (their keys are 32-bit halves).
MERGE_MAX_CELL = float(2**30)
#: Blocks of ``merge_centroids`` per SM (a grid-stride loop covers the components).
_CENTROID_BLOCKS_PER_SM = 16

MERGING = KernelSource(
    "merging",
    ("ecl_cc.cuh", "widen.cuh", "stages/merging.cu"),
    {
        "MERGE_THREADS": MERGE_THREADS,
        "MERGE_SUM_LEAF": SUM_LEAF,
        "MERGE_CELL_SLACK": MERGE_CELL_SLACK,
        "MERGE_MAX_CELL": MERGE_MAX_CELL,
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
    side = np.float64(float(threshold) * MERGE_CELL_SLACK)
    table_size = 1 << (2 * m - 1).bit_length()  # a power of two >= 2M: never full
    keys = [cupy.empty(m, dtype=cupy.uint64), cupy.empty(m, dtype=cupy.uint64)]
    ints = cupy.empty(4 * m + table_size + 1, dtype=cupy.int32)
    starts, parent, component_of, chain = (ints[j * m : (j + 1) * m] for j in range(4))
    table_heads = ints[4 * m : 4 * m + table_size]
    count = ints[4 * m + table_size :]
    table_keys = cupy.empty(table_size, dtype=cupy.uint64)
    sums = cupy.empty((2, m), dtype=cupy.float64)
    centroids = cupy.empty((2, m), dtype=cupy.float64)
    centroid_grid = (min(m, _CENTROID_BLOCKS_PER_SM * _sm_count(device_id)),)
    stream = cupy.cuda.get_current_stream()
    get_kernel(MERGING, "merge_keys", device_id)(grid, (THREADS,), (ids, m32, keys[0]))
    for number in range(passes):
        now, following_keys = keys[number % 2], keys[(number + 1) % 2]
        cupy.cuda.runtime.memsetAsync(table_keys.data.ptr, 0xFF, table_keys.nbytes, stream.ptr)
        cupy.cuda.runtime.memsetAsync(table_heads.data.ptr, 0xFF, table_heads.nbytes, stream.ptr)
        cupy.cuda.runtime.memsetAsync(count.data.ptr, 0, count.nbytes, stream.ptr)
        now.sort()
        get_kernel(MERGING, "merge_heads", device_id)(
            grid, (THREADS,), (now, m32, count, starts, parent)
        )
        get_kernel(MERGING, "merge_centroids", device_id)(
            centroid_grid,
            (MERGE_THREADS,),
            (
                xyz,
                now,
                starts,
                count,
                m32,
                side,
                sums[0],
                sums[1],
                centroids[0],
                centroids[1],
                component_of,
                table_keys,
                table_heads,
                chain,
                np.uint32(table_size),
            ),
        )
        get_kernel(MERGING, "merge_links", device_id)(
            grid,
            (THREADS,),
            (
                centroids[0],
                centroids[1],
                count,
                np.float64(threshold),
                side,
                table_keys,
                table_heads,
                chain,
                np.uint32(table_size),
                parent,
            ),
        )
        merged = cupy.empty(m, dtype=cupy.int32)
        get_kernel(MERGING, "merge_relabel", device_id)(
            grid, (THREADS,), (now, component_of, m32, parent, merged, following_keys)
        )
        ids = merged
    return ids
