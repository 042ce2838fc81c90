"""Memory a frame will need, known before it is spent.

The paper's methods build a structure whose size follows the number of neighbour pairs: the
adjacency list of Algorithm 1, the ``j > i`` edge set of Section 4.2, the |R|² matrices of
Section 4.3. Each backend computes that size before allocating and raises
:class:`StructureTooLargeError` when it would not fit (the int32 indices of the CUDA kernels, or
the memory budget); ``union_find`` needs O(N) memory whatever the degree, so the message names it.

The host's budget is a share of what this process can still allocate, which is the least of
three limits: the system's available memory, the address space left under ``RLIMIT_AS``, and
the memory left under the limit of every cgroup the process is in (the files memory.max of
cgroup v2 and memory.limit_in_bytes of v1, less the usage at that level).
"""

from __future__ import annotations

import os
from pathlib import Path

from .units import format_bytes

#: Share of the memory this process can still allocate that a CPU-side structure may take by
#: default (the rest is for the frame, the outputs and whatever else runs).
HOST_BUDGET_SHARE = 0.5

#: Memory assumed available where the system does not say (no /proc/meminfo, no sysconf).
UNKNOWN_AVAILABLE = 8 << 30

#: A cgroup v1 limit at or above this means "no limit" (the kernel's page-rounded 2**63 - 1).
CGROUP_V1_UNLIMITED = 1 << 62

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF = Path("/proc/self")


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
    """Bytes a CPU-side structure may take: :data:`HOST_BUDGET_SHARE` of
    :func:`allocatable_bytes`."""
    return int(allocatable_bytes() * HOST_BUDGET_SHARE)


def allocatable_bytes() -> int:
    """Bytes this process can still allocate now: the least of the system's available memory,
    the address space left under ``RLIMIT_AS`` and the room left in its cgroups (never below 0)."""
    limits = [system_available_bytes(), *address_space_left(), *cgroup_room()]
    return max(0, min(limits))


def system_available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Linux's ``MemAvailable`` (free memory plus what the kernel can reclaim); the free pages
    (``SC_AVPHYS_PAGES``) where it is not reported; :data:`UNKNOWN_AVAILABLE` where neither is."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return UNKNOWN_AVAILABLE


def address_space_left(statm: Path = PROC_SELF / "statm") -> list[int]:
    """``[RLIMIT_AS soft limit - the process's virtual size]``, or ``[]`` where there is no
    limit (or the platform has no ``resource`` module or no ``/proc``)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return []
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    if limit == resource.RLIM_INFINITY:
        return []
    try:
        size = int(statm.read_text(encoding="ascii").split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        size = 0
    return [limit - size]


def cgroup_room(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_SELF / "cgroup") -> list[int]:
    """The memory left under every limited cgroup on the process's path, innermost first.

    cgroup v2 (the line ``0::/path``): the files memory.max less memory.current in
    ``root/path`` and each parent up to ``root``; cgroup v1 (the line of the memory
    controller): memory.limit_in_bytes less memory.usage_in_bytes in ``root/memory/path`` and
    its parents. Levels that do not exist
    (a path named outside this mount namespace) or have no limit are skipped.
    """
    try:
        lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    room = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            room += _levels_room(root, path, "memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            room += _levels_room(
                root / "memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes"
            )
    return room


def _levels_room(mount: Path, path: str, limit_file: str, usage_file: str) -> list[int]:
    """``limit - usage`` at ``mount/path`` and each parent up to ``mount``, where limited."""
    room = []
    level = mount / path.strip("/")
    while True:
        limit = _read_bytes(level / limit_file)
        if limit is not None and limit < CGROUP_V1_UNLIMITED:
            usage = _read_bytes(level / usage_file) or 0
            room.append(limit - usage)
        if level == mount or mount not in level.parents:
            return room
        level = level.parent


def _read_bytes(path: Path) -> int | None:
    """The integer in a cgroup file; None for ``max``, a missing or unreadable file."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
