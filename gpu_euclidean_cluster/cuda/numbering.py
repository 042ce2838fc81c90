"""Canonical cluster numbering and size filter on the GPU (the filter stage).

Equal, label for label, to :func:`gpu_euclidean_cluster.core.numbering.canonical_labels`, but
instead of sorting all N ids it gathers each component's size and smallest member with atomics and
sorts only the K components; kept clusters form one run of that order, since it is by size.
"""

from __future__ import annotations

import cupy
import numpy as np

from .module import THREADS, blocks


def canonical_labels_gpu(
    module: cupy.RawModule, ids: cupy.ndarray, min_size: int, max_size: int
) -> tuple[cupy.ndarray, np.ndarray, int]:
    """``(labels, sizes, num_components)`` for component ``ids`` in ``[0, N)``."""
    n = int(ids.shape[0])
    if n == 0:
        return cupy.empty(0, dtype=cupy.int32), np.empty(0, dtype=np.int64), 0
    counts = cupy.zeros(n, dtype=cupy.int32)
    first = cupy.full(n, n, dtype=cupy.int32)
    module.get_function("component_stats")(blocks(n), (THREADS,), (ids, np.int32(n), counts, first))
    present = cupy.flatnonzero(counts)
    k = int(present.shape[0])
    keys = cupy.empty(k, dtype=cupy.int64)
    module.get_function("component_keys")(
        blocks(k), (THREADS,), (present, np.int32(k), counts, first, np.int32(n), keys)
    )
    order = cupy.argsort(keys)
    sizes = n - (keys[order] >> 32).get()  # descending
    lo = int(np.count_nonzero(sizes > max_size))
    hi = int(np.count_nonzero(sizes >= min_size))
    kept = max(hi - lo, 0)
    rank = cupy.full(n, -1, dtype=cupy.int32)
    module.get_function("assign_ranks")(
        blocks(kept), (THREADS,), (present, order, np.int32(lo), np.int32(kept), rank)
    )
    return rank[ids], sizes[lo:lo + kept].astype(np.int64), k
