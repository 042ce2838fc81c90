"""The CUDA backend: the paper's three methods with ES or RS neighbour search, through CuPy."""

from __future__ import annotations

import cupy
import numpy as np

from ..core.config import DEFAULT_MATRIX_BLOCK, ClusterConfig
from ..core.result import Labelling
from ..core.timing import StageClock
from .ccl import label_edges, label_vertices
from .graph import NeighbourSearch, build_adjacency_list, build_edge_set
from .matrix import label_matrix
from .module import kernel_module
from .numbering import canonical_labels_gpu


def free_device_memory() -> int:
    """Bytes the current device can still allocate: driver-free plus CuPy's cached free blocks."""
    free, _ = cupy.cuda.runtime.memGetInfo()
    return int(free) + int(cupy.get_default_memory_pool().free_bytes())


class CudaBackend:
    """Runs the vertex-, edge- or matrix-based method on one CUDA device."""

    name = "cuda"

    def __init__(self, device_id: int = 0) -> None:
        self.device_id = device_id
        self._device = cupy.cuda.Device(device_id)
        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        self.device = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]

    def to_device(self, points: object) -> cupy.ndarray:
        with self._device:
            return cupy.asarray(points)

    def synchronize(self) -> None:
        with self._device:
            cupy.cuda.get_current_stream().synchronize()

    def number_clusters(
        self, components: cupy.ndarray, min_size: int, max_size: int
    ) -> tuple[cupy.ndarray, np.ndarray, int]:
        with self._device:
            module = kernel_module(self.device_id, DEFAULT_MATRIX_BLOCK)
            return canonical_labels_gpu(module, components, min_size, max_size)

    def label(self, points: cupy.ndarray, config: ClusterConfig, clock: StageClock) -> Labelling:
        n = int(points.shape[0])
        if n == 0:
            return Labelling(components=cupy.empty(0, dtype=cupy.int32), num_edges=0)
        with self._device:
            pool = cupy.get_default_memory_pool()
            base = pool.used_bytes()
            module = kernel_module(self.device_id, config.matrix_block)
            if config.method == "matrix":
                result = label_matrix(
                    module, points, config.d_th, config.search, config.matrix_block,
                    free_device_memory, clock,
                )
                return Labelling(
                    components=result.labels,
                    iterations=result.updates + 1,
                    num_labels_after_initial=result.labels_after_initial,
                    peak_bytes=result.peak_bytes,
                )
            with clock("build"):
                search = NeighbourSearch(module, points, config.d_th, config.search)
                if config.method == "vertex":
                    starts, neighbours = build_adjacency_list(search)
                    num_edges = int(neighbours.shape[0]) // 2
                else:
                    edges = build_edge_set(search)
                    num_edges = int(edges.shape[0])
            peak = pool.used_bytes() - base
            with clock("label"):
                if config.method == "vertex":
                    labels, iterations = label_vertices(
                        module, starts, neighbours, n, config.pointer_jumping
                    )
                else:
                    labels, iterations = label_edges(module, edges, n, config.pointer_jumping)
            return Labelling(
                components=labels,
                iterations=iterations,
                num_edges=num_edges,
                peak_bytes=max(peak, pool.used_bytes() - base),
            )
