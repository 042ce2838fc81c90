"""The CPU backend: NumPy neighbour search and SciPy connected components.

It builds the graph structure each of the paper's methods uses (the adjacency list of
Algorithm 1 for the vertex-based method, the ``j > i`` edge set of Section 4.2 for the edge- and
matrix-based methods) from the same ES or RS neighbour search, then labels the connected
components with SciPy. Since :func:`canonical_labels` numbers clusters canonically, its labels are
identical to the CUDA backend's for every method and search; it is also the tests' oracle.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components

from .config import ClusterConfig
from .labels import canonical_labels
from .neighbors import exhaustive_edges, range_edges
from .result import Labelling


class CpuBackend:
    """Runs everything with NumPy and SciPy on the host."""

    name = "cpu"
    device = "cpu"

    def to_device(self, points: np.ndarray) -> np.ndarray:
        return np.asarray(points)

    def synchronize(self) -> None:
        """Nothing is queued on the host."""

    def number_clusters(
        self, components: np.ndarray, min_size: int, max_size: int
    ) -> tuple[np.ndarray, np.ndarray, int]:
        return canonical_labels(components, min_size, max_size)

    def label(self, points: np.ndarray, config: ClusterConfig) -> Labelling:
        start = time.perf_counter()
        if config.search == "exhaustive":
            edges = exhaustive_edges(points, config.d_th)
        else:
            edges = range_edges(points, config.d_th)
        graph = adjacency_list(edges, len(points)) if config.method == "vertex" else None
        built = time.perf_counter()
        if graph is None:
            graph = coo_matrix(
                (np.ones(len(edges), dtype=np.int8), (edges[:, 0], edges[:, 1])),
                shape=(len(points), len(points)),
            )
        _, components = connected_components(graph, directed=False)
        done = time.perf_counter()
        return Labelling(
            components=components.astype(np.int32, copy=False),
            timings_ms={"build": (built - start) * 1e3, "label": (done - built) * 1e3},
            num_edges=len(edges),
        )


def adjacency_list(edges: np.ndarray, n: int) -> csr_matrix:
    """Algorithm 1's ``S`` (exclusive scan of neighbour counts) and ``N`` as a CSR matrix."""
    both = np.concatenate((edges, edges[:, ::-1]))
    counts = np.bincount(both[:, 0], minlength=n)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    neighbours = both[np.argsort(both[:, 0], kind="stable"), 1]
    data = np.ones(len(neighbours), dtype=np.int8)
    return csr_matrix((data, neighbours, starts), shape=(n, n))
