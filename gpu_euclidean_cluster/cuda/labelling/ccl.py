"""Label propagation of the vertex- and edge-based methods (Sections 4.1.2 and 4.2.2).

Every point starts with its own index as label (``C[i] = i``); passes of atomicMin propagation run
until a pass changes nothing (its ``m_d`` flag stays 0). Labels end as the smallest point index of
each connected component. Passes are queued in batches of :data:`PASSES_PER_CHECK` with one flag
each, so the host waits once per batch instead of once per pass (see
``cuda/kernels/labelling/ccl.cu``).

``pointer_jumping`` (``ClusterConfig.pointer_jumping``, on by default) hooks labels at their roots
and compresses paths after each pass; the final labels are the same. Off, the paper's algorithms
run exactly as written.
"""

from __future__ import annotations

from collections.abc import Callable

import cupy
import numpy as np

from ..module import CLUSTERING, THREADS, blocks, get_kernel

#: Passes queued between two reads of the change flags.
PASSES_PER_CHECK = 8


def _propagate(
    device_id: int,
    n: int,
    one_pass: Callable[[cupy.ndarray, cupy.ndarray, np.int32], None],
    pointer_jumping: bool,
) -> tuple[cupy.ndarray, int]:
    labels = cupy.arange(n, dtype=cupy.int32)
    flags = cupy.empty(PASSES_PER_CHECK, dtype=cupy.int32)
    compress_labels = get_kernel(CLUSTERING, "compress_labels", device_id)
    iterations = 0
    while True:
        flags.fill(0)
        for p in range(PASSES_PER_CHECK):
            one_pass(labels, flags, np.int32(p))
            if pointer_jumping:
                compress_labels(blocks(n), (THREADS,), (labels, np.int32(n), flags, np.int32(p)))
        unchanged = np.flatnonzero(flags.get() == 0)
        if unchanged.size:
            return labels, iterations + int(unchanged[0]) + 1
        iterations += PASSES_PER_CHECK


def label_vertices(
    device_id: int,
    starts: cupy.ndarray,
    neighbours: cupy.ndarray,
    n: int,
    pointer_jumping: bool,
) -> tuple[cupy.ndarray, int]:
    """Vertex-based CCL over the adjacency list ``(S, N)``; returns labels and passes."""
    kernel = get_kernel(CLUSTERING, "vertex_ccl", device_id)
    jump = np.int32(pointer_jumping)
    return _propagate(
        device_id,
        n,
        lambda c, flags, p: kernel(
            blocks(n), (THREADS,), (starts, neighbours, c, np.int32(n), flags, p, jump)
        ),
        pointer_jumping,
    )


def label_edges(
    device_id: int, edges: cupy.ndarray, n: int, pointer_jumping: bool
) -> tuple[cupy.ndarray, int]:
    """Edge-based CCL over the ``j > i`` edge set; returns labels and passes."""
    kernel = get_kernel(CLUSTERING, "edge_ccl", device_id)
    jump = np.int32(pointer_jumping)
    num_edges = int(edges.shape[0])
    return _propagate(
        device_id,
        n,
        lambda c, flags, p: kernel(
            blocks(num_edges), (THREADS,), (edges, np.int64(num_edges), c, flags, p, jump)
        ),
        pointer_jumping,
    )
