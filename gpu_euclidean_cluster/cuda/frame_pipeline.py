"""The node's frame on the GPU: PointCloud2 bytes in, labelled payload and cluster table out, bit
for bit what the NumPy path of ``FrameProcessor.process`` (``ros/frame_processor.py``) produces.

    >>> pipeline = GpuFramePipeline(device_id)
    >>> frame = pipeline.decode(cloud, FrameWindow(max_range=40.0, max_coordinate=1e6))
    >>> result = clusterer.cluster(frame.points, mask=frame.mask)  # CuPy in, CuPy labels out
    >>> encoded = pipeline.encode(result.labels, result.cluster_sizes)
    >>> labeled = pipeline.output_cloud(encoded.payload)  # == append_fields(cloud, {...})

Per frame: the raw payload is copied once into a reused pinned staging buffer and once to the
device; x/y/z decoding, the plausibility and window mask and the ``use_height=false`` flattening
run in one kernel (:func:`plan_xyz` checks the layout on the host first, raising what
``read_xyz`` raises). The output payload (every input byte of each point, then ``cluster_id``
and ``rgb``) is written by one kernel and copied back once into a reused pinned buffer, together
with the cluster table (count, centroid, box per cluster) reduced on the GPU and the frame's
implausible-point count. Device and pinned buffers only grow. ``encode`` ends with the frame's
only host synchronisation.

How the bytes come out identical (no tolerances anywhere):

* **Decode**: each field is read byte by byte at its offset in the cloud's byte order, carried
  as an exact double plus the bits of ``read_xyz``'s dtype; float32 <-> float64 conversions are
  done on the bits as x86 does them (CuPy compiles with ``-ftz=true``, which would flush
  subnormal float32 values; the GPU's ``cvt`` would also lose NaN payloads).
* **Mask**: plausibility (every ``|coordinate| <= max_coordinate``) and the window of
  ``clip_mask`` are defined in float64 on the CPU side: ``x*x + y*y`` against ``min_range**2``
  and ``max_range**2``, ``z`` against ``min_z``/``max_z``. The kernel does the same double
  operations, each rounded once (``__dmul_rn``, ``__dadd_rn``, no FMA).
* **Payload**: ``append_fields``' layout (:func:`output_layout`) and ``cluster_rgb``'s HSV
  formula evaluated in float64 with the same operations.
* **Cluster table**: ``cluster_table`` sorts the points stably by label and reduces with
  ``np.add/minimum/maximum.reduceat``. The kernel sorts ``(label + 1) << 32 | index`` keys (the
  stable order), sums each cluster as NumPy does (first element, then NumPy's pairwise sum of
  the rest: leaves of <= 128 elements with 8 accumulators, split points at n/2 rounded down to a
  multiple of 8), and settles +0/-0 ties of the minimum/maximum as NumPy's unrolled loops do.
  :func:`detect_numpy_reductions` probes once which variant this NumPy uses.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ..core.cluster_stats import CLUSTER_DTYPE
from ..pointcloud_io.pointcloud2 import (
    DATATYPES,
    FLOAT32,
    INT32,
    UINT8,
    XYZ,
    Field,
    PointCloud2Error,
    RawCloud,
    check_layout,
)

log = logging.getLogger(__name__)

KERNEL_DIR = Path(__file__).with_name("kernels")
#: Compiled together, in this order, into this module's own RawModule.
SOURCES = ("common.cuh", "pointcloud2.cu")
NVRTC_OPTIONS = ("--std=c++17", "--fmad=false")

#: Threads per block of the element-wise kernels and of the cluster-table kernel.
THREADS = 256
TABLE_THREADS = 128

#: NumPy's pairwise-summation block and the positions each cluster-table thread starts from
#: (``PC2_PW_BLOCK`` and ``PC2_TABLE_CHUNK`` in pointcloud2.cu).
PAIRWISE_BLOCK = 128
TABLE_CHUNK = 64
#: Bytes of one ``pc2_Partial`` (9 doubles, 6 ints).
PARTIAL_BYTES = 96

#: Fields replaced in the labelled cloud, in the order they are appended.
OUTPUT_COLUMNS = ("cluster_id", "rgb")

#: How ``np.minimum/np.maximum`` settle a tie between +0 and -0 (``tie_mode`` of the kernel):
#: 0: the second operand of each step wins (x86 SSE minsd/maxsd: NumPy's C loops on x86),
#: 1: the first operand wins (C ``a <= b ? a : b``: NumPy's Highway loops),
#: 2: -0 < +0 (IEEE 754-2019 minimum/maximum: aarch64 fmin/fmax).
TIE_MODES = (0, 1, 2)

_H2D = 1  # cudaMemcpyHostToDevice
_D2H = 2  # cudaMemcpyDeviceToHost
_STATUS_WORDS = 2  # [error flags of encode, implausible points of decode]


# ---------------------------------------------------------------------------------------------
# What the decode kernel masks


@dataclass(frozen=True)
class FrameWindow:
    """The points a frame clusters: plausible ones inside a range and height window.

    The defaults exclude nothing but non-finite points. ``ros/frame_processor.py`` builds one from
    the node's settings; its ``clip_mask`` and plausibility test define the semantics.

    Attributes:
        min_range, max_range: horizontal distance window (m, inclusive), compared squared in
            float64 (:meth:`range_bounds_sq`); ``min_range`` >= 0.
        min_z, max_z: height window (m, inclusive), compared in float64.
        max_coordinate: a point with any ``|coordinate|`` above it (float64) is implausible:
            not clustered, and counted when it is finite.
        use_height: cluster on x, y, z (True) or with z set to +0 where finite (False).
    """

    min_range: float = 0.0
    max_range: float = float("inf")
    min_z: float = float("-inf")
    max_z: float = float("inf")
    max_coordinate: float = float("inf")
    use_height: bool = True

    def range_bounds_sq(self) -> tuple[float, float]:
        """``(min_range**2, max_range**2)`` as Python floats (a square beyond float64 is inf)."""
        low, high = float(self.min_range), float(self.max_range)
        return low * low, high * high


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
            (float32).
        cluster_id_offset, rgb_offset: byte offsets of the two new fields (multiples of 4).
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
        missing = [name for name in XYZ if cloud.field(name) is None]
        if missing:
            present = ", ".join(f.name for f in cloud.fields) or "none"
            raise PointCloud2Error(
                "missing_fields", f"missing field(s) {', '.join(missing)} (cloud has: {present})"
            )
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


def cluster_threads(sizes: np.ndarray) -> np.ndarray:
    """Threads of the cluster-table kernel per cluster: 1 when the points after the first fit one
    pairwise-summation block, else one per 64 of them."""
    rest = np.asarray(sizes, dtype=np.int64) - 1
    return np.where(rest <= PAIRWISE_BLOCK, 1, -(-rest // TABLE_CHUNK))


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
# How this NumPy reduces what cluster_table reduces


@dataclass(frozen=True)
class NumpyReductions:
    """The details of NumPy's reductions that the cluster-table kernel follows.

    Attributes:
        pairwise_zero: the value NumPy's pairwise sum of fewer than 8 elements starts from
            (-0.0 in NumPy 2, +0.0 before; it decides the sign of an all-zero sum).
        tie_mode: how ``np.minimum/np.maximum.reduceat`` over an (N, 3) array settle +0 against
            -0 (:data:`TIE_MODES`).
        minmax_modelled: one of the tie modes reproduced every probe.
    """

    pairwise_zero: float
    tie_mode: int
    minmax_modelled: bool


def minmax_priority(m: int) -> np.ndarray:
    """``pc2_minmax_priority`` for a reduction over 1 + m elements (the copied first one first):
    among equal extremes (+0 and -0), NumPy's unrolled minimum/maximum returns the element of
    highest priority."""
    r = np.arange(m)
    blocks = m // 8
    rest = np.where(r < 8 * blocks, 1 + (r % 8) * blocks + r // 8, 1 + r)
    return np.concatenate(([0], rest))


def priority_extreme(values: np.ndarray, minimum: bool, tie_mode: int = 0) -> float:
    """The element of ``values`` (one cluster's coordinates in index order) the kernel picks
    for the minimum (or maximum) under ``tie_mode``."""
    extreme = values.min() if minimum else values.max()
    tied = np.flatnonzero(values == extreme)
    if tie_mode == 2:
        if extreme != 0:
            return float(extreme)
        negative = np.signbit(values[tied])
        return -0.0 if (negative.any() if minimum else negative.all()) else 0.0
    priority = minmax_priority(len(values) - 1)[tied]
    return float(values[tied[np.argmax(priority) if tie_mode == 0 else np.argmin(priority)]])


@cache
def detect_numpy_reductions() -> NumpyReductions:
    """Probe how this NumPy reduces (N, 3) float64 arrays as ``cluster_table`` does (logs a
    warning when no tie mode reproduces its minimum/maximum of signed zeros)."""
    zero = float(np.add.reduceat(np.full((2, 3), -0.0), [0], axis=0)[0, 0])
    rng = np.random.default_rng(0)
    matching = set(TIE_MODES)
    for size in (2, 3, 8, 9, 16, 17, 40, 77, 130):
        values = np.where(rng.random((size, 3)) < 0.5, -0.0, 0.0)
        values[rng.random((size, 3)) < 0.1] = 1.0
        for minimum, ufunc in ((True, np.minimum), (False, np.maximum)):
            got = ufunc.reduceat(values, [0], axis=0)[0]
            for mode in list(matching):
                want = [priority_extreme(values[:, k], minimum, mode) for k in range(3)]
                if not np.array_equal(np.signbit(got), np.signbit(want)):
                    matching.discard(mode)
    if not matching:
        log.warning(
            "np.minimum/np.maximum settle +0 against -0 in none of the modelled ways: a cluster "
            "box whose bound is zero may differ from the CPU's in the sign of that zero"
        )
    return NumpyReductions(zero, min(matching, default=0), bool(matching))


# ---------------------------------------------------------------------------------------------
# The GPU pipeline


@dataclass(frozen=True)
class DecodedFrame:
    """What :meth:`GpuFramePipeline.decode` hands to the clusterer (views of reused device
    buffers, valid until the next ``decode``).

    Attributes:
        points: (N, 3) float32 CuPy array, z flattened to +0 where finite unless ``use_height``.
        mask: (N,) bool CuPy array: plausible and inside the window.
    """

    points: Any
    mask: Any


@dataclass(frozen=True)
class EncodedFrame:
    """What :meth:`GpuFramePipeline.encode` returns.

    Attributes:
        payload: uint8 bytes of the labelled cloud (layout: :meth:`GpuFramePipeline.
            output_cloud`); a view of a reused pinned buffer, valid until the next ``encode``.
        table: (K,) :data:`~..core.cluster_stats.CLUSTER_DTYPE` rows, ``cluster_table``'s; also a
            view of a reused pinned buffer.
        implausible_points: finite points of the decoded frame beyond ``max_coordinate``.
    """

    payload: np.ndarray
    table: np.ndarray
    implausible_points: int


@dataclass(frozen=True)
class _Frame:
    """The last decoded frame: its plans, device payload and the table's coordinates."""

    plan: XyzPlan
    layout: OutputLayout
    is_dense: bool
    raw: Any
    coords: Any


def kernel_source() -> str:
    """``common.cuh`` of the package's kernels, then ``pointcloud2.cu``."""
    return "\n".join((KERNEL_DIR / name).read_text() for name in SOURCES)


@cache
def frame_module(device_id: int) -> Any:
    """This module's compiled kernels for ``device_id`` (compiled once per process; CuPy also
    caches the binary on disk)."""
    import cupy

    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=kernel_source(), options=NVRTC_OPTIONS)
        module.compile()
        return module


class GpuFramePipeline:
    """Decodes PointCloud2 payloads and encodes the labelled output on one CUDA device.

    Buffers (device and pinned host) are kept between frames and only grow. Arrays returned by
    :meth:`decode` and :meth:`encode` are views of them: valid until the next call of the same
    method. Work is queued on CuPy's current stream, where the clusterer queues its own. One
    pipeline serves one thread.
    """

    def __init__(self, device_id: int = 0) -> None:
        """Compile the kernels (once per device and process) and probe NumPy's reductions."""
        import cupy

        self._cp = cupy
        self.device_id = device_id
        self._device = cupy.cuda.Device(device_id)
        self.reductions = detect_numpy_reductions()
        with self._device:
            module = frame_module(device_id)
            self._kernels = {
                name: module.get_function(name)
                for name in ("pc2_decode", "pc2_encode", "pc2_table_f32", "pc2_table_f64")
            }
            self._input_done = cupy.cuda.Event(block=False, disable_timing=True)
        self._device_buffers: dict[str, Any] = {}
        self._pinned_buffers: dict[str, np.ndarray] = {}
        self._generation = 0
        self._frame: _Frame | None = None
        self._clusters = 0

    def decode(self, cloud: RawCloud, window: FrameWindow | None = None) -> DecodedFrame:
        """Copy ``cloud.data`` to the device and decode it for clustering.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (as ``read_xyz`` raises).
        """
        cupy = self._cp
        window = window or FrameWindow()
        plan = plan_xyz(cloud)
        layout = output_layout(cloud)
        n = plan.num_points
        coord_dtype = plan.dtype
        with self._device:
            stream = cupy.cuda.get_current_stream()
            status = self._buffer("status", _STATUS_WORDS, np.int32)
            cupy.cuda.runtime.memsetAsync(status.data.ptr, 0, status.nbytes, stream.ptr)
            if n == 0:
                self._frame = _Frame(plan, layout, bool(cloud.is_dense), None, None)
                return DecodedFrame(
                    cupy.empty((0, 3), dtype=cupy.float32), cupy.empty(0, dtype=cupy.bool_)
                )
            self._input_done.synchronize()  # the staging buffer is free again
            staging = self._pinned("input", plan.nbytes)
            np.copyto(staging, np.frombuffer(cloud.data, dtype=np.uint8, count=plan.nbytes))
            raw = self._buffer("raw", plan.nbytes, np.uint8)
            cupy.cuda.runtime.memcpyAsync(
                raw.data.ptr, staging.ctypes.data, plan.nbytes, _H2D, stream.ptr
            )
            self._input_done.record(stream)
            points = self._buffer("points", 3 * n, np.float32)
            mask = self._buffer("mask", n, np.bool_)
            write_table = coord_dtype != np.float32 or not window.use_height
            if write_table:
                coords = self._buffer(f"coords_{coord_dtype.name}", 3 * n, coord_dtype)
            else:
                coords = points  # the float32 table coordinates are the points themselves
            f64 = coord_dtype == np.float64
            table32 = self._dummy(np.float32) if f64 else coords
            table64 = coords if f64 else self._dummy(np.float64)
            min_range_sq, max_range_sq = window.range_bounds_sq()
            self._kernels["pc2_decode"](
                _blocks(n),
                (THREADS,),
                (
                    raw,
                    np.int32(n),
                    np.int32(plan.width),
                    np.int64(plan.row_step),
                    np.int32(plan.point_step),
                    np.int32(plan.offsets[0]),
                    np.int32(plan.datatypes[0]),
                    np.int32(plan.offsets[1]),
                    np.int32(plan.datatypes[1]),
                    np.int32(plan.offsets[2]),
                    np.int32(plan.datatypes[2]),
                    np.int32(plan.big_endian),
                    np.int32(f64),
                    np.int32(window.use_height),
                    np.float64(min_range_sq),
                    np.float64(max_range_sq),
                    np.float64(window.min_z),
                    np.float64(window.max_z),
                    np.float64(window.max_coordinate),
                    np.int32(write_table),
                    points,
                    mask,
                    table32,
                    table64,
                    status,
                ),
            )
            self._frame = _Frame(plan, layout, bool(cloud.is_dense), raw, coords)
            return DecodedFrame(points.reshape(n, 3), mask)

    def encode(self, labels: Any, sizes: Any) -> EncodedFrame:
        """The labelled payload, cluster table and implausible count of the last decoded frame.

        Args:
            labels: (N,) int labels (CuPy, or NumPy), -1 for points in no kept cluster.
            sizes: (K,) host array, ``sizes[k]`` points labelled k (``ClusterResult.
                cluster_sizes``).

        Returns:
            The bytes of ``append_fields(cloud, {"cluster_id": labels, "rgb": pack_rgb(
            cluster_rgb(labels))})`` and ``cluster_table(read_xyz(cloud), labels, K)``, both
            views of pinned buffers valid until the next ``encode``.

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
        layout = frame.layout
        out_bytes = n * layout.point_step
        table_words = 11 * k  # CLUSTER_DTYPE: 11 four-byte fields
        with self._device:
            labels = cupy.asarray(labels)
            if labels.shape != (n,):
                raise ValueError(f"labels have shape {labels.shape}, expected ({n},)")
            if labels.dtype != cupy.int32:
                labels = labels.astype(cupy.int32)
            stream = cupy.cuda.get_current_stream()
            status = self._buffer("status", _STATUS_WORDS, np.int32)
            err = status[0:1]
            cupy.cuda.runtime.memsetAsync(err.data.ptr, 0, err.nbytes, stream.ptr)
            self._clusters = k
            if n:
                keys = self._buffer("keys", n, np.uint64)
                out = self._buffer("out", out_bytes // 4, np.uint32)
                self._kernels["pc2_encode"](
                    _blocks(n * (layout.point_step // 4)),
                    (THREADS,),
                    (
                        frame.raw,
                        np.int32(n),
                        np.int32(frame.plan.width),
                        np.int64(frame.plan.row_step),
                        np.int32(frame.plan.point_step),
                        np.int32(layout.point_step // 4),
                        np.int32(layout.cluster_id_offset // 4),
                        np.int32(layout.rgb_offset // 4),
                        np.int32(frame.plan.big_endian),
                        labels,
                        np.int32(k),
                        out,
                        keys,
                        err,
                    ),
                )
                if k:
                    self._table(frame, sizes, keys, err, stream)
                payload_host = self._pinned("output", out_bytes)
                cupy.cuda.runtime.memcpyAsync(
                    payload_host.ctypes.data, out.data.ptr, out_bytes, _D2H, stream.ptr
                )
            else:
                payload_host = self._pinned("output", 0)
            table_host = self._pinned("table", 4 * (table_words + _STATUS_WORDS)).view(np.uint32)
            if table_words:
                table = self._buffer("table", table_words, np.uint32)
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
            return EncodedFrame(
                payload=payload_host[:out_bytes],
                table=table_host[:table_words].view(CLUSTER_DTYPE),
                implausible_points=int(status_host[1]),
            )

    def output_cloud(self, payload: np.ndarray) -> RawCloud:
        """The labelled cloud of the last decoded frame with ``payload`` as its data (the layout
        ``append_fields`` gives it)."""
        frame = self._frame
        if frame is None:
            raise RuntimeError("output_cloud() needs a decode() first")
        plan = frame.plan
        return RawCloud(
            fields=frame.layout.fields,
            height=plan.height,
            width=plan.width,
            point_step=frame.layout.point_step,
            row_step=plan.width * frame.layout.point_step,
            data=payload,
            is_bigendian=plan.big_endian,
            is_dense=frame.is_dense,
        )

    def cluster_sums(self) -> np.ndarray:
        """(K, 3) float64 coordinate sums per cluster of the last :meth:`encode` (the centroids
        before the division; they show a summation order that the float32 centroids may hide).
        For tests; synchronises."""
        k = self._clusters
        with self._device:
            return self._buffer("sums", max(3 * k, 1), np.float64)[: 3 * k].get().reshape(k, 3)

    # -- steps and buffers -------------------------------------------------------------------

    def _table(self, frame: _Frame, sizes: np.ndarray, keys: Any, err: Any, stream: Any) -> None:
        """Queue the cluster table: sort the keys, then one thread per <= 64-element leaf."""
        cupy = self._cp
        k = int(sizes.shape[0])
        n = frame.plan.num_points
        threads = cluster_threads(sizes)
        total_threads = int(threads.sum())
        # meta: starts (K + 1: the unlabelled points sort first), thread offsets (K + 1)
        meta_host = self._pinned("meta", 4 * (2 * k + 2)).view(np.int32)
        starts = meta_host[: k + 1]
        starts[0] = n - int(sizes.sum())
        starts[1:] = starts[0] + np.cumsum(sizes)
        offsets = meta_host[k + 1 :]
        offsets[0] = 0
        offsets[1:] = np.cumsum(threads)
        meta = self._buffer("meta", 2 * k + 2, np.int32)
        cupy.cuda.runtime.memcpyAsync(
            meta.data.ptr, meta_host.ctypes.data, meta_host.nbytes, _H2D, stream.ptr
        )
        keys.sort()
        slots = self._buffer("slots", 2 * total_threads * PARTIAL_BYTES, np.uint8)
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
                np.float64(self.reductions.pairwise_zero),
                np.int32(self.reductions.tie_mode),
                self._buffer("table", 11 * k, np.uint32),
                self._buffer("sums", 3 * k, np.float64),
                err,
            ),
        )

    def _buffer(self, name: str, count: int, dtype: Any) -> Any:
        """A device array of ``count`` items of ``dtype``, a view of a grow-only buffer."""
        cupy = self._cp
        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        buffer = self._device_buffers.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = cupy.empty(_grown(nbytes), dtype=cupy.uint8)
            self._device_buffers[name] = buffer
        return buffer[:nbytes].view(dtype)

    def _dummy(self, dtype: Any) -> Any:
        return self._buffer(f"dummy_{np.dtype(dtype).name}", 1, dtype)

    def _flags(self, count: int) -> Any:
        """The node flags of the cluster-table kernel and this frame's generation stamp."""
        cupy = self._cp
        flags = self._device_buffers.get("flags")
        if flags is None or flags.size < count or self._generation >= 2**31 - 2:
            if flags is None or flags.size < count:
                flags = cupy.zeros(_grown(4 * count) // 4, dtype=cupy.int32)
                self._device_buffers["flags"] = flags
            else:
                flags.fill(0)
            self._generation = 0
        self._generation += 1
        return flags

    def _pinned(self, name: str, nbytes: int) -> np.ndarray:
        """``nbytes`` of a grow-only page-locked host buffer, as uint8."""
        buffer = self._pinned_buffers.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            size = _grown(max(nbytes, 1))
            memory = self._cp.cuda.alloc_pinned_memory(size)
            buffer = np.frombuffer(memory, dtype=np.uint8, count=size)
            self._pinned_buffers[name] = buffer
        return buffer[:nbytes]


def _blocks(count: int, threads: int = THREADS) -> tuple[int]:
    return (max(1, (count + threads - 1) // threads),)


def _grown(nbytes: int) -> int:
    """Capacity for a buffer of ``nbytes``: 25 % headroom, rounded up to 64 KiB."""
    return _align(nbytes + nbytes // 4, 1 << 16)
