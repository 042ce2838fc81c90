"""A frame's device work as step lists (``launches.py``), for both ways a frame runs: the staged
codec (``frame.py``) issues them one by one around the clusterer, a frame graph
(``cuda/graphs/frame_graphs.py``) captures the same lists around the clustering graph's steps.

The lists, by stage: ``shape_in`` (N, width and row step into ``dims``; the status words
cleared), ``decode`` (``pc2_decode_sized``), ``encode`` (``pc2_encode_sized`` or
``pc2_encode_compact_sized``: the labelled payload and the table's ``(label + 1) << 32 | index``
keys), ``sort`` (the keys' radix sort by label, :data:`RADIX_BITS` a pass: as many passes as the
largest label needs; ``cuda/kernels/codecs/pc2_sort.cu``), ``table`` (the table's bounds, then
``pc2_table_sized_*``: the package's own sums, ``cluster_stats.cluster_table``), ``group``
(``pc2_group_records_sized``) and ``copy_out`` (the status words and rows into page-locked
memory). Every kernel reads N from ``dims``, so a list made for more points (a graph's bucket)
serves any cloud up to them. The table's bounds (each cluster's first sorted key and its
threads) are copied in where the host knows the sizes (staged) and found on the device from
the sorted keys where it does not (a graph: ``pc2_table_bounds``, ``pc2_table_offsets``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...core.cluster_stats import SUM_LEAF
from ...core.frame import FrameWindow
from ...pointcloud_io.pointcloud2 import DATATYPES, UINT8, RawCloud, on_device
from ...pointcloud_io.pointcloud2_plan import CloudShape, OutputLayout, XyzPlan
from ..graphs.launches import (
    DEVICE_TO_HOST,
    HOST_TO_DEVICE,
    Copy,
    KernelLaunch,
    Memset,
    Step,
    copy_async,
)
from ..module import KernelSource, blocks

#: Threads per block of the element-wise kernels and of the cluster-table kernel.
THREADS = 256
TABLE_THREADS = 128
#: Bytes of one ``pc2_Partial`` (9 doubles).
PARTIAL_BYTES = 72
#: Label bits sorted per radix pass of the table's sort (``cuda/kernels/codecs/pc2_sort.cu``).
RADIX_BITS = 8
#: Keys per block of those passes (one per thread).
SORT_TILE = 1024
#: Status words: encode's error flags, decode's implausible points, the table's cluster count K.
STATUS_WORDS = 4

#: The frame's kernels: their sources (after the package's ``common.cuh``) and constants.
KERNEL_FILES = (
    "common.cuh",
    "block_scan.cuh",
    "codecs/pointcloud2.cu",
    "codecs/pc2_group.cu",
    "codecs/pc2_sort.cu",
)
KERNEL_CONSTANTS = (
    ("PC2_SUM_LEAF", SUM_LEAF),
    ("PC2_RADIX_BITS", RADIX_BITS),
    ("PC2_SORT_TILE", SORT_TILE),
)
SOURCE = KernelSource("pointcloud2", KERNEL_FILES, KERNEL_CONSTANTS)

#: Makes a named device array of ``count`` items of a dtype, and a named page-locked uint8 array.
DeviceArrays = Callable[[str, int, Any], Any]
PinnedArrays = Callable[[str, int], np.ndarray]


@dataclass(frozen=True)
class FrameLayout:
    """What a frame's steps bake in of a cloud's layout and its labelled output (the shape, N,
    width and row step, is read from the device).

    Attributes:
        point_step, offsets, datatypes, big_endian: the input's (:class:`XyzPlan`).
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


def frame_layout(plan: XyzPlan, out: OutputLayout, group: bool) -> FrameLayout:
    """What the steps bake in of ``plan``, the labelled layout ``out`` and ``group``."""
    return FrameLayout(
        point_step=plan.point_step,
        offsets=plan.offsets,
        datatypes=plan.datatypes,
        big_endian=plan.big_endian,
        coords_f64=plan.dtype == np.float64,
        out_step=out.point_step,
        cid_word=out.cluster_id_offset // 4,
        rgb_word=out.rgb_offset // 4 if out.rgb_offset >= 0 else -1,
        group=group,
    )


def cluster_threads(sizes: np.ndarray) -> np.ndarray:
    """Threads of the cluster-table kernel per cluster: one per leaf of ``SUM_LEAF`` points."""
    return -(-np.asarray(sizes, dtype=np.int64) // SUM_LEAF)


def decode_settings(layout: FrameLayout, window: FrameWindow, write_table: bool) -> tuple[Any, ...]:
    """``pc2_decode_sized``'s arguments from ``point_step`` to ``write_table``."""
    min_range_sq, max_range_sq = window.range_bounds_sq()
    fields = zip(layout.offsets, layout.datatypes, strict=True)
    return (
        np.int32(layout.point_step),
        *(np.int32(value) for field in fields for value in field),
        np.int32(layout.big_endian),
        np.int32(layout.coords_f64),
        np.int32(window.use_height),
        *(np.float64(v) for v in (min_range_sq, max_range_sq, window.min_z, window.max_z)),
        *(np.float64(v) for v in (window.min_y, window.max_y, window.max_coordinate)),
        np.int32(write_table),
    )


def compact_spans(layout: FrameLayout) -> tuple[np.int32, ...]:
    """``pc2_encode_compact_sized``'s x, y, z spans: each coordinate's offset and byte size."""
    spans = (
        (offset, DATATYPES.get(datatype, DATATYPES[UINT8]).itemsize)
        for offset, datatype in zip(layout.offsets, layout.datatypes, strict=True)
    )
    return tuple(np.int32(value) for span in spans for value in span)


@dataclass(frozen=True)
class FrameArrays:
    """The device arrays (CuPy) and page-locked views (NumPy) a frame's steps use, sized by
    their owner: a frame graph's for its bucket, the staged codec's for the frame.

    Attributes:
        raw: the payload (uint8). dims, host_dims: (3,) int64 N, width, row step.
        words, host_words: (:data:`STATUS_WORDS`,) int32 status.
        points, mask: decode's output, the clusterer's input (float32 x, y, z; bool).
        coords: the table's coordinates in ``read_xyz``'s dtype where they are not the points.
        out, host_out: the labelled payload (uint32 words; its host twin, uint8).
        keys: the sort's two uint64 key buffers.
        counts: the radix passes' digit counts, one per digit and tile.
        starts, offsets, clusters: the table's bounds (K + 1 each: the most clusters the arrays
            hold + 1) and K (``words[2]``).
        slots, flags: the table kernel's tree nodes (uint8) and their flags, one per thread.
        table, sums, host_table: the rows (11 words each), their float64 sums, the rows' host
            twin. grouped, host_grouped: the records grouped by cluster (uint8), and host twin.
    """

    raw: Any
    dims: Any
    host_dims: np.ndarray
    words: Any
    host_words: np.ndarray
    points: Any
    mask: Any
    coords: Any
    out: Any = None
    host_out: Any = None
    keys: tuple[Any, Any] = (None, None)
    counts: Any = None
    starts: Any = None
    offsets: Any = None
    clusters: Any = None
    slots: Any = None
    flags: Any = None
    table: Any = None
    sums: Any = None
    host_table: Any = None
    grouped: Any = None
    host_grouped: Any = None


def decode_arrays(
    device: DeviceArrays,
    pinned: PinnedArrays,
    raw_bytes: int,
    layout: FrameLayout,
    window: FrameWindow,
    points: Any,
    mask: Any,
) -> FrameArrays:
    """The arrays :func:`decode_steps` uses for ``points`` and ``mask`` (as many points as
    ``mask`` holds) and ``raw_bytes`` of payload."""
    host = pinned("status", 24 + 4 * STATUS_WORDS)
    size, dtype = len(mask), np.float64 if layout.coords_f64 else np.float32
    separate = layout.coords_f64 or not window.use_height
    return FrameArrays(
        raw=device("raw", raw_bytes, np.uint8),
        dims=device("dims", 3, np.int64),
        host_dims=host[:24].view(np.int64),
        words=device("status", STATUS_WORDS, np.int32),
        host_words=host[24:].view(np.int32),
        points=points,
        mask=mask,
        coords=device(f"coords_{np.dtype(dtype).name}", 3 * size, dtype) if separate else None,
    )


def with_table_arrays(
    a: FrameArrays,
    device: DeviceArrays,
    pinned: PinnedArrays,
    layout: FrameLayout,
    max_clusters: int,
    threads: int,
) -> FrameArrays:
    """``a`` with the arrays :func:`encode_steps` adds: for at most ``max_clusters`` clusters,
    ``threads`` table threads and the records of as many points as ``a.mask`` holds."""
    size, grouped = len(a.mask), layout.point_step if layout.group else 0
    bounds = device("bounds", 2 * max_clusters + 2, np.int32)
    return replace(
        a,
        out=device("out", size * layout.out_step // 4, np.uint32),
        host_out=pinned("output", size * layout.out_step),
        keys=(device("keys", size, np.uint64), device("sorted", size, np.uint64)),
        counts=device("counts", tiles(size) << RADIX_BITS, np.int32),
        starts=bounds[: max_clusters + 1],
        offsets=bounds[max_clusters + 1 :],
        clusters=a.words[2:3],
        slots=device("slots", 2 * threads * PARTIAL_BYTES, np.uint8),
        flags=device("flags", threads, np.int32),
        table=device("table", 11 * max_clusters, np.uint32),
        sums=device("sums", 3 * max_clusters, np.float64),
        host_table=pinned("table", 44 * max_clusters).view(np.uint32),
        grouped=device("grouped", size * grouped, np.uint8),
        host_grouped=pinned("grouped", size * grouped),
    )


def tiles(size: int) -> int:
    """Tiles of the radix sort over ``size`` keys."""
    return -(-size // SORT_TILE)


def table_coords(a: FrameArrays, layout: FrameLayout, window: FrameWindow) -> Any:
    """The table's coordinates: the points themselves where they are ``read_xyz``'s (float32,
    heights kept), else ``a.coords``."""
    return a.coords if layout.coords_f64 or not window.use_height else a.points


def decode_steps(
    a: FrameArrays, layout: FrameLayout, window: FrameWindow
) -> list[tuple[str, Step]]:
    """The shape in and the decode of up to ``len(a.mask)`` points."""
    coords = table_coords(a, layout, window)
    table32, table64 = (a.words, coords) if layout.coords_f64 else (coords, a.words)
    settings = decode_settings(layout, window, coords is a.coords)
    args = (a.raw, a.dims, *settings, a.points, a.mask, table32, table64, a.words)
    return [
        ("shape_in", Copy(a.dims.data.ptr, a.host_dims.ctypes.data, 24, HOST_TO_DEVICE)),
        ("shape_in", Memset(a.words.data.ptr, 0, a.words.nbytes)),
        ("decode", _launch("pc2_decode_sized", blocks(len(a.mask)), args)),
    ]


def encode_steps(
    a: FrameArrays,
    layout: FrameLayout,
    window: FrameWindow,
    labels: Any,
    bounds: list[Step] | None,
) -> list[tuple[str, Step]]:
    """The labelled payload and keys of ``labels``, the keys' sort, the table, the grouped
    records (``layout.group``) and the copies of the status words and rows.

    ``bounds``: the copies of the host's K (``len(a.starts) - 1``), starts and offsets (labels
    are then checked against K; K = 0 leaves out the sort, table and grouping); None: found on
    the device from the sorted keys, labels unchecked.
    """
    max_clusters = len(a.starts) - 1
    out_words = layout.out_step // 4
    if layout.rgb_word >= 0:
        name = "pc2_encode_sized"
        middle: tuple[Any, ...] = (np.int32(layout.rgb_word), np.int32(layout.big_endian))
    else:
        name = "pc2_encode_compact_sized"
        middle = (np.int32(layout.big_endian), *compact_spans(layout))
    check = max_clusters if bounds is not None else 0
    args = (a.raw, a.dims, np.int32(layout.point_step), np.int32(out_words),
            np.int32(layout.cid_word), *middle, labels, np.int32(check), a.out, a.keys[0],
            a.words)  # fmt: skip
    size = len(a.keys[0])
    steps: list[tuple[str, Step]] = [
        ("encode", Memset(a.words.data.ptr, 0, 4)),  # the error flags
        ("encode", _launch(name, blocks(size * out_words), args)),
    ]
    if bounds is None or max_clusters:
        sort, keys = sort_steps(a, max_clusters)
        steps += [("sort", step) for step in sort]
        coords = table_coords(a, layout, window)
        steps += [("table", step) for step in table_steps(a, layout, keys, coords, bounds)]
        if layout.group:
            grid = blocks(size * max(layout.point_step // 4, 1))
            group = (a.raw, keys, a.starts, a.dims, np.int32(layout.point_step), a.grouped)
            steps.append(("group", _launch("pc2_group_records_sized", grid, group)))
    words = a.host_words
    copies = [Copy(words.ctypes.data, a.words.data.ptr, words.nbytes, DEVICE_TO_HOST)]
    if a.host_table.nbytes:
        table = a.host_table
        copies.append(Copy(table.ctypes.data, a.table.data.ptr, table.nbytes, DEVICE_TO_HOST))
    return steps + [("copy_out", step) for step in copies]


def sort_steps(a: FrameArrays, max_label: int) -> tuple[list[Step], Any]:
    """The radix passes over the keys' label bits (labels + 1 up to ``max_label`` + 1), and
    the buffer that ends up holding the sorted keys."""
    count = tiles(len(a.keys[0]))
    passes = max(1, -(-(max_label + 1).bit_length() // RADIX_BITS))
    source, target = a.keys
    steps: list[Step] = []
    for p in range(passes):
        shift = np.int32(32 + RADIX_BITS * p)
        steps += [
            _launch("pc2_radix_count", (count,), (source, a.dims, shift, a.counts,
                    np.int32(count)), SORT_TILE),
            _launch("pc2_scan_counts", (1,), (a.counts, np.int32(count << RADIX_BITS)), 1024),
            _launch("pc2_radix_scatter", (count,), (source, a.dims, shift, a.counts,
                    np.int32(count), target), SORT_TILE),
        ]  # fmt: skip
        source, target = target, source
    return steps, source


def table_steps(
    a: FrameArrays, layout: FrameLayout, keys: Any, coords: Any, bounds: list[Step] | None
) -> list[Step]:
    """The table's bounds (``bounds``, or found from the sorted ``keys``), then its rows."""
    found: list[Step] = bounds if bounds is not None else [
        _launch("pc2_table_bounds", blocks(len(keys)),
                (keys, a.dims, a.starts, a.clusters, np.int32(len(a.starts) - 1))),
        _launch("pc2_table_offsets", (1,), (a.starts, a.clusters, a.offsets), 1024),
    ]  # fmt: skip
    table = "pc2_table_sized_f64" if layout.coords_f64 else "pc2_table_sized_f32"
    args = (keys, coords, a.clusters, a.starts, a.offsets, a.slots, a.flags, np.int32(1),
            a.table, a.sums, a.words)  # fmt: skip
    grid = blocks(len(a.flags), TABLE_THREADS)
    flags = Memset(a.flags.data.ptr, 0, a.flags.nbytes)
    return [*found, flags, _launch(table, grid, args, TABLE_THREADS)]


def copy_in(a: FrameArrays, cloud: RawCloud, shape: CloudShape, stream: Any) -> None:
    """The cloud's shape into the page-locked words ``shape_in`` copies, its payload onto the
    device (from the message's memory as it is; a device payload, a sweep decoded on the GPU,
    device to device)."""
    n, width, row_step, nbytes = shape
    a.host_dims[:] = (n, width, row_step)
    data = cloud.data
    payload = data if on_device(data) else np.frombuffer(data, dtype=np.uint8, count=nbytes)
    copy_async(a.raw, payload, nbytes, stream)


def copy_back(a: FrameArrays, layout: FrameLayout, n: int, records: int, stream: Any) -> None:
    """The labelled payload of ``n`` points (and, with ``layout.group``, ``records`` grouped
    records) into their host twins, once the steps are done."""
    copy_async(a.host_out, a.out, n * layout.out_step, stream)
    if layout.group and records:
        copy_async(a.host_grouped, a.grouped, records * layout.point_step, stream)


def _launch(
    kernel: str, grid: tuple[int, ...], args: tuple[Any, ...], threads: int = THREADS
) -> KernelLaunch:
    return KernelLaunch(SOURCE, kernel, grid, threads, args)
