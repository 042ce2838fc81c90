"""Device work as data: kernel launches, copies and memsets, issued one by one or captured.

A method that may run inside a CUDA graph (``union_find.py``, ``numbering.py``) describes its
work as a list of :class:`Step` objects instead of issuing it: the staged path issues the steps at
once on the current stream (:func:`issue`), the graph path (``graphs.py``) issues the same steps
while a stream captures them, and the benchmarks' stage split issues them with events between
named stages. Every size and pointer of a step is fixed when the step is made: a step holds the
CuPy arrays its kernel reads or writes (so they live as long as the step), while a copy or a
memset holds raw addresses, whose buffers the caller keeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cupy
import numpy as np

from .module import KernelSource, compile_source, get_kernel

#: ``cudaMemcpyKind`` values of :class:`Copy`.
HOST_TO_DEVICE = 1
DEVICE_TO_HOST = 2
DEVICE_TO_DEVICE = 3


@dataclass(frozen=True)
class KernelLaunch:
    """One launch of ``kernel`` of ``source`` (arguments by value, CuPy arrays as pointers)."""

    source: KernelSource
    kernel: str
    grid: tuple[int, ...]
    block: int
    args: tuple[Any, ...]
    shared_mem: int = 0

    @property
    def name(self) -> str:
        return self.kernel

    def issue(self, device_id: int) -> None:
        get_kernel(self.source, self.kernel, device_id)(
            self.grid, (self.block,), self.args, shared_mem=self.shared_mem
        )


@dataclass(frozen=True)
class Copy:
    """``cudaMemcpyAsync`` of ``nbytes`` from ``src`` to ``dst`` (host addresses: page-locked)."""

    dst: int
    src: int
    nbytes: int
    kind: int

    @property
    def name(self) -> str:
        return {HOST_TO_DEVICE: "copy_h2d", DEVICE_TO_HOST: "copy_d2h"}.get(self.kind, "copy_d2d")

    def issue(self, device_id: int) -> None:
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memcpyAsync(self.dst, self.src, self.nbytes, self.kind, stream.ptr)


@dataclass(frozen=True)
class Memset:
    """``cudaMemsetAsync`` of ``nbytes`` at ``ptr`` to the byte ``value``."""

    ptr: int
    value: int
    nbytes: int

    @property
    def name(self) -> str:
        return "memset"

    def issue(self, device_id: int) -> None:
        stream = cupy.cuda.get_current_stream()
        cupy.cuda.runtime.memsetAsync(self.ptr, self.value, self.nbytes, stream.ptr)


Step = KernelLaunch | Copy | Memset


def issue(steps: list[Step], device_id: int) -> None:
    """Issue ``steps`` in order on the current stream of ``device_id`` (current)."""
    for step in steps:
        step.issue(device_id)


def kernel_launches(steps: list[Step]) -> int:
    """How many of ``steps`` are kernel launches."""
    return sum(isinstance(step, KernelLaunch) for step in steps)


def capture(steps: list[Step], stream: cupy.cuda.Stream, device_id: int) -> Any:
    """``steps`` captured on ``stream`` as one CUDA graph, returned; their kernels' sources are
    compiled and loaded first, so that nothing is loaded while the stream captures.

    Raises:
        CUDARuntimeError, CUDADriverError: the capture failed (CuPy's).
    """
    for source in {step.source for step in steps if isinstance(step, KernelLaunch)}:
        compile_source(source, device_id)
    with stream:
        stream.begin_capture()
        try:
            issue(steps, device_id)
        finally:
            graph = stream.end_capture()
    return graph


def stage_split(
    steps: list[tuple[str, Step]],
    stages: tuple[str, ...],
    copy_in: Callable[[], object],
    copy_out: Callable[[], object],
    repeats: int,
    device_id: int,
) -> dict[str, float]:
    """Median milliseconds of each of ``stages``: the first is ``copy_in`` and the last
    ``copy_out``, each timed on the host clock up to a synchronisation; between them, the
    ``steps`` tagged with each stage, issued one stage at a time on the current stream between
    events (a stage of several launches includes the host's gaps between them)."""
    stream = cupy.cuda.get_current_stream()
    samples: dict[str, list[float]] = {stage: [] for stage in stages}
    inside = stages[1:-1]
    for _ in range(repeats):
        samples[stages[0]].append(_host_ms(copy_in, stream))
        events = {stage: (cupy.cuda.Event(), cupy.cuda.Event()) for stage in inside}
        for stage in inside:
            events[stage][0].record(stream)
            issue([step for tag, step in steps if tag == stage], device_id)
            events[stage][1].record(stream)
        stream.synchronize()
        for stage in inside:
            samples[stage].append(cupy.cuda.get_elapsed_time(*events[stage]))
        samples[stages[-1]].append(_host_ms(copy_out, stream))
    return {stage: float(np.median(values)) for stage, values in samples.items()}


def _host_ms(call: Callable[[], object], stream: cupy.cuda.Stream) -> float:
    """Milliseconds of ``call`` on the host clock, from an idle stream to its synchronisation."""
    stream.synchronize()
    start = time.perf_counter()
    call()
    stream.synchronize()
    return (time.perf_counter() - start) * 1e3
