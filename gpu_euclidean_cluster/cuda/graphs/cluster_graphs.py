"""The whole ``union_find`` clustering call as one CUDA graph per size bucket, replayed.

The staged path (``backend.py``'s ``label`` and ``number_clusters``, driven stage by stage by the
clusterer) issues a dozen launches, CuPy's compaction of the finite points and several host
synchronisations per call. Here the call is one graph launch and one synchronisation:

1. The cloud of N points is padded to its *bucket* (:func:`bucket_size`: N rounded up to an
   eighth of its power of two, at least :data:`MIN_BUCKET`), and every buffer of the bucket is
   allocated once and reused: the device points and mask, the union-find's grid, the numbering's
   scratch, and page-locked host words for N, the numbering's counts and runs and (clouds of up
   to :data:`PINNED_LABELS_MAX_POINTS`) the labels.
2. The points (and the mask) are copied into the bucket's device buffers beside the graph, from
   the caller's array as it is (``cudaMemcpyAsync`` from pageable memory, or device to device):
   on the H100 that beat a copy into a page-locked buffer followed by a copy inside the graph at
   every size measured (120 k points: 0.10 ms against 0.16 ms; 2 M: 1.8 ms against 2.8 ms).
3. The first call of a bucket and configuration (threshold, search, size filter, mask or not,
   labels to the host or not) captures its steps on a private stream (``Stream.begin_capture``):
   the copy of N in, ``uf_stage_points`` (points at or beyond N, the padding, and masked-out
   points become NaN, i.e. in no component: ``cuda/kernels/labelling/union_find.cu``), the
   union-find's launches (``union_find.py``: 7 with the grid, 3 exhaustive, 2 when no pair can be
   neighbours), the numbering's memset and two launches (``numbering.py``), and the copies out.
   Later calls replay it.
4. One host synchronisation at the end reads the component count and the kept sizes. Where the
   numbering's single sorting block could not rank the kept clusters (more than
   ``numbering.SORT_CAPACITY``), the keys are sorted by CuPy after the graph, as the staged path
   does: one more synchronisation, counted in :attr:`GraphCall.host_syncs`.

Labels equal the staged path's label for label: the padding and the masked-out points are NaN
points, which are nobody's neighbour and get the id -1 as the compacted-away points do; the
canonical numbering orders clusters by size and smallest member index, both unchanged by the
padding. CuPy input stays on the device (labels copied device to device beside the graph).

The stage timings of a graph call (``ClusterResult.timings_ms``): ``transfer_in`` is the input's
copy (from pageable memory it returns once the data is staged by the driver), ``build`` the
capture of a new graph (0 when replayed), ``label`` the replay from launch to the
synchronisation (every kernel on the device and the copies inside the graph), ``filter`` the
reading of the sizes (and the host sort where needed), ``transfer_out`` the labels' copy into the
returned array (with one more synchronisation for a cloud over
:data:`PINNED_LABELS_MAX_POINTS`). The benchmarks' stage split (``benchmarks/stage_split.py``) times
the same steps stage by stage with events (:attr:`GraphCall.graph` holds them).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import cupy
import numpy as np

from ...core.config import PAPER_SEARCHES, ClusterConfig, resolve_method
from ...core.result import ClusterResult
from ...core.work import needs_estimate
from ..labelling.numbering import (
    NumberingBuffers,
    numbering_steps,
    rank_by_host_sort,
    read_sizes,
    size_bounds,
    sorted_in_one_block,
)
from ..labelling.union_find import (
    EXHAUSTIVE,
    GRID,
    UNION_FIND,
    GridBuffers,
    exhaustive_steps,
    grid_steps,
    isolated_steps,
    search_kind,
)
from ..module import THREADS, blocks
from .launches import (
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    CapturedGraph,
    Copy,
    GraphCapturer,
    KernelLaunch,
    Step,
    copy_async,
)

#: Smallest bucket (points): every cloud of up to this many points shares it.
MIN_BUCKET = 1024
#: Buckets per doubling of the size: a cloud is padded by at most 1 / BUCKETS_PER_OCTAVE.
BUCKETS_PER_OCTAVE = 8
#: Buckets whose buffers are kept (the least recently used is dropped first, with its graphs).
MAX_BUCKETS = 4
#: Captured graphs kept over all buckets (least recently used dropped first).
MAX_GRAPHS = 64
#: Labels of clouds up to this many points come back to the host through a page-locked buffer
#: inside the graph and a host copy (H100: 0.051 ms at 120 k points against 0.066 ms for a
#: copy into new pageable memory); larger ones by one copy into the returned array beside the
#: graph (2 M points: 0.66 ms against 0.94 ms).
PINNED_LABELS_MAX_POINTS = 1 << 20

#: The stage of a labelling step, by kernel (others: ``grid``).
_GRID_STAGE = {"uf_link_cells": "link", "uf_link_exhaustive": "link", "uf_finish": "finish"}


#: A graph's key: bucket, mask or not, labels copied to the page-locked buffer inside the graph,
#: search kind, threshold's bits, clique-cell side, size filter bounds.
_Key = tuple[int, bool, bool, str, int, float | None, int, int]


def bucket_size(n: int) -> int:
    """Points of the bucket of a cloud of ``n`` points: :data:`MIN_BUCKET`, or ``n`` rounded up
    to a multiple of ``2**floor(log2(n - 1)) / BUCKETS_PER_OCTAVE``."""
    if n <= MIN_BUCKET:
        return MIN_BUCKET
    step = (1 << ((n - 1).bit_length() - 1)) // BUCKETS_PER_OCTAVE
    return -(-n // step) * step


def graph_applies(config: ClusterConfig) -> bool:
    """Whether a call with ``config`` runs as a graph: exact ``union_find`` with the paper's
    searches (the kd-tree and scan searches link their pairs stage by stage) on one threshold, no
    downsampling, range bands or merging, and no work estimate to make first."""
    return (
        config.algorithm == "exact"
        and config.search in PAPER_SEARCHES
        and not config.downsample_leaf_size > 0
        and not config.clustering_ranges
        and not config.cluster_merge_threshold > 0
        and resolve_method(config.method) == "union_find"
        and (config.max_work_s is None or not needs_estimate(config.method, config.search))
    )


@dataclass(frozen=True)
class GraphCall:
    """What the last graph call did (for the benchmarks' launch and synchronisation counts).

    Attributes:
        points, bucket: the cloud's size and its bucket's.
        captured: this call captured its graph (the first of its bucket and configuration).
        capture_ms: the capture and instantiation (and new buffers), where ``captured``.
        kernel_nodes, copy_nodes: kernels, and copies or memsets, inside the graph.
        graph_launches: graph launches made (1).
        outside_copies: copies issued beside the graph (device input in, device labels out).
        host_syncs: host synchronisations (1; 2 where the keys were sorted after the graph).
        graph: the graph launched (its steps by stage: what the benchmarks' stage split issues).
    """

    points: int
    bucket: int
    captured: bool
    capture_ms: float
    kernel_nodes: int
    copy_nodes: int
    graph_launches: int
    outside_copies: int
    host_syncs: int
    graph: ClusterGraph


class Bucket:
    """Every buffer of the clouds of one bucket size, host and device, allocated once."""

    def __init__(self, device_id: int, size: int) -> None:
        self.size = size
        self.numbering = NumberingBuffers(device_id, size)
        # Page-locked: the labels (small buckets), the numbering's out ints, N.
        labels_bytes = 4 * size if size <= PINNED_LABELS_MAX_POINTS else 0
        layout = {"labels": labels_bytes, "out": 4 * self.numbering.out_ints, "count": 4}
        total = sum(_aligned(nbytes) for nbytes in layout.values())
        self._pinned = cupy.cuda.alloc_pinned_memory(total)
        host = np.frombuffer(self._pinned, np.uint8, total)
        views: dict[str, np.ndarray] = {}
        offset = 0
        for name, nbytes in layout.items():
            views[name] = host[offset : offset + nbytes]
            offset += _aligned(nbytes)
        self.host_labels = views["labels"].view(np.int32)
        self.host_out = views["out"].view(np.int32)
        self.host_count = views["count"].view(np.int32)
        self.points = cupy.empty((size, 3), dtype=cupy.float32)
        self.mask = cupy.empty(size, dtype=cupy.uint8)
        self.count = cupy.empty(1, dtype=cupy.int32)
        self._grid: GridBuffers | None = None
        self._point_ids: tuple[cupy.ndarray, cupy.ndarray] | None = None
        #: Device bytes held by the bucket.
        self.nbytes = int(
            self.numbering.nbytes + self.points.nbytes + self.mask.nbytes + self.count.nbytes
        )

    @property
    def pinned_labels(self) -> bool:
        """Labels for the host come back through the page-locked buffer (inside the graph)."""
        return self.size <= PINNED_LABELS_MAX_POINTS

    def grid(self) -> GridBuffers:
        """The clique-cell grid's buffers (allocated on the first grid graph of the bucket)."""
        if self._grid is None:
            self._grid = GridBuffers.allocate(self.size)
            self.nbytes += self._grid.nbytes
        return self._grid

    def point_ids(self) -> tuple[cupy.ndarray, cupy.ndarray]:
        """``(parent, components)`` by point, for the exhaustive and isolated graphs."""
        if self._point_ids is None:
            self._point_ids = (
                cupy.empty(self.size, dtype=cupy.int32),
                cupy.empty(self.size, dtype=cupy.int32),
            )
            self.nbytes += 8 * self.size
        return self._point_ids


def graph_key(
    n: int, to_host: bool, masked: bool, config: ClusterConfig
) -> tuple[_Key, np.float32, float | None]:
    """The graph's key for a cloud of ``n`` points (labels wanted on the host or not, a mask or
    not), its threshold T and its clique-cell side."""
    kind, thr, side, bounds = _configuration(
        config.d_th, config.search, config.min_cluster_size, config.max_cluster_size
    )
    size = bucket_size(n)
    pinned = to_host and size <= PINNED_LABELS_MAX_POINTS
    return (size, masked, pinned, kind, int(thr.view(np.int32)), side, *bounds), thr, side


@lru_cache(maxsize=64)
def _configuration(
    d_th: float, search: str, min_size: int, max_size: int
) -> tuple[str, np.float32, float | None, tuple[int, int]]:
    """:func:`~..labelling.union_find.search_kind` and the size bounds of a configuration, computed
    once."""
    kind, thr, side = search_kind(d_th, search)
    low, high = size_bounds(min_size, max_size)
    return kind, thr, side, (int(low), int(high))


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 256) * 256


@dataclass(frozen=True)
class ClusterGraph:
    """A captured clustering graph, the component ids it leaves and its size filter's bounds."""

    captured: CapturedGraph
    components: cupy.ndarray
    low: np.int32
    high: np.int32


class ClusterGraphs:
    """Captured graphs of the ``union_find`` clustering call on one device, by size bucket.

    Not thread-safe by design of its buffers: calls are serialised by a lock.
    """

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._buckets: OrderedDict[int, Bucket] = OrderedDict()
        self._graphs: OrderedDict[_Key, ClusterGraph] = OrderedDict()
        self._capturer = GraphCapturer(device_id, "CUDA graph", "clustering stage by stage")
        self.lock = threading.Lock()
        #: The last call's counts, None before the first.
        self.last_call: GraphCall | None = None

    def release(self) -> None:
        """Drop every graph and buffer (the next call of each bucket captures again)."""
        with self.lock:
            self._clear()

    def _clear(self) -> None:
        self._graphs.clear()
        self._buckets.clear()

    @property
    def disabled(self) -> str | None:
        """Why graphs are off for good on this device (a capture failed), else None."""
        return self._capturer.disabled

    @property
    def held_bytes(self) -> int:
        """Device bytes held by the kept buckets."""
        return sum(bucket.nbytes for bucket in self._buckets.values())

    def cluster(
        self, points: Any, mask: Any, config: ClusterConfig, device: str
    ) -> ClusterResult | None:
        """The labels of ``points`` ((N, 3) float32, C-contiguous, NumPy or CuPy; ``mask`` None or
        a boolean (N,) array of either kind) as :class:`ClusterResult`, through a graph; None
        where graphs are off here (the caller runs the stages)."""
        if self.disabled is not None:
            return None
        n = int(points.shape[0])
        to_host = isinstance(points, np.ndarray)
        key, thr, side = graph_key(n, to_host, mask is not None, config)
        start = time.perf_counter()
        with self.lock:
            bucket = self.bucket(key[0])
            graph = self._graphs.get(key)
            captured = graph is None
            if graph is None:
                graph = self._capture(key, bucket, thr, side)
                if graph is None:
                    return None
            self._graphs.move_to_end(key)
            captured_at = time.perf_counter()
            stream = cupy.cuda.get_current_stream()
            outside = self.copy_input(bucket, points, mask, n, stream)
            staged_at = time.perf_counter()
            graph.captured.graph.launch(stream)
            stream.synchronize()
            syncs = 1
            ran_at = time.perf_counter()
            if not sorted_in_one_block(bucket.host_out):
                self._sort_after(bucket, graph, to_host, n, stream)
                syncs += 1
            sizes, num_components = read_sizes(bucket.host_out)
            read_at = time.perf_counter()
            labels, copies, synced = self.fetch_labels(bucket, to_host, n, stream)
            outside += copies
            syncs += synced
            done = time.perf_counter()
            self.last_call = GraphCall(
                points=n,
                bucket=key[0],
                captured=captured,
                capture_ms=(captured_at - start) * 1e3 if captured else 0.0,
                kernel_nodes=graph.captured.kernel_nodes,
                copy_nodes=graph.captured.copy_nodes,
                graph_launches=1,
                outside_copies=outside,
                host_syncs=syncs,
                graph=graph,
            )
            held = bucket.nbytes
        timings = {
            "transfer_in": (staged_at - captured_at) * 1e3,
            "build": (captured_at - start) * 1e3,
            "label": (ran_at - staged_at) * 1e3,
            "filter": (read_at - ran_at) * 1e3,
            "transfer_out": (done - read_at) * 1e3,
        }
        return ClusterResult(
            labels=labels,
            cluster_sizes=sizes,
            timings_ms={**timings, "total": sum(timings.values())},
            backend="cuda",
            method="union_find",
            search=config.search,
            device=device,
            num_components=num_components,
            peak_bytes=held,
        )

    def bucket(self, size: int) -> Bucket:
        """The buffers of the bucket of ``size`` points (made, dropping the least recently used
        bucket and its graphs where :data:`MAX_BUCKETS` are kept); call with :attr:`lock` held."""
        bucket = self._buckets.get(size)
        if bucket is None:
            while len(self._buckets) >= MAX_BUCKETS:
                dropped, _ = self._buckets.popitem(last=False)
                for key in [k for k in self._graphs if k[0] == dropped]:
                    del self._graphs[key]
            bucket = Bucket(self.device_id, size)
            self._buckets[size] = bucket
        self._buckets.move_to_end(size)
        return bucket

    def cluster_steps(
        self, key: _Key, bucket: Bucket, thr: np.float32, side: float | None
    ) -> tuple[list[tuple[str, Step]], cupy.ndarray]:
        """The graph's steps by stage, and the component ids they leave on the device (also the
        middle of a frame graph's, ``cuda/graphs/frame_graphs.py``)."""
        size, masked, pinned, kind = key[:4]
        low, high = np.int32(key[6]), np.int32(key[7])
        count_in = Copy(bucket.count.data.ptr, bucket.host_count.ctypes.data, 4, HOST_TO_DEVICE)
        mask_arg = bucket.mask if masked else np.uint64(0)  # a null pointer: no mask
        stage_args = (bucket.points, np.int32(size), bucket.count, mask_arg)
        steps: list[tuple[str, Step]] = [
            ("copy_in", count_in),
            (
                "stage",
                KernelLaunch(UNION_FIND, "uf_stage_points", blocks(size), THREADS, stage_args),
            ),
        ]
        if kind == GRID:
            assert side is not None
            grid = bucket.grid()
            labelling = grid_steps(self.device_id, bucket.points, thr, side, grid)
            components = grid.components
        else:
            parent, components = bucket.point_ids()
            if kind == EXHAUSTIVE:
                labelling = exhaustive_steps(
                    self.device_id, bucket.points, size, thr, parent, components
                )
            else:
                labelling = isolated_steps(bucket.points, size, parent, components)
        steps += [(_GRID_STAGE.get(step.kernel, "grid"), step) for step in labelling]
        numbering = bucket.numbering
        steps += [
            ("numbering", step)
            for step in numbering_steps(self.device_id, components, numbering, low, high)
        ]
        steps.append(("copy_out", numbering.copy_out(bucket.host_out)))
        if pinned:
            labels_ptr = numbering.labels.data.ptr
            steps.append(
                (
                    "copy_out",
                    Copy(bucket.host_labels.ctypes.data, labels_ptr, 4 * size, DEVICE_TO_HOST),
                )
            )
        return steps, components

    def _capture(
        self, key: _Key, bucket: Bucket, thr: np.float32, side: float | None
    ) -> ClusterGraph | None:
        """Capture the steps of ``key``; None, with graphs off for good on this device, where
        the capture fails."""
        steps, components = self.cluster_steps(key, bucket, thr, side)
        captured = self._capturer.capture(steps)
        if captured is None:
            self._clear()
            return None
        while len(self._graphs) >= MAX_GRAPHS:
            self._graphs.popitem(last=False)
        entry = ClusterGraph(captured, components, np.int32(key[6]), np.int32(key[7]))
        self._graphs[key] = entry
        return entry

    def copy_input(
        self, bucket: Bucket, points: Any, mask: Any, n: int, stream: cupy.cuda.Stream
    ) -> int:
        """N into its page-locked word, the points (and the mask) into the bucket's device
        buffers on ``stream`` (call with :attr:`lock` held); the copies issued."""
        bucket.host_count[0] = n
        copy_async(bucket.points.data.ptr, points, 12 * n, stream)
        if mask is None:
            return 1
        if isinstance(mask, np.ndarray):
            mask = np.ascontiguousarray(mask)
        else:
            mask = cupy.ascontiguousarray(mask)
        copy_async(bucket.mask.data.ptr, mask, n, stream)
        return 2

    def fetch_labels(
        self, bucket: Bucket, to_host: bool, n: int, stream: cupy.cuda.Stream
    ) -> tuple[Any, int, int]:
        """The returned labels, once the graph (and any sort after it) has finished: ``(labels,
        copies issued beside the graph, host synchronisations made)``. Small clouds for the host:
        a copy of the page-locked buffer; larger ones: one copy from the device into a new NumPy
        array (made once the counts are read, so that a sort after the graph never makes it
        twice); CuPy labels: a device copy on ``stream``, ordered before the caller's later work
        on it."""
        source = bucket.numbering.labels
        if to_host and bucket.pinned_labels:
            return bucket.host_labels[:n].copy(), 0, 0
        if not to_host:
            labels = cupy.empty(n, dtype=cupy.int32)
            copy_async(labels, source, 4 * n, stream)
            return labels, 1, 0
        labels = np.empty(n, dtype=np.int32)
        copy_async(labels, source, 4 * n, stream)
        stream.synchronize()
        return labels, 1, 1

    def _sort_after(
        self, bucket: Bucket, graph: ClusterGraph, to_host: bool, n: int, stream: cupy.cuda.Stream
    ) -> None:
        """More components than one block sorts: rank them by CuPy's sort, after the graph, and
        copy the counts (and the page-locked labels, where the graph copied them) again: one
        more synchronisation."""
        numbering = bucket.numbering
        count = int(bucket.host_out[0])
        rank_by_host_sort(self.device_id, graph.components, numbering, count, graph.low, graph.high)
        numbering.copy_out(bucket.host_out).issue(self.device_id)
        if to_host and bucket.pinned_labels:
            copy_async(bucket.host_labels, numbering.labels, 4 * n, stream)
        stream.synchronize()
