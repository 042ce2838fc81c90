"""The CUDA backend: the fused union-find and the paper's three methods through CuPy, with
exhaustive or range search (Section 4.4) or the companion papers' kd-tree and scan searches
(``kdtree.py``, ``scan_search.py``: ``union_find`` then unites the pairs their queries find).

Kernels come from :func:`.module.get_kernel`; the drivers take the device id and fetch their own.
A whole ``union_find`` call runs as one CUDA graph per size bucket
(``cuda/graphs/cluster_graphs.py``, :meth:`CudaBackend.cluster_whole`), and a whole frame of the
frame layer with it where it can (``cuda/graphs/frame_graphs.py``, through the codecs of
:meth:`CudaBackend.frame_codec`); every other configuration runs stage by stage.

Large NumPy clouds cross to the device through the backend's ring of page-locked buffers
(``staging.py``): :meth:`CudaBackend.to_device`, and the graph call of a cloud of at least
:data:`STAGED_CALL_MIN_POINTS`; labels come back by CuPy's plain copy
(:meth:`CudaBackend.to_host`).
"""

from __future__ import annotations

import dataclasses
import time
import weakref
from collections.abc import Callable
from typing import Any

import cupy
import numpy as np

from ..core.config import PAIR_SEARCHES, UNLIMITED_CLUSTER_SIZE, ClusterConfig, resolve_method
from ..core.device import DeviceInfo, MemoryPeak
from ..core.result import ClusterResult, Labelling
from ..core.timing import StageClock
from .codecs.frame import CudaFrameCodec
from .codecs.velodyne_sweeps import DeviceSweepDecoder, device_sweep_decoder
from .graphs.cluster_graphs import ClusterGraphs, graph_applies
from .graphs.frame_graphs import FrameGraphs
from .labelling.autoware_voxel import AUTOWARE_VOXEL, downsample_gpu, voxel_grid_components_gpu
from .labelling.ccl import label_edges, label_vertices
from .labelling.graph import (
    NeighbourSearch,
    build_adjacency_list,
    build_edge_set,
    free_device_memory,
    pair_search_structure,
)
from .labelling.matrix import label_matrix, matrix_source
from .labelling.numbering import canonical_labels_gpu
from .labelling.union_find import UNION_FIND, label_union_find
from .module import CLUSTERING, KernelSource, compile_source
from .search.kdtree import STRUCTURES
from .stages.merging import merge_components_gpu
from .stages.oriented_boxes import oriented_boxes_gpu
from .staging import PinnedStaging, contiguous_as

#: Point pairs examined per second by the neighbour searches here (H100, kitti_000001 at 0.5 m,
#: labelling included, rounded down): exhaustive search, and the voxel grid's candidate pairs of
#: the paper's methods (union_find with the voxel grid costs O(N): never estimated). The
#: kd-tree and scan searches are estimated at the range rate: on the real frames (H100,
#: 2026-11-24) their slowest runs but the matrix method's made 3.2e8 (kd-tree) and 4.1e8 (scan)
#: voxel-grid candidate pairs per second, union_find included.
EXHAUSTIVE_PAIRS_PER_S = 5e10
RANGE_PAIRS_PER_S = 3e8


#: Points from which the graph call of a NumPy cloud stages its upload: between the sizes where
#: each way won, end to end on an H200 (2026-11-28, ``benchmarks large-clouds``): 2.0 M points
#: plain 6.10 ms against staged 6.82, 4.1 M plain 11.01 against staged 9.24.
STAGED_CALL_MIN_POINTS = 3 << 20


class CudaBackend:
    """Runs the ``union_find`` method (the default) or the paper's vertex-, edge- or matrix-based
    method on one CUDA device.

    Args:
        device_id: the CUDA device.
        stage_transfers: move large NumPy arrays to the device through page-locked staging
            (``staging.py``); False: plain copies (``cupy.asarray``, the graphs' pageable
            copies). Either way arrays come back by CuPy's ``.get()``.

    Attributes:
        graphs: the captured graphs of whole ``union_find`` calls
            (``cuda/graphs/cluster_graphs.py``); its ``last_call`` says what the last graph call
            launched and synchronised.
        staging: the page-locked ring of large uploads, or None (plain copies).
    """

    name = "cuda"

    def __init__(self, device_id: int = 0, stage_transfers: bool = True) -> None:
        self.device_id = device_id
        self._device = cupy.cuda.Device(device_id)
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        self.device = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        self.graphs = ClusterGraphs(device_id)
        self._frame_graphs: weakref.WeakSet[FrameGraphs] = weakref.WeakSet()
        self.staging = PinnedStaging(device_id) if stage_transfers else None

    def to_device(self, array: Any, dtype: Any = None) -> cupy.ndarray:
        """``array`` on the device, C-contiguous in ``dtype`` where given (its own dtype kept
        otherwise); a large NumPy array through the page-locked staging, cast there."""
        with self._device:
            if (
                self.staging is not None
                and isinstance(array, np.ndarray)
                and self.staging.applies(array, dtype)
            ):
                return self.staging.to_device(array, dtype)
            if dtype is None:
                return cupy.asarray(array)
            return cupy.asarray(contiguous_as(array, dtype))

    def to_host(self, array: Any) -> np.ndarray:
        """A new NumPy array of the device ``array`` by CuPy's ``.get()`` (a NumPy one as it is):
        staged downloads lost to it (``staging.py``, "Downloads")."""
        if isinstance(array, np.ndarray):
            return array
        with self._device:
            return array.get()

    def synchronize(self) -> None:
        with self._device:
            cupy.cuda.get_current_stream().synchronize()

    def describe(self) -> DeviceInfo:
        runtime = cupy.cuda.runtime
        props = runtime.getDeviceProperties(self.device_id)
        return DeviceInfo(
            name=self.device,
            memory_bytes=int(props["totalGlobalMem"]),
            driver_version=_cuda_version(runtime.driverGetVersion()),
            runtime_version=_cuda_version(runtime.runtimeGetVersion()),
            cupy_version=str(cupy.__version__),
        )

    def release_memory(self) -> int | None:
        """Drop the captured graphs and their buffers and free CuPy's pooled blocks; the bytes
        the pool held (its high-water mark since the last release, as the pool keeps every block
        until freed)."""
        with self._device:
            pool = cupy.get_default_memory_pool()
            held = int(pool.total_bytes())
            self._release_graphs()
            pool.free_all_blocks()
            return held

    def measure_peak_memory(self, call: Callable[[], Any]) -> MemoryPeak | None:
        """Peak bytes held from CuPy's pool while ``call`` runs (a CuPy memory hook), and the
        drop of the driver's free memory (``memGetInfo``) over the run from an empty pool."""
        with self._device:
            self._release_graphs()  # a graph call allocates its bucket's buffers again
            cupy.get_default_memory_pool().free_all_blocks()
            self.synchronize()
            free_before = int(cupy.cuda.runtime.memGetInfo()[0])
            hook = _PeakHook()
            with hook:
                result = call()
                self.synchronize()
            free_after = int(cupy.cuda.runtime.memGetInfo()[0])
            del result
            return MemoryPeak(peak_bytes=hook.peak, free_drop_bytes=free_before - free_after)

    def pairs_per_second(self, method: str, search: str) -> float:
        return EXHAUSTIVE_PAIRS_PER_S if search == "exhaustive" else RANGE_PAIRS_PER_S

    def sweep_decoder(self, calibration: Any, settings: Any) -> DeviceSweepDecoder:
        """The CUDA twin (``cuda/codecs/velodyne_sweeps.py``): packets decoded one thread per
        firing and laser, sweeps cut and kept on the device."""
        return device_sweep_decoder(calibration, settings, self.device_id)

    def frame_codec(self) -> CudaFrameCodec:
        """A codec that runs whole frames as graphs on this backend's buckets where it can."""
        frame_graphs = FrameGraphs(self.graphs, self.device)
        self._frame_graphs.add(frame_graphs)
        return CudaFrameCodec(frame_graphs)

    def _release_graphs(self) -> None:
        for frame_graphs in list(self._frame_graphs):
            frame_graphs.release()
        self.graphs.release()

    def cluster_whole(self, points: Any, mask: Any, config: ClusterConfig) -> ClusterResult | None:
        """The whole ``union_find`` call as one CUDA graph launch and one synchronisation
        (``cuda/graphs/cluster_graphs.py``); None for other configurations, an empty cloud, or where
        capture failed on this device (logged once): the clusterer then runs the stages.

        A NumPy cloud of at least :data:`STAGED_CALL_MIN_POINTS` goes to the device through the
        page-locked staging (:meth:`_cluster_staged`); a smaller one is copied by the graph call
        itself (its pageable copy beats the staging's up to about 3 M points on an H200)."""
        if not graph_applies(config) or int(points.shape[0]) == 0:
            return None
        with self._device:
            staged = (
                self.staging is not None
                and isinstance(points, np.ndarray)
                and self.graphs.disabled is None
                and int(points.shape[0]) >= STAGED_CALL_MIN_POINTS
            )
            if staged:
                return self._cluster_staged(points, mask, config)
            return self.graphs.cluster(contiguous_as(points, np.float32), mask, config, self.device)

    def _cluster_staged(
        self, points: np.ndarray, mask: Any, config: ClusterConfig
    ) -> ClusterResult | None:
        """The graph call of a large NumPy cloud on its staged device copy, the labels back by
        :meth:`to_host`: ``transfer_in`` adds the staged copy until its last chunk is queued (the
        last chunks' DMA ends inside ``label``, before the graph), ``transfer_out`` the labels'
        copy into the returned array."""
        start = time.perf_counter()
        device_points = self.to_device(points, np.float32)
        device_mask = None if mask is None else self.to_device(mask)
        staged_at = time.perf_counter()
        result = self.graphs.cluster(device_points, device_mask, config, self.device)
        if result is None:
            return None
        returned_at = time.perf_counter()
        labels = self.to_host(result.labels)
        timings = dict(result.timings_ms)
        timings["transfer_in"] += (staged_at - start) * 1e3
        timings["transfer_out"] += (time.perf_counter() - returned_at) * 1e3
        timings["total"] = sum(value for stage, value in timings.items() if stage != "total")
        return dataclasses.replace(result, labels=labels, timings_ms=timings)

    def number_clusters(
        self, components: cupy.ndarray, min_size: int, max_size: int
    ) -> tuple[cupy.ndarray, np.ndarray, int]:
        with self._device:
            # The numbering kernels skip id -1 (no component) and label it -1.
            return canonical_labels_gpu(self.device_id, components, min_size, max_size)

    def merge_components(
        self, points: cupy.ndarray, components: cupy.ndarray, threshold: float
    ) -> cupy.ndarray:
        """Autoware.ai's centroid merging on the device (``merging.py``, the CPU twin's rules);
        no host synchronisation."""
        with self._device:
            return merge_components_gpu(self.device_id, points, components, threshold)

    def oriented_boxes(self, points: Any, labels: Any, sizes: np.ndarray) -> np.ndarray:
        """The boxes on the device (``oriented_boxes.py``, the CPU twin's rules), ``points`` and
        ``labels`` moved there if given on the host; one synchronisation for the result.

        Raises:
            ValueError: as the CPU twin raises.
        """
        with self._device:
            return oriented_boxes_gpu(self.device_id, points, labels, sizes)

    def downsample(
        self, points: cupy.ndarray, leaf_size: float, clock: StageClock
    ) -> tuple[cupy.ndarray, cupy.ndarray]:
        """PCL ``VoxelGrid`` at ``(L, L, L)`` on the device (``autoware_voxel.py``'s
        ``downsample_gpu``, the CPU twin's rules)."""
        with self._device:
            compile_source(AUTOWARE_VOXEL, self.device_id)  # before the stage is timed
            with clock("build"):
                return downsample_gpu(self.device_id, points, leaf_size)

    def label_voxel_grid(
        self, points: cupy.ndarray, config: ClusterConfig, clock: StageClock
    ) -> Labelling:
        """Autoware's ``voxel_grid`` algorithm (``autoware_voxel.py``, the CPU twin's rules):
        one piece id per point, -1 for points in no cluster; ``method`` is the one that
        clustered the centroids."""
        centroids = config.with_changes(
            algorithm="exact", min_cluster_size=1, max_cluster_size=UNLIMITED_CLUSTER_SIZE
        )
        method = resolve_method(config.method)
        with self._device:
            pool = cupy.get_default_memory_pool()
            base = pool.used_bytes()
            for source in (AUTOWARE_VOXEL, *_sources(method, config.matrix_block, config.search)):
                compile_source(source, self.device_id)
            ran: list[Labelling] = []

            def label_centroids(flat: cupy.ndarray) -> cupy.ndarray:
                ran.append(self.label(flat, centroids, clock))
                return ran[-1].components

            components = voxel_grid_components_gpu(
                self.device_id,
                points,
                config.voxel_leaf_size,
                config.min_points_per_voxel,
                config.max_voxels_per_cluster,
                config.large_cluster_voxel_count_threshold,
                config.large_cluster_max_points_per_voxel,
                label_centroids,
                clock,
            )
            return Labelling(
                components=components,
                method=ran[0].method if ran else method,
                iterations=ran[0].iterations if ran else 0,
                num_edges=ran[0].num_edges if ran else None,
                peak_bytes=pool.used_bytes() - base,
            )

    def label(
        self,
        points: cupy.ndarray,
        config: ClusterConfig,
        clock: StageClock,
        rings: cupy.ndarray | None = None,
    ) -> Labelling:
        n = int(points.shape[0])
        # grid_fits is checked on the device: a cloud too wide for the grid makes union_find
        # search all pairs inside the same launch, with no host synchronisation.
        method = resolve_method(config.method)
        if n == 0:
            return Labelling(components=cupy.empty(0, dtype=cupy.int32), method=method)
        with self._device:
            pool = cupy.get_default_memory_pool()
            base = pool.used_bytes()
            # Compile what the method and the numbering need before any stage is timed.
            for source in _sources(method, config.matrix_block, config.search):
                compile_source(source, self.device_id)
            if method == "union_find" and config.search in PAIR_SEARCHES:
                with clock("build"):
                    structure = pair_search_structure(
                        self.device_id, points, config.d_th, config.search, rings
                    )
                with clock("label"):
                    components = structure.components()
                return Labelling(
                    components=components, method=method, peak_bytes=pool.used_bytes() - base
                )
            if method == "union_find":
                with clock("label"):
                    fused = label_union_find(self.device_id, points, config.d_th, config.search)
                return Labelling(
                    components=fused.components,
                    method=method,
                    peak_bytes=pool.used_bytes() - base,
                )
            if method == "matrix":
                budget = config.memory_budget
                result = label_matrix(
                    self.device_id,
                    points,
                    config.d_th,
                    config.search,
                    config.matrix_block,
                    lambda: min(free_device_memory(), budget or free_device_memory()),
                    clock,
                    rings,
                )
                return Labelling(
                    components=result.labels,
                    method=method,
                    iterations=result.updates + 1,
                    num_labels_after_initial=result.labels_after_initial,
                    peak_bytes=result.peak_bytes,
                )
            with clock("build"):
                search = NeighbourSearch(self.device_id, points, config.d_th, config.search, rings)
                if method == "vertex":
                    starts, neighbours = build_adjacency_list(search, config.memory_budget)
                    num_edges = int(neighbours.shape[0]) // 2
                else:
                    edges = build_edge_set(search, config.memory_budget)
                    num_edges = int(edges.shape[0])
            peak = pool.used_bytes() - base
            with clock("label"):
                if method == "vertex":
                    labels, iterations = label_vertices(
                        self.device_id, starts, neighbours, n, config.pointer_jumping
                    )
                else:
                    labels, iterations = label_edges(
                        self.device_id, edges, n, config.pointer_jumping
                    )
            return Labelling(
                components=labels,
                method=method,
                iterations=iterations,
                num_edges=num_edges,
                peak_bytes=max(peak, pool.used_bytes() - base),
            )


def _sources(method: str, matrix_block: int, search: str) -> tuple[KernelSource, ...]:
    """The compile units ``method`` with ``search`` uses, the numbering's (:data:`CLUSTERING`,
    also the scan search's voxel grid) included."""
    structures = (STRUCTURES,) if search in PAIR_SEARCHES else ()
    if method == "union_find":
        return (*(structures or (UNION_FIND,)), CLUSTERING)
    if method == "matrix":
        return (CLUSTERING, *structures, matrix_source(matrix_block))
    return (CLUSTERING, *structures)


class _PeakHook(cupy.cuda.MemoryHook):  # type: ignore[misc]
    """Tracks the bytes held from CuPy's pool and their maximum."""

    name = "peak-bytes"

    def __init__(self) -> None:
        self.held: dict[int, int] = {}
        self.used = 0
        self.peak = 0

    def malloc_postprocess(self, **kw: Any) -> None:
        if kw.get("mem_ptr"):
            self.held[kw["mem_ptr"]] = kw["mem_size"]
            self.used += kw["mem_size"]
            self.peak = max(self.peak, self.used)

    def free_postprocess(self, **kw: Any) -> None:
        self.used -= self.held.pop(kw.get("mem_ptr"), 0)


def _cuda_version(version: int) -> str:
    """CUDA's integer version (e.g. 12040) as ``12.4``."""
    return f"{version // 1000}.{(version % 1000) // 10}"
