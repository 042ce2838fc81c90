"""What the ``replay`` tool plays and how: its validated options, free of ROS."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..parameters.option_values import MAX_RATE, MAX_SPAN_S, MIN_RATE, topic_name_problem
from ..parameters.velodyne_options import VelodyneOptions
from ..qos import RELIABILITIES

#: rmw's largest history depth (a 32-bit int)
MAX_QOS_DEPTH = 2**31 - 1
#: How Velodyne packet topics are played (``--packets``): the recorded ``VelodyneScan`` messages,
#: the PointCloud2 sweeps decoded from them, or both.
PACKET_MODES = ("raw", "decoded", "both")
#: Where ``--concatenate`` publishes the joined cloud: Autoware's name (the sample sensor kit's
#: ``concatenate_and_time_sync_node`` output), ``--remap`` renames it.
CONCATENATED_TOPIC = "/sensing/lidar/concatenated/pointcloud"


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
    #: how packet topics are played, one of :data:`PACKET_MODES`; None: the default (both where
    #: the sensor is named and ``velodyne_msgs`` is importable, see ``packet_player.packet_plan``)
    packets: str | None = None
    #: a sensor kit (a file, or the name of one shipped in ``config/``): each packets topic its
    #: sensors name is decoded with that sensor's settings (``sensor_kit_player``); None: none
    sensor_kit: str | Path | None = None
    #: join the kit's sensors' sweeps in its base frame, as Autoware's concatenation node does
    concatenate: bool = False

    def __post_init__(self) -> None:
        rates = f"in [{MIN_RATE:g}, {MAX_RATE:g}]"
        if not _within(self.rate, MIN_RATE, MAX_RATE):
            raise ValueError(f"--rate must be a number {rates}, got {self.rate}")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValueError(f"--repeat must be an integer >= 1, got {self.repeat}")
        if self.rate_hz is not None and not _within(self.rate_hz, MIN_RATE, MAX_RATE):
            raise ValueError(f"--rate-hz must be a number {rates}, got {self.rate_hz}")
        if not _within(self.start_s, 0.0, MAX_SPAN_S):
            raise ValueError(f"--start must be in [0, {MAX_SPAN_S:g}] seconds, got {self.start_s}")
        if self.duration_s is not None and not (
            _within(self.duration_s, 0.0, MAX_SPAN_S) and self.duration_s > 0
        ):
            raise ValueError(
                f"--duration must be in (0, {MAX_SPAN_S:g}] seconds, got {self.duration_s}"
            )
        for topic in self.topics:
            if problem := topic_name_problem(topic):
                raise ValueError(f"--topics: {topic!r} is not a valid ROS topic name: it {problem}")
        if self.qos_reliability not in RELIABILITIES:
            raise ValueError(
                f"unknown QoS reliability {self.qos_reliability!r}; "
                f"choose {' or '.join(RELIABILITIES)}"
            )
        if not 1 <= self.qos_depth <= MAX_QOS_DEPTH:
            raise ValueError(f"--qos-depth must be in [1, {MAX_QOS_DEPTH}], got {self.qos_depth}")
        if not (self.clock_hz == 0 or _within(self.clock_hz, MIN_RATE, MAX_RATE)):
            raise ValueError(f"--clock must be 0 or a number {rates} Hz, got {self.clock_hz}")
        if not _within(self.wait_for_subscribers_s, 0.0, MAX_SPAN_S):
            raise ValueError(
                f"--wait-for-subscribers must be in [0, {MAX_SPAN_S:g}] seconds, "
                f"got {self.wait_for_subscribers_s}"
            )
        if self.min_subscribers < 1:
            raise ValueError(f"--min-subscribers must be >= 1, got {self.min_subscribers}")
        if self.packets is not None and self.packets not in PACKET_MODES:
            raise ValueError(
                f"--packets must be {', '.join(PACKET_MODES[:-1])} or {PACKET_MODES[-1]}, "
                f"got {self.packets!r}"
            )
        self._check_sensor_kit()

    def _check_sensor_kit(self) -> None:
        """``--sensor-kit`` and ``--concatenate`` against the options they exclude."""
        if self.sensor_kit is None:
            if self.concatenate:
                raise ValueError(
                    "--concatenate joins the sweeps of a sensor kit's LiDARs: give --sensor-kit"
                )
            return
        if not str(self.sensor_kit).strip():
            raise ValueError("--sensor-kit must name a kit file (or a shipped kit), got ''")
        given = [
            "--" + option.name.replace("_", "-")
            for option in fields(self.velodyne)
            if getattr(self.velodyne, option.name) is not None
        ]
        if given:
            raise ValueError(
                f"--sensor-kit gives each sensor's model, calibration and decoder settings: "
                f"drop {', '.join(given)}"
            )
        if self.packets == "raw":
            raise ValueError(
                "--packets raw plays packet topics as recorded, undecoded: --sensor-kit (how to "
                "decode them) has no use there; use --packets decoded or both"
            )


def _within(value: float, low: float, high: float) -> bool:
    return math.isfinite(value) and low <= value <= high


def queue_depth(text: str) -> int:
    """A publisher history depth: a whole number in [1, :data:`MAX_QOS_DEPTH`]."""
    try:
        depth = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if not 1 <= depth <= MAX_QOS_DEPTH:
        raise ValueError(f"must be in [1, {MAX_QOS_DEPTH}], got {text}")
    return depth


def remap_rule(text: str) -> str:
    """``OLD:=NEW`` with valid topic names on both sides (ValueError says which is wrong)."""
    parse_remaps([text])
    return text


def parse_remaps(items: Sequence[str]) -> dict[str, str]:
    """Parse ``OLD:=NEW`` remap arguments into a mapping.

    Raises:
        ValueError: an item lacks ``:=``, or a side is not a valid topic name.
    """
    remaps: dict[str, str] = {}
    for item in items:
        old, sep, new = item.partition(":=")
        if not sep or not old or not new:
            raise ValueError(f"bad remap {item!r}: expected OLD:=NEW, e.g. /points_raw:=/points")
        for side, name in (("OLD", old), ("NEW", new)):
            if problem := topic_name_problem(name):
                raise ValueError(
                    f"bad remap {item!r}: {side} is not a valid topic name: it {problem}"
                )
        remaps[old] = new
    return remaps
