"""A whole frame on the GPU as one CUDA graph: decode, cluster, encode, the cluster table and the
records grouped by cluster.

The codec's staged frame (``frame.py``'s ``decode`` and ``encode`` around the clusterer) takes
three host synchronisations and some twenty launches issued from Python: the clustering graph's
(``graphs.py``), the cluster table's shape and prefix sums (computed on the host from the sizes)
and CuPy's sort of the table's keys. Here, where :func:`frame_graph_applies`, the frame is:

1. N, the width and the row step into page-locked words; the payload's bytes copied to the device
   beside the graph (``cudaMemcpyAsync`` from the message's memory as it is);
2. one graph launch: the shape in, ``pc2_decode_sized`` into the clustering bucket's points and
   mask (``graphs.Bucket``), the clustering graph's steps (``ClusterGraphs.cluster_steps``),
   ``pc2_encode_sized`` (or ``pc2_encode_compact_sized``) writing the labelled payload and the
   table's keys, the keys' radix sort by label (:data:`RADIX_BITS` a pass, as many passes as the
   bucket's largest label needs), the table's bounds and thread offsets, ``pc2_table_sized_*``,
   where asked (``FrameLayout.group``) ``pc2_group_records_sized``, and the copies of the
   numbering's counts, the table's rows (as many as the numbering's sorting block ranks
   components), the status words and K back into page-locked memory (``kernels/pc2_sort.cu``
   says how the sort and the bounds work on the device alone);
3. the labelled payload (and the grouped records) copied back beside the graph, the labels
   copied into a new device array;
4. one host synchronisation.

Every size in the graph is the bucket's: the kernels read N from the device and the threads past
it do nothing, so one graph serves every cloud of a bucket, layout, window and clustering
configuration; the first such frame captures it. The output is the staged codec's byte for byte
(the same kernels, the same sums in the same order): ``test/test_frame_graph.py`` compares them.

A frame whose components outnumber the numbering's sorting block (``numbering.SORT_CAPACITY``) is
not finished in the graph: :meth:`FrameGraphs.run` returns None for it and the caller runs the
staged frame, as it does for every configuration the graph does not cover.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import cupy
import numpy as np

from ..core.cluster_stats import CLUSTER_DTYPE, SUM_LEAF
from ..core.config import ClusterConfig
from ..core.frame import (
    DEFAULT_LABELED_LAYOUT,
    EncodedFrame,
    FrameWindow,
    GroupedRecords,
    LabeledLayout,
)
from ..core.result import ClusterResult
from ..pointcloud_io.pointcloud2 import RawCloud
from .buffers import grown
from .frame import (
    PARTIAL_BYTES,
    RADIX_BITS,
    SORT_TILE,
    TABLE_THREADS,
    CudaFrameCodec,
    OutputLayout,
    XyzPlan,
    compact_layout,
    compact_spans,
    decode_settings,
)
from .graphs import (
    PINNED_LABELS_MAX_POINTS,
    Bucket,
    ClusterGraphs,
    graph_applies,
    graph_key,
)
from .launches import (
    DEVICE_TO_DEVICE,
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    Copy,
    KernelLaunch,
    Memset,
    Step,
    capture,
    kernel_launches,
    stage_split,
)
from .module import KernelSource, blocks
from .numbering import read_sizes, sorted_in_one_block

log = logging.getLogger(__name__)

#: Largest cloud run as a frame graph (the clustering graph's labels come back through page-locked
#: memory up to this size; larger clouds run the staged frame).
MAX_POINTS = PINNED_LABELS_MAX_POINTS
#: Frame graphs kept (least recently used dropped first, with their buffers).
MAX_FRAME_GRAPHS = 8
#: The stages of :meth:`FrameGraphs.stage_split`, in order: the payload's copy in (host clock),
#: the graph's steps grouped (events), the payload and labels back (host clock).
STAGES = ("payload_in", "shape_in", "decode", "cluster", "encode", "sort", "table", "group",
          "copy_out", "payload_out")  # fmt: skip


def frame_graph_applies(config: ClusterConfig, num_points: int) -> bool:
    """Whether a frame of ``num_points`` clustered with ``config`` runs as a frame graph: the
    clustering graph's configurations (``graphs.graph_applies``), 1 to :data:`MAX_POINTS` points."""
    return 0 < num_points <= MAX_POINTS and graph_applies(config)


@dataclass(frozen=True)
class FrameLayout:
    """What a frame graph bakes in of a cloud's layout and its labelled output (the shape, N,
    width and row step, is read from the device).

    Attributes:
        point_step, offsets, datatypes, big_endian: the input's (``frame.XyzPlan``).
        coords_f64: ``read_xyz`` gives float64.
        out_step, cid_word, rgb_word: the labelled cloud's point step and its cluster_id and rgb
            words (rgb -1: the compact layout).
        group: the input records are also grouped by cluster (``pc2_group_records_sized``).
    """

    point_step: int
    offsets: tuple[int, int, int]
    datatypes: tuple[int, int, int]
    big_endian: bool
    coords_f64: bool
    out_step: int
    cid_word: int
    rgb_word: int
    group: bool


@dataclass(frozen=True)
class FrameCall:
    """What the last frame graph call did (for the benchmarks' counts).

    Attributes:
        points, bucket: the cloud's size and its bucket's.
        captured: this call captured its graph; capture_ms: that capture (and new buffers).
        kernel_nodes, copy_nodes: kernels, and copies or memsets, inside the graph.
        outside_copies: copies beside it (payload in and out, labels, grouped records).
        host_syncs: host synchronisations (1).
    """

    points: int
    bucket: int
    captured: bool
    capture_ms: float
    kernel_nodes: int
    copy_nodes: int
    outside_copies: int
    host_syncs: int


class _Buffers:
    """A frame graph's own buffers (the clustering bucket holds the points, mask and labels)."""

    def __init__(self, size: int, raw_bytes: int, layout: FrameLayout, max_clusters: int) -> None:
        """Buffers of a bucket of ``size`` points, ``raw_bytes`` of payload and at most
        ``max_clusters`` clusters: the most a frame whose components the numbering ranks can
        have (a frame with more runs staged; ``pc2_table_bounds`` clamps its labels to this)."""
        tiles = -(-size // SORT_TILE)
        coord = np.float64 if layout.coords_f64 else np.float32
        self.raw_capacity = raw_bytes
        self.raw = cupy.empty(raw_bytes, dtype=cupy.uint8)
        self.coords = cupy.empty(3 * size, dtype=coord)
        self.out = cupy.empty(size * layout.out_step // 4, dtype=cupy.uint32)
        self.keys = (cupy.empty(size, dtype=cupy.uint64), cupy.empty(size, dtype=cupy.uint64))
        self.counts = cupy.empty((1 << RADIX_BITS) * tiles, dtype=cupy.int32)
        self.starts = cupy.empty(max_clusters + 1, dtype=cupy.int32)
        self.offsets = cupy.empty(max_clusters + 1, dtype=cupy.int32)
        self.max_threads = max_clusters + -(-size // SUM_LEAF)
        self.slots = cupy.empty(2 * self.max_threads * PARTIAL_BYTES, dtype=cupy.uint8)
        self.flags = cupy.empty(self.max_threads, dtype=cupy.int32)
        self.table = cupy.empty(11 * max_clusters, dtype=cupy.uint32)
        self.sums = cupy.empty(3 * max_clusters, dtype=cupy.float64)
        self.words = cupy.empty(4, dtype=cupy.int32)  # err, implausible, K, unused
        self.dims = cupy.empty(3, dtype=cupy.int64)
        grouped_bytes = size * layout.point_step if layout.group else 0
        self.grouped = cupy.empty(grouped_bytes, dtype=cupy.uint8)
        total = 8 * 3 + 16 + 44 * max_clusters + size * layout.out_step + grouped_bytes
        self._pinned = cupy.cuda.alloc_pinned_memory(total)
        host = np.frombuffer(self._pinned, np.uint8, total)
        self.host_dims = host[:24].view(np.int64)
        self.host_words = host[24:40].view(np.int32)
        table_end = 40 + 44 * max_clusters
        self.host_table = host[40:table_end].view(np.uint32)
        payload_end = table_end + size * layout.out_step
        self.host_payload = host[table_end:payload_end]
        self.host_grouped = host[payload_end:]

    @property
    def nbytes(self) -> int:
        """Device bytes held."""
        arrays = (self.raw, self.coords, self.out, *self.keys, self.counts, self.starts,
                  self.offsets, self.slots, self.flags, self.table, self.sums, self.words,
                  self.dims, self.grouped)  # fmt: skip
        return sum(int(array.nbytes) for array in arrays)


class _FrameGraph:
    def __init__(
        self, graph: Any, steps: list[tuple[str, Step]], bucket: Bucket, buffers: _Buffers
    ) -> None:
        self.graph = graph
        self.steps = steps
        self.bucket = bucket
        self.buffers = buffers
        self.kernel_nodes = kernel_launches([step for _, step in steps])
        self.copy_nodes = len(steps) - self.kernel_nodes


@dataclass(frozen=True)
class FrameGraphOutput:
    """A frame graph's results.

    Attributes:
        payload: the labelled payload (N * out_step bytes), a view of page-locked memory the
            next call of the same graph reuses.
        table: the cluster table (``CLUSTER_DTYPE`` rows, a copy).
        implausible_points: finite points beyond ``max_coordinate``.
        result: the clustering result (labels on the device, a new array).
        grouped: with ``FrameLayout.group``, the clustered points' input records in cluster
            order, (records, point_step) uint8, a view of page-locked memory like ``payload``;
            else None.
    """

    payload: np.ndarray
    table: np.ndarray
    implausible_points: int
    result: ClusterResult
    grouped: np.ndarray | None


class FrameGraphs:
    """Captured frame graphs of one codec's kernels on the clustering graphs' buckets; calls are
    serialised by the clustering graphs' lock (they share the buckets' buffers)."""

    def __init__(self, cluster_graphs: ClusterGraphs, source: KernelSource, device: str) -> None:
        """Frame graphs of ``source``'s kernels (``frame.SOURCE``) on ``cluster_graphs``' buckets,
        their results labelled as run on ``device`` (the device's name)."""
        self.cluster_graphs = cluster_graphs
        self.device_id = cluster_graphs.device_id
        self.source = source
        self.device = device
        self._graphs: OrderedDict[tuple[Any, ...], _FrameGraph] = OrderedDict()
        self._capture_stream: cupy.cuda.Stream | None = None
        #: Why frame graphs are off for good (a capture failed), else None.
        self.disabled: str | None = None
        #: The last call's counts, None before the first.
        self.last_call: FrameCall | None = None

    def release(self) -> None:
        """Drop every frame graph and its buffers (the next frame of each captures again)."""
        with self.cluster_graphs.lock:
            self._graphs.clear()

    def run(
        self,
        cloud: RawCloud,
        layout: FrameLayout,
        shape: tuple[int, int, int, int],
        window: FrameWindow,
        config: ClusterConfig,
    ) -> FrameGraphOutput | None:
        """The frame of ``cloud`` (``shape``: N, width, row step and payload bytes, planned and
        checked by the codec; N within :func:`frame_graph_applies`); None where the frame runs
        staged: graphs off on this device, or more components than the numbering's block
        sorts."""
        if self.disabled is not None:
            return None
        n, nbytes = shape[0], shape[3]
        ckey, thr, side = graph_key(n, False, True, config)
        key = (ckey, layout, window)
        start = time.perf_counter()
        graphs = self.cluster_graphs
        with graphs.lock:
            bucket = graphs.bucket(ckey[0])
            entry = self._graphs.get(key)
            captured = entry is None or entry.bucket is not bucket
            if captured or entry.buffers.raw_capacity < nbytes:  # type: ignore[union-attr]
                entry = self._capture(key, bucket, layout, window, thr, side, nbytes)
                if entry is None:
                    return None
                captured = True
            self._graphs.move_to_end(key)
            captured_at = time.perf_counter()
            buffers = entry.buffers
            stream = cupy.cuda.get_current_stream()
            _copy_in(entry, cloud, shape, stream)
            copied_at = time.perf_counter()
            entry.graph.launch(stream)
            payload, labels = _copy_out(entry, n, layout, stream)
            stream.synchronize()
            ran_at = time.perf_counter()
            if not sorted_in_one_block(bucket.host_out):
                return None
            sizes, num_components = read_sizes(bucket.host_out)
            table = buffers.host_table.view(CLUSTER_DTYPE)[: len(sizes)].copy()
            err, implausible, clusters = (int(word) for word in buffers.host_words[:3])
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
                kernel_nodes=entry.kernel_nodes,
                copy_nodes=entry.copy_nodes,
                outside_copies=4 if layout.group else 3,
                host_syncs=1,
            )
            held = bucket.nbytes + entry.buffers.nbytes
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
        grouped = None
        if layout.group:
            count = int(sizes.sum())
            step = layout.point_step
            grouped = buffers.host_grouped[: count * step].reshape(count, step)
        return FrameGraphOutput(payload, table, implausible, result, grouped)

    def stage_split(
        self,
        cloud: RawCloud,
        layout: FrameLayout,
        shape: tuple[int, int, int, int],
        window: FrameWindow,
        config: ClusterConfig,
        repeats: int = 20,
    ) -> dict[str, float] | None:
        """Median milliseconds of each of :data:`STAGES` for the frame :meth:`run` takes: the
        graph's steps issued one stage at a time between events (the graph itself is not
        launched), the copies beside it timed on the host clock up to a synchronisation; None
        where the frame runs staged."""
        if self.run(cloud, layout, shape, window, config) is None:  # captures where needed
            return None
        ckey, _, _ = graph_key(shape[0], False, True, config)
        stream = cupy.cuda.get_current_stream()
        with self.cluster_graphs.lock:
            entry = self._graphs[(ckey, layout, window)]
            return stage_split(
                entry.steps,
                STAGES,
                lambda: _copy_in(entry, cloud, shape, stream),
                lambda: _copy_out(entry, shape[0], layout, stream),
                repeats,
                self.device_id,
            )

    def _capture(
        self,
        key: tuple[Any, ...],
        bucket: Bucket,
        layout: FrameLayout,
        window: FrameWindow,
        thr: np.float32,
        side: float | None,
        nbytes: int,
    ) -> _FrameGraph | None:
        """Make the buffers and capture the steps of ``key``; None, with frame graphs off for
        good on this device, where the capture fails."""
        size = bucket.size
        low = int(key[0][6])
        raw_bytes = grown(max(nbytes, size * layout.point_step))
        max_clusters = min(size // max(low, 1), bucket.numbering.capacity)
        buffers = _Buffers(size, raw_bytes, layout, max_clusters)
        cluster_steps, _ = self.cluster_graphs.cluster_steps(key[0], bucket, thr, side)
        steps = self._steps(bucket, buffers, layout, window, [s for _, s in cluster_steps])
        if self._capture_stream is None:
            self._capture_stream = cupy.cuda.Stream(non_blocking=True)
        try:
            graph = capture([step for _, step in steps], self._capture_stream, self.device_id)
        except (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError) as error:
            self.disabled = f"{type(error).__name__}: {error}"
            log.warning(
                "CUDA frame graph capture failed on device %d (%s): frames run staged from now",
                self.device_id,
                self.disabled,
            )
            self._graphs.clear()
            return None
        while len(self._graphs) >= MAX_FRAME_GRAPHS:
            self._graphs.popitem(last=False)
        entry = _FrameGraph(graph, steps, bucket, buffers)
        self._graphs[key] = entry
        return entry

    def _steps(
        self,
        bucket: Bucket,
        buffers: _Buffers,
        layout: FrameLayout,
        window: FrameWindow,
        cluster_steps: list[Step],
    ) -> list[tuple[str, Step]]:
        """The graph's steps by stage (:data:`STAGES`)."""
        size, b = bucket.size, buffers
        words = b.words
        src = self.source
        write_table = layout.coords_f64 or not window.use_height
        coords = b.coords if write_table else bucket.points
        table32 = coords if not layout.coords_f64 else b.coords[:1].view(cupy.uint32)
        table64 = coords if layout.coords_f64 else b.sums[:1]
        decode_args = (
            b.raw,
            b.dims,
            *decode_settings(layout, layout.coords_f64, window, write_table),
            bucket.points,
            bucket.mask,
            table32,
            table64,
            words,
        )
        out_words = layout.out_step // 4
        labels = bucket.numbering.labels
        if layout.rgb_word >= 0:
            encode = "pc2_encode_sized"
            middle: tuple[Any, ...] = (np.int32(layout.rgb_word), np.int32(layout.big_endian))
        else:
            encode = "pc2_encode_compact_sized"
            middle = (np.int32(layout.big_endian), *compact_spans(layout.offsets, layout.datatypes))
        encode_args = (
            b.raw,
            b.dims,
            np.int32(layout.point_step),
            np.int32(out_words),
            np.int32(layout.cid_word),
            *middle,
            labels,
            np.int32(0),  # the numbering's own labels: no range check
            b.out,
            b.keys[0],
            words,
        )
        steps: list[tuple[str, Step]] = [
            ("shape_in", Copy(b.dims.data.ptr, b.host_dims.ctypes.data, 24, HOST_TO_DEVICE)),
            ("shape_in", Memset(words.data.ptr, 0, words.nbytes)),
            ("decode", KernelLaunch(src, "pc2_decode_sized", blocks(size), 256, decode_args)),
            *(("cluster", step) for step in cluster_steps),
            ("encode", KernelLaunch(src, encode, blocks(size * out_words), 256, encode_args)),
        ]
        sort, sorted_keys = self._sort_steps(b, size, len(b.starts) - 1)
        steps += [("sort", step) for step in sort]
        table = "pc2_table_sized_f64" if layout.coords_f64 else "pc2_table_sized_f32"
        clusters = words[2:3]
        table_steps: list[Step] = [
            KernelLaunch(
                src,
                "pc2_table_bounds",
                blocks(size),
                256,
                (sorted_keys, b.dims, b.starts, clusters, np.int32(len(b.starts) - 1)),
            ),
            KernelLaunch(src, "pc2_table_offsets", (1,), 1024, (b.starts, clusters, b.offsets)),
            Memset(b.flags.data.ptr, 0, b.flags.nbytes),
            KernelLaunch(
                src,
                table,
                blocks(b.max_threads, TABLE_THREADS),
                TABLE_THREADS,
                (
                    sorted_keys,
                    coords,
                    clusters,
                    b.starts,
                    b.offsets,
                    b.slots,
                    b.flags,
                    np.int32(1),
                    b.table,
                    b.sums,
                    words,
                ),
            ),
        ]
        steps += [("table", step) for step in table_steps]
        if layout.group:
            group_args = (
                b.raw,
                sorted_keys,
                b.starts,
                b.dims,
                np.int32(layout.point_step),
                b.grouped,
            )
            grid = blocks(size * max(layout.point_step // 4, 1))
            group = KernelLaunch(src, "pc2_group_records_sized", grid, 256, group_args)
            steps.append(("group", group))
        copies = [Copy(b.host_words.ctypes.data, words.data.ptr, words.nbytes, DEVICE_TO_HOST)]
        if b.host_table.nbytes:
            table_ptr = b.table.data.ptr
            copies.append(
                Copy(b.host_table.ctypes.data, table_ptr, b.host_table.nbytes, DEVICE_TO_HOST)
            )
        return steps + [("copy_out", step) for step in copies]

    def _sort_steps(self, b: _Buffers, size: int, max_label: int) -> tuple[list[Step], Any]:
        """The radix passes over the keys' label bits (labels + 1 up to ``max_label`` + 1), and
        the buffer that ends up holding the sorted keys."""
        steps: list[Step] = []
        tiles = -(-size // SORT_TILE)
        passes = max(1, -(-(max_label + 1).bit_length() // RADIX_BITS))
        source, target = b.keys
        for p in range(passes):
            shift = np.int32(32 + RADIX_BITS * p)
            steps += [
                KernelLaunch(
                    self.source,
                    "pc2_radix_count",
                    (tiles,),
                    SORT_TILE,
                    (source, b.dims, shift, b.counts, np.int32(tiles)),
                ),
                KernelLaunch(
                    self.source,
                    "pc2_scan_counts",
                    (1,),
                    1024,
                    (b.counts, np.int32(b.counts.size)),
                ),
                KernelLaunch(
                    self.source,
                    "pc2_radix_scatter",
                    (tiles,),
                    SORT_TILE,
                    (source, b.dims, shift, b.counts, np.int32(tiles), target),
                ),
            ]
            source, target = target, source
        return steps, source


def _copy_in(
    entry: _FrameGraph, cloud: RawCloud, shape: tuple[int, int, int, int], stream: Any
) -> None:
    """The frame's shape into the page-locked words the graph reads, its payload onto the
    device (from the message's memory as it is)."""
    n, width, row_step, nbytes = shape
    entry.buffers.host_dims[:] = (n, width, row_step)
    entry.bucket.host_count[0] = n
    data = np.frombuffer(cloud.data, dtype=np.uint8, count=nbytes)
    _copy(entry.buffers.raw.data.ptr, data.ctypes.data, nbytes, HOST_TO_DEVICE, stream)


def _copy_out(
    entry: _FrameGraph, n: int, layout: FrameLayout, stream: Any
) -> tuple[np.ndarray, Any]:
    """Queue the labelled payload's copy into page-locked memory (and the grouped records', as
    many bytes as N points could fill), and the labels' into a new device array, after the
    graph: ``(payload, labels)``, filled once ``stream`` is done."""
    b = entry.buffers
    payload = b.host_payload[: n * layout.out_step]
    _copy(payload.ctypes.data, b.out.data.ptr, payload.nbytes, DEVICE_TO_HOST, stream)
    if layout.group:
        grouped_bytes = n * layout.point_step
        _copy(b.host_grouped.ctypes.data, b.grouped.data.ptr, grouped_bytes, DEVICE_TO_HOST, stream)
    labels = cupy.empty(n, dtype=cupy.int32)
    source = entry.bucket.numbering.labels.data.ptr
    _copy(labels.data.ptr, source, 4 * n, DEVICE_TO_DEVICE, stream)
    return payload, labels


def _copy(dst: int, src: int, nbytes: int, kind: int, stream: Any) -> None:
    cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)


class GraphFrameCodec(CudaFrameCodec):
    """The CUDA frame codec, running a whole frame as one graph launch where it can."""

    def __init__(self, frame_graphs: FrameGraphs) -> None:
        """Run whole frames on ``frame_graphs`` (its device is the codec's)."""
        super().__init__(frame_graphs.device_id)
        self.frame_graphs = frame_graphs

    def process_whole(
        self,
        cloud: RawCloud,
        config: ClusterConfig,
        window: FrameWindow,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
        copy: bool = True,
        group: bool = False,
    ) -> tuple[EncodedFrame, ClusterResult] | None:
        """``decode``, clustering with ``config`` and ``encode`` (``copy``, ``group`` and
        ``layout`` as there) as one graph launch and one synchronisation, with their outputs;
        None where the frame runs staged (:func:`frame_graph_applies` false, frame graphs off
        on the device, more components than the numbering's block sorts). The frame is not kept
        for a later ``encode``.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (as ``read_xyz`` raises).
        """
        plan, out_layout, frame_layout, shape = self._frame_plan(cloud, layout, group)
        if not frame_graph_applies(config, plan.num_points):
            return None
        with self._device:
            output = self.frame_graphs.run(cloud, frame_layout, shape, window, config)
        if output is None:
            return None
        payload = output.payload.copy() if copy else output.payload
        grouped = None
        if output.grouped is not None:
            records = output.grouped.copy() if copy else output.grouped
            grouped = GroupedRecords(counts=output.result.cluster_sizes.copy(), records=records)
        encoded = EncodedFrame(
            labeled=self._output_cloud(plan, bool(cloud.is_dense), out_layout, payload),
            table=output.table,
            implausible_points=output.implausible_points,
            grouped=grouped,
        )
        return encoded, output.result

    def stage_split(
        self,
        cloud: RawCloud,
        config: ClusterConfig,
        window: FrameWindow,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
        repeats: int = 20,
    ) -> dict[str, float] | None:
        """:meth:`FrameGraphs.stage_split` of the frame :meth:`process_whole` would run; None
        where it runs staged."""
        plan, _, frame_layout, shape = self._frame_plan(cloud, layout, False)
        if not frame_graph_applies(config, plan.num_points):
            return None
        with self._device:
            return self.frame_graphs.stage_split(
                cloud, frame_layout, shape, window, config, repeats
            )

    def _frame_plan(
        self, cloud: RawCloud, layout: LabeledLayout, group: bool
    ) -> tuple[XyzPlan, OutputLayout, FrameLayout, tuple[int, int, int, int]]:
        """The cloud's plan, its labelled layout, what a graph bakes in of both (and of
        ``group``), and its shape (N, width, row step, payload bytes)."""
        plan, full = self._plan(cloud)
        out_layout = compact_layout(plan) if layout == "compact" else full
        frame_layout = FrameLayout(
            point_step=plan.point_step,
            offsets=plan.offsets,
            datatypes=plan.datatypes,
            big_endian=plan.big_endian,
            coords_f64=plan.dtype == np.float64,
            out_step=out_layout.point_step,
            cid_word=out_layout.cluster_id_offset // 4,
            rgb_word=out_layout.rgb_offset // 4 if out_layout.rgb_offset >= 0 else -1,
            group=group,
        )
        shape = (plan.num_points, plan.width, plan.row_step, plan.nbytes)
        return plan, out_layout, frame_layout, shape
