"""The frame codec on the GPU: PointCloud2 bytes in, labelled cloud and cluster table out, bit for
bit what the CPU twin (``cpu/frame.py``) produces.

    >>> codec = CudaFrameCodec(device_id)
    >>> frame = codec.decode(cloud, FrameWindow(max_range=40.0))
    >>> result = clusterer.cluster(frame.points, mask=frame.mask)  # CuPy in, CuPy labels out
    >>> encoded = codec.encode(result.labels, result.cluster_sizes)
    >>> encoded.labeled  # == append_fields(cloud, {"cluster_id": ..., "rgb": ...})
    >>> codec.encode(result.labels, result.cluster_sizes, group=True).grouped  # records by cluster
    >>> codec.encode(result.labels, result.cluster_sizes, layout="compact").labeled  # x y z id

Per frame: the raw payload is copied once into a reused pinned staging buffer and once to the
device; x/y/z decoding, the plausibility and window mask and the ``use_height=false`` flattening
run in one kernel (:func:`plan_xyz` checks the layout on the host first, raising what
``read_xyz`` raises). The output payload (every input byte of each point, then ``cluster_id``
and ``rgb``) is written by one kernel and copied back once into a reused pinned buffer, together
with the cluster table (count, centroid, box per cluster) reduced on the GPU and the frame's
implausible-point count; asked to ``group``, it also gathers each cluster's input records in
cluster order (by the table's sorted keys, ``pc2_group.cu``) into one more pinned buffer, copied
back in the same way (what ``core/frame.py``'s ``group_records`` gives, byte for byte). Device
and pinned buffers only grow. ``encode`` ends with the frame's
only host synchronisation.

How the bytes come out identical (no tolerances anywhere):

* **Decode**: each field is read byte by byte at its offset in the cloud's byte order, carried
  as an exact double plus the bits of ``read_xyz``'s dtype; float32 <-> float64 conversions are
  done on the bits as x86 does them (CuPy compiles with ``-ftz=true``, which would flush
  subnormal float32 values; the GPU's ``cvt`` would also lose NaN payloads).
* **Mask**: plausibility (every ``|coordinate| <= max_coordinate``) and the window of
  ``clip_mask`` (``cpu/frame.py``) are defined in float64: ``x*x + y*y`` against
  ``min_range**2`` and ``max_range**2``, ``z`` against ``min_z``/``max_z``, ``y`` against
  ``min_y``/``max_y``. The kernel does the
  same double operations, each rounded once (``__dmul_rn``, ``__dadd_rn``, no FMA).
* **Payload**: ``append_fields``' layout (:func:`output_layout`) and ``cluster_rgb``'s HSV
  formula evaluated in float64 with the same operations; the compact layout
  (:func:`compact_layout`, ``pc2_encode_compact``) copies the x, y, z bytes as ``keep_fields``
  does.
* **Cluster table**: the package's own arithmetic (``cluster_stats.cluster_table``): the kernel
  sorts ``(label + 1) << 32 | index`` keys (index order within a cluster), sums leaves of
  ``SUM_LEAF`` points left to right, one thread each, then adds the leaf sums pairwise up a
  tree; minimum and maximum order -0 below +0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.cluster_stats import CLUSTER_DTYPE, SUM_LEAF
from ..core.frame import (
    DEFAULT_LABELED_LAYOUT,
    DecodedFrame,
    EncodedFrame,
    FrameWindow,
    GroupedRecords,
    LabeledLayout,
)
from ..pointcloud_io.pointcloud2 import (
    DATATYPES,
    FLOAT32,
    INT32,
    UINT8,
    XYZ,
    Field,
    PointCloud2Error,
    RawCloud,
    check_data_size,
    check_layout,
    require_fields,
)
from .buffers import GrowOnlyBuffers, grown
from .module import KernelSource

if TYPE_CHECKING:
    from ..core.config import ClusterConfig
    from ..core.result import ClusterResult

#: Threads per block of the element-wise kernels and of the cluster-table kernel.
THREADS = 256
TABLE_THREADS = 128
#: Bytes of one ``pc2_Partial`` (9 doubles).
PARTIAL_BYTES = 72

#: Fields replaced in the labelled cloud, in the order they are appended.
OUTPUT_COLUMNS = ("cluster_id", "rgb")

_H2D = 1  # cudaMemcpyHostToDevice
_D2H = 2  # cudaMemcpyDeviceToHost
_STATUS_WORDS = 2  # [error flags of encode, implausible points of decode]


# ---------------------------------------------------------------------------------------------
# Layout planning (host only)


@dataclass(frozen=True)
class XyzPlan:
    """Where and how x, y, z sit in a cloud, checked as ``read_xyz`` checks it.

    Attributes:
        height, width, point_step, row_step: the cloud's layout.
        nbytes: bytes of ``data`` the points occupy (``row_step * height``; 0 when empty).
        offsets: byte offsets of x, y, z within a point.
        datatypes: their PointField datatypes.
        big_endian: the cloud's byte order.
        dtype: ``read_xyz``'s result dtype (float64 where any of x, y, z needs it, else float32).
    """

    height: int
    width: int
    point_step: int
    row_step: int
    nbytes: int
    offsets: tuple[int, int, int]
    datatypes: tuple[int, int, int]
    big_endian: bool
    dtype: np.dtype

    @property
    def num_points(self) -> int:
        """``height * width``."""
        return self.height * self.width


@dataclass(frozen=True)
class OutputLayout:
    """The layout ``append_fields(cloud, {"cluster_id": ..., "rgb": ...})`` gives the output.

    Attributes:
        fields: the input fields not named cluster_id or rgb, then cluster_id (int32) and rgb
            (float32); in the compact layout x, y, z, then cluster_id.
        cluster_id_offset, rgb_offset: byte offsets of the two new fields (multiples of 4; no
            rgb in the compact layout: -1).
        point_step: bytes per output point (a multiple of 4); rows are not padded.
    """

    fields: tuple[Field, ...]
    cluster_id_offset: int
    rgb_offset: int
    point_step: int


def plan_xyz(cloud: RawCloud) -> XyzPlan:
    """The decode plan of ``cloud``: ``read_xyz``'s checks in its order, without reading data.

    Raises:
        PointCloud2Error: what ``read_xyz`` raises for this cloud (same kind and message).
    """
    packed = _packed_float32_offset(cloud)
    if packed is not None:
        check_layout(cloud)
        offsets = (packed, packed + 4, packed + 8)
        datatypes = (FLOAT32, FLOAT32, FLOAT32)
    else:
        require_fields(cloud, XYZ)
        check_layout(cloud)  # a non-empty cloud's fields all have known types, counts >= 1
        x, y, z = (cloud.field(name) for name in XYZ)
        for field in (x, y, z):
            if field.count != 1:  # type: ignore[union-attr]
                count = max(field.count, 0)  # type: ignore[union-attr]
                raise PointCloud2Error(
                    "unsupported",
                    f"field {field.name} has count {count}, not 1",  # type: ignore[union-attr]
                )
        offsets = (x.offset, y.offset, z.offset)  # type: ignore[union-attr]
        datatypes = (x.datatype, y.datatype, z.datatype)  # type: ignore[union-attr]
    bases = (DATATYPES.get(t, DATATYPES[UINT8]) for t in datatypes)  # known unless empty
    n = cloud.num_points
    return XyzPlan(
        height=cloud.height,
        width=cloud.width,
        point_step=cloud.point_step,
        row_step=cloud.row_step,
        nbytes=cloud.row_step * cloud.height if n else 0,
        offsets=offsets,
        datatypes=datatypes,
        big_endian=bool(cloud.is_bigendian),
        dtype=np.dtype(np.result_type(np.float32, *bases)),
    )


def output_layout(cloud: RawCloud) -> OutputLayout:
    """The labelled cloud's layout, as ``append_fields`` lays out ``cluster_id`` and ``rgb``."""
    fields = [f for f in cloud.fields if f.name not in OUTPUT_COLUMNS]
    ends = (
        f.offset + DATATYPES.get(f.datatype, DATATYPES[UINT8]).itemsize * f.count
        for f in cloud.fields
    )
    offset = max(cloud.point_step, max(ends, default=0))
    cluster_id = _align(offset, 4)
    rgb = _align(cluster_id + 4, 4)
    fields += [Field("cluster_id", cluster_id, INT32), Field("rgb", rgb, FLOAT32)]
    return OutputLayout(tuple(fields), cluster_id, rgb, _align(rgb + 4, 4))


def compact_layout(plan: XyzPlan) -> OutputLayout:
    """The compact labelled cloud's layout (``keep_fields(cloud, XYZ)`` then ``append_fields``
    of cluster_id): x, y, z packed from byte 0 in their input datatypes, cluster_id 4-aligned."""
    fields, offset = [], 0
    for name, datatype in zip(XYZ, plan.datatypes, strict=True):
        fields.append(Field(name, offset, datatype))
        offset += DATATYPES.get(datatype, DATATYPES[UINT8]).itemsize  # known unless empty
    cluster_id = _align(offset, 4)
    fields.append(Field("cluster_id", cluster_id, INT32))
    return OutputLayout(tuple(fields), cluster_id, -1, cluster_id + 4)


def layout_key(cloud: RawCloud) -> tuple[Any, ...]:
    """What :func:`plan_xyz` and :func:`output_layout` read of ``cloud`` besides the size of its
    data (``check_data_size``): clouds with equal keys have equal plans and output layouts."""
    return (
        cloud.fields,
        cloud.height,
        cloud.width,
        cloud.point_step,
        cloud.row_step,
        bool(cloud.is_bigendian),
    )


def cluster_threads(sizes: np.ndarray) -> np.ndarray:
    """Threads of the cluster-table kernel per cluster: one per leaf of ``SUM_LEAF`` points."""
    return -(-np.asarray(sizes, dtype=np.int64) // SUM_LEAF)


def decode_settings(
    layout: Any, coords_f64: bool, window: FrameWindow, write_table: bool
) -> tuple[Any, ...]:
    """``pc2_decode``'s (and ``pc2_decode_sized``'s) arguments from ``point_step`` to
    ``write_table``, for a cloud ``layout`` (an :class:`XyzPlan`, or anything with its
    ``point_step``, ``offsets``, ``datatypes`` and ``big_endian``)."""
    min_range_sq, max_range_sq = window.range_bounds_sq()
    fields = zip(layout.offsets, layout.datatypes, strict=True)
    return (
        np.int32(layout.point_step),
        *(np.int32(value) for field in fields for value in field),
        np.int32(layout.big_endian),
        np.int32(coords_f64),
        np.int32(window.use_height),
        *(np.float64(v) for v in (min_range_sq, max_range_sq, window.min_z, window.max_z)),
        *(np.float64(v) for v in (window.min_y, window.max_y, window.max_coordinate)),
        np.int32(write_table),
    )


def compact_spans(offsets: tuple[int, ...], datatypes: tuple[int, ...]) -> tuple[np.int32, ...]:
    """``pc2_encode_compact``'s x, y, z spans: each coordinate's offset and byte size."""
    spans = (
        (offset, DATATYPES.get(datatype, DATATYPES[UINT8]).itemsize)
        for offset, datatype in zip(offsets, datatypes, strict=True)
    )
    return tuple(np.int32(value) for span in spans for value in span)


def _packed_float32_offset(cloud: RawCloud) -> int | None:
    """Offset of x when ``read_xyz`` takes its packed float32 path, else None."""
    fields = [cloud.field(name) for name in XYZ]
    if any(f is None or f.datatype != FLOAT32 or f.count != 1 for f in fields):
        return None
    offsets = [f.offset for f in fields]  # type: ignore[union-attr]
    x = offsets[0]
    if offsets != [x, x + 4, x + 8] or x < 0 or x + 12 > cloud.point_step:
        return None
    return x


def _align(offset: int, size: int) -> int:
    return -(-offset // size) * size


# ---------------------------------------------------------------------------------------------
# The GPU codec


@dataclass(frozen=True)
class _Frame:
    """The last decoded frame: its plans, device payload and the table's coordinates."""

    plan: XyzPlan
    layout: OutputLayout
    is_dense: bool
    raw: Any
    coords: Any


#: Label bits sorted per radix pass of a frame graph's table sort (``kernels/pc2_sort.cu``).
RADIX_BITS = 8
#: Keys per block of those passes (one per thread).
SORT_TILE = 1024

#: The codec's kernels: their sources (after the package's ``common.cuh``) and the constants
#: they are compiled with; the ``*_sized`` kernels and ``pc2_sort.cu`` serve the frame graphs
#: (``frame_graph.py``).
KERNEL_FILES = ("common.cuh", "pointcloud2.cu", "pc2_group.cu", "pc2_sort.cu")
KERNEL_CONSTANTS = (
    ("PC2_SUM_LEAF", SUM_LEAF),
    ("PC2_RADIX_BITS", RADIX_BITS),
    ("PC2_SORT_TILE", SORT_TILE),
)
SOURCE = KernelSource("pointcloud2", KERNEL_FILES, KERNEL_CONSTANTS)
KERNELS = (
    "pc2_decode",
    "pc2_encode",
    "pc2_encode_compact",
    "pc2_table_f32",
    "pc2_table_f64",
    "pc2_group_records",
)


class CudaFrameCodec:
    """Decodes PointCloud2 payloads and encodes the labelled output on one CUDA device.

    Buffers (device and pinned host) are kept between frames and only grow. The frame returned
    by :meth:`decode` is a view of them, valid until the next ``decode``; :meth:`encode`'s
    labelled cloud is one too unless it is asked for a copy. Work is queued on CuPy's current
    stream, where the clusterer queues its own. One codec serves one thread.
    """

    #: Points of the cloud the frame layer runs once at start-up: a full HDL-64E sweep, so the
    #: memory pool already holds frame-sized blocks when the first frame arrives.
    warm_up_points = 131072

    def __init__(self, device_id: int = 0) -> None:
        """Fetch the kernels (compiled once per device and process)."""
        import cupy

        from .module import get_kernel

        self._cp = cupy
        self.device_id = device_id
        self._device = cupy.cuda.Device(device_id)
        with self._device:
            self._kernels = {name: get_kernel(SOURCE, name, device_id) for name in KERNELS}
            self._input_done = cupy.cuda.Event(block=False, disable_timing=True)
        self._buffers = GrowOnlyBuffers()
        self._generation = 0
        self._frame: _Frame | None = None
        self._clusters = 0
        #: the last layout planned: its key (:func:`layout_key`), plan and output layout
        self._planned: tuple[tuple[Any, ...], XyzPlan, OutputLayout] | None = None

    def process_whole(
        self,
        cloud: RawCloud,
        config: ClusterConfig,
        window: FrameWindow,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
        copy: bool = True,
        group: bool = False,
    ) -> tuple[EncodedFrame, ClusterResult] | None:
        """None: this codec runs frames step by step; ``frame_graph.GraphFrameCodec`` runs them
        as one graph launch where it can."""
        return None

    def decode(self, cloud: RawCloud, window: FrameWindow) -> DecodedFrame:
        """Copy ``cloud.data`` to the device and decode it for clustering.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (as ``read_xyz`` raises).
        """
        cupy = self._cp
        plan, layout = self._plan(cloud)
        n = plan.num_points
        coord_dtype = plan.dtype
        with self._device:
            stream = cupy.cuda.get_current_stream()
            status = self._buffers.device("status", _STATUS_WORDS, np.int32)
            cupy.cuda.runtime.memsetAsync(status.data.ptr, 0, status.nbytes, stream.ptr)
            if n == 0:
                self._frame = _Frame(plan, layout, bool(cloud.is_dense), None, None)
                return DecodedFrame(
                    cupy.empty((0, 3), dtype=cupy.float32), cupy.empty(0, dtype=cupy.bool_)
                )
            self._input_done.synchronize()  # the staging buffer is free again
            staging = self._buffers.pinned("input", plan.nbytes)
            np.copyto(staging, np.frombuffer(cloud.data, dtype=np.uint8, count=plan.nbytes))
            raw = self._buffers.device("raw", plan.nbytes, np.uint8)
            cupy.cuda.runtime.memcpyAsync(
                raw.data.ptr, staging.ctypes.data, plan.nbytes, _H2D, stream.ptr
            )
            self._input_done.record(stream)
            points = self._buffers.device("points", 3 * n, np.float32)
            mask = self._buffers.device("mask", n, np.bool_)
            write_table = coord_dtype != np.float32 or not window.use_height
            if write_table:
                coords = self._buffers.device(f"coords_{coord_dtype.name}", 3 * n, coord_dtype)
            else:
                coords = points  # the float32 table coordinates are the points themselves
            f64 = coord_dtype == np.float64
            table32 = self._dummy(np.float32) if f64 else coords
            table64 = coords if f64 else self._dummy(np.float64)
            self._kernels["pc2_decode"](
                _blocks(n),
                (THREADS,),
                (
                    raw,
                    np.int32(n),
                    np.int32(plan.width),
                    np.int64(plan.row_step),
                    *decode_settings(plan, f64, window, write_table),
                    points,
                    mask,
                    table32,
                    table64,
                    status,
                ),
            )
            self._frame = _Frame(plan, layout, bool(cloud.is_dense), raw, coords)
            return DecodedFrame(points.reshape(n, 3), mask)

    def _plan(self, cloud: RawCloud) -> tuple[XyzPlan, OutputLayout]:
        """:func:`plan_xyz` and :func:`output_layout` of ``cloud``; for the layout of the last
        cloud planned (a sensor's frames share one) only the data size is checked again."""
        key = layout_key(cloud)
        if self._planned is not None and self._planned[0] == key:
            check_data_size(cloud)
            return self._planned[1], self._planned[2]
        plan, layout = plan_xyz(cloud), output_layout(cloud)
        self._planned = (key, plan, layout)
        return plan, layout

    def encode(
        self,
        labels: Any,
        sizes: Any,
        copy: bool = True,
        group: bool = False,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
    ) -> EncodedFrame:
        """The labelled cloud, cluster table and implausible count of the last decoded frame.

        Args:
            labels: (N,) int labels (CuPy, or NumPy), -1 for points in no kept cluster.
            sizes: (K,) host array, ``sizes[k]`` points labelled k (``ClusterResult.
                cluster_sizes``).
            copy: copy the labelled payload (and the grouped records) out of the pinned buffers
                the next ``encode`` reuses (about 0.3 ms for 120 k points); False hands out views
                of them, valid until then.
            group: also gather each cluster's input records (``EncodedFrame.grouped``).
            layout: the labelled cloud's (``core.frame.LABELED_LAYOUTS``).

        Returns:
            ``append_fields(cloud, {"cluster_id": labels, "rgb": pack_rgb(cluster_rgb(
            labels))})`` (``compact``: ``append_fields(keep_fields(cloud, XYZ), {"cluster_id":
            labels})``) and ``cluster_table(read_xyz(cloud), labels, K)`` (a copy); with
            ``group``, ``group_records(point_bytes(cloud), labels, K)`` (``core/frame.py``).

        Raises:
            ValueError: labels or sizes of the wrong shape, labels below -1, or sizes that are
                not the label counts of clusters ``0..K-1``.
        """
        cupy = self._cp
        frame = self._frame
        if frame is None:
            raise RuntimeError("encode() needs a decode() first")
        n = frame.plan.num_points
        sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
        k = int(sizes.shape[0])
        if k and (int(sizes.min()) < 1 or int(sizes.sum()) > n):
            raise ValueError(f"labels do not number exactly {k} non-empty clusters")
        out_layout = compact_layout(frame.plan) if layout == "compact" else frame.layout
        out_bytes = n * out_layout.point_step
        table_words = 11 * k  # CLUSTER_DTYPE: 11 four-byte fields
        with self._device:
            labels = cupy.asarray(labels)
            if labels.shape != (n,):
                raise ValueError(f"labels have shape {labels.shape}, expected ({n},)")
            if labels.dtype != cupy.int32:
                labels = labels.astype(cupy.int32)
            stream = cupy.cuda.get_current_stream()
            status = self._buffers.device("status", _STATUS_WORDS, np.int32)
            err = status[0:1]
            cupy.cuda.runtime.memsetAsync(err.data.ptr, 0, err.nbytes, stream.ptr)
            self._clusters = k
            if n:
                keys = self._buffers.device("keys", n, np.uint64)
                out = self._buffers.device("out", out_bytes // 4, np.uint32)
                self._encode_payload(frame, out_layout, labels, k, out, keys, err)
                if k:
                    self._table(frame, sizes, keys, err, stream)
                payload_host = self._buffers.pinned("output", out_bytes)
                cupy.cuda.runtime.memcpyAsync(
                    payload_host.ctypes.data, out.data.ptr, out_bytes, _D2H, stream.ptr
                )
            else:
                payload_host = self._buffers.pinned("output", 0)
            grouped_host = self._group(frame, sizes, keys if n else None, stream) if group else None
            table_host = self._buffers.pinned("table", 4 * (table_words + _STATUS_WORDS)).view(
                np.uint32
            )
            if table_words:
                table = self._buffers.device("table", table_words, np.uint32)
                cupy.cuda.runtime.memcpyAsync(
                    table_host.ctypes.data, table.data.ptr, 4 * table_words, _D2H, stream.ptr
                )
            status_host = table_host[table_words:].view(np.int32)
            cupy.cuda.runtime.memcpyAsync(
                status_host.ctypes.data, status.data.ptr, status.nbytes, _D2H, stream.ptr
            )
            stream.synchronize()
            flags_set = int(status_host[0])
            if flags_set & 2:
                raise ValueError("labels below -1 (only -1 marks points in no cluster)")
            if flags_set:
                raise ValueError(f"labels do not number exactly {k} non-empty clusters")
            payload = payload_host[:out_bytes]
            grouped = None
            if grouped_host is not None:
                records = grouped_host.copy() if copy else grouped_host
                grouped = GroupedRecords(counts=sizes.copy(), records=records)
            return EncodedFrame(
                labeled=self._output_cloud(
                    frame.plan, frame.is_dense, out_layout, payload.copy() if copy else payload
                ),
                table=table_host[:table_words].view(CLUSTER_DTYPE).copy(),
                implausible_points=int(status_host[1]),
                grouped=grouped,
            )

    def _encode_payload(
        self,
        frame: _Frame,
        layout: OutputLayout,
        labels: Any,
        k: int,
        out: Any,
        keys: Any,
        err: Any,
    ) -> None:
        """Queue the labelled payload in ``layout`` (full: ``pc2_encode``; compact:
        ``pc2_encode_compact``) and the table's sort keys."""
        plan = frame.plan
        shape = (
            frame.raw,
            np.int32(plan.num_points),
            np.int32(plan.width),
            np.int64(plan.row_step),
            np.int32(plan.point_step),
            np.int32(layout.point_step // 4),
            np.int32(layout.cluster_id_offset // 4),
        )
        if layout.rgb_offset >= 0:
            name = "pc2_encode"
            middle: tuple[Any, ...] = (np.int32(layout.rgb_offset // 4), np.int32(plan.big_endian))
        else:
            name = "pc2_encode_compact"
            middle = (np.int32(plan.big_endian), *compact_spans(plan.offsets, plan.datatypes))
        self._kernels[name](
            _blocks(plan.num_points * (layout.point_step // 4)),
            (THREADS,),
            (*shape, *middle, labels, np.int32(k), out, keys, err),
        )

    def _output_cloud(
        self, plan: XyzPlan, is_dense: bool, layout: OutputLayout, payload: np.ndarray
    ) -> RawCloud:
        """The labelled cloud of the cloud ``plan`` planned, in ``layout``, with ``payload`` as
        its data."""
        return RawCloud(
            fields=layout.fields,
            height=plan.height,
            width=plan.width,
            point_step=layout.point_step,
            row_step=plan.width * layout.point_step,
            data=payload,
            is_bigendian=plan.big_endian,
            is_dense=is_dense,
        )

    def cluster_sums(self) -> np.ndarray:
        """(K, 3) float64 coordinate sums per cluster of the last :meth:`encode` (the centroids
        before the division; they show a summation order that the float32 centroids may hide).
        For tests; synchronises."""
        k = self._clusters
        with self._device:
            return (
                self._buffers.device("sums", max(3 * k, 1), np.float64)[: 3 * k].get().reshape(k, 3)
            )

    # -- steps and buffers -------------------------------------------------------------------

    def _table(self, frame: _Frame, sizes: np.ndarray, keys: Any, err: Any, stream: Any) -> None:
        """Queue the cluster table: sort the keys, then one thread per leaf of the sums' tree."""
        cupy = self._cp
        k = int(sizes.shape[0])
        n = frame.plan.num_points
        threads = cluster_threads(sizes)
        total_threads = int(threads.sum())
        # meta: starts (K + 1: the unlabelled points sort first), thread offsets (K + 1)
        meta_host = self._buffers.pinned("meta", 4 * (2 * k + 2)).view(np.int32)
        starts = meta_host[: k + 1]
        starts[0] = n - int(sizes.sum())
        starts[1:] = starts[0] + np.cumsum(sizes)
        offsets = meta_host[k + 1 :]
        offsets[0] = 0
        offsets[1:] = np.cumsum(threads)
        meta = self._buffers.device("meta", 2 * k + 2, np.int32)
        cupy.cuda.runtime.memcpyAsync(
            meta.data.ptr, meta_host.ctypes.data, meta_host.nbytes, _H2D, stream.ptr
        )
        keys.sort()
        slots = self._buffers.device("slots", 2 * total_threads * PARTIAL_BYTES, np.uint8)
        flags = self._flags(total_threads)
        kernel = "pc2_table_f32" if frame.coords.dtype == np.float32 else "pc2_table_f64"
        self._kernels[kernel](
            _blocks(total_threads, TABLE_THREADS),
            (TABLE_THREADS,),
            (
                keys,
                frame.coords,
                np.int32(k),
                meta[: k + 1],
                meta[k + 1 :],
                slots,
                flags,
                np.int32(self._generation),
                self._buffers.device("table", 11 * k, np.uint32),
                self._buffers.device("sums", 3 * k, np.float64),
                err,
            ),
        )

    def _group(self, frame: _Frame, sizes: np.ndarray, keys: Any, stream: Any) -> np.ndarray:
        """Queue the gather of the clustered points' input records in cluster order (by the keys
        :meth:`_table` sorted) and their copy into a pinned buffer; returns that buffer's
        (records, point_step) view, filled once the stream is synchronised."""
        cupy = self._cp
        plan = frame.plan
        step = max(plan.point_step, 0)
        count = int(sizes.sum())
        nbytes = count * step
        host = self._buffers.pinned("grouped", nbytes)
        if nbytes:
            device = self._buffers.device("grouped", nbytes, np.uint8)
            unit = 4 if step % 4 == 0 and plan.row_step % 4 == 0 else 1
            self._kernels["pc2_group_records"](
                _blocks(nbytes // unit),
                (THREADS,),
                (
                    frame.raw,
                    keys,
                    np.int64(plan.num_points - count),
                    np.int64(count),
                    np.int32(plan.width),
                    np.int64(plan.row_step),
                    np.int32(step),
                    np.int32(unit),
                    device,
                ),
            )
            cupy.cuda.runtime.memcpyAsync(
                host.ctypes.data, device.data.ptr, nbytes, _D2H, stream.ptr
            )
        return host.reshape(count, step)

    def _dummy(self, dtype: Any) -> Any:
        return self._buffers.device(f"dummy_{np.dtype(dtype).name}", 1, dtype)

    def _flags(self, count: int) -> Any:
        """The node flags of the cluster-table kernel and this frame's generation stamp."""
        cupy = self._cp
        flags = self._buffers.device_arrays.get("flags")
        if flags is None or flags.size < count or self._generation >= 2**31 - 2:
            if flags is None or flags.size < count:
                flags = cupy.zeros(grown(4 * count) // 4, dtype=cupy.int32)
                self._buffers.device_arrays["flags"] = flags
            else:
                flags.fill(0)
            self._generation = 0
        self._generation += 1
        return flags


def _blocks(count: int, threads: int = THREADS) -> tuple[int]:
    return (max(1, (count + threads - 1) // threads),)
