"""Cutting the packet stream into sweeps, as nebula's ``VelodyneScanDecoder`` does.

:class:`SweepDecoder` is fed packets in arrival order (any number at a time: a sweep may span
``VelodyneScan`` messages) and returns each sweep as soon as the packet that completes it
arrives. The rules, from nebula's ``check_and_handle_scan_complete`` and its decoders'
``get_pointcloud``/``reset_overflow``:

1. Each packet's first and last block rotations (bytes 2-3 and 1102-1103) are phased:
   ``(36000 + azimuth - phase) % 36000``, ``phase = round(scan_phase * 100)``. A packet completes
   the sweep when it is not the sweep's first packet and its last phased azimuth is below its
   first, or its first is below the previous packet's first (:func:`completing_packets`).
2. The completing packet's points still join the sweep. Then the trailing points near the cut
   move to an overflow: VLP-16 and VLS-128 while ``(size_t) to_degrees(2 pi + azimuth - phase)
   % 360 < 90`` (``to_degrees(r) = r * 180.0 / M_PI``, ``phase = scan_phase * M_PI / 180.0``, in
   double), VLP-32 while ``2 pi + azimuth - phase < pi / 2``. The rest is the sweep, stamped
   with the sweep stamp.
3. At the next packet the overflow opens the next sweep, unless it is stale: with ``t0`` the old
   sweep stamp plus the first overflow point's ``time_stamp`` (``t0 = stamp + 1e-9 * ts``), a
   packet stamp more than 0.05 s after ``t0`` drops it. Kept points are restamped
   ``(uint32) (1e9 * max(stamp + 1e-9 * ts - last, 0))`` and the new sweep's stamp is ``last``,
   the stamp of the last packet that emitted a point. Without overflow the stamp is that of the
   first packet whose decoding reaches a return (:func:`.packets.packets_reaching_points`).

What the decoder checks, before any work (:meth:`SweepDecoder.feed`; nebula checks none of it),
each refusal a :class:`PacketsRefusedError` (a ``ValueError``, one line):

- the calibration is the model's (:func:`.calibration.check_calibration_model`), at construction;
- a call's packets are at most the model's budget, :attr:`.sensors.SensorModel.sweep_packet_budget`
  (two rotations at nebula's slowest 300 RPM, dual return: 603 VLP-16 packets, 7 505 VLS-128
  packets; the table in :mod:`.sensors`): more are refused, not decoded (``message_over_budget``);
- no packet carries the product id of another product (:data:`.sensors.PRODUCT_IDS`, byte 1205;
  0 is unset and passes, as does any id for the HDL-64E, whose byte there is a status): such
  packets are refused with their call (``other_model``);
- a sweep never holds more than that budget: when the packets of a call would take the sweep in
  progress past it (its azimuth never wrapped: a stopped motor, a stream of one heading), the
  sweep is cut and dropped with the call's packets, the decoder starts afresh, and the next call
  opens a new sweep (``sweep_over_budget``). So a sweep's points stay within
  :attr:`.sensors.SensorModel.sweep_point_budget` (92 MB for a VLS-128), and a call's decoding
  within the budget's time and memory (7 505 VLS-128 packets: about 2 s and 0.6 GB on one CPU
  core).

A refused call leaves the decoder as it was (``other_model``, ``message_over_budget``) or fresh
(``sweep_over_budget``); a call that fails otherwise (out of memory, say) leaves it fresh too.
Both twins share all of it: the GPU's ``DeviceSweepDecoder`` overrides only the array steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from .calibration import VelodyneCalibration, check_calibration_model
from .packets import (
    FIRST_AZIMUTH_OFFSET,
    LAST_AZIMUTH_OFFSET,
    PACKET_SIZE,
    POINT_DTYPE,
    decode_packets,
    packets_reaching_points,
)
from .sensors import (
    PRODUCT_ID_OFFSET,
    PRODUCT_IDS,
    SLOWEST_RPM,
    SWEEP_MARGIN,
    DecoderSettings,
    Family,
)


class PacketsRefusedError(ValueError):
    """Packets the sweep decoder refuses before decoding them (see the module docstring).

    Attributes:
        kind: ``message_over_budget``, ``other_model`` or ``sweep_over_budget``.
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class Sweep:
    """One decoded sweep.

    Attributes:
        points: :data:`.packets.POINT_DTYPE` points, ``time_stamp`` in ns since :attr:`stamp`
            (from the GPU's sweep decoder, ``cuda/codecs/velodyne_sweeps.py``: ``(N, 32)`` uint8
            CuPy rows in that layout).
        stamp: the sweep stamp in seconds (nebula's ``scan_timestamp_``; the cloud's header).
        frame_id: the settings' frame.
        packet_count: packets decoded into this sweep, counting the completing one.
    """

    points: np.ndarray
    stamp: float
    frame_id: str
    packet_count: int

    @property
    def stamp_ns(self) -> int:
        """:attr:`stamp` as integer nanoseconds (``round(stamp * 1e9)``)."""
        return round(self.stamp * 1e9)


def _phased(packets: np.ndarray, offset: int, phase: int) -> np.ndarray:
    azimuth = packets[:, offset].astype(np.int64) | (packets[:, offset + 1].astype(np.int64) << 8)
    return (36000 + azimuth - phase) % 36000


def completing_packets(
    packets: np.ndarray,
    phase: int,
    previous_first: int = 0,
    first_is_new_sweep: bool = True,
) -> np.ndarray:
    """(P,) bool: the packets that complete a sweep (rule 1).

    Args:
        packets: (P, 1206) uint8.
        phase: ``round(scan_phase * 100)`` centidegrees.
        previous_first: the phased first azimuth of the packet before ``packets[0]``.
        first_is_new_sweep: ``packets[0]`` opens a sweep (the stream's first packet, or the one
            after a completing packet), so it cannot complete one.
    """
    first = _phased(packets, FIRST_AZIMUTH_OFFSET, phase)
    last = _phased(packets, LAST_AZIMUTH_OFFSET, phase)
    before = np.concatenate([[previous_first], first[:-1]])
    candidate = (last < first) | (first < before)
    done = np.zeros(candidate.shape, bool)
    opens = first_is_new_sweep
    for i in np.flatnonzero(candidate):
        # a candidate completes unless it opens a sweep (right after a completing packet)
        if i == 0:
            done[i] = not opens
        else:
            done[i] = not done[i - 1]
    return done


@dataclass
class SweepDecoder:
    """Stateful sweep cutting over :func:`.packets.decode_packets` (see the module docstring).

    Args:
        calibration: the sensor's calibration.
        settings: decoder settings.
        decode: the per-packet decoder, with :func:`.packets.decode_packets`' signature and
            result (NumPy points); the CUDA twin's ``CudaPacketDecoder.decode_with`` (in
            ``cuda/codecs/velodyne.py``) decodes on the GPU, the cutting stays here.

    Raises:
        CalibrationError: the calibration is not the model's (another laser count or ids).
    """

    calibration: VelodyneCalibration
    settings: DecoderSettings
    decode: Callable[..., tuple[np.ndarray, np.ndarray]] = decode_packets
    _points: list[np.ndarray] = field(default_factory=list, init=False)
    _packets: int = field(default=0, init=False)
    _stamp: float = field(default=-1.0, init=False)
    _last_block_stamp: float = field(default=math.nan, init=False)
    _overflow: np.ndarray = field(default_factory=lambda: np.zeros(0, POINT_DTYPE), init=False)
    _overflow_first_ns: int = field(default=0, init=False)
    _previous_first: int = field(default=0, init=False)
    _opens: bool = field(default=True, init=False)
    _reset_pending: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        check_calibration_model(self.calibration, self.settings.sensor)

    def feed(self, packets: np.ndarray, packet_seconds: np.ndarray) -> list[Sweep]:
        """Decode packets in arrival order; return the sweeps they complete (often none).

        Args:
            packets: (P, 1206) uint8.
            packet_seconds: (P,) float64 packet stamps in seconds (see
                :func:`.packets.decode_packets`).

        Raises:
            PacketsRefusedError: over the budget or of another model (the module docstring), before
                any work.
            ValueError: as many stamps as packets are needed.
        """
        packets = np.asarray(packets, np.uint8).reshape(-1, PACKET_SIZE)
        seconds = np.asarray(packet_seconds, np.float64).reshape(-1)
        if packets.shape[0] != seconds.shape[0]:
            raise ValueError(f"{packets.shape[0]} packets but {seconds.shape[0]} stamps")
        if packets.shape[0] == 0:
            return []
        self._check_packets(packets)
        phase = self.settings.phase_centidegrees
        done = completing_packets(packets, phase, self._previous_first, self._opens)
        self._check_sweep_budget(done)
        try:
            return self._cut(packets, seconds, done)
        except BaseException:
            self.restart()  # whatever failed, the next call finds a consistent decoder
            raise

    @property
    def held_packets(self) -> int:
        """Packets decoded into the sweep in progress (0 once a sweep completed): at most the
        model's :attr:`~.sensors.SensorModel.sweep_packet_budget`."""
        return 0 if self._reset_pending else self._packets

    def restart(self) -> None:
        """Forget the stream: the state of a fresh decoder (the next packet opens a sweep)."""
        for state in fields(self):
            if not state.init:
                fresh = state.default_factory() if state.default is MISSING else state.default
                setattr(self, state.name, fresh)

    def _check_packets(self, packets: np.ndarray) -> None:
        """Refuse a call over the budget or with another model's packets (state untouched)."""
        model = self.settings.sensor
        budget = model.sweep_packet_budget
        if packets.shape[0] > budget:
            raise PacketsRefusedError(
                "message_over_budget",
                f"{packets.shape[0]} packets at once, over the {model.name} budget of {budget} "
                f"({SWEEP_MARGIN} rotations at {SLOWEST_RPM} RPM, dual return): not decoded",
            )
        if not model.product_ids:
            return
        counts = np.bincount(packets[:, PRODUCT_ID_OFFSET], minlength=256)
        foreign = [pid for pid in np.flatnonzero(counts) if model.foreign_product(int(pid))]
        if foreign:
            pid = int(foreign[0])
            ours = " or ".join(f"{i:#04x}" for i in model.product_ids)
            raise PacketsRefusedError(
                "other_model",
                f"{int(counts[foreign].sum())} of {packets.shape[0]} packets carry product id "
                f"{pid:#04x} ({PRODUCT_IDS[pid]}), not a {model.name}'s ({ours}): not decoded "
                "(is sensor_model right for this topic?)",
            )

    def _check_sweep_budget(self, done: np.ndarray) -> None:
        """Cut the sweep in progress when this call's packets up to its first completing one
        would take it past the budget: the sweep and the call are dropped, the decoder starts
        afresh (only the first part of a call can: every later part opens a sweep of its own,
        within the call, within the budget)."""
        model = self.settings.sensor
        budget = model.sweep_packet_budget
        held = self.held_packets
        ends = np.flatnonzero(done)
        first = int(ends[0]) + 1 if ends.size else done.shape[0]
        if held + first <= budget:
            return
        self.restart()
        raise PacketsRefusedError(
            "sweep_over_budget",
            f"a sweep still not complete after {held} packets, {first} more would pass the "
            f"{model.name} budget of {budget} ({SWEEP_MARGIN} rotations at {SLOWEST_RPM} RPM, "
            f"dual return; is the sensor turning?): the sweep is cut and dropped with these "
            f"{done.shape[0]} packets, the next ones open a new sweep",
        )

    def _cut(self, packets: np.ndarray, seconds: np.ndarray, done: np.ndarray) -> list[Sweep]:
        """Rules 1-3 on checked packets, ``done`` their completing flags."""
        phase = self.settings.phase_centidegrees
        self._previous_first = int(_phased(packets[-1:], FIRST_AZIMUTH_OFFSET, phase)[0])
        self._opens = bool(done[-1])
        sweeps = []
        start = 0
        for end in [*(np.flatnonzero(done) + 1), packets.shape[0]]:
            if end <= start:
                continue
            sweep = self._run(packets[start:end], seconds[start:end], bool(done[end - 1]))
            if sweep is not None:
                sweeps.append(sweep)
            start = end
        return sweeps

    def _run(self, packets: np.ndarray, seconds: np.ndarray, completes: bool) -> Sweep | None:
        """Packets of one sweep, the last one completing it when ``completes``."""
        if self._reset_pending:
            self._reset(float(seconds[0]))
            self._reset_pending = False
        if self._stamp < 0:
            reaching = first_packet_reaching_points(packets, self.settings)
            if reaching is not None:
                self._stamp = float(seconds[reaching])
        points, packet_index = self.decode(
            packets, seconds, self._stamp, self.calibration, self.settings
        )
        if points.shape[0]:
            self._last_block_stamp = float(seconds[int(packet_index[-1])])
            self._points.append(points)
        self._packets += packets.shape[0]
        if not completes:
            return None
        # one message, one sweep (the VLS-128's): no copy
        cloud = self._points[0] if len(self._points) == 1 else self._join(self._points)
        kept, self._overflow, self._overflow_first_ns = self._split_trailing(cloud)
        sweep = Sweep(kept, self._stamp, self.settings.frame_id, self._packets)
        self._reset_pending = True
        return sweep

    # -- the array steps: NumPy's here, the device's in ``cuda/codecs/velodyne_sweeps.py`` ----

    def _join(self, parts: list[np.ndarray]) -> np.ndarray:
        """The sweep's points, its parts concatenated in order."""
        return np.concatenate(parts) if parts else np.zeros(0, POINT_DTYPE)

    def _split_trailing(self, cloud: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """``(sweep, overflow, first)``: the points that stay, a copy of the trailing points
        that move to the overflow (rule 2), and the overflow's first ``time_stamp`` (0 when
        empty)."""
        stays = np.flatnonzero(~trailing_moves(cloud["azimuth"], self.settings, np))
        kept = int(stays[-1]) + 1 if stays.size else 0
        overflow = cloud[kept:].copy()
        return cloud[:kept], overflow, int(overflow["time_stamp"][0]) if overflow.size else 0

    def _restamp(self, overflow: np.ndarray, stamp: float, last: float) -> np.ndarray:
        """The overflow with its ``time_stamp`` moved from ``stamp`` to ``last`` (rule 3)."""
        overflow["time_stamp"] = restamped_ns(overflow["time_stamp"], stamp, last, np)
        return overflow

    def _reset(self, packet_stamp: float) -> None:
        """Rule 3, at the first packet after a completed sweep."""
        self._points = []
        self._packets = 0
        overflow, self._overflow = self._overflow, self._overflow[:0]
        if overflow.shape[0] == 0:
            self._stamp = -1.0
            return
        first_moved = self._stamp + 1e-9 * float(self._overflow_first_ns)
        if packet_stamp - first_moved > 0.05:
            self._stamp = -1.0
            return
        self._points.append(self._restamp(overflow, self._stamp, self._last_block_stamp))
        self._stamp = self._last_block_stamp


def first_packet_reaching_points(packets: np.ndarray, settings: DecoderSettings) -> int | None:
    """The index of the first packet whose decoding reaches a return (it sets the sweep stamp),
    or None: :func:`.packets.packets_reaching_points` on chunks growing eightfold from one packet
    (the test is per packet, and the first packet usually answers: a VLS-128 message of 600
    packets then costs one packet's test, not 1.4 ms)."""
    start, size = 0, 1
    while start < packets.shape[0]:
        found = np.flatnonzero(packets_reaching_points(packets[start : start + size], settings))
        if found.size:
            return start + int(found[0])
        start, size = start + size, size * 8
    return None


def trailing_moves(azimuth: Any, settings: DecoderSettings, xp: Any) -> Any:
    """(N,) bool: the points rule 2 would move to the overflow, were they trailing; ``azimuth``
    float32 radians, NumPy or CuPy (``xp``), each operation rounded as nebula's double code."""
    turned = 2 * math.pi + azimuth.astype(xp.float64) - settings.phase_radians
    if settings.sensor.family is Family.VLP32:
        return turned < math.pi / 2
    degrees = xp.trunc(turned * 180.0 / math.pi).astype(xp.int64) % 360
    return degrees < int(math.pi / 2 * 180.0 / math.pi)


#: The largest restamped offset, ns, before the wrap to 32 bits (see :func:`restamped_ns`).
RESTAMP_LIMIT_NS = 2.0**62


def restamped_ns(time_stamp: Any, stamp: float, last: float, xp: Any) -> Any:
    """Rule 3's new ``time_stamp`` of points stamped ``time_stamp`` ns after ``stamp``, relative
    to ``last``: ``(uint32) (1e9 * max(stamp + 1e-9 * ts - last, 0))``, NumPy or CuPy. A value
    past 2**32 (only packet stamps running backwards make one) keeps its low 32 bits, through
    int64 as x86 converts nebula's double; beyond 2**62 ns (146 years) it is held at 2**62 first,
    so that both twins wrap the same number."""
    moved = (stamp + 1e-9 * time_stamp.astype(xp.float64)) - last
    ns = xp.where(moved < 0.0, 0.0, 1e9 * moved)
    ns = xp.where(ns > RESTAMP_LIMIT_NS, RESTAMP_LIMIT_NS, ns)
    return xp.trunc(ns).astype(xp.int64).astype(xp.uint32)
