"""Large NumPy arrays to the GPU through a small ring of page-locked buffers, in chunks.

**The rule.** A NumPy array of at least :data:`STAGING_MIN_BYTES` (as the device will hold it)
goes to the device in chunks through page-locked slots; a smaller one takes the plain path
(``cupy.asarray``), where a few launches matter more than the copy's bandwidth. Nothing comes
back this way: device arrays return by CuPy's plain ``.get()`` (see "Downloads" below).

**Why.** A copy from pageable memory is staged by the driver through its own page-locked buffer
by one host thread: 7-14 GB/s measured on the H100 host (24.5 MB of 2 M points in 1.8-3.0 ms,
98 MB of 8 M points in 12.6-14.9 ms), while the DMA from page-locked memory runs at about
53 GB/s (0.46 ms and 1.8 ms). Copying the whole array into page-locked memory first, on one
thread, lost to the pageable copy (2.4 ms at 2 M, 14.6 ms at 8 M): one thread's ``memcpy`` is
the limit (``benchmarks/results/2026-11-24.md``, "What moved the large clouds"). So here:

1. The array is cut into chunks of whole rows (:func:`plan_chunks`) dealt round-robin to up to
   :data:`MAX_WORKERS` workers (the calling thread and a thread pool); NumPy's copy releases the
   GIL, so the workers' host copies run in parallel.
2. Each worker owns two page-locked slots of :data:`SLOT_BYTES` and a stream: it copies chunk
   k into one slot while the DMA of chunk k-1 runs from the other, and refills a slot only once
   the slot's last DMA has finished (its event; the events outlive the call, so a call never
   overwrites a slot the previous call's DMA still reads).
3. The workers' streams wait for the caller's stream before their first DMA (so that device
   memory the caller's earlier work still uses is never overwritten), and the caller's stream
   waits for each worker's last DMA (so that the caller's later work sees the whole array):
   ``to_device`` returns without a host synchronisation.
4. A cast (float64 to float32, say) and the gather of a strided array happen in the same copy
   into the slot (``np.copyto`` into a page-locked view of the target dtype): no extra pass over
   the host array, and no fresh host array whose pages fault in.

On the H200 host (2026-11-28, ``python -m benchmarks large-clouds``, medians) clouds of 2 M
and 8 M points reached the device in 3.45 and 4.98 ms staged, against 4.84 and 18.10 ms through
``cupy.asarray``.

**Downloads.** The labels (4 bytes a point) come back by the plain ``.get()``: staged the mirror
way they took 2.46 and 3.16 ms at 2 M and 8 M points against 0.96 and 2.70 ms plain, on the H200
host, into a new array as a loop over frames gets it (glibc hands it the pages the last call's
labels freed, for arrays up to 32 MiB). Staging only won into never-touched pages, whose faults
its threads take in parallel (4.0 and 12.1 ms against 7.7 and 31.5 ms): a caller keeping every
call's labels, or labels over 32 MiB (8 388 608 points), which glibc always maps afresh.

**Not registered in place.** ``cudaHostRegister`` of the caller's array lets the DMA read it
directly, but pins every page of the array on every call, must be undone after the DMA (a host
synchronisation first), and cannot cast or gather. Register, DMA and unregister of a float32
cloud took 2.18 ms at 2 M points (staged: 3.45) and 7.09 ms at 8 M (staged: 4.98) on the H200
host: the benchmark measures it beside the staging, to find where it would pay.

**Sizes.** A slot holds :data:`SLOT_BYTES` (2 MiB); a chunk is cut so that each worker gets
about :data:`CHUNKS_PER_WORKER` of them (at least :data:`MIN_CHUNK_BYTES`, at most a slot): the
first DMA waits for one chunk's host copy, and the call pays a few microseconds of Python and
CUDA calls (holding the GIL) per chunk. 2 M points (24.5 MB) on 8 workers make 32 chunks of
0.77 MB, 8 M points (98 MB) 47 chunks of 2 MiB. The ring holds ``2 * workers * SLOT_BYTES`` of
page-locked memory (32 MiB with 8 workers).

**Lifetime and threads.** A backend makes one :class:`PinnedStaging`; its slots, streams,
events and threads are made on its first staged copy and freed with it (or by
:meth:`PinnedStaging.close`). Calls are serialised by a lock: one staged copy at a time per
backend, from any thread (the clustering graphs serialise their calls the same way). CuPy is
imported on first use: the planning code runs without it (the CPU tests).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from math import prod
from typing import Any

import numpy as np

#: Arrays of at least this many bytes (on the device) are staged; smaller ones copied plainly.
STAGING_MIN_BYTES = 4 << 20
#: Bytes of one page-locked slot; each worker owns :data:`SLOTS_PER_WORKER` of them.
SLOT_BYTES = 2 << 20
#: Page-locked slots per worker: one filled on the host while the other's DMA runs.
SLOTS_PER_WORKER = 2
#: Chunks aimed at per worker (smaller chunks fill the pipeline sooner, cost more calls).
CHUNKS_PER_WORKER = 4
#: Smallest chunk cut (bytes), unless the whole array is smaller.
MIN_CHUNK_BYTES = 256 << 10
#: Most workers (threads copying on the host) of one staging.
MAX_WORKERS = 8

#: ``cudaMemcpyKind`` of a host-to-device copy.
_HOST_TO_DEVICE = 1


@dataclass(frozen=True)
class Chunk:
    """Rows ``start:stop`` of an array, copied by worker ``worker`` through its slot ``slot``."""

    start: int
    stop: int
    worker: int
    slot: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def default_workers() -> int:
    """Worker threads for a staging: half the usable cores, 1 to :data:`MAX_WORKERS` (the other
    half keeps the caller's own threads and the driver going)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores // 2))


def chunk_rows(rows: int, row_bytes: int, workers: int, slot_bytes: int = SLOT_BYTES) -> int:
    """Rows per chunk for ``rows`` rows of ``row_bytes``: about :data:`CHUNKS_PER_WORKER` chunks
    per worker, each of :data:`MIN_CHUNK_BYTES` to ``slot_bytes`` (and at least one row).

    Raises:
        ValueError: no row bytes or no workers, or a row larger than a slot.
    """
    if row_bytes < 1 or workers < 1 or rows < 0:
        raise ValueError(f"cannot plan {rows} rows of {row_bytes} bytes on {workers} workers")
    if row_bytes > slot_bytes:
        raise ValueError(f"a row of {row_bytes} bytes does not fit a slot of {slot_bytes}")
    aim = -(-rows // (workers * CHUNKS_PER_WORKER))
    return min(slot_bytes // row_bytes, max(MIN_CHUNK_BYTES // row_bytes, aim, 1))


def plan_chunks(
    rows: int, row_bytes: int, workers: int, slot_bytes: int = SLOT_BYTES
) -> list[Chunk]:
    """The chunks of ``rows`` rows in order, covering ``0:rows`` exactly (the last one may be
    shorter); chunk k goes to worker ``k % workers`` and alternates between its slots.

    Raises:
        ValueError: as :func:`chunk_rows`.
    """
    step = chunk_rows(rows, row_bytes, workers, slot_bytes)
    return [
        Chunk(start, min(start + step, rows), k % workers, (k // workers) % SLOTS_PER_WORKER)
        for k, start in enumerate(range(0, rows, step))
    ]


def row_bytes_of(shape: tuple[int, ...], dtype: Any) -> int:
    """Bytes of one row (``shape[1:]`` items) of an array of ``shape`` in ``dtype``."""
    return prod(shape[1:]) * np.dtype(dtype).itemsize


def stage_chunk(slot: np.ndarray, source: np.ndarray, chunk: Chunk, dtype: Any) -> np.ndarray:
    """Rows ``chunk`` of ``source`` (any strides, any real dtype) cast into the start of the
    uint8 ``slot``, C-contiguous in ``dtype``: the view the DMA reads. Values beyond ``dtype``'s
    range become inf, as ``np.ascontiguousarray(source, dtype)`` makes them."""
    dtype = np.dtype(dtype)
    staged = _view(slot, chunk.rows, source.shape[1:], dtype)
    with np.errstate(over="ignore"):
        np.copyto(staged, source[chunk.start : chunk.stop], casting="unsafe")
    return staged


def _view(slot: np.ndarray, rows: int, row_shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The start of the uint8 ``slot`` as ``rows`` C-contiguous rows of ``row_shape``, ``dtype``."""
    nbytes = rows * prod(row_shape) * dtype.itemsize
    return slot[:nbytes].view(dtype).reshape((rows, *row_shape))


def contiguous_as(array: Any, dtype: Any) -> Any:
    """``array`` (NumPy or CuPy) C-contiguous in ``dtype`` (the array itself where it is);
    values beyond ``dtype``'s range become inf, without a warning."""
    if isinstance(array, np.ndarray):
        with np.errstate(over="ignore"):
            return np.ascontiguousarray(array, dtype=dtype)
    import cupy

    return cupy.ascontiguousarray(array, dtype=dtype)


@dataclass(frozen=True)
class _Worker:
    """One worker's stream, page-locked slots (uint8) and their events, and the event of its
    last DMA of a call."""

    stream: Any
    slots: tuple[np.ndarray, ...]
    slot_events: tuple[Any, ...]
    done: Any


class PinnedStaging:
    """Copies of large NumPy arrays to one device through a ring of page-locked slots (see the
    module's docstring).

    Args:
        device_id: the CUDA device.
        workers: host threads copying (the caller's included); default :func:`default_workers`.
        slot_bytes: bytes of one page-locked slot.
        min_bytes: arrays of fewer bytes are not staged (:meth:`applies`).
    """

    def __init__(
        self,
        device_id: int,
        workers: int | None = None,
        slot_bytes: int = SLOT_BYTES,
        min_bytes: int = STAGING_MIN_BYTES,
    ) -> None:
        self.device_id = device_id
        self.workers = workers or default_workers()
        self.slot_bytes = slot_bytes
        self.min_bytes = min_bytes
        self._lock = threading.Lock()
        self._ring: list[_Worker] = []
        self._memory: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._start: Any = None

    @property
    def pinned_bytes(self) -> int:
        """Page-locked bytes held (0 before the first staged copy)."""
        return 0 if self._memory is None else int(self._memory.mem.size)

    def applies(self, array: Any, dtype: Any = None) -> bool:
        """Whether ``array`` (in ``dtype``, default its own) is staged: at least
        :attr:`min_bytes`, numeric, and rows that fit a slot."""
        dtype = np.dtype(array.dtype if dtype is None else dtype)
        if array.ndim == 0 or array.shape[0] == 0 or dtype.kind not in "biufc":
            return False
        row_bytes = row_bytes_of(array.shape, dtype)
        return array.shape[0] * row_bytes >= self.min_bytes and 0 < row_bytes <= self.slot_bytes

    def to_device(self, array: np.ndarray, dtype: Any = None) -> Any:
        """A new C-contiguous CuPy array of the NumPy ``array`` in ``dtype`` (default its own) on
        this staging's device, ordered before the current stream's later work; no host
        synchronisation."""
        import cupy

        dtype = np.dtype(array.dtype if dtype is None else dtype)
        with cupy.cuda.Device(self.device_id):
            out = cupy.empty(array.shape, dtype=dtype)
            plan = self._plan(array.shape, dtype)
            if not plan:
                return out
            with self._lock:
                self._make_ring()
                stream = cupy.cuda.get_current_stream()
                self._start.record(stream)
                active = self._ring[: min(self.workers, len(plan))]
                try:
                    self._run(
                        [
                            partial(self._upload, worker, _of(plan, number), array, out, dtype)
                            for number, worker in enumerate(active)
                        ]
                    )
                finally:  # also on a failure: ``out`` is not freed under a running DMA
                    for worker in active:
                        stream.wait_event(worker.done)
            return out

    def _plan(self, shape: tuple[int, ...], dtype: np.dtype) -> list[Chunk]:
        """The chunks of an array of ``shape`` in ``dtype`` (none for a 0-d or empty one)."""
        if not shape or row_bytes_of(shape, dtype) == 0:
            return []
        return plan_chunks(shape[0], row_bytes_of(shape, dtype), self.workers, self.slot_bytes)

    def close(self) -> None:
        """Wait for the slots' last copies, then free the ring and stop the threads (the next
        staged copy makes them again)."""
        with self._lock:
            for worker in self._ring:
                worker.stream.synchronize()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._ring, self._memory, self._pool, self._start = [], None, None, None

    def _make_ring(self) -> None:
        """The slots, streams, events and threads, on first use (call with the lock held)."""
        if self._ring:
            return
        import cupy

        with cupy.cuda.Device(self.device_id):
            size = self.workers * SLOTS_PER_WORKER * self.slot_bytes
            memory = cupy.cuda.PinnedMemoryPointer(cupy.cuda.PinnedMemory(size), 0)
            host = np.frombuffer(memory, dtype=np.uint8, count=size)
            ring = []
            for number in range(self.workers):
                first = number * SLOTS_PER_WORKER
                slots = tuple(
                    host[(first + s) * self.slot_bytes : (first + s + 1) * self.slot_bytes]
                    for s in range(SLOTS_PER_WORKER)
                )
                events = tuple(
                    cupy.cuda.Event(disable_timing=True) for _ in range(SLOTS_PER_WORKER)
                )
                ring.append(
                    _Worker(
                        cupy.cuda.Stream(non_blocking=True),
                        slots,
                        events,
                        cupy.cuda.Event(disable_timing=True),
                    )
                )
            self._start = cupy.cuda.Event(disable_timing=True)
        if self.workers > 1:
            self._pool = ThreadPoolExecutor(
                self.workers - 1,
                thread_name_prefix="pinned-staging",
                initializer=cupy.cuda.runtime.setDevice,
                initargs=(self.device_id,),
            )
        self._memory, self._ring = memory, ring

    def _run(self, jobs: list[Callable[[], None]]) -> None:
        """The first job on this thread, the others on the pool; returns once all have finished,
        raising the first failure."""
        futures = [self._pool.submit(job) for job in jobs[1:]] if self._pool else []
        try:
            jobs[0]()
        finally:
            for future in futures:
                future.exception()  # wait for every worker before the slots are touched again
        for future in futures:
            future.result()

    def _upload(
        self, worker: _Worker, chunks: list[Chunk], source: np.ndarray, out: Any, dtype: np.dtype
    ) -> None:
        """One worker's chunks host -> slot -> device, then its ``done`` event."""
        import cupy

        runtime = cupy.cuda.runtime
        stream = worker.stream.ptr
        runtime.streamWaitEvent(stream, self._start.ptr, 0)
        row_bytes = row_bytes_of(out.shape, dtype)
        try:
            for chunk in chunks:
                event = worker.slot_events[chunk.slot]
                runtime.eventSynchronize(event.ptr)  # the slot's previous DMA has read it
                staged = stage_chunk(worker.slots[chunk.slot], source, chunk, dtype)
                runtime.memcpyAsync(
                    out.data.ptr + chunk.start * row_bytes,
                    staged.ctypes.data,
                    staged.nbytes,
                    _HOST_TO_DEVICE,
                    stream,
                )
                runtime.eventRecord(event.ptr, stream)
        finally:
            runtime.eventRecord(worker.done.ptr, stream)


def _of(plan: list[Chunk], worker: int) -> list[Chunk]:
    return [chunk for chunk in plan if chunk.worker == worker]
