"""Autoware's ring outlier filter on the GPU: the CUDA twin of ``cpu/stages/ring_outlier.py``, bit
for bit.

    >>> result = filter_rings(rows, RingOutlierSettings())   # CuPy (N, 32) uint8 point rows
    >>> rows[result.mask]          # the kept points, in input order (CuPy bool mask)
    >>> rows[result.order]         # the kept points in Autoware's output order (ring by ring)

``points`` is CuPy ``(N, 32)`` uint8 point rows in ``POINT_DTYPE``'s layout (the GPU sweep
decoder's, ``point_rows.py``), read in place, or a mapping of CuPy columns like the CPU twin's
(``channel`` an integer column; ``azimuth``, ``distance``, ``x``, ``y``, ``z`` float columns),
first packed into such rows: a channel outside ``0..65534`` becomes 65535, which no ring reaches
(``max_rings_num`` is at most 65535), and a float64 column is rounded to float32 by the kernel
``ring_narrow`` (CuPy's own ``astype`` flushes float32 subnormals, NumPy's keeps them).

The rules are ``core/ring_outlier.py``'s; ``cuda/kernels/stages/ring_outlier.cu`` says how the
kernels follow them: a sort of distinct int64 keys (ring, then index: the stable sort by channel),
two inclusive scans (``cupy.cumsum``) and five launches. Host synchronisations: ``cupy.sort``
(Thrust may wait for its sort) and one 16-byte read-back of the kept and out-of-range counts,
which the result's ``out_of_range`` and the length of its ``order`` need. ``order`` is a view of
an (N,) array.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cupy
import numpy as np

from ...core.ring_outlier import (
    AZIMUTH_STEP_LIMIT,
    MAX_RINGS,
    TWO_PI,
    RingOutlierResult,
    RingOutlierSettings,
)
from ..module import THREADS, KernelSource, blocks, get_kernel
from .point_rows import POINT_ROW_BYTES, field_offset, is_point_rows

#: Low bits of a sort key that hold the point's index (the ring above them): at most 2**40
#: points a sweep, rings up to 65535 (MAX_RINGS): keys below 2**56.
KEY_INDEX_BITS = 40
#: The channel a mapping's out-of-range channel is packed as: never a ring's.
_NO_RING = MAX_RINGS
#: The float columns of rule 3 and 5 (``channel`` is the integer one).
_FLOAT_FIELDS = ("x", "y", "z", "azimuth", "distance")

RING_OUTLIER = KernelSource(
    "ring_outlier",
    ("widen.cuh", "ieee32.cuh", "stages/ring_outlier.cu"),
    {
        "RING_ROW": POINT_ROW_BYTES,
        "RING_X": field_offset("x", "<f4"),
        "RING_Y": field_offset("y", "<f4"),
        "RING_Z": field_offset("z", "<f4"),
        "RING_CHANNEL": field_offset("channel", "<u2"),
        "RING_AZIMUTH": field_offset("azimuth", "<f4"),
        "RING_DISTANCE": field_offset("distance", "<f4"),
        "RING_INDEX_BITS": KEY_INDEX_BITS,
        "RING_TWO_PI": TWO_PI,
        "RING_AZIMUTH_LIMIT": AZIMUTH_STEP_LIMIT,
    },
)


def filter_rings(points: Any, settings: RingOutlierSettings) -> RingOutlierResult:
    """Autoware's keep mask and output order for one sweep (``core/ring_outlier.py``), on the
    device of ``points`` (point rows or a mapping of CuPy columns, see the module docstring)."""
    rows = _point_rows(points)
    device_id = rows.device.id
    n = rows.shape[0]
    if n >= 1 << KEY_INDEX_BITS:
        raise ValueError(f"fewer than 2**{KEY_INDEX_BITS} points a sweep, got {n}")
    with cupy.cuda.Device(device_id):
        if n == 0:
            return RingOutlierResult(cupy.zeros(0, cupy.bool_), cupy.zeros(0, cupy.int64), 0)

        def launch(name: str, *args: Any) -> None:
            get_kernel(RING_OUTLIER, name, device_id)(blocks(n), (THREADS,), args)

        size = np.int64(n)
        rings = np.int64(settings.max_rings_num)
        counts = cupy.zeros(2, dtype=cupy.uint64)  # kept, out of range
        keys = cupy.empty(n, dtype=cupy.int64)
        launch("ring_keys", rows, size, rings, keys)
        keys = cupy.sort(keys)
        in_walk = cupy.empty(n, dtype=cupy.uint8)
        broken = cupy.empty(n, dtype=cupy.uint8)
        ratio = np.float64(settings.distance_ratio)
        launch("ring_links", rows, keys, size, rings, ratio, in_walk, broken, counts)
        cum = cupy.cumsum(broken, dtype=cupy.int64)
        seg_end = cupy.empty(n, dtype=cupy.int64)
        launch("ring_segment_ends", broken, cum, size, seg_end)
        threshold = float(settings.object_length_threshold)
        count_threshold = settings.num_points_threshold
        mask = cupy.empty(n, dtype=cupy.bool_)
        kept = cupy.empty(n, dtype=cupy.uint8)
        launch(
            "ring_keep",
            *(rows, keys, size, in_walk, broken, cum, seg_end),
            np.float64(threshold * threshold),
            np.int64(-1 if count_threshold is None else count_threshold),
            *(mask, kept),
        )
        where = cupy.cumsum(kept, dtype=cupy.int64)
        order = cupy.empty(n, dtype=cupy.int64)
        launch("ring_order", keys, size, kept, where, order, counts)
        kept_count, out_of_range = (int(c) for c in counts.get())  # synchronises
    return RingOutlierResult(mask, order[:kept_count], out_of_range)


def _point_rows(points: Any) -> cupy.ndarray:
    """``points`` as C-contiguous CuPy point rows: rows as they are, a mapping packed."""
    if is_point_rows(points):
        with cupy.cuda.Device(points.device.id):
            return cupy.ascontiguousarray(points)
    if not isinstance(points, Mapping):
        raise ValueError(
            f"points must be (N, {POINT_ROW_BYTES}) uint8 point rows or a mapping of CuPy "
            f"columns, got {type(points).__name__} {getattr(points, 'shape', '')}"
        )
    channel = points["channel"]
    if not isinstance(channel, cupy.ndarray) or channel.dtype.kind not in "ui":
        raise ValueError(
            f"channel must be an integer column on the GPU, got "
            f"{getattr(channel, 'dtype', type(channel).__name__)}"
        )
    with cupy.cuda.Device(channel.device.id):
        channel = channel.reshape(-1).astype(cupy.int64)
        n = channel.shape[0]
        rows = cupy.zeros((n, POINT_ROW_BYTES), dtype=cupy.uint8)
        on_a_ring = (channel >= 0) & (channel < _NO_RING)
        packed = cupy.where(on_a_ring, channel, _NO_RING).astype(cupy.uint16)
        offset = field_offset("channel", "<u2")
        rows[:, offset : offset + 2] = packed.view(cupy.uint8).reshape(n, 2)
        for name in _FLOAT_FIELDS:
            column = _float32_column(points[name], name, n)
            offset = field_offset(name, "<f4")
            rows[:, offset : offset + 4] = column.view(cupy.uint8).reshape(n, 4)
    return rows


def _float32_column(column: Any, name: str, n: int) -> cupy.ndarray:
    """A float CuPy column of ``n`` values as contiguous float32, rounded as NumPy rounds."""
    if not isinstance(column, cupy.ndarray) or column.dtype.kind != "f" or column.size != n:
        raise ValueError(
            f"{name} must be a float CuPy column of {n} values, got "
            f"{getattr(column, 'dtype', type(column).__name__)} {getattr(column, 'shape', '')}"
        )
    column = column.reshape(-1)
    if column.dtype != cupy.float64:
        return cupy.ascontiguousarray(column, dtype=cupy.float32)  # float16, float32: exact
    column = cupy.ascontiguousarray(column)
    narrowed = cupy.empty(n, dtype=cupy.float32)
    get_kernel(RING_OUTLIER, "ring_narrow", column.device.id)(
        blocks(n), (THREADS,), (column, np.int64(n), narrowed)
    )
    return narrowed
