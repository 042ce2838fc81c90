"""Hesai packets: their checks, their fields, and the returns nebula keeps from them.

A packet's blocks go in **groups** of ``n`` blocks, ``n`` the returns per firing of the packet's
return-mode byte (:data:`.sensors.RETURN_MODE_BYTES`): blocks ``0 .. n - 1``, ``n .. 2n - 1``,
... of one packet hold the ``n`` returns of one firing, and the group's first block's azimuth
is the group's encoder azimuth. nebula decodes the groups in stream order; this module's
:func:`decode_returns` gives, for given groups, every return nebula keeps, in nebula's order
(group, then channel, then return), each computed independently from its packet (a GPU twin can
run one thread per group, channel and return and compact the kept ones in that order).

Per return ``r`` of channel ``c`` of group ``g`` (float is float32, double float64, ``f(x)``
rounds a double to float32; each operation rounded once, never fused):

1. ``distance = f(raw * dis_unit)``: the ``uint16`` raw distance times the header's
   ``dis_unit / 1000.`` (double; the 40P: ``4 / 1000.``).
2. Kept when ``raw != 0``; the model's float32 limits ``min <= distance <= max``; the
   settings' ``min_range <= (double) distance <= max_range``; and, unless ``r`` is the group's
   last return, no other return of the group (same channel) is identical (same raw distance
   and reflectivity) and ``fabsf(distance_i - distance) < dual_return_distance_threshold``
   (double) holds for none; and the channel is inside the field of view and the group
   intersects it (:mod:`.scan_cutter`).
3. The return type (nebula's ``ReturnType`` numbers): IDENTICAL (6) when another return of the
   group is identical; otherwise by the packet's mode: single first 2, second 7, strongest 3,
   last 1; dual last+strongest ``r`` 0: 10 when strongest else 1, ``r`` 1: 3 when strongest
   else 8; dual first+strongest likewise with 9 and 2 for ``r`` 0; dual first+second 2, 7;
   dual first+last 2, 1 (swapped to 1, 2 for the models that list the last return first,
   :attr:`.sensors.HesaiModel.swaps_first_last`); dual strongest+second 3, 8; triple 2, 1, 3.
   Strongest: no other return of the group has a greater reflectivity.
4. Angles (:mod:`.angles`) of the group's encoder azimuth and the channel; ``xy =
   distance * cos_el``; ``x = xy * sin_az``; ``y = xy * cos_az``; ``z = distance * sin_el``
   (float).
5. ``intensity`` the reflectivity byte, ``channel`` c, ``azimuth``/``elevation`` radians, and
   the firing's offset from the packet stamp (:mod:`.timing`) for the sweep's ``time_stamp``.

:func:`parse_packets` checks the packets first (each refusal a :class:`PacketsRefusedError`,
one line): the ``size`` of each at least the format's (``packet_size``); the header's start
bytes, laser and block counts (the 40P: every block's start bytes) the model's
(``other_model``); a known return-mode byte with at most the model's returns (``return_mode``);
every group's encoder azimuth within a turn (AT128: inside one of the ``.dat``'s fields)
(``azimuth``). nebula checks only the size: the others would read past its arrays or throw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..velodyne.packets import POINT_DTYPE
from .angles import CalibrationAngles, CorrectionAngles
from .sensors import RETURN_MODE_BYTES, DecoderSettings, HesaiModel
from .timing import point_time_offsets

#: nebula's ``ReturnType`` numbers.
RETURN_UNKNOWN, RETURN_LAST, RETURN_FIRST, RETURN_STRONGEST = 0, 1, 2, 3
RETURN_IDENTICAL, RETURN_SECOND, RETURN_SECONDSTRONGEST = 6, 7, 8
RETURN_FIRST_STRONGEST, RETURN_LAST_STRONGEST = 9, 10


class PacketsRefusedError(ValueError):
    """Packets refused before any decoding (one line).

    Attributes:
        kind: ``packet_size``, ``other_model``, ``return_mode``, ``azimuth``, ``no_packets``,
            ``message_over_budget`` or ``sweep_over_budget``.
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class PacketFields:
    """The fields of ``P`` checked packets.

    Attributes:
        encoder: (P, B) int64 block azimuths (AT128: ``(azimuth << 8) + fine``).
        raw: (P, B, C) int64 raw distances; ``reflectivity``: (P, B, C) uint8.
        mode: (P,) int64 return-mode bytes; ``returns``: (P,) int64 returns per firing.
        dis_unit: (P,) float64 metres per raw unit (``dis_unit / 1000.``).
        stamp_ns: (P,) uint64 packet stamps (date and microseconds, wrapping as nebula's).
        mode_flag, operational_state, azimuth_state: (P,) int64 tail fields (0 where absent).
    """

    encoder: np.ndarray
    raw: np.ndarray
    reflectivity: np.ndarray
    mode: np.ndarray
    returns: np.ndarray
    dis_unit: np.ndarray
    stamp_ns: np.ndarray
    mode_flag: np.ndarray
    operational_state: np.ndarray
    azimuth_state: np.ndarray


@dataclass(frozen=True)
class BlockGroups:
    """Block groups in stream order: (G,) int64 ``packet``, first ``block`` and ``returns``."""

    packet: np.ndarray
    block: np.ndarray
    returns: np.ndarray

    @property
    def count(self) -> int:
        """Groups held."""
        return int(self.packet.shape[0])


def _u16(packets: np.ndarray, at: int | np.ndarray) -> np.ndarray:
    return packets[..., at].astype(np.int64) | (
        packets[..., np.asarray(at) + 1].astype(np.int64) << 8
    )


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of a proleptic Gregorian date (month 1-12; ``day`` any)."""
    y = year - (month <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def packet_seconds(packets: np.ndarray, model: HesaiModel) -> np.ndarray:
    """(P,) int64 whole seconds of the packets' dates: ``timegm`` of the date fields (out of
    range fields carried over as ``timegm`` normalises them), or the AT128's 40-bit count."""
    fmt = model.packet
    at = fmt.date_at
    if fmt.date_kind == "epoch":
        seconds = np.zeros(packets.shape[0], np.int64)
        for index in range(1, 6):
            seconds = (seconds << 8) | packets[:, at + index].astype(np.int64)
        return seconds
    date = packets[:, at : at + 6].astype(np.int64)
    year = date[:, 0] + (2000 if fmt.date_kind == "ymd2000" else 1900)
    month0 = date[:, 1] - 1
    year = year + np.floor_divide(month0, 12)
    month = month0 % 12 + 1
    days = _days_from_civil(year, month, np.ones_like(year)) + date[:, 2] - 1
    return days * 86400 + date[:, 3] * 3600 + date[:, 4] * 60 + date[:, 5]


def parse_packets(
    packets: np.ndarray,
    sizes: np.ndarray,
    settings: DecoderSettings,
    corrector: CalibrationAngles | CorrectionAngles,
) -> PacketFields:
    """Check ``(P, W)`` uint8 packets of ``sizes`` bytes each and split them into fields.

    Raises:
        PacketsRefusedError: see the module docstring.
    """
    model = settings.sensor
    fmt = model.packet
    packets = np.asarray(packets, np.uint8)
    sizes = np.asarray(sizes, np.int64).reshape(-1)
    count = packets.shape[0]
    if packets.ndim != 2 or sizes.shape[0] != count:
        raise ValueError(f"packets must be (P, W) uint8 with P sizes, got {packets.shape}")
    _check_sizes(packets, sizes, model)
    _check_model(packets, model)
    mode = packets[:, fmt.return_mode_at].astype(np.int64)
    returns = np.zeros(count, np.int64)
    for byte, (_, n) in RETURN_MODE_BYTES.items():
        returns[mode == byte] = n
    bad = np.flatnonzero((returns == 0) | (returns > fmt.max_returns))
    if bad.size:
        byte = int(mode[bad[0]])
        known = RETURN_MODE_BYTES.get(byte)
        what = f"{known[0]}, {known[1]} returns" if known else "unknown"
        raise PacketsRefusedError(
            "return_mode",
            f"{bad.size} of {count} packets carry return mode {byte:#04x} ({what}), which a "
            f"{model.name} does not send (at most {fmt.max_returns} returns): not decoded",
        )
    body = packets[:, fmt.header : fmt.header + fmt.blocks * fmt.block_size]
    blocks = body.reshape(count, fmt.blocks, fmt.block_size)
    encoder = _u16(blocks, fmt.azimuth_at)
    if fmt.fine_azimuth:
        encoder = (encoder << 8) + blocks[:, :, fmt.azimuth_at + 2].astype(np.int64)
    units = blocks[:, :, fmt.units_at :].reshape(count, fmt.blocks, fmt.channels, fmt.unit_size)
    raw = units[..., 0].astype(np.int64) | (units[..., 1].astype(np.int64) << 8)
    if fmt.dis_unit_at < 0:
        dis_unit = np.full(count, 4 / 1000.0)
    else:
        dis_unit = packets[:, fmt.dis_unit_at].astype(np.float64) / 1000.0
    micros = np.zeros(count, np.int64)
    for index in range(4):
        micros |= packets[:, fmt.timestamp_at + index].astype(np.int64) << (8 * index)
    seconds = packet_seconds(packets, model).astype(np.uint64)
    with np.errstate(over="ignore"):
        stamp = seconds * np.uint64(1_000_000_000) + micros.astype(np.uint64) * np.uint64(1000)

    def tail(at: int, width: int = 1) -> np.ndarray:
        if at < 0:
            return np.zeros(count, np.int64)
        return _u16(packets, at) if width == 2 else packets[:, at].astype(np.int64)

    fields = PacketFields(
        encoder=encoder,
        raw=raw,
        reflectivity=units[..., 2].copy(),
        mode=mode,
        returns=returns,
        dis_unit=dis_unit,
        stamp_ns=stamp,
        mode_flag=tail(fmt.mode_flag_at),
        operational_state=tail(fmt.operational_state_at),
        azimuth_state=tail(fmt.azimuth_state_at, 2),
    )
    _check_azimuths(fields, block_groups(fields, fmt.blocks), model, corrector)
    return fields


def _check_sizes(packets: np.ndarray, sizes: np.ndarray, model: HesaiModel) -> None:
    width = packets.shape[1]
    over = np.flatnonzero(sizes > width)
    if over.size:
        raise PacketsRefusedError(
            "packet_size",
            f"packet {int(over[0])} claims {int(sizes[over[0]])} bytes, beyond its {width} data "
            "bytes: not decoded",
        )
    short = np.flatnonzero(sizes < model.packet.size)
    if short.size:
        first = int(short[0])
        raise PacketsRefusedError(
            "packet_size",
            f"{short.size} of {sizes.shape[0]} packets are shorter than a {model.name} packet "
            f"(packet {first}: {int(sizes[first])} bytes, {model.packet.size} needed; is "
            "sensor_model right for this topic?): not decoded",
        )


def _check_model(packets: np.ndarray, model: HesaiModel) -> None:
    fmt = model.packet
    if fmt.header:
        start = _u16(packets, 0)
        lasers = packets[:, fmt.laser_num_at].astype(np.int64)
        blocks = packets[:, fmt.laser_num_at + 1].astype(np.int64)
        wrong = (start != 0xFFEE) | (lasers != fmt.channels) | (blocks != fmt.blocks)
        major = packets[:, 2].astype(np.int64)
        if fmt.protocol_majors:
            wrong |= ~np.isin(major, fmt.protocol_majors)
        first = int(np.argmax(wrong))
        seen = (
            f"start {int(start[first]):#06x}, {int(lasers[first])} lasers, "
            f"{int(blocks[first])} blocks"
            + (
                f", protocol {int(major[first])}.{int(packets[first, 3])}"
                if fmt.header == 12
                else ""
            )
        )
    else:
        starts = np.arange(fmt.blocks) * fmt.block_size
        wrong = (_u16(packets, starts) != 0xEEFF).any(axis=1)
        seen = "a block without its 0xFF 0xEE start"
    if wrong.any():
        majors = (
            f", protocol {' or '.join(f'{m}.x' for m in fmt.protocol_majors)}"
            if fmt.protocol_majors
            else ""
        )
        raise PacketsRefusedError(
            "other_model",
            f"{int(wrong.sum())} of {packets.shape[0]} packets are not {model.name} packets "
            f"({seen}; a {model.name} packet has {fmt.channels} lasers and {fmt.blocks} "
            f"blocks{majors}; is sensor_model right for this topic?): not decoded",
        )


def _check_azimuths(
    fields: PacketFields,
    groups: BlockGroups,
    model: HesaiModel,
    corrector: CalibrationAngles | CorrectionAngles,
) -> None:
    encoder = fields.encoder[groups.packet, groups.block]
    turn = model.packet.full_turn
    beyond = np.flatnonzero(encoder >= turn)
    if beyond.size:
        raise PacketsRefusedError(
            "azimuth",
            f"{beyond.size} block azimuths at or beyond a full turn ({int(encoder[beyond[0]])} "
            f"of {turn} units, packet {int(groups.packet[beyond[0]])}): corrupt packets, not "
            "decoded",
        )
    if isinstance(corrector, CorrectionAngles):
        outside = np.flatnonzero(corrector.fields(encoder) < 0)
        if outside.size:
            raise PacketsRefusedError(
                "azimuth",
                f"{outside.size} block azimuths in none of the correction file's fields (first "
                f"{int(encoder[outside[0]])}): not decoded",
            )


def block_groups(fields: PacketFields, blocks: int) -> BlockGroups:
    """The block groups of the packets, in stream order (packet, then block)."""
    returns = fields.returns
    per_packet = -(-blocks // returns)
    packet = np.repeat(np.arange(returns.shape[0]), per_packet)
    first = np.cumsum(per_packet) - per_packet
    index = np.arange(packet.shape[0]) - np.repeat(first, per_packet)
    n = returns[packet]
    return BlockGroups(packet, index * n, n)


def return_types(
    mode: np.ndarray,
    index: np.ndarray,
    strongest: np.ndarray,
    identical: np.ndarray,
    swaps_first_last: bool,
) -> np.ndarray:
    """Step 3's type of returns (``mode`` the packet's byte, ``index`` the return's place in its
    group), uint8."""
    first = index == 0
    kinds = {
        0x33: RETURN_FIRST,
        0x34: RETURN_SECOND,
        0x37: RETURN_STRONGEST,
        0x38: RETURN_LAST,
        0x39: np.where(
            strongest,
            np.where(first, RETURN_LAST_STRONGEST, RETURN_STRONGEST),
            np.where(first, RETURN_LAST, RETURN_SECONDSTRONGEST),
        ),
        0x3A: np.where(first, RETURN_FIRST, RETURN_SECOND),
        0x3B: np.where(first, RETURN_LAST, RETURN_FIRST)
        if swaps_first_last
        else np.where(first, RETURN_FIRST, RETURN_LAST),
        0x3C: np.where(
            strongest,
            np.where(first, RETURN_FIRST_STRONGEST, RETURN_STRONGEST),
            np.where(first, RETURN_FIRST, RETURN_SECONDSTRONGEST),
        ),
        0x3D: np.choose(np.clip(index, 0, 2), [RETURN_FIRST, RETURN_LAST, RETURN_STRONGEST]),
        0x3E: np.where(first, RETURN_STRONGEST, RETURN_SECONDSTRONGEST),
    }
    out = np.full(index.shape, RETURN_UNKNOWN, np.int64)
    for byte, kind in kinds.items():
        out = np.where(mode == byte, kind, out)
    return np.where(identical, RETURN_IDENTICAL, out).astype(np.uint8)


@dataclass(frozen=True)
class DecodedReturns:
    """The kept returns of some groups, in nebula's order.

    Attributes:
        points: :data:`POINT_DTYPE` points, ``time_stamp`` still 0.
        group: (N,) int64 index (into the groups given) of each point's group.
        offset_ns: (N,) int64 firing offset of each point from its packet's stamp.
    """

    points: np.ndarray
    group: np.ndarray
    offset_ns: np.ndarray


def decode_returns(
    fields: PacketFields,
    groups: BlockGroups,
    keep_channel: np.ndarray,
    settings: DecoderSettings,
    corrector: CalibrationAngles | CorrectionAngles,
) -> DecodedReturns:
    """Steps 1-5 for ``groups`` of ``fields``' packets (the module docstring).

    Args:
        keep_channel: (G, C) bool: the channel is inside the field of view and its group
            intersects it (the scan cutter's verdict).
    """
    model = settings.sensor
    depth = int(groups.returns.max(initial=1))
    slot = np.arange(depth)
    present = slot[None, :] < groups.returns[:, None]  # (G, R)
    block = groups.block[:, None] + np.where(present, slot[None, :], 0)
    packet = groups.packet[:, None]
    raw = np.where(present[:, :, None], fields.raw[packet, block], 0)  # (G, R, C)
    reflectivity = fields.reflectivity[packet, block]
    distance = (raw * fields.dis_unit[packet][:, :, None]).astype(np.float32)

    identical = np.zeros(raw.shape, bool)
    strongest = np.ones(raw.shape, bool)
    close = np.zeros(raw.shape, bool)
    threshold = settings.dual_return_distance_threshold
    for mine in range(depth):
        for other in range(depth):
            if other == mine:
                continue
            counts = present[:, other][:, None]
            same = (raw[:, other] == raw[:, mine]) & (
                reflectivity[:, other] == reflectivity[:, mine]
            )
            identical[:, mine] |= counts & same
            strongest[:, mine] &= ~counts | (reflectivity[:, mine] >= reflectivity[:, other])
            gap = np.abs(distance[:, other] - distance[:, mine]).astype(np.float64)
            close[:, mine] |= counts & (gap < threshold)
    last = (slot[None, :] == groups.returns[:, None] - 1)[:, :, None]
    wide = distance.astype(np.float64)
    keep = present[:, :, None] & (raw != 0)
    keep &= (distance >= model.min_range) & (distance <= model.max_range)
    keep &= (wide >= settings.min_range) & (wide <= settings.max_range)
    keep &= last | ~(identical | close)
    keep &= keep_channel[:, None, :]

    # nebula's order: group, channel, return
    where = np.nonzero(keep.transpose(0, 2, 1))
    g, c, r = where
    p = groups.packet[g]
    encoder = fields.encoder[p, groups.block[g]]
    angles = corrector.return_angles(encoder, c)
    dist = distance[g, r, c]
    xy = dist * angles.cos_elevation
    points = np.zeros(g.shape[0], POINT_DTYPE)
    points["x"] = xy * angles.sin_azimuth
    points["y"] = xy * angles.cos_azimuth
    points["z"] = dist * angles.sin_elevation
    points["intensity"] = reflectivity[g, r, c]
    points["return_type"] = return_types(
        fields.mode[p], r, strongest[g, r, c], identical[g, r, c], model.swaps_first_last
    )
    points["channel"] = c
    points["azimuth"] = angles.azimuth
    points["elevation"] = angles.elevation
    points["distance"] = dist
    offsets = point_time_offsets(
        model.name,
        groups.block[g] + r,
        c,
        groups.returns[g],
        fields.mode_flag[p],
        fields.operational_state[p],
        fields.azimuth_state[p],
    )
    return DecodedReturns(points, g.astype(np.int64), offsets.astype(np.int64))
