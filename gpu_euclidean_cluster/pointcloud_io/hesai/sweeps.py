"""Cutting the Hesai packet stream into sweeps, as nebula's ``HesaiDecoder`` does.

:class:`SweepDecoder` is fed the packets of ``PandarScan`` messages in arrival order (any number
at a time: a sweep spans messages) and returns each sweep as soon as the block group that
completes it arrives. Per call:

1. The packets are checked and split (:func:`.packets.parse_packets`); their block groups'
   corrected azimuths (:mod:`.angles`) go through the scan cutter (:mod:`.scan_cutter`), which
   puts each channel of each group into one of two buffers and says when a buffer is stamped
   and when it is emitted as a sweep.
2. The kept returns (:func:`.packets.decode_returns`) join their channel's buffer in nebula's
   order (group, channel, return). A buffer emitted at group ``k`` holds the returns of the
   groups before ``k`` since its last emission; the group's own returns go to the next sweep.
3. A buffer's stamp (``scan_timestamp_ns``, uint64) is set when the cutter stamps it: the
   packet's stamp plus the group's earliest firing offset (:func:`.timing.earliest_offsets`);
   it is 0 until then. A return's ``time_stamp`` is ``(uint32) (packet_stamp - stamp) +
   offset`` (the buffer's stamp when the return was decoded, its firing offset; modulo 2^32).
   The sweep's stamp is its buffer's stamp when emitted.

What the decoder checks, before any work, each refusal a :class:`.packets.PacketsRefusedError`
(a ``ValueError``, one line), leaving the decoder as it was unless said otherwise:

- the calibration is the model's (:func:`.calibration.check_calibration_model`), at
  construction;
- a call holds packets (``no_packets``) and at most the model's budget,
  :attr:`.sensors.HesaiModel.sweep_packet_budget` (``message_over_budget``);
- the packets are the model's, whole, and sane (:func:`.packets.parse_packets`: ``packet_size``,
  ``other_model``, ``return_mode``, ``azimuth``);
- no more than the budget's packets go by without a sweep (the azimuth never reaching the cut:
  a stopped motor): the call that would pass it is refused and the decoder starts afresh
  (``sweep_over_budget``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .angles import CalibrationAngles, CorrectionAngles, corrector_for
from .calibration import HesaiCalibration, HesaiCorrection, check_calibration_model
from .packets import (
    POINT_DTYPE,
    BlockGroups,
    DecodedReturns,
    PacketFields,
    PacketsRefusedError,
    block_groups,
    decode_returns,
    parse_packets,
)
from .scan_cutter import EMIT, STAMP, Cut, CutterState, cut_groups
from .sensors import DecoderSettings
from .timing import earliest_offsets

_NS = 1_000_000_000
_U64 = 2**64


@dataclass(frozen=True)
class Sweep:
    """One decoded sweep.

    Attributes:
        points: :data:`.packets.POINT_DTYPE` points, ``time_stamp`` in ns since the stamp.
        stamp_ns: the sweep stamp (nebula's ``scan_timestamp_ns``), integer nanoseconds.
        frame_id: the settings' frame.
    """

    points: np.ndarray
    stamp_ns: int
    frame_id: str

    @property
    def stamp(self) -> float:
        """The stamp in seconds as nebula hands it on: ``(double) (ns / 10^9) + (double) (ns %
        10^9) / 1e9``."""
        return float(self.stamp_ns // _NS) + float(self.stamp_ns % _NS) / 1e9


@dataclass
class SweepDecoder:
    """Stateful sweep cutting of a Hesai packet stream (see the module docstring).

    Args:
        calibration: the model's calibration (a CSV's, or the AT128's ``.dat``).
        settings: decoder settings.
        decode_with: decodes the kept returns of a call's packets, ``(packets, fields,
            groups, keep_channel) -> DecodedReturns`` as :func:`.packets.decode_returns`
            gives them; None: that function, on the CPU. The CUDA twin's
            (``cuda/codecs/hesai.py``, ``hesai_sweep_decoder``) decodes on the GPU, the cutting
            stays here.

    Raises:
        CalibrationError: the calibration is not the model's kind or channel count.
    """

    calibration: HesaiCalibration | HesaiCorrection
    settings: DecoderSettings
    decode_with: Callable[..., DecodedReturns] | None = None
    _cutter: CutterState | None = field(default=None, init=False)
    _stamps: list[int] = field(default_factory=lambda: [0, 0], init=False)
    _pending: list[list[np.ndarray]] = field(default_factory=lambda: [[], []], init=False)
    _held: int = field(default=0, init=False)
    _corrector: CalibrationAngles | CorrectionAngles = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_calibration_model(self.calibration, self.settings.sensor)
        self._corrector = corrector_for(self.calibration)

    @property
    def held_packets(self) -> int:
        """Packets decoded since the last sweep was emitted."""
        return self._held

    def restart(self) -> None:
        """Forget the stream: the next packet is the stream's first."""
        self._cutter = None
        self._stamps = [0, 0]
        self._pending = [[], []]
        self._held = 0

    def feed(self, packets: np.ndarray, sizes: np.ndarray) -> list[Sweep]:
        """Decode packets in arrival order; return the sweeps they complete (often none).

        Args:
            packets: (P, W) uint8 packet bytes (``PandarPacket.data``, W 1500).
            sizes: (P,) their ``size`` fields: the bytes of each packet.

        Raises:
            PacketsRefusedError: see the module docstring; nothing is decoded.
        """
        packets = np.asarray(packets, np.uint8)
        if packets.ndim != 2:
            raise ValueError(f"packets must be (P, W) uint8, got shape {packets.shape}")
        model = self.settings.sensor
        count = packets.shape[0]
        if count == 0:
            raise PacketsRefusedError(
                "no_packets", f"a PandarScan without packets: no {model.name} data to decode"
            )
        budget = model.sweep_packet_budget
        if count > budget:
            raise PacketsRefusedError(
                "message_over_budget",
                f"{count} packets at once, over the {model.name} budget of {budget}: not decoded",
            )
        fields = parse_packets(packets, sizes, self.settings, self._corrector)
        groups = block_groups(fields, model.packet.blocks)
        corrected = self._corrector.azimuths(fields.encoder[groups.packet, groups.block])
        cutter, cut = cut_groups(self._cutter, corrected, self.settings)
        emits = [group for group, action, _ in cut.events if action == EMIT]
        first_packet = int(groups.packet[emits[0]]) + 1 if emits else count
        if self._held + first_packet > budget:
            held = self._held
            self.restart()
            raise PacketsRefusedError(
                "sweep_over_budget",
                f"no sweep completed in {held} packets, {first_packet} more would pass the "
                f"{model.name} budget of {budget} (is the sensor turning?): the sweep is dropped "
                f"with these {count} packets, the next ones open a new stream",
            )
        try:
            sweeps = self._assemble(packets, fields, groups, cut)
        except BaseException:
            self.restart()
            raise
        self._cutter = cutter
        last_emit = int(groups.packet[emits[-1]]) if emits else -1
        self._held = count - last_emit - 1 + (0 if emits else self._held)
        return sweeps

    def _assemble(
        self, packets: np.ndarray, fields: PacketFields, groups: BlockGroups, cut: Cut
    ) -> list[Sweep]:
        """Rules 2 and 3: the returns into buffers, stamped; the emitted buffers as sweeps."""
        model = self.settings.sensor
        if self.decode_with is None:
            keep = cut.keep_channel
            decoded = decode_returns(fields, groups, keep, self.settings, self._corrector)
        else:
            decoded = self.decode_with(packets, fields, groups, cut.keep_channel)
        point_group = decoded.group
        buffer = cut.buffer[point_group, decoded.points["channel"].astype(np.int64)]
        stamped = [(g, b) for g, action, b in cut.events if action == STAMP]
        stamp_groups = np.array([g for g, _ in stamped], np.int64)
        packet = groups.packet[stamp_groups]
        earliest = earliest_offsets(
            model.name,
            model.channels,
            groups.block[stamp_groups],
            groups.returns[stamp_groups],
            fields.mode_flag[packet],
            fields.operational_state[packet],
            fields.azimuth_state[packet],
        )
        values = [
            (int(fields.stamp_ns[p]) + int(offset)) % _U64
            for p, offset in zip(packet, earliest, strict=True)
        ]
        # the stamp each buffer holds at each point's group
        point_stamp = np.zeros(point_group.shape[0], np.uint64)
        for b in (0, 1):
            mine = [i for i, (_, sb) in enumerate(stamped) if sb == b]
            at = stamp_groups[mine]
            table = np.array([self._stamps[b]] + [values[i] for i in mine], np.uint64)
            index = np.searchsorted(at, point_group, side="right")
            point_stamp = np.where(buffer == b, table[index], point_stamp)
        packet_stamp = fields.stamp_ns[groups.packet[point_group]]
        with np.errstate(over="ignore"):
            since = (packet_stamp - point_stamp) & np.uint64(0xFFFFFFFF)
        points = decoded.points
        points["time_stamp"] = ((since.astype(np.int64) + decoded.offset_ns) % 2**32).astype(
            np.uint32
        )
        # emissions, in order; each buffer's points by epoch (emissions of it up to the point)
        sweeps: list[Sweep] = []
        emitted = {0: [], 1: []}
        for group, action, b in cut.events:
            if action == EMIT:
                emitted[b].append(group)
        epoch = np.zeros(point_group.shape[0], np.int64)
        for b in (0, 1):
            index = np.searchsorted(np.array(emitted[b], np.int64), point_group, side="right")
            epoch = np.where(buffer == b, index, epoch)
        done = {0: 0, 1: 0}
        for group, action, b in cut.events:
            if action == STAMP:
                self._stamps[b] = values[stamped.index((group, b))]
                continue
            part = points[(buffer == b) & (epoch == done[b])]
            parts = [*self._pending[b], part]
            cloud = np.concatenate(parts) if len(parts) > 1 else part
            sweeps.append(Sweep(cloud, self._stamps[b], self.settings.frame_id))
            self._pending[b] = []
            done[b] += 1
        for b in (0, 1):
            rest = points[(buffer == b) & (epoch == done[b])]
            if rest.shape[0]:
                self._pending[b].append(rest)
        return sweeps


__all__ = ["POINT_DTYPE", "PacketsRefusedError", "Sweep", "SweepDecoder"]
