"""A whole frame on the GPU as one CUDA graph: decode, cluster, encode, the cluster table and the
records grouped by cluster.

Where :func:`frame_graph_applies`, the frame's step lists (``frame_steps.py``, which the staged
codec issues one by one) are captured around the clustering graph's steps
(``ClusterGraphs.cluster_steps``) into one graph, and a frame is: its shape into page-locked words
and its payload onto the device (beside the graph, from the message's memory as it is); one graph
launch (the table's bounds found on the device from the sorted keys); the labelled payload (and
the grouped records) and the labels copied beside it; one host synchronisation. Every size in the
graph is its bucket's (``cluster_graphs.Bucket``): the kernels read N from the device, so one graph
serves every cloud of a bucket, layout, window and clustering configuration; the first such frame
captures it. The output is the staged codec's byte for byte (``test/frame/test_frame_graph.py``).

A frame whose kept clusters (components within the size filter) outnumber the numbering's
sorting block (``numbering.sort_capacity``) is not finished in the graph: :meth:`FrameGraphs.run`
answers ``core.frame.Unsupported`` and the caller runs it staged, as every configuration the
graph does not cover.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import cupy
import numpy as np

from ...core.cluster_stats import SUM_LEAF
from ...core.config import ClusterConfig
from ...core.frame import FrameWindow, Unsupported
from ...core.result import ClusterResult
from ...pointcloud_io.pointcloud2 import RawCloud
from ...pointcloud_io.pointcloud2_plan import CloudShape
from ..buffers import grown
from ..codecs import frame_steps
from ..codecs.frame_steps import FrameArrays, FrameLayout
from ..labelling.numbering import read_sizes, sorted_in_one_block
from .cluster_graphs import (
    PINNED_LABELS_MAX_POINTS,
    Bucket,
    ClusterGraphs,
    graph_applies,
    graph_key,
)
from .launches import CapturedGraph, GraphCapturer, copy_async

#: Largest cloud run as a frame graph (the clustering graph's labels come back through page-locked
#: memory up to this size; larger clouds run the staged frame).
MAX_POINTS = PINNED_LABELS_MAX_POINTS
#: Frame graphs kept (least recently used dropped first, with their buffers).
MAX_FRAME_GRAPHS = 8
#: Why a frame the graph could not finish runs staged.
UNRANKED = Unsupported("more kept clusters than the numbering's sorting block ranks")


def frame_graph_applies(config: ClusterConfig, num_points: int) -> bool:
    """Whether a frame of ``num_points`` clustered with ``config`` runs as a frame graph: the
    clustering graph's configurations (``cluster_graphs.graph_applies``), 1 to :data:`MAX_POINTS`
    points."""
    return 0 < num_points <= MAX_POINTS and graph_applies(config)


@dataclass(frozen=True)
class FrameGraph:
    """A captured frame graph (its steps by stage), what it bakes in of the layout, the bucket
    it clusters on, its arrays (the bucket's points and mask among them) and their device bytes."""

    captured: CapturedGraph
    layout: FrameLayout
    bucket: Bucket
    arrays: FrameArrays
    nbytes: int


@dataclass(frozen=True)
class FrameCall:
    """What the last frame graph call did (for the benchmarks' counts).

    Attributes:
        points, bucket: the cloud's size and its bucket's.
        captured: this call captured its graph; capture_ms: that capture (and new buffers).
        kernel_nodes, copy_nodes: kernels, and copies or memsets, inside the graph.
        outside_copies: copies beside it (payload in and out, labels, grouped records).
        host_syncs: host synchronisations (1).
        graph: the graph launched (its steps by stage: what the benchmarks' stage split issues).
    """

    points: int
    bucket: int
    captured: bool
    capture_ms: float
    kernel_nodes: int
    copy_nodes: int
    outside_copies: int
    host_syncs: int
    graph: FrameGraph


class FrameGraphs:
    """Captured frame graphs on the clustering graphs' buckets; calls are serialised by the
    clustering graphs' lock (they share the buckets' buffers)."""

    def __init__(self, cluster_graphs: ClusterGraphs, device: str) -> None:
        """Frame graphs on ``cluster_graphs``' buckets, their results labelled as run on
        ``device`` (the device's name)."""
        self.cluster_graphs = cluster_graphs
        self.device_id = cluster_graphs.device_id
        self.device = device
        self._graphs: OrderedDict[tuple[Any, ...], FrameGraph] = OrderedDict()
        self._capturer = GraphCapturer(self.device_id, "CUDA frame graph", "frames run staged")
        #: The last call's counts, None before the first.
        self.last_call: FrameCall | None = None

    def release(self) -> None:
        """Drop every frame graph and its buffers (the next frame of each captures again)."""
        with self.cluster_graphs.lock:
            self._graphs.clear()

    def run(
        self,
        cloud: RawCloud,
        shape: CloudShape,
        layout: FrameLayout,
        window: FrameWindow,
        config: ClusterConfig,
    ) -> tuple[FrameArrays, ClusterResult] | Unsupported:
        """The frame of ``cloud`` (``shape`` planned and checked by the codec): the graph's
        arrays, their host twins filled (valid until its next call), and the clustering result
        (labels in a new device array); ``Unsupported`` where it runs staged: outside
        :func:`frame_graph_applies`, graphs off on this device, or more kept clusters than the
        numbering's block sorts."""
        n, nbytes = shape[0], shape[3]
        if not frame_graph_applies(config, n):
            return Unsupported("not a frame graph's configuration or size")
        if self._capturer.disabled is not None:
            return Unsupported(f"frame graphs are off on this device: {self._capturer.disabled}")
        ckey, thr, side = graph_key(n, False, True, config)
        key = (ckey, layout, window)
        start = time.perf_counter()
        with self.cluster_graphs.lock:
            bucket = self.cluster_graphs.bucket(ckey[0])
            entry = self._graphs.get(key)
            captured = entry is None or entry.bucket is not bucket
            if captured or entry.arrays.raw.nbytes < nbytes:  # type: ignore[union-attr]
                entry = self._capture(key, bucket, layout, window, thr, side, nbytes)
                if entry is None:
                    return Unsupported(f"frame graph capture failed: {self._capturer.disabled}")
                captured = True
            self._graphs.move_to_end(key)
            captured_at = time.perf_counter()
            stream = cupy.cuda.get_current_stream()
            copy_frame_in(entry, cloud, shape, stream)
            copied_at = time.perf_counter()
            entry.captured.graph.launch(stream)
            labels = copy_frame_out(entry, n, stream)
            stream.synchronize()
            ran_at = time.perf_counter()
            if not sorted_in_one_block(bucket.host_out):
                return UNRANKED
            sizes, num_components = read_sizes(bucket.host_out)
            err, _, clusters = (int(word) for word in entry.arrays.host_words[:3])
            if err or clusters != len(sizes):
                raise RuntimeError(
                    f"frame graph: the cluster table disagrees with the numbering (flags {err}, "
                    f"{clusters} clusters against {len(sizes)})"
                )
            done = time.perf_counter()
            self.last_call = FrameCall(
                points=n,
                bucket=ckey[0],
                captured=captured,
                capture_ms=(captured_at - start) * 1e3 if captured else 0.0,
                kernel_nodes=entry.captured.kernel_nodes,
                copy_nodes=entry.captured.copy_nodes,
                outside_copies=4 if layout.group else 3,
                host_syncs=1,
                graph=entry,
            )
            held = bucket.nbytes + entry.nbytes
        timings = {
            "transfer_in": (copied_at - captured_at) * 1e3,
            "build": (captured_at - start) * 1e3,
            "label": (ran_at - copied_at) * 1e3,
            "filter": (done - ran_at) * 1e3,
        }
        result = ClusterResult(
            labels=labels,
            cluster_sizes=sizes,
            timings_ms={**timings, "total": sum(timings.values())},
            backend="cuda",
            method="union_find",
            search=config.search,
            device=self.device,
            num_components=num_components,
            peak_bytes=held,
        )
        return entry.arrays, result

    def _capture(
        self,
        key: tuple[Any, ...],
        bucket: Bucket,
        layout: FrameLayout,
        window: FrameWindow,
        thr: np.float32,
        side: float | None,
        nbytes: int,
    ) -> FrameGraph | None:
        """Make the arrays and capture the steps of ``key``; None, with frame graphs off for
        good on this device, where the capture fails."""
        low = int(key[0][6])
        max_clusters = min(bucket.size // max(low, 1), bucket.numbering.capacity)
        raw_bytes = grown(max(nbytes, bucket.size * layout.point_step))
        arrays, held = _allocate(bucket, raw_bytes, layout, window, max_clusters)
        cluster_steps, _ = self.cluster_graphs.cluster_steps(key[0], bucket, thr, side)
        labels = bucket.numbering.labels
        steps = [
            *frame_steps.decode_steps(arrays, layout, window),
            *(("cluster", step) for _, step in cluster_steps),
            *frame_steps.encode_steps(arrays, layout, window, labels, None),
        ]
        captured = self._capturer.capture(steps)
        if captured is None:
            self._graphs.clear()
            return None
        while len(self._graphs) >= MAX_FRAME_GRAPHS:
            self._graphs.popitem(last=False)
        entry = FrameGraph(captured, layout, bucket, arrays, held)
        self._graphs[key] = entry
        return entry


def _allocate(
    bucket: Bucket, raw_bytes: int, layout: FrameLayout, window: FrameWindow, max_clusters: int
) -> tuple[FrameArrays, int]:
    """A graph's arrays for ``bucket``'s points, ``raw_bytes`` of payload and at most
    ``max_clusters`` clusters (the most a frame whose components the numbering ranks can have:
    ``pc2_table_bounds`` clamps labels to it), and the device bytes they hold."""
    held: list[int] = []

    def device(_: str, count: int, dtype: Any) -> Any:
        array = cupy.empty(count, dtype=dtype)
        held.append(int(array.nbytes))
        return array

    def pinned(_: str, nbytes: int) -> np.ndarray:
        return np.frombuffer(cupy.cuda.alloc_pinned_memory(max(nbytes, 1)), np.uint8, nbytes)

    arrays = frame_steps.decode_arrays(
        device, pinned, raw_bytes, layout, window, bucket.points, bucket.mask
    )
    threads = max_clusters + -(-bucket.size // SUM_LEAF)
    return frame_steps.with_table_arrays(
        arrays, device, pinned, layout, max_clusters, threads
    ), sum(held)


def copy_frame_in(entry: FrameGraph, cloud: RawCloud, shape: CloudShape, stream: Any) -> None:
    """The frame's shape into the page-locked words the graph reads (N for the clustering's
    steps too), its payload onto the device."""
    entry.bucket.host_count[0] = shape[0]
    frame_steps.copy_in(entry.arrays, cloud, shape, stream)


def copy_frame_out(entry: FrameGraph, n: int, stream: Any) -> Any:
    """Queue the labelled payload's copy into its host twin (and the grouped records', as many
    as N points could fill), and the labels' into a new device array, returned, after the
    graph."""
    frame_steps.copy_back(entry.arrays, entry.layout, n, n, stream)
    labels = cupy.empty(n, dtype=cupy.int32)
    copy_async(labels, entry.bucket.numbering.labels, 4 * n, stream)
    return labels
