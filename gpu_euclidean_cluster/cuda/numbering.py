"""Canonical cluster numbering and size filter on the GPU (the filter stage).

Equal, label for label, to :func:`gpu_euclidean_cluster.core.numbering.canonical_labels`.
One memset, two launches and one small device-to-host copy (kernels/numbering.cu): the first
kernel gathers each component's size and smallest member with warp-aggregated atomics and lists
the components; its last block sorts their keys ``(n - size, smallest member)`` in shared memory,
writes each component's rank and the kept sizes run-length encoded (at most ``sqrt(2n)`` runs);
the second writes the labels. The host then reads the component count and the runs in one copy.
With more than :data:`SORT_CAPACITY` components the keys are sorted by ``cupy`` instead (one more
round trip). The kernels come from :data:`~.module.CLUSTERING`.
"""

from __future__ import annotations

import math
import threading
from functools import cache

import cupy
import numpy as np

from .module import CLUSTERING, THREADS, blocks, get_kernel

#: Most components the single sorting block orders (keys in its shared memory, 8 bytes each).
SORT_CAPACITY = 8192
#: Threads per block of the statistics kernel (its last block sorts with all of them).
STATS_THREADS = 1024
_HEADER = 4  # K, kept, runs, status
_D2H = 2  # cudaMemcpyDeviceToHost
_INT32_MAX = 2**31 - 1
_DEFAULT_SHARED = 48 * 1024


_HOST = threading.local()  # a grow-only page-locked int32 buffer per thread, for the results


def _host_buffer(count: int) -> np.ndarray:
    """``count`` int32 of this thread's page-locked buffer (valid until its next call)."""
    buffer = getattr(_HOST, "buffer", None)
    if buffer is None or buffer.shape[0] < count:
        size = max(count, 1024, 2 * (0 if buffer is None else buffer.shape[0]))
        buffer = np.frombuffer(cupy.cuda.alloc_pinned_memory(4 * size), np.int32, size)
        _HOST.buffer = buffer
    return buffer[:count]


@cache
def sort_capacity(device_id: int) -> int:
    """Most component keys the sorting block of ``numbering_stats`` orders on ``device_id``:
    :data:`SORT_CAPACITY` once the kernel is opted in to that much dynamic shared memory (done
    here, once per device), else what fits in the default 48 KiB."""
    capacity = SORT_CAPACITY
    if 8 * capacity > _DEFAULT_SHARED:
        stats = get_kernel(CLUSTERING, "numbering_stats", device_id)
        try:
            with cupy.cuda.Device(device_id):
                stats.max_dynamic_shared_size_bytes = 8 * capacity
        except Exception:  # no opt-in to large shared memory: sort what fits by default
            capacity = _DEFAULT_SHARED // 2 // 8
    return capacity


def canonical_labels_gpu(
    device_id: int, ids: cupy.ndarray, min_size: int, max_size: int
) -> tuple[cupy.ndarray, np.ndarray, int]:
    """``(labels, sizes, num_components)`` for component ``ids`` in ``[0, N)`` on ``device_id``
    (current during the call); an id of -1 is in no component: labelled -1, counted nowhere."""
    n = int(ids.shape[0])
    if n == 0:
        return cupy.empty(0, dtype=cupy.int32), np.empty(0, dtype=np.int64), 0
    if ids.dtype != cupy.int32 or not ids.flags.c_contiguous:
        ids = cupy.ascontiguousarray(ids, dtype=cupy.int32)
    stats = get_kernel(CLUSTERING, "numbering_stats", device_id)
    gather = get_kernel(CLUSTERING, "numbering_gather", device_id)
    low = np.int32(min(max(int(min_size), 0), _INT32_MAX))
    high = np.int32(min(max(int(max_size), -1), _INT32_MAX))
    n32 = np.int32(n)
    capacity = min(sort_capacity(device_id), 1 << (n - 1).bit_length())
    out_ints = _HEADER + 2 * (math.isqrt(2 * n) + 2)
    work = cupy.empty(1 + n + (n + out_ints + 1) // 2, dtype=cupy.uint64)
    out_ptr = work.data.ptr + 8 * (1 + n) + 4 * n
    stream = cupy.cuda.get_current_stream()
    cupy.cuda.runtime.memsetAsync(work.data.ptr, 0, 8 * (1 + n), stream.ptr)
    stats(
        ((n + STATS_THREADS - 1) // STATS_THREADS,),
        (STATS_THREADS,),
        (ids, n32, work, np.int32(capacity), low, high),
        shared_mem=8 * capacity,
    )
    labels = cupy.empty(n, dtype=cupy.int32)
    gather(blocks(n), (THREADS,), (ids, n32, work, labels))
    out = _host_buffer(out_ints)
    cupy.cuda.runtime.memcpyAsync(out.ctypes.data, out_ptr, 4 * out_ints, _D2H, stream.ptr)
    stream.synchronize()
    if out[3] != 1:  # more components than the block sorts: sort their keys with cupy
        count = int(out[0])
        keys = cupy.empty(count, dtype=cupy.uint64)
        get_kernel(CLUSTERING, "numbering_keys", device_id)(
            blocks(count), (THREADS,), (work, n32, np.int32(count), keys)
        )
        keys.sort()
        get_kernel(CLUSTERING, "numbering_ranks", device_id)(
            blocks(count), (THREADS,), (ids, n32, work, keys, np.int32(count), low, high)
        )
        gather(blocks(n), (THREADS,), (ids, n32, work, labels))
        cupy.cuda.runtime.memcpyAsync(out.ctypes.data, out_ptr, 4 * out_ints, _D2H, stream.ptr)
        stream.synchronize()
    num_components, runs = int(out[0]), int(out[2])
    pairs = out[_HEADER : _HEADER + 2 * runs].reshape(runs, 2).astype(np.int64)
    pairs = pairs[np.argsort(-pairs[:, 0])]  # runs were appended in no order; sizes are distinct
    sizes = np.repeat(pairs[:, 0], pairs[:, 1])
    return labels, sizes, num_components
