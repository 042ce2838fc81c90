"""What the ``replay`` tool plays and how: its validated options, free of ROS."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .qos import RELIABILITIES
from .velodyne_options import VelodyneOptions


@dataclass(frozen=True)
class ReplayOptions:
    """What to replay and how (see ``gpu-euclidean-cluster replay --help``)."""

    bag: Path
    rate: float = 1.0
    loop: bool = False
    repeat: int = 1
    rate_hz: float | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    topics: tuple[str, ...] = ()
    remap: dict[str, str] = field(default_factory=dict)
    qos_reliability: str = "reliable"
    qos_depth: int = 10
    clock_hz: float = 0.0
    wait_for_subscribers_s: float = 0.0
    min_subscribers: int = 1
    progress: bool = True
    rcl_args: tuple[str, ...] = ()  # command line for rclpy.init, with any --ros-args
    #: how Velodyne packet topics are decoded (ignored for a bag without them)
    velodyne: VelodyneOptions = field(default_factory=VelodyneOptions)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"--rate must be a positive number, got {self.rate}")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValueError(f"--repeat must be an integer >= 1, got {self.repeat}")
        if self.rate_hz is not None and not (math.isfinite(self.rate_hz) and self.rate_hz > 0):
            raise ValueError(f"--rate-hz must be a positive number, got {self.rate_hz}")
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise ValueError(f"--start must be >= 0 seconds, got {self.start_s}")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and self.duration_s > 0
        ):
            raise ValueError(f"--duration must be > 0 seconds, got {self.duration_s}")
        if self.qos_reliability not in RELIABILITIES:
            raise ValueError(
                f"unknown QoS reliability {self.qos_reliability!r}; "
                f"choose {' or '.join(RELIABILITIES)}"
            )
        if self.qos_depth < 1:
            raise ValueError(f"--qos-depth must be >= 1, got {self.qos_depth}")
        if not (math.isfinite(self.clock_hz) and self.clock_hz >= 0):
            raise ValueError(f"--clock must be >= 0 Hz, got {self.clock_hz}")
        if self.wait_for_subscribers_s < 0:
            raise ValueError("--wait-for-subscribers must be >= 0 seconds")
        if self.min_subscribers < 1:
            raise ValueError(f"--min-subscribers must be >= 1, got {self.min_subscribers}")


def parse_remaps(items: Sequence[str]) -> dict[str, str]:
    """Parse ``OLD:=NEW`` remap arguments into a mapping.

    Raises:
        ValueError: an item lacks ``:=`` or has an empty side.
    """
    remaps: dict[str, str] = {}
    for item in items:
        old, sep, new = item.partition(":=")
        if not sep or not old or not new:
            raise ValueError(f"bad remap {item!r}: expected OLD:=NEW, e.g. /points_raw:=/points")
        remaps[old] = new
    return remaps
