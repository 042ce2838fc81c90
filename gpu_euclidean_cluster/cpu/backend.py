"""The CPU backend: NumPy neighbour search and SciPy connected components.

It builds the graph structure each of the paper's methods uses (the adjacency list of
Algorithm 1 for the vertex-based method, the ``j > i`` edge set of Section 4.2 for the edge- and
matrix-based methods) from the same ES or RS neighbour search, then labels the connected
components with SciPy; ``union_find`` runs the CPU twin of the fused method (``union_find.py``,
O(N) memory). The companion papers' searches (``kdtree.py``, ``scan_search.py``) hand every
method their neighbour pairs in chunks: the edge set of the paper's methods, or folded into
``union_find``'s labels. Since
:func:`~gpu_euclidean_cluster.core.numbering.canonical_labels` numbers clusters canonically, its
labels are identical to the CUDA backend's for every method and search; it is also the tests'
oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..core.config import PAIR_SEARCHES, UNLIMITED_CLUSTER_SIZE, ClusterConfig, resolve_method
from ..core.device import DeviceInfo, MemoryPeak
from ..core.memory import host_memory_budget
from ..core.merging import merge_components
from ..core.numbering import canonical_labels
from ..core.oriented_boxes import oriented_boxes
from ..core.result import ClusterResult, Labelling
from ..core.timing import StageClock
from ..pointcloud_io.velodyne.sweeps import SweepDecoder
from .codecs.frame import CpuFrameCodec
from .labelling.autoware_voxel import downsample, voxel_grid_components
from .labelling.graph import adjacency_list, neighbour_edges
from .labelling.union_find import union_find_components
from .search.kdtree import PairChunk, collect_edges, fold_components, kdtree_pair_chunks
from .search.scan_search import scan_pair_chunks

#: Point pairs examined per second by the neighbour searches here (2-core x86 host, kitti_000001
#: at 0.5 m, rounded down): exhaustive search by method, and the voxel grid's candidate pairs of
#: the paper's methods (union_find with the voxel grid costs O(N): never estimated).
EXHAUSTIVE_PAIRS_PER_S = {"union_find": 1.0e8, "vertex": 5e7, "edge": 5e7, "matrix": 5e7}
RANGE_PAIRS_PER_S = {"vertex": 8e6, "edge": 1e7, "matrix": 1.5e7}
#: The companion papers' searches, any method (their search dominates): the voxel grid's
#: candidate pairs (their work estimate) per second, kitti_000001 at 0.5 and 1.0 m.
PAIR_SEARCH_PAIRS_PER_S = {"kdtree": 5e6, "scan": 9e6}


class CpuBackend:
    """Runs everything with NumPy and SciPy on the host."""

    name = "cpu"
    device = "cpu"

    def to_device(self, array: Any, dtype: Any = None) -> np.ndarray:
        """``array`` as a NumPy array, C-contiguous in ``dtype`` where given (values beyond its
        range become inf, as the CUDA twin makes them)."""
        if dtype is None:
            return np.asarray(array)
        with np.errstate(over="ignore"):
            return np.ascontiguousarray(array, dtype=dtype)

    def to_host(self, array: np.ndarray) -> np.ndarray:
        """The array as it is: it is on the host already."""
        return array

    def synchronize(self) -> None:
        """Nothing is queued on the host."""

    def describe(self) -> DeviceInfo:
        return DeviceInfo(name=self.device, cupy_version=_cupy_version())

    def release_memory(self) -> int | None:
        """NumPy allocates from the C heap: there is no pool to release."""
        return None

    def measure_peak_memory(self, call: Callable[[], Any]) -> MemoryPeak | None:
        """No device memory on the host."""
        return None

    def pairs_per_second(self, method: str, search: str) -> float:
        if search in PAIR_SEARCH_PAIRS_PER_S:
            return PAIR_SEARCH_PAIRS_PER_S[search]
        rates = EXHAUSTIVE_PAIRS_PER_S if search == "exhaustive" else RANGE_PAIRS_PER_S
        return rates.get(method, min(rates.values()))

    def sweep_decoder(self, calibration: Any, settings: Any) -> SweepDecoder:
        """NumPy's: :class:`~..pointcloud_io.velodyne.sweeps.SweepDecoder` itself."""
        return SweepDecoder(calibration, settings)

    def frame_codec(self) -> CpuFrameCodec:
        return CpuFrameCodec()

    def cluster_whole(self, points: Any, mask: Any, config: ClusterConfig) -> ClusterResult | None:
        """None: the host runs every call stage by stage."""
        return None

    def number_clusters(
        self, components: np.ndarray, min_size: int, max_size: int
    ) -> tuple[np.ndarray, np.ndarray, int]:
        return canonical_labels(components, min_size, max_size)

    def merge_components(
        self, points: np.ndarray, components: np.ndarray, threshold: float
    ) -> np.ndarray:
        """Autoware.ai's centroid merging: ``core/merging.py`` itself."""
        return merge_components(points, components, threshold)

    def oriented_boxes(self, points: Any, labels: Any, sizes: np.ndarray) -> np.ndarray:
        """``core/oriented_boxes.py`` itself (host arrays), after the checks the GPU twin makes.

        Raises:
            ValueError: shapes that do not match, labels that do not number exactly the K
                clusters of ``sizes``, or a clustered coordinate beyond the rule's range.
        """
        xyz = np.asarray(points)
        labels = np.asarray(labels).reshape(-1)
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        if xyz.shape != (labels.shape[0], 3):
            raise ValueError(f"points of shape {xyz.shape} for {labels.shape[0]} labels")
        k = int(sizes.shape[0])
        counts = np.bincount(labels[labels >= 0], minlength=k)
        if not np.array_equal(counts, sizes):
            raise ValueError(f"labels do not number {k} non-empty clusters")
        return oriented_boxes(xyz[:, 0], xyz[:, 1], xyz[:, 2], labels, k)

    def downsample(
        self, points: np.ndarray, leaf_size: float, clock: StageClock
    ) -> tuple[np.ndarray, np.ndarray]:
        """PCL ``VoxelGrid`` at ``(L, L, L)`` (``autoware_voxel.py``'s ``downsample``)."""
        with clock("build"):
            return downsample(points, leaf_size)

    def label_voxel_grid(
        self, points: np.ndarray, config: ClusterConfig, clock: StageClock
    ) -> Labelling:
        """Autoware's ``voxel_grid`` algorithm (``autoware_voxel.py``): one piece id per point,
        -1 for points in no cluster; ``method`` is the one that clustered the centroids."""
        centroids = centroid_config(config)
        ran: list[Labelling] = []

        def label_centroids(flat: np.ndarray) -> np.ndarray:
            ran.append(self.label(flat, centroids, clock))
            return ran[-1].components

        components = voxel_grid_components(
            points,
            config.voxel_leaf_size,
            config.min_points_per_voxel,
            config.max_voxels_per_cluster,
            config.large_cluster_voxel_count_threshold,
            config.large_cluster_max_points_per_voxel,
            label_centroids,
            clock,
        )
        method = ran[0].method if ran else resolve_method(config.method)
        return Labelling(components=components, method=method)

    def label(
        self,
        points: np.ndarray,
        config: ClusterConfig,
        clock: StageClock,
        rings: np.ndarray | None = None,
    ) -> Labelling:
        method = resolve_method(config.method)
        if method == "union_find":
            with clock("label"):
                if config.search in PAIR_SEARCHES:
                    pairs = _pair_chunks(points, config, rings)
                    components = fold_components(len(points), pairs)
                else:
                    components = union_find_components(points, config.d_th, config.search)
            return Labelling(components=components, method=method)
        with clock("build"):
            if config.search in PAIR_SEARCHES:
                budget = config.memory_budget
                edges = collect_edges(
                    _pair_chunks(points, config, rings),
                    method,
                    host_memory_budget() if budget is None else budget,
                    config.search,
                )
            else:
                edges = neighbour_edges(
                    points, config.d_th, config.search, method, config.memory_budget
                )
            if method == "vertex":
                graph = adjacency_list(edges, len(points))
            else:
                graph = coo_matrix(
                    (np.ones(len(edges), dtype=np.int8), (edges[:, 0], edges[:, 1])),
                    shape=(len(points), len(points)),
                )
        with clock("label"):
            _, components = connected_components(graph, directed=False)
        return Labelling(
            components=components.astype(np.int32, copy=False),
            method=method,
            num_edges=len(edges),
        )


def _pair_chunks(
    points: np.ndarray, config: ClusterConfig, rings: np.ndarray | None
) -> Iterator[PairChunk]:
    """The neighbour pairs of ``config.search`` (``kdtree`` or ``scan``), in chunks."""
    if config.search == "kdtree":
        return kdtree_pair_chunks(points, config.d_th)
    return scan_pair_chunks(points, config.d_th, rings)


def centroid_config(config: ClusterConfig) -> ClusterConfig:
    """The configuration the ``voxel_grid`` algorithm clusters its voxel centroids with: exact,
    ``d_th``, ``method`` and ``search`` as given, nothing filtered by size."""
    return config.with_changes(
        algorithm="exact", min_cluster_size=1, max_cluster_size=UNLIMITED_CLUSTER_SIZE
    )


def _cupy_version() -> str | None:
    """CuPy's version where it imports (installed beside a CPU run, for reports), else None."""
    try:
        import cupy
    except Exception:  # CuPy absent or broken: no version to report
        return None
    return str(cupy.__version__)
