"""What a clustering run returns: labels, cluster sizes and the per-stage timing breakdown."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Stage names of the timing breakdown, in pipeline order.
STAGES: tuple[str, ...] = ("transfer_in", "build", "label", "filter", "transfer_out")


@dataclass
class Labelling:
    """What a backend returns for the finite points it was given.

    Attributes:
        components: int32 array (NumPy or CuPy, on the backend's device), one component id per
            point; two points share an id exactly when they are connected. Ids are arbitrary.
        method: the labelling method that ran (``auto`` resolved).
        iterations: passes of the labelling loop (0 where the backend has no loop).
        num_edges: undirected neighbour pairs found, where the method counts them.
        num_labels_after_initial: the matrix method's |R| after INITIAL_EC, else None.
        peak_bytes: device memory the run held at its peak, where the backend tracks it.
    """

    components: Any
    method: str
    iterations: int = 0
    num_edges: int | None = None
    num_labels_after_initial: int | None = None
    peak_bytes: int | None = None


@dataclass
class ClusterResult:
    """The outcome of clustering one cloud.

    Attributes:
        labels: int32 array, one per input point: clusters numbered 0..K-1 by size descending
            (ties: the cluster holding the smallest point index first); -1 for points in clusters
            outside ``[min_cluster_size, max_cluster_size]`` and for non-finite or masked points.
            NumPy when the input was NumPy, CuPy when it was CuPy.
        cluster_sizes: int64 NumPy array of K sizes, ``cluster_sizes[k]`` points carry label k.
        timings_ms: milliseconds per stage of ``STAGES`` plus ``total``.
        backend, method, search: what actually ran (``backend`` is ``cuda`` or ``cpu``).
        device: the GPU's name, or ``cpu``.
        iterations: passes of the labelling loop.
        num_components: connected components before the size filter.
        num_edges, num_labels_after_initial, peak_bytes: see :class:`Labelling`.
    """

    labels: Any
    cluster_sizes: Any
    timings_ms: dict[str, float]
    backend: str
    method: str
    search: str
    device: str
    iterations: int = 0
    num_components: int = 0
    num_edges: int | None = None
    num_labels_after_initial: int | None = None
    peak_bytes: int | None = None

    @property
    def num_clusters(self) -> int:
        """K, the number of clusters kept by the size filter."""
        return len(self.cluster_sizes)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready dictionary of everything but the per-point labels."""
        return {
            "points": len(self.labels),
            "clusters": self.num_clusters,
            "components": self.num_components,
            "method": self.method,
            "search": self.search,
            "backend": self.backend,
            "device": self.device,
            "iterations": self.iterations,
            "num_edges": self.num_edges,
            "num_labels_after_initial": self.num_labels_after_initial,
            "peak_bytes": self.peak_bytes,
            "cluster_sizes": [int(s) for s in self.cluster_sizes],
            "timings_ms": {k: round(float(v), 4) for k, v in self.timings_ms.items()},
        }
