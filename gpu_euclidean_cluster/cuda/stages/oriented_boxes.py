"""Oriented boxes on the GPU: the CUDA twin of ``core/oriented_boxes.py``, bit for bit.

    >>> boxes = oriented_boxes_gpu(device_id, points, labels, sizes)  # (K,) BOX_DTYPE, host

The rules are ``core/oriented_boxes.py``'s; ``cuda/kernels/stages/oriented_boxes.cu`` says how the
kernels follow them. The points stay on the device: one memset, one small copy of the clusters'
offsets up, two launches (group the clustered points by cluster; one block per cluster: z range,
hull, rectangles, least-area edges) and one copy back of a few words per cluster, which
``core.oriented_boxes.box_rows`` turns into the boxes on the host (the yaw's ``arctan2`` and the
choice among edges of equal area: the CPU twin's own code). Where more edges tie for the least
area than the first copy holds, a second copy brings the rest.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from ...core.oriented_boxes import (
    BOX_DTYPE,
    COORDINATE_ERROR,
    MAX_BOX_COORDINATE,
    EdgeRectangles,
    box_rows,
)
from ...core.units import INT32_MAX
from ..module import THREADS, KernelSource, blocks, get_kernel

#: Threads per block of ``boxes_hull`` (one block per cluster).
BOXES_THREADS = 256
#: Output words before the fill counters: two ints (status flags, extras' count) and padding.
BOXES_HEADER_WORDS = 2
#: Output words per cluster: flat, min z, max z, least point x and y, then its first least-area
#: edge: position (-1: none), ux, uy, area, side along, side across, centre x and y.
BOXES_CLUSTER_WORDS = 13
#: Output words per further least-area edge: its cluster, then the edge as above.
BOXES_EXTRA_WORDS = 9
#: Status flags: labels that do not number the clusters, and a clustered coordinate that is not
#: finite or beyond ``MAX_BOX_COORDINATE``.
BOXES_BAD_LABELS = 1
BOXES_BAD_COORDINATE = 2
#: Further least-area edges the first copy back brings, beyond one per cluster.
_EXTRA_SLACK = 64

ORIENTED_BOXES = KernelSource(
    "oriented_boxes",
    ("widen.cuh", "block_scan.cuh", "stages/oriented_boxes.cu"),
    {
        "BOXES_THREADS": BOXES_THREADS,
        "BOXES_MAX_COORDINATE": MAX_BOX_COORDINATE,
        "BOXES_HEADER_WORDS": BOXES_HEADER_WORDS,
        "BOXES_CLUSTER_WORDS": BOXES_CLUSTER_WORDS,
        "BOXES_EXTRA_WORDS": BOXES_EXTRA_WORDS,
        "BOXES_BAD_LABELS": BOXES_BAD_LABELS,
        "BOXES_BAD_COORDINATE": BOXES_BAD_COORDINATE,
    },
)


def oriented_boxes_gpu(device_id: int, points: Any, labels: Any, sizes: Any) -> np.ndarray:
    """``core.oriented_boxes.oriented_boxes`` of the (N, 3) ``points`` (float32 or float64, CuPy
    or NumPy) labelled by ``labels`` ((N,) int, -1 for points in no cluster), with ``sizes``
    ((K,) host: the points of each cluster ``0..K-1``), on ``device_id`` (current during the
    call).

    Raises:
        ValueError: shapes that do not match, labels that do not number exactly the K clusters
            of ``sizes``, or a clustered coordinate that is not finite or beyond
            ``MAX_BOX_COORDINATE``.
    """
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
    k = int(sizes.shape[0])
    xyz = cupy.asarray(points)
    if xyz.dtype not in (cupy.float32, cupy.float64):
        xyz = xyz.astype(cupy.float64)
    xyz = cupy.ascontiguousarray(xyz)
    labels = cupy.ascontiguousarray(cupy.asarray(labels).reshape(-1), dtype=cupy.int32)
    n = int(labels.shape[0])
    if xyz.shape != (n, 3):
        raise ValueError(f"points of shape {xyz.shape} for {n} labels")
    mismatch = ValueError(f"labels do not number {k} non-empty clusters")
    if k == 0:
        if n and bool((labels >= 0).any()):
            raise mismatch
        return np.zeros(0, dtype=BOX_DTYPE)
    if int(sizes.min()) < 1 or int(sizes.sum()) > n:
        raise mismatch
    s = int(sizes.sum())
    e = s + 2 * k
    if e > INT32_MAX:
        raise ValueError(f"{s} clustered points in {k} clusters exceed the int32 slots")
    offsets = cupy.asarray(np.concatenate(([0], np.cumsum(sizes))).astype(np.int32))
    fill_words = (k + 1) // 2
    rows_at = BOXES_HEADER_WORDS + fill_words
    extras_at = rows_at + BOXES_CLUSTER_WORDS * k
    capacity = e  # every hull edge could tie
    out = cupy.empty(extras_at + BOXES_EXTRA_WORDS * capacity, dtype=cupy.float64)
    doubles = cupy.empty(5 * s + 7 * e, dtype=cupy.float64)
    words = cupy.empty(2 * e, dtype=cupy.uint64)
    ints = cupy.empty(5 * s + 5 * e, dtype=cupy.int32)
    stream = cupy.cuda.get_current_stream()
    cupy.cuda.runtime.memsetAsync(out.data.ptr, 0, 8 * rows_at, stream.ptr)
    group = "boxes_group_f32" if xyz.dtype == cupy.float32 else "boxes_group_f64"
    get_kernel(ORIENTED_BOXES, group, device_id)(
        blocks(n),
        (THREADS,),
        (xyz, labels, np.int32(n), np.int32(k), offsets, doubles, ints, np.int32(s), out),
    )
    get_kernel(ORIENTED_BOXES, "boxes_hull", device_id)(
        (k,),
        (BOXES_THREADS,),
        (doubles, words, ints, np.int32(s), np.int32(e), offsets, out, np.int32(capacity)),
    )
    first_extras = k + _EXTRA_SLACK
    host = out[: extras_at + BOXES_EXTRA_WORDS * min(first_extras, capacity)].get()
    status, extra_count = (int(v) for v in host[:1].view(np.int32))
    if status & BOXES_BAD_LABELS:
        raise mismatch
    if status & BOXES_BAD_COORDINATE:
        raise ValueError(COORDINATE_ERROR)
    if extra_count > first_extras:
        extras = out[extras_at : extras_at + BOXES_EXTRA_WORDS * extra_count].get()
    else:
        extras = host[extras_at : extras_at + BOXES_EXTRA_WORDS * extra_count]
    rows = host[rows_at:extras_at].reshape(k, BOXES_CLUSTER_WORDS)
    extras = extras.reshape(extra_count, BOXES_EXTRA_WORDS)
    flat = rows[:, 0] != 0.0
    edged = np.flatnonzero(~flat)
    edges = np.concatenate((rows[edged, 5:], extras[:, 1:]))
    cluster = np.concatenate((edged, extras[:, 0].astype(np.int64)))
    return box_rows(
        min_z=rows[:, 1],
        max_z=rows[:, 2],
        flat=flat,
        flat_x=rows[:, 3],
        flat_y=rows[:, 4],
        edges=EdgeRectangles(
            cluster=cluster,
            position=edges[:, 0].astype(np.int64),
            ux=edges[:, 1],
            uy=edges[:, 2],
            area=edges[:, 3],
            side_u=edges[:, 4],
            side_n=edges[:, 5],
            center_x=edges[:, 6],
            center_y=edges[:, 7],
        ),
    )
