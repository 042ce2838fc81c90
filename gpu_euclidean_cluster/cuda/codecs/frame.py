"""The frame codec on the GPU: PointCloud2 bytes in, labelled cloud and cluster table out, bit for
bit what the CPU twin (``cpu/codecs/frame.py``) produces; a ``core.frame.FrameCodec``.

    >>> codec = backend.frame_codec()  # CudaFrameCodec(FrameGraphs(...))
    >>> frame = codec.decode(cloud, FrameWindow(max_range=40.0))
    >>> result = clusterer.cluster(frame.points, mask=frame.mask)  # CuPy in, CuPy labels out
    >>> encoded = codec.encode(result.labels, result.cluster_sizes)
    >>> encoded.labeled  # == append_fields(cloud, {"cluster_id": ..., "rgb": ...})
    >>> codec.encode(result.labels, result.cluster_sizes, group=True).grouped  # records by cluster
    >>> codec.encode(result.labels, result.cluster_sizes, layout="compact").labeled  # x y z id
    >>> codec.process_whole(cloud, config, window)  # (encoded, result) as one graph, or Unsupported

A frame runs one of two ways, with the same step lists (``frame_steps.py``): staged, ``decode``
and ``encode`` issue them one by one around the clusterer (the raw payload copied once to the
device after ``pointcloud2_plan.plan_xyz`` checked the layout as ``read_xyz`` does; decode, mask
and flattening in one kernel; the labelled payload, the cluster table and the grouped records
computed on the device and copied back once into reused page-locked buffers; ``encode`` ends
with the frame's only host synchronisation); whole (``process_whole``), a frame graph captures
them around the clustering graph's (``cuda/graphs/frame_graphs.py``). Buffers only grow.

The bytes come out identical without tolerances (``cuda/kernels/codecs/pointcloud2.cu`` states each
rule): fields are read byte by byte and float32 <-> float64 converted on the bits as x86 does; the
mask's float64 operations are each rounded once (no FMA); the payload follows ``append_fields``'
layout and ``cluster_rgb``'s float64 formula; the table's keys ``(label + 1) << 32 | index`` are
sorted by label, and each cluster's leaves of ``SUM_LEAF`` points summed left to right, then
pairwise up a tree (``cluster_stats.cluster_table``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import cupy
import numpy as np

from ...core.cluster_stats import CLUSTER_DTYPE
from ...core.config import ClusterConfig
from ...core.frame import (
    DEFAULT_LABELED_LAYOUT,
    DecodedFrame,
    EncodedFrame,
    FrameWindow,
    GroupedRecords,
    LabeledLayout,
    Unsupported,
    WholeFrame,
)
from ...pointcloud_io.pointcloud2 import RawCloud, check_data_size
from ...pointcloud_io.pointcloud2_plan import (
    OutputLayout,
    XyzPlan,
    compact_layout,
    layout_key,
    output_layout,
    plan_xyz,
)
from ..buffers import GrowOnlyBuffers
from ..graphs.frame_graphs import FrameGraphs
from ..graphs.launches import HOST_TO_DEVICE, Copy, Step, issue
from ..module import compile_source
from .frame_steps import (
    SOURCE,
    FrameArrays,
    FrameLayout,
    cluster_threads,
    copy_back,
    copy_in,
    decode_arrays,
    decode_steps,
    encode_steps,
    frame_layout,
    with_table_arrays,
)


@dataclass(frozen=True)
class _Frame:
    """The last decoded frame: its plan, full output layout, window and decode's arrays."""

    plan: XyzPlan
    layout: OutputLayout
    is_dense: bool
    window: FrameWindow
    arrays: FrameArrays | None


class CudaFrameCodec:
    """Decodes PointCloud2 payloads and encodes the labelled output on one CUDA device, a whole
    frame as one graph launch where it can. The frame :meth:`decode` returns is a view of its
    buffers, valid until the next ``decode``; work is queued on CuPy's current stream, where the
    clusterer queues its own. One codec serves one thread."""

    #: Points of the cloud the frame layer runs once at start-up: a full HDL-64E sweep, so the
    #: memory pool already holds frame-sized blocks when the first frame arrives.
    warm_up_points = 131072

    def __init__(self, frame_graphs: FrameGraphs) -> None:
        """Run whole frames on ``frame_graphs`` (its device is the codec's); compile the
        kernels (once per device and process)."""
        self.frame_graphs = frame_graphs
        self.device_id = frame_graphs.device_id
        self._device = cupy.cuda.Device(self.device_id)
        with self._device:
            compile_source(SOURCE, self.device_id)
            self._shape_done = cupy.cuda.Event(block=False, disable_timing=True)
        self._buffers = GrowOnlyBuffers()
        self._frame: _Frame | None = None
        self._clusters = 0
        #: the last layout planned: its key (``pointcloud2_plan.layout_key``), plan and output
        #: layout
        self._planned: tuple[tuple[Any, ...], XyzPlan, OutputLayout] | None = None

    def process_whole(
        self,
        cloud: RawCloud,
        config: ClusterConfig,
        window: FrameWindow,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
        copy: bool = True,
        group: bool = False,
    ) -> WholeFrame | Unsupported:
        """``core.frame.FrameCodec.process_whole`` as one graph launch and one synchronisation
        (``FrameGraphs.run`` says where not); the frame is not kept for a later ``encode``."""
        plan, full = self._plan(cloud)
        out = compact_layout(plan) if layout == "compact" else full
        steps_layout = frame_layout(plan, out, group)
        with self._device:
            run = self.frame_graphs.run(cloud, plan.shape, steps_layout, window, config)
        if isinstance(run, Unsupported):
            return run
        arrays, result = run
        outputs = _outputs(arrays, steps_layout, plan.num_points, result.cluster_sizes, copy)
        return _encoded(plan, bool(cloud.is_dense), out, *outputs), result

    def decode(self, cloud: RawCloud, window: FrameWindow) -> DecodedFrame:
        """``core.frame.FrameCodec.decode``: the payload copied to the device, decoded there."""
        plan, full = self._plan(cloud)
        n = plan.num_points
        self._frame = _Frame(plan, full, bool(cloud.is_dense), window, None)
        if n == 0:
            return DecodedFrame(cupy.empty((0, 3), cupy.float32), cupy.empty(0, cupy.bool_))
        buffers = self._buffers
        layout = frame_layout(plan, full, False)
        with self._device:
            self._shape_done.synchronize()  # the page-locked shape words are free again
            points = buffers.device("points", 3 * n, np.float32)
            mask = buffers.device("mask", n, np.bool_)
            arrays = decode_arrays(
                buffers.device, buffers.pinned, plan.nbytes, layout, window, points, mask
            )
            stream = cupy.cuda.get_current_stream()
            copy_in(arrays, cloud, plan.shape, stream)
            issue([step for _, step in decode_steps(arrays, layout, window)], self.device_id)
            self._shape_done.record(stream)
        self._frame = replace(self._frame, arrays=arrays)
        return DecodedFrame(arrays.points.reshape(n, 3), arrays.mask)

    def encode(
        self,
        labels: Any,
        sizes: Any,
        copy: bool = True,
        group: bool = False,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
    ) -> EncodedFrame:
        """``core.frame.FrameCodec.encode`` of the last decoded frame; ``copy`` False hands out
        views of the page-locked payload and records the next ``encode`` reuses (a copy costs
        about 0.3 ms for 120 k points).

        Raises:
            ValueError: labels or sizes of the wrong shape, labels below -1, or sizes that are
                not the label counts of clusters ``0..K-1``.
        """
        frame = self._frame
        if frame is None:
            raise RuntimeError("encode() needs a decode() first")
        n = frame.plan.num_points
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        k = int(sizes.shape[0])
        if k and (int(sizes.min()) < 1 or int(sizes.sum()) > n):
            raise ValueError(f"labels do not number exactly {k} non-empty clusters")
        out = compact_layout(frame.plan) if layout == "compact" else frame.layout
        steps_layout = frame_layout(frame.plan, out, group)
        with self._device:
            labels = cupy.asarray(labels)
            if labels.shape != (n,):
                raise ValueError(f"labels have shape {labels.shape}, expected ({n},)")
            if labels.dtype != cupy.int32:
                labels = labels.astype(cupy.int32)
            self._clusters = k
            if n == 0:  # nothing on the device: an empty labelled cloud and table
                records = np.empty((0, max(frame.plan.point_step, 0)), np.uint8)
                grouped = GroupedRecords(sizes.copy(), records) if group else None
                empty = (np.empty(0, np.uint8), np.empty(0, CLUSTER_DTYPE), 0, grouped)
                return _encoded(frame.plan, frame.is_dense, out, *empty)
            arrays, bounds = self._encode_arrays(frame, steps_layout, sizes)
            steps = encode_steps(arrays, steps_layout, frame.window, labels, bounds)
            issue([step for _, step in steps], self.device_id)
            stream = cupy.cuda.get_current_stream()
            copy_back(arrays, steps_layout, n, int(sizes.sum()), stream)
            stream.synchronize()
            flags_set = int(arrays.host_words[0])
            if flags_set & 2:
                raise ValueError("labels below -1 (only -1 marks points in no cluster)")
            if flags_set:
                raise ValueError(f"labels do not number exactly {k} non-empty clusters")
        outputs = _outputs(arrays, steps_layout, n, sizes, copy)
        return _encoded(frame.plan, frame.is_dense, out, *outputs)

    def cluster_sums(self) -> np.ndarray:
        """(K, 3) float64 coordinate sums per cluster of the last :meth:`encode` (the centroids
        before the division; they show a summation order that the float32 centroids may hide).
        For tests; synchronises."""
        k = self._clusters
        with self._device:
            sums = self._buffers.device("sums", max(3 * k, 1), np.float64)
            return sums[: 3 * k].get().reshape(k, 3)

    def _plan(self, cloud: RawCloud) -> tuple[XyzPlan, OutputLayout]:
        """``plan_xyz`` and ``output_layout`` of ``cloud``; for the layout of the last cloud
        planned (a sensor's frames share one) only the data size is checked again."""
        key = layout_key(cloud)
        if self._planned is not None and self._planned[0] == key:
            check_data_size(cloud)
            return self._planned[1], self._planned[2]
        plan, layout = plan_xyz(cloud), output_layout(cloud)
        self._planned = (key, plan, layout)
        return plan, layout

    def _encode_arrays(
        self, frame: _Frame, layout: FrameLayout, sizes: np.ndarray
    ) -> tuple[FrameArrays, list[Step]]:
        """The decoded frame's arrays with the encoding's, for ``sizes``' clusters, and the
        copies of their bounds (K; starts: the unlabelled points sort first; thread offsets)."""
        buffers, n, k = self._buffers, frame.plan.num_points, len(sizes)
        threads = cluster_threads(sizes)
        host = buffers.pinned("bounds", 4 * (2 * k + 2)).view(np.int32)
        host[0] = n - int(sizes.sum())
        host[1 : k + 1] = host[0] + np.cumsum(sizes)
        host[k + 1] = 0
        host[k + 2 :] = np.cumsum(threads)
        a = with_table_arrays(
            frame.arrays,  # type: ignore[arg-type]
            buffers.device,
            buffers.pinned,
            layout,
            k,
            int(threads.sum()),
        )
        a.host_words[2] = k
        bounds = [
            Copy(a.starts.data.ptr, host.ctypes.data, host.nbytes, HOST_TO_DEVICE),
            Copy(a.clusters.data.ptr, a.host_words[2:].ctypes.data, 4, HOST_TO_DEVICE),
        ]
        return a, bounds


def _outputs(
    a: FrameArrays, layout: FrameLayout, n: int, sizes: np.ndarray, copy: bool
) -> tuple[np.ndarray, np.ndarray, int, GroupedRecords | None]:
    """``(payload, table, implausible points, grouped records)`` of a frame of ``n`` points and
    ``sizes``' clusters from ``a``'s host twins, once the steps and copies are done; the payload
    and records copied out of them where ``copy``."""
    payload = a.host_out[: n * layout.out_step]
    table = a.host_table.view(CLUSTER_DTYPE)[: len(sizes)].copy()
    grouped = None
    if layout.group:
        count, step = int(sizes.sum()), layout.point_step
        records = a.host_grouped[: count * step].reshape(count, step)
        grouped = GroupedRecords(sizes.copy(), records.copy() if copy else records)
    return payload.copy() if copy else payload, table, int(a.host_words[1]), grouped


def _encoded(
    plan: XyzPlan,
    is_dense: bool,
    layout: OutputLayout,
    payload: np.ndarray,
    table: np.ndarray,
    implausible: int,
    grouped: GroupedRecords | None,
) -> EncodedFrame:
    """The encoding of the cloud ``plan`` planned: its labelled cloud in ``layout`` with
    ``payload`` as its data, the table, the implausible count and the grouped records."""
    labeled = RawCloud(
        fields=layout.fields,
        height=plan.height,
        width=plan.width,
        point_step=layout.point_step,
        row_step=plan.width * layout.point_step,
        data=payload,
        is_bigendian=plan.big_endian,
        is_dense=is_dense,
    )
    return EncodedFrame(labeled, table, implausible, grouped)
