"""Constants and unit helpers used across the package, defined once."""

from __future__ import annotations

#: Nanoseconds per second (ROS stamps and bag times are integer nanoseconds).
NS_PER_S = 1_000_000_000

#: Largest int32: CUDA index arrays are int32, and ROS/PCL use it for "no upper limit".
INT32_MAX = 2**31 - 1


def format_bytes(count: int) -> str:
    """``count`` bytes in a readable binary unit (e.g. ``1.5 GiB``)."""
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
