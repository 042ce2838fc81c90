"""Canonical cluster numbering and size filter on the GPU (the filter stage).

Equal, label for label, to :func:`gpu_euclidean_cluster.core.numbering.canonical_labels`.
One memset, two launches and one small device-to-host copy (cuda/kernels/labelling/numbering.cu):
the first kernel gathers each component's size and smallest member with warp-aggregated atomics and
lists the components; its last block sorts the keys ``(n - size, smallest member)`` of the kept
components (those the size filter keeps: the others are -1 whatever their order, so a sweep of
many single-point components still sorts in one block) in shared memory, writes each kept
component's rank and the kept sizes run-length encoded (at most ``sqrt(2n)`` runs); the second
writes the labels. The host then reads the component count and the runs in one copy. With more
than :data:`SORT_CAPACITY` kept components all keys are sorted by ``cupy`` instead (one more
round trip). The kernels come from :data:`~..module.CLUSTERING`.

The device work is built as data (:func:`numbering_steps`, ``launches.py``) over
:class:`NumberingBuffers`: :func:`canonical_labels_gpu` allocates them per call, the graph path
(``cuda/graphs/cluster_graphs.py``) keeps them per size bucket and captures the steps; both read the
result with :func:`read_sizes` and take :func:`rank_by_host_sort` where one block could not sort the
keys.
"""

from __future__ import annotations

import math
import threading
from functools import cache

import cupy
import numpy as np

from ..graphs.launches import DEVICE_TO_HOST, Copy, KernelLaunch, Memset, Step, issue
from ..module import CLUSTERING, THREADS, blocks, get_kernel

#: Most kept components the single sorting block orders (keys in its shared memory, 8 bytes each).
SORT_CAPACITY = 16384
#: Threads per block of the statistics kernel (its last block sorts with all of them).
STATS_THREADS = 1024
_HEADER = 4  # K, kept, runs, status
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
    """Most component keys the sorting block of ``numbering_stats`` orders on ``device_id``: the
    largest power of two up to :data:`SORT_CAPACITY` whose keys the kernel may hold in dynamic
    shared memory (opted in here, once per device: 128 KiB where a block may opt in to that much,
    as on Hopper and the A100; 64 KiB on most other recent GPUs), else what fits in the default
    48 KiB."""
    stats = get_kernel(CLUSTERING, "numbering_stats", device_id)
    capacity = SORT_CAPACITY
    while 8 * capacity > _DEFAULT_SHARED:
        try:
            with cupy.cuda.Device(device_id):
                stats.max_dynamic_shared_size_bytes = 8 * capacity
            return capacity
        except (cupy.cuda.driver.CUDADriverError, cupy.cuda.runtime.CUDARuntimeError):
            # more than a block may opt in to
            capacity //= 2
    return _DEFAULT_SHARED // 2 // 8


def size_bounds(min_size: int, max_size: int) -> tuple[np.int32, np.int32]:
    """The size filter's bounds as the kernels take them (clamped to int32)."""
    low = np.int32(min(max(int(min_size), 0), _INT32_MAX))
    high = np.int32(min(max(int(max_size), -1), _INT32_MAX))
    return low, high


class NumberingBuffers:
    """The numbering's device buffers for ``n`` component ids: the scratch words (counts, smallest
    members, the list of components, then the ``out`` ints the host reads) and the labels."""

    def __init__(self, device_id: int, n: int) -> None:
        self.n = n
        self.capacity = min(sort_capacity(device_id), 1 << (n - 1).bit_length())
        self.out_ints = _HEADER + 2 * (math.isqrt(2 * n) + 2)
        self.work = cupy.empty(1 + n + (n + self.out_ints + 1) // 2, dtype=cupy.uint64)
        self.labels = cupy.empty(n, dtype=cupy.int32)

    @property
    def out_ptr(self) -> int:
        """Device address of the ``out`` ints (K, kept, runs, status, then the runs)."""
        return int(self.work.data.ptr) + 8 * (1 + self.n) + 4 * self.n

    @property
    def nbytes(self) -> int:
        return int(self.work.nbytes + self.labels.nbytes)

    def copy_out(self, host: np.ndarray) -> Copy:
        """The copy of the ``out`` ints into the page-locked ``host`` (``out_ints`` int32)."""
        return Copy(host.ctypes.data, self.out_ptr, 4 * self.out_ints, DEVICE_TO_HOST)


def numbering_steps(
    device_id: int, ids: cupy.ndarray, buffers: NumberingBuffers, low: np.int32, high: np.int32
) -> list[Step]:
    """One memset and two launches: statistics (and, in its last block, the sort of up to the
    buffers' capacity of keys), then the labels into the buffers' labels."""
    n, work, capacity = buffers.n, buffers.work, buffers.capacity
    n32 = np.int32(n)
    return [
        Memset(int(work.data.ptr), 0, 8 * (1 + n)),
        KernelLaunch(
            CLUSTERING,
            "numbering_stats",
            ((n + STATS_THREADS - 1) // STATS_THREADS,),
            STATS_THREADS,
            (ids, n32, work, np.int32(capacity), low, high),
            shared_mem=8 * capacity,
        ),
        KernelLaunch(
            CLUSTERING, "numbering_gather", blocks(n), THREADS, (ids, n32, work, buffers.labels)
        ),
    ]


def sorted_in_one_block(out: np.ndarray) -> bool:
    """Whether the statistics kernel's last block ranked the components (status 1)."""
    return bool(out[3] == 1)


def rank_by_host_sort(
    device_id: int,
    ids: cupy.ndarray,
    buffers: NumberingBuffers,
    count: int,
    low: np.int32,
    high: np.int32,
) -> None:
    """More components than the buffers' capacity: their ``count`` keys sorted by ``cupy``, the
    ranks and the labels written (issued on the current stream, not synchronised)."""
    n32, work = np.int32(buffers.n), buffers.work
    keys = cupy.empty(count, dtype=cupy.uint64)
    get_kernel(CLUSTERING, "numbering_keys", device_id)(
        blocks(count), (THREADS,), (work, n32, np.int32(count), keys)
    )
    keys.sort()
    get_kernel(CLUSTERING, "numbering_ranks", device_id)(
        blocks(count), (THREADS,), (ids, n32, work, keys, np.int32(count), low, high)
    )
    get_kernel(CLUSTERING, "numbering_gather", device_id)(
        blocks(buffers.n), (THREADS,), (ids, n32, work, buffers.labels)
    )


def read_sizes(out: np.ndarray) -> tuple[np.ndarray, int]:
    """``(sizes, num_components)`` from the ``out`` ints: the kept clusters' sizes, descending."""
    num_components, runs = int(out[0]), int(out[2])
    pairs = sorted(out[_HEADER : _HEADER + 2 * runs].reshape(runs, 2).tolist(), reverse=True)
    # Runs were appended in no order; their sizes are distinct: sorted by size, descending.
    sizes = np.array([size for size, _ in pairs], dtype=np.int64)
    return np.repeat(sizes, [count for _, count in pairs]), num_components


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
    low, high = size_bounds(min_size, max_size)
    buffers = NumberingBuffers(device_id, n)
    out = _host_buffer(buffers.out_ints)
    issue([*numbering_steps(device_id, ids, buffers, low, high), buffers.copy_out(out)], device_id)
    stream = cupy.cuda.get_current_stream()
    stream.synchronize()
    if not sorted_in_one_block(out):  # more components than the block sorts: sort with cupy
        rank_by_host_sort(device_id, ids, buffers, int(out[0]), low, high)
        buffers.copy_out(out).issue(device_id)
        stream.synchronize()
    sizes, num_components = read_sizes(out)
    return buffers.labels, sizes, num_components
