"""Autoware's rules for grouping LiDAR sweeps by time: the settings and the matching rules of
``concatenate_and_time_sync_node`` (autoware_universe, ``sensing/autoware_pointcloud_preprocessor``,
``matching_policy.cpp`` and ``cloud_concatenator.ipp``), without ROS.

:class:`~.concatenation.SweepCollector` (``frame/concatenation.py``) applies them. Times are
integer nanoseconds (stamps, arrivals, offsets, windows); Autoware compares double seconds, whose
step near 1.6e9 s is about 0.24 us, so a sweep within a quarter microsecond of a window's edge may
be grouped differently there. The rules:

1. **Naive** (``matching_strategy.type: naive``): a sweep joins the open group that does not hold
   its sensor yet and whose first arrival is closest to the sweep's arrival (the first such group
   on a tie), however far; none: a new group whose reference is the sweep's arrival.
2. **Advanced** (``advanced``): with ``t = stamp - offset[sensor]``, a sweep joins the first open
   group (oldest first) with ``reference - window - noise[sensor] < t < reference + window +
   noise[sensor]``, where ``window`` is the noise window of the sensor that opened the group;
   none: a new group with ``reference = t`` and ``window = noise[sensor]``. Whether the group
   already holds the sensor is not asked: a second sweep of one sensor in a window replaces the
   first (Autoware warns "already exists in the collector").
3. **At most** ``max_open_collectors`` groups are open (Autoware's pool of 3 collectors): a new
   group first discards the open group with the smallest reference (its sweeps are lost).
4. **Closing**: a group closes when it holds every sensor, or ``timeout`` after its first arrival
   (a deadline equal to now has passed), with the sweeps it has.
5. **Output stamp**: the oldest stamp of the group's sweeps. A group stamped before the newest
   published one is dropped unless ``publish_previous_but_late_pointcloud`` or it is more than
   ``rosbag_length`` older (a replay restarting); a group whose sweeps hold no point is not
   published either.
6. **Join order** (:func:`autoware_join_order`): Autoware concatenates in the iteration order of a
   ``std::unordered_map`` keyed by topic; with GCC's libstdc++ that order follows from the topics'
   hashes and the order they first arrived in the group. For topics in different buckets of its
   13 (the sample kit's three) it is the reverse of their arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ..core.config import ConfigError

Strategy = Literal["naive", "advanced"]
STRATEGIES: tuple[str, ...] = ("naive", "advanced")
NS_PER_S = 1_000_000_000
#: libstdc++'s bucket counts as a fresh ``unordered_map`` grows past 13, 29, ... entries.
_BUCKET_COUNTS = (13, 29, 59, 127, 257)
MAX_SENSORS = _BUCKET_COUNTS[-1]
_HASH_SEED = 0xC70F6907
_HASH_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class ConcatenationSettings:
    """Autoware's ``concatenate_and_time_sync_node`` parameters (validated: :class:`ConfigError`).

    Defaults are the sample sensor kit's ``concatenate_and_time_sync_node.param.yaml``; durations
    in integer nanoseconds. The last four are the joiner's (the caller's): kept so one object
    holds the file.

    Attributes:
        sensors: ``input_topics``, in their order (offsets and windows follow it).
        strategy: ``matching_strategy.type``.
        timeout_ns: ``timeout_sec``.
        offsets_ns, noise_windows_ns: ``matching_strategy.lidar_timestamp_offsets`` and
            ``lidar_timestamp_noise_window``, one per sensor (advanced; naive ignores them).
        max_open_collectors: open groups at most (Autoware's fixed pool of 3, rule 3).
        publish_previous_but_late: ``publish_previous_but_late_pointcloud`` (rule 5).
        rosbag_length_ns: ``rosbag_length`` (rule 5).
        output_frame, is_motion_compensated, publish_synchronized_pointcloud,
            keep_input_frame_in_synchronized_pointcloud: as Autoware's, for the joiner.
    """

    sensors: tuple[str, ...]
    strategy: Strategy = "advanced"
    timeout_ns: int = 200_000_000
    offsets_ns: tuple[int, ...] = ()
    noise_windows_ns: tuple[int, ...] = ()
    max_open_collectors: int = 3
    publish_previous_but_late: bool = False
    rosbag_length_ns: int = 10 * NS_PER_S
    output_frame: str = "base_link"
    is_motion_compensated: bool = True
    publish_synchronized_pointcloud: bool = True
    keep_input_frame_in_synchronized_pointcloud: bool = True

    def __post_init__(self) -> None:
        for problem in concatenation_problems(self):
            raise ConfigError(problem)

    def offset_ns(self, sensor: str) -> int:
        """The sensor's stamp offset (0 for naive)."""
        return self.offsets_ns[self.sensors.index(sensor)] if self.strategy == "advanced" else 0

    def noise_window_ns(self, sensor: str) -> int:
        """The sensor's noise window (0 for naive)."""
        if self.strategy != "advanced":
            return 0
        return self.noise_windows_ns[self.sensors.index(sensor)]

    @classmethod
    def from_autoware_parameters(cls, parameters: Mapping[str, Any]) -> ConcatenationSettings:
        """The settings of a ``ros__parameters`` mapping: ``matching_strategy`` nested or as
        dotted names; seconds rounded to the nearest nanosecond. Autoware's ROS-side parameters
        (``debug_mode``, ``maximum_queue_size``, ...) are not read."""
        strategy = dict(parameters.get("matching_strategy") or {})
        prefix = "matching_strategy."
        strategy.update(
            {k[len(prefix) :]: v for k, v in parameters.items() if k.startswith(prefix)}
        )
        values: dict[str, Any] = {
            "sensors": tuple(parameters.get("input_topics", ())),
            "strategy": strategy.get("type", "advanced"),
            "offsets_ns": tuple(map(_ns, strategy.get("lidar_timestamp_offsets", ()))),
            "noise_windows_ns": tuple(map(_ns, strategy.get("lidar_timestamp_noise_window", ()))),
        }
        for key, name in _PARAMETER_NAMES.items():
            if key in parameters:
                value = parameters[key]
                values[name] = _ns(value) if name.endswith("_ns") else value
        return cls(**values)


#: Autoware's names of the other parameters read, and the fields they set.
_PARAMETER_NAMES = {
    "timeout_sec": "timeout_ns",
    "rosbag_length": "rosbag_length_ns",
    "publish_previous_but_late_pointcloud": "publish_previous_but_late",
    "output_frame": "output_frame",
    "is_motion_compensated": "is_motion_compensated",
    "publish_synchronized_pointcloud": "publish_synchronized_pointcloud",
    "keep_input_frame_in_synchronized_pointcloud": "keep_input_frame_in_synchronized_pointcloud",
}


def concatenation_problems(settings: ConcatenationSettings) -> list[str]:
    """Every reason ``settings`` is invalid, as human-readable sentences (empty when valid)."""
    problems = []
    sensors = settings.sensors
    if not isinstance(sensors, tuple) or not all(isinstance(s, str) and s for s in sensors):
        problems.append(f"sensors must be a tuple of non-empty names, got {sensors!r}")
    elif not 2 <= len(sensors) <= MAX_SENSORS or len(set(sensors)) != len(sensors):
        problems.append(f"sensors must be 2 to {MAX_SENSORS} distinct names, got {sensors!r}")
    if settings.strategy not in STRATEGIES:
        problems.append(f"strategy must be one of {STRATEGIES}, got {settings.strategy!r}")
    if settings.strategy == "advanced":
        for name in ("offsets_ns", "noise_windows_ns"):
            values = getattr(settings, name)
            if not isinstance(values, tuple) or len(values) != len(sensors):
                problems.append(f"{name} must hold one integer per sensor, got {values!r}")
            elif not all(_is_int(v) for v in values):
                problems.append(f"{name} must be integers (nanoseconds), got {values!r}")
        if any(_is_int(v) and v < 0 for v in settings.noise_windows_ns):
            problems.append(f"noise windows must be >= 0 ns, got {settings.noise_windows_ns!r}")
    for name, low in (("timeout_ns", 1), ("max_open_collectors", 1), ("rosbag_length_ns", 0)):
        value = getattr(settings, name)
        if not _is_int(value) or value < low:
            problems.append(f"{name} must be an integer >= {low}, got {value!r}")
    if not isinstance(settings.output_frame, str) or not settings.output_frame:
        problems.append(
            f"output_frame must be a non-empty frame name, got {settings.output_frame!r}"
        )
    return problems


class Candidate(NamedTuple):
    """An open group as the matching rules see it."""

    reference_ns: int
    noise_window_ns: int
    has_sensor: bool


def match(
    settings: ConcatenationSettings,
    candidates: Sequence[Candidate],
    sensor: str,
    stamp_ns: int,
    arrival_ns: int,
) -> int | None:
    """The index of the open group a sweep joins (rules 1 and 2), or None for a new group."""
    if settings.strategy == "naive":
        best, best_gap = None, 0
        for index, candidate in enumerate(candidates):
            gap = abs(arrival_ns - candidate.reference_ns)
            if not candidate.has_sensor and (best is None or gap < best_gap):
                best, best_gap = index, gap
        return best
    time = stamp_ns - settings.offset_ns(sensor)
    noise = settings.noise_window_ns(sensor)
    for index, candidate in enumerate(candidates):
        low = candidate.reference_ns - candidate.noise_window_ns - noise
        high = candidate.reference_ns + candidate.noise_window_ns + noise
        if low < time < high:
            return index
    return None


def reference_for(
    settings: ConcatenationSettings, sensor: str, stamp_ns: int, arrival_ns: int
) -> tuple[int, int]:
    """``(reference, window)`` of a group a sweep opens (rules 1 and 2)."""
    if settings.strategy == "naive":
        return arrival_ns, 0
    return stamp_ns - settings.offset_ns(sensor), settings.noise_window_ns(sensor)


def libstdcxx_hash(text: str) -> int:
    """``std::hash<std::string>`` of GCC's libstdc++ on a 64-bit target (its ``_Hash_bytes``)."""
    data = text.encode()
    length = len(data)
    aligned = length & ~7
    value = _HASH_SEED ^ ((length * _HASH_MUL) & _MASK64)
    for start in range(0, aligned, 8):
        word = int.from_bytes(data[start : start + 8], "little")
        value ^= (_shift_mix((word * _HASH_MUL) & _MASK64) * _HASH_MUL) & _MASK64
        value = (value * _HASH_MUL) & _MASK64
    if length & 7:
        value ^= int.from_bytes(data[aligned:], "little")
        value = (value * _HASH_MUL) & _MASK64
    return _shift_mix((_shift_mix(value) * _HASH_MUL) & _MASK64)


def autoware_join_order(arrived: Sequence[str]) -> tuple[str, ...]:
    """Rule 6: the order Autoware (built with GCC) concatenates topics that first arrived in a
    group in the order ``arrived`` (distinct names, at most :data:`MAX_SENSORS`): each goes first
    in its hash bucket's run, or at the front when its bucket is empty, re-placed in the old order
    when the table grows."""
    order: list[str] = []
    buckets = _BUCKET_COUNTS[0]
    for name in arrived:
        if len(order) + 1 > buckets:
            buckets = next(count for count in _BUCKET_COUNTS if count >= len(order) + 1)
            previous, order = order, []
            for placed in previous:
                _place(order, placed, buckets)
        _place(order, name, buckets)
    return tuple(order)


def motion_compensation_notice(
    settings: ConcatenationSettings, twist_available: bool
) -> str | None:
    """One line for the log when motion compensation is asked for without a twist (else None)."""
    if not settings.is_motion_compensated or twist_available:
        return None
    return (
        "is_motion_compensated is true but no twist is given: sweeps are joined without motion "
        "compensation, each as of its own stamp (Autoware does the same with an empty twist "
        "queue and flags no_twist_available)"
    )


def format_stamp(ns: int) -> str:
    """A stamp as Autoware's diagnostics print it, seconds with 9 decimals (exact here)."""
    seconds, nanoseconds = divmod(abs(ns), NS_PER_S)
    return f"{'-' if ns < 0 else ''}{seconds}.{nanoseconds:09d}"


def _place(order: list[str], name: str, buckets: int) -> None:
    bucket = libstdcxx_hash(name) % buckets
    for position, placed in enumerate(order):
        if libstdcxx_hash(placed) % buckets == bucket:
            order.insert(position, name)
            return
    order.insert(0, name)


def _shift_mix(value: int) -> int:
    return value ^ (value >> 47)


def _ns(seconds: Any) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ConfigError(f"durations must be numbers of seconds, got {seconds!r}")
    if not math.isfinite(seconds):
        raise ConfigError(f"durations must be finite, got {seconds!r}")
    return round(seconds * NS_PER_S)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
