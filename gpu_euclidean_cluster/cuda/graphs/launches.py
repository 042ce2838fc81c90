"""Device work as data: kernel launches, copies and memsets, issued one by one or captured.

A method that may run inside a CUDA graph (``union_find.py``, ``numbering.py``) describes its work
as a list of :class:`Step` objects instead of issuing it: the staged path issues the steps at once
on the current stream (:func:`issue`), the graph paths (``cuda/graphs/cluster_graphs.py``,
``cuda/graphs/frame_graphs.py``) capture the same steps through one :class:`GraphCapturer`, and the
benchmarks' stage split (``benchmarks/stage_split.py``) issues them with events between named
stages. Every size and pointer of a step is fixed when the step is made: a step holds the CuPy
arrays its kernel reads or writes (so they live as long as the step), while a copy or a memset holds
raw addresses, whose buffers the caller keeps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..module import KernelSource, compile_source, get_kernel

if TYPE_CHECKING:
    import cupy

log = logging.getLogger(__name__)

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
        import cupy

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
        import cupy

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


@dataclass(frozen=True)
class CapturedGraph:
    """A captured graph and its steps by stage (they hold the arrays the graph uses).

    Attributes:
        graph: CuPy's graph, launched with ``graph.launch(stream)``.
        steps: ``(stage, step)`` in issue order.
        kernel_nodes, copy_nodes: kernels, and copies or memsets, inside the graph.
    """

    graph: Any
    steps: list[tuple[str, Step]]
    kernel_nodes: int
    copy_nodes: int


class GraphCapturer:
    """Captures step lists on one device's private stream until a capture fails; from then on
    it is off for good (:attr:`disabled` says why) and the caller runs its steps staged."""

    def __init__(self, device_id: int, graphs: str, fallback: str) -> None:
        """A capturer for ``device_id``; its one warning names the ``graphs`` (``CUDA graph``)
        and what runs instead (``clustering stage by stage``)."""
        self.device_id = device_id
        self._graphs = graphs
        self._fallback = fallback
        self._stream: cupy.cuda.Stream | None = None
        #: Why capture is off for good (a capture failed), else None.
        self.disabled: str | None = None

    def capture(self, steps: list[tuple[str, Step]]) -> CapturedGraph | None:
        """``steps`` captured (:func:`capture`); None, with capture off for good and one
        warning logged, where the capture fails."""
        import cupy

        if self._stream is None:
            self._stream = cupy.cuda.Stream(non_blocking=True)
        plain = [step for _, step in steps]
        try:
            graph = capture(plain, self._stream, self.device_id)
        except (cupy.cuda.runtime.CUDARuntimeError, cupy.cuda.driver.CUDADriverError) as error:
            self.disabled = f"{type(error).__name__}: {error}"
            log.warning(
                "%s capture failed on device %d (%s): %s from now",
                self._graphs,
                self.device_id,
                self.disabled,
                self._fallback,
            )
            return None
        kernels = kernel_launches(plain)
        return CapturedGraph(graph, steps, kernels, len(plain) - kernels)


def copy_async(dst: Any, src: Any, nbytes: int, stream: cupy.cuda.Stream) -> None:
    """``cudaMemcpyAsync`` of ``nbytes`` between two arrays (an int: a device address), each
    NumPy (host, page-locked or not) or CuPy, in the direction their kinds say."""
    import cupy

    dst_ptr, dst_host = _address(dst)
    src_ptr, src_host = _address(src)
    kind = {(False, True): HOST_TO_DEVICE, (True, False): DEVICE_TO_HOST}.get(
        (dst_host, src_host), DEVICE_TO_DEVICE
    )
    cupy.cuda.runtime.memcpyAsync(dst_ptr, src_ptr, nbytes, kind, stream.ptr)


def _address(array: Any) -> tuple[int, bool]:
    """``(address, on the host)`` of a NumPy or CuPy array, or of a device address."""
    if isinstance(array, np.ndarray):
        return int(array.ctypes.data), True
    if isinstance(array, int):
        return array, False
    return int(array.data.ptr), False
