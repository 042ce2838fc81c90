"""Memory a frame will need, known before it is spent.

The paper's methods build a structure whose size follows the number of neighbour pairs: the
adjacency list of Algorithm 1, the ``j > i`` edge set of Section 4.2, the |R|² matrices of
Section 4.3. Each backend computes that size before allocating and raises
:class:`StructureTooLargeError` when it would not fit (the int32 indices of the CUDA kernels, or
the memory budget); ``union_find`` needs O(N) memory whatever the degree, so the message names it.
"""

from __future__ import annotations

import os

from .units import format_bytes

#: Share of the host's available memory a CPU-side structure may take by default.
HOST_BUDGET_SHARE = 0.5


class StructureTooLargeError(MemoryError):
    """A method's graph structure would not fit; ``union_find`` (or ``auto``) would."""

    def __init__(self, method: str, what: str, need_bytes: int, limit: str) -> None:
        super().__init__(
            f"method {method} needs {format_bytes(need_bytes)} for {what}, over {limit}; "
            "use method 'union_find' or 'auto' (O(N) memory whatever the density)"
        )
        self.method = method
        self.need_bytes = need_bytes


def host_memory_budget() -> int:
    """Bytes a CPU-side structure may take: :data:`HOST_BUDGET_SHARE` of the memory available now
    (Linux ``SC_AVPHYS_PAGES``; 4 GiB where the system does not say)."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        available = 8 << 30
    return int(available * HOST_BUDGET_SHARE)
