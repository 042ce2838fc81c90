"""Label propagation of the vertex- and edge-based methods (Sections 4.1.2 and 4.2.2).

Every point starts with its own index as label (``C[i] = i``); passes of atomicMin propagation run
until a pass changes nothing (the global flag ``m_d`` stays 0). Labels end as the smallest point
index of each connected component.
"""

from __future__ import annotations

from collections.abc import Callable

import cupy
import numpy as np

from .module import blocks


def _propagate(
    n: int, one_pass: Callable[[cupy.ndarray, cupy.ndarray], None]
) -> tuple[cupy.ndarray, int]:
    labels = cupy.arange(n, dtype=cupy.int32)
    m_d = cupy.zeros(1, dtype=cupy.int32)
    iterations = 0
    while True:
        m_d.fill(0)
        one_pass(labels, m_d)
        iterations += 1
        if not int(m_d.get()[0]):
            return labels, iterations


def label_vertices(
    module: cupy.RawModule, starts: cupy.ndarray, neighbours: cupy.ndarray, n: int
) -> tuple[cupy.ndarray, int]:
    """Vertex-based CCL over the adjacency list ``(S, N)``; returns labels and passes."""
    kernel = module.get_function("vertex_ccl")
    return _propagate(
        n, lambda c, m_d: kernel(blocks(n), (256,), (starts, neighbours, c, np.int32(n), m_d))
    )


def label_edges(module: cupy.RawModule, edges: cupy.ndarray, n: int) -> tuple[cupy.ndarray, int]:
    """Edge-based CCL over the ``j > i`` edge set; returns labels and passes."""
    kernel = module.get_function("edge_ccl")
    num_edges = int(edges.shape[0])
    return _propagate(
        n, lambda c, m_d: kernel(blocks(num_edges), (256,), (edges, np.int64(num_edges), c, m_d))
    )
