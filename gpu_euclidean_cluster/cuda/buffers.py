"""Grow-only device and pinned host buffers, reused frame after frame by the GPU codecs.

A codec asks for ``count`` items of a dtype under a name; it gets a view of a buffer that is
reallocated only when a larger one is needed (25 % headroom, whole 64 KiB), so a stream of frames
of similar size allocates nothing after the first. Views stay valid until the next request of the
same name. The last view of each name is kept and handed out again for the same request (a
CuPy slice and view cost about 8 us, a frame asks for a dozen). CuPy is imported on first use
(the CPU tests import the codecs' planning code).
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
        #: name -> (buffer, count, dtype, view) of the last :meth:`device` request
        self._last_views: dict[str, tuple[Any, int, Any, Any]] = {}

    def device(self, name: str, count: int, dtype: Any) -> Any:
        """A device array of ``count`` items of ``dtype``, a view of the buffer ``name``."""
        buffer = self.device_arrays.get(name)
        last = self._last_views.get(name)
        if last is not None and last[0] is buffer and last[1] == count and last[2] == dtype:
            return last[3]
        import cupy

        item = np.dtype(dtype)
        nbytes = count * item.itemsize
        if buffer is None or buffer.nbytes < nbytes:
            buffer = cupy.empty(grown(nbytes), dtype=cupy.uint8)
            self.device_arrays[name] = buffer
        view = buffer[:nbytes].view(item)
        self._last_views[name] = (buffer, count, dtype, view)
        return view

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
