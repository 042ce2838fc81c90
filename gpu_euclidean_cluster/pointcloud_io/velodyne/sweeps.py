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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .calibration import VelodyneCalibration
from .packets import (
    FIRST_AZIMUTH_OFFSET,
    LAST_AZIMUTH_OFFSET,
    POINT_DTYPE,
    decode_packets,
    packets_reaching_points,
)
from .sensors import DecoderSettings, Family


@dataclass(frozen=True)
class Sweep:
    """One decoded sweep.

    Attributes:
        points: :data:`.packets.POINT_DTYPE` points, ``time_stamp`` in ns since :attr:`stamp`.
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
    """

    calibration: VelodyneCalibration
    settings: DecoderSettings
    decode: Callable[..., tuple[np.ndarray, np.ndarray]] = decode_packets
    _points: list[np.ndarray] = field(default_factory=list, init=False)
    _packets: int = field(default=0, init=False)
    _stamp: float = field(default=-1.0, init=False)
    _last_block_stamp: float = field(default=math.nan, init=False)
    _overflow: np.ndarray = field(default_factory=lambda: np.zeros(0, POINT_DTYPE), init=False)
    _previous_first: int = field(default=0, init=False)
    _opens: bool = field(default=True, init=False)
    _reset_pending: bool = field(default=False, init=False)

    def feed(self, packets: np.ndarray, packet_seconds: np.ndarray) -> list[Sweep]:
        """Decode packets in arrival order; return the sweeps they complete (often none).

        Args:
            packets: (P, 1206) uint8.
            packet_seconds: (P,) float64 packet stamps in seconds (see
                :func:`.packets.decode_packets`).
        """
        packets = np.asarray(packets, np.uint8).reshape(-1, 1206)
        seconds = np.asarray(packet_seconds, np.float64).reshape(-1)
        if packets.shape[0] != seconds.shape[0]:
            raise ValueError(f"{packets.shape[0]} packets but {seconds.shape[0]} stamps")
        if packets.shape[0] == 0:
            return []
        phase = self.settings.phase_centidegrees
        done = completing_packets(packets, phase, self._previous_first, self._opens)
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
            reaching = np.flatnonzero(packets_reaching_points(packets, self.settings))
            if reaching.size:
                self._stamp = float(seconds[reaching[0]])
        points, packet_index = self.decode(
            packets, seconds, self._stamp, self.calibration, self.settings
        )
        if points.shape[0]:
            self._last_block_stamp = float(seconds[packet_index[-1]])
            self._points.append(points)
        self._packets += packets.shape[0]
        if not completes:
            return None
        if len(self._points) == 1:  # one message, one sweep (the VLS-128's): no copy
            cloud = self._points[0]
        else:
            cloud = np.concatenate(self._points) if self._points else np.zeros(0, POINT_DTYPE)
        moving = self._trailing(cloud)
        self._overflow = cloud[cloud.shape[0] - moving :].copy()
        sweep = Sweep(
            cloud[: cloud.shape[0] - moving], self._stamp, self.settings.frame_id, self._packets
        )
        self._reset_pending = True
        return sweep

    def _trailing(self, cloud: np.ndarray) -> int:
        """How many trailing points move to the overflow (rule 2)."""
        if cloud.shape[0] == 0:
            return 0
        azimuth = cloud["azimuth"].astype(np.float64)
        phase = self.settings.phase_radians
        turned = 2 * math.pi + azimuth - phase
        if self.settings.sensor.family is Family.VLP32:
            moves = turned < math.pi / 2
        else:
            degrees = np.trunc(turned * 180.0 / math.pi).astype(np.int64) % 360
            moves = degrees < int(math.pi / 2 * 180.0 / math.pi)
        stays = np.flatnonzero(~moves)
        return cloud.shape[0] - (int(stays[-1]) + 1 if stays.size else 0)

    def _reset(self, packet_stamp: float) -> None:
        """Rule 3, at the first packet after a completed sweep."""
        self._points = []
        self._packets = 0
        overflow, self._overflow = self._overflow, np.zeros(0, POINT_DTYPE)
        if overflow.shape[0] == 0:
            self._stamp = -1.0
            return
        first_moved = self._stamp + 1e-9 * float(overflow["time_stamp"][0])
        if packet_stamp - first_moved > 0.05:
            self._stamp = -1.0
            return
        restamped = (self._stamp + 1e-9 * overflow["time_stamp"].astype(np.float64)) - (
            self._last_block_stamp
        )
        overflow["time_stamp"] = np.trunc(np.where(restamped < 0.0, 0.0, 1e9 * restamped)).astype(
            np.uint32
        )
        self._points.append(overflow)
        self._stamp = self._last_block_stamp
