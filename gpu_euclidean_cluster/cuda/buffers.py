"""Grow-only device and pinned host buffers, reused frame after frame by the GPU codecs.

A codec asks for ``count`` items of a dtype under a name; it gets a view of a buffer that is
reallocated only when a larger one is needed (25 % headroom, whole 64 KiB), so a stream of frames
of similar size allocates nothing after the first. Views stay valid until the next request of the
same name. CuPy is imported on first use (the CPU tests import the codecs' planning code).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Allocation granularity of the buffers (bytes).
GRANULE = 1 << 16


def grown(nbytes: int) -> int:
    """Capacity for a buffer of ``nbytes``: 25 % headroom, rounded up to :data:`GRANULE`."""
    return -(-(nbytes + nbytes // 4) // GRANULE) * GRANULE


class GrowOnlyBuffers:
    """Named device buffers and page-locked host buffers that only grow.

    Attributes:
        device_arrays: name -> the device buffer (uint8; a codec may keep its own arrays here).
        pinned_arrays: name -> the pinned host buffer (uint8).
    """

    def __init__(self) -> None:
        self.device_arrays: dict[str, Any] = {}
        self.pinned_arrays: dict[str, np.ndarray] = {}

    def device(self, name: str, count: int, dtype: Any) -> Any:
        """A device array of ``count`` items of ``dtype``, a view of the buffer ``name``."""
        import cupy

        dtype = np.dtype(dtype)
        nbytes = count * dtype.itemsize
        buffer = self.device_arrays.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = cupy.empty(grown(nbytes), dtype=cupy.uint8)
            self.device_arrays[name] = buffer
        return buffer[:nbytes].view(dtype)

    def pinned(self, name: str, nbytes: int) -> np.ndarray:
        """``nbytes`` of the page-locked host buffer ``name``, as uint8."""
        import cupy

        buffer = self.pinned_arrays.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            size = grown(max(nbytes, 1))
            memory = cupy.cuda.alloc_pinned_memory(size)
            buffer = np.frombuffer(memory, dtype=np.uint8, count=size)
            self.pinned_arrays[name] = buffer
        return buffer[:nbytes]
