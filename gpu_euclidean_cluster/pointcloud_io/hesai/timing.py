"""When each return fires, relative to its packet's stamp: nebula's per-model time offsets.

:func:`point_time_offsets` is each model's ``get_packet_relative_point_time_offset``, vectorised:
the offset (int nanoseconds, may be negative) of the return in block ``b`` and channel ``c`` of
a packet whose return mode has ``n`` returns per firing (integer divisions truncate; nebula's
unsigned intermediates give the same values for every block of a packet):

=============== ===========================================================================
model           offset (ns)
=============== ===========================================================================
Pandar40P/40M   ``-28580 - 55560 * ((9 - b) / n) + PANDAR40[c]``
Pandar64        ``-42580 - 55560 * ((5 - b) / n) + PANDAR64[c]``
PandarXT32      ``5632 - 50000 * ((7 - b) / n) + 368 + 1512 * c``
PandarXT16      ``5632 - 50000 * ((7 - b) / n) + 368 + 3024 * c``
PandarXT32M     ``5632 - 50000 * ((7 - b) / n)`` (``n`` 3: ``(5 - b) / 3``) ``+ 368 + 2888 *
                (c mod 16)``
PandarQT64      ``25710 + (500000 * (b / n)) / 3 + QT64[c]``
PandarQT128     ``9000 + (111110 * (1 - b)) / n + LOOP[c]``: ``LOOP1`` for block 0 and
                ``LOOP2`` for block 1 of a single-return packet, by the mode flag's bit 0 (set:
                ``LOOP1``) in dual return
PandarAT128     ``-9249 - 41666 * (2 - b)`` single, ``-9249 - 41666`` multiple return,
                ``+ AT128[c]``
Pandar128E4X    ``-55556 * (1 - b)`` single, 0 multiple return, ``+ 43346 +`` the standard
                table, or in high resolution (operational state 0) the azimuth state's table
                (``(azimuth_state >> (14 - 2 b)) & 3``: 0 ``AS0``, else ``AS1``)
=============== ===========================================================================

A sweep's stamp is a packet's stamp plus :func:`earliest_offsets` of the block group that set
it: the least offset of any channel of the group's blocks.
"""

from __future__ import annotations

import numpy as np

#: Pandar40P/40M: per channel (``Pandar40::firing_time_offset_ns_``).
PANDAR40_FIRING_NS = (
    -42220, -28470, -16040, -3620, -45490, -31740, -47460, -54670, -20620, -33710, -40910,
    -8190, -20620, -27160, -50730, -8190, -14740, -36980, -45490, -52700, -23890, -31740,
    -38950, -11470, -18650, -25190, -48760, -6230, -12770, -35010, -21920, -9500, -43520,
    -29770, -17350, -4920, -42220, -28470, -16040, -3620,
)  # fmt: skip
#: Pandar64: per channel.
PANDAR64_FIRING_NS = (
    -23180, -21876, -20572, -19268, -17964, -16660, -11444, -46796, -7532, -36956, -50732,
    -54668, -40892, -44828, -31052, -34988, -48764, -52700, -38924, -42860, -29084, -33020,
    -46796, -25148, -36956, -50732, -27116, -40892, -44828, -31052, -34988, -48764, -25148,
    -38924, -42860, -29084, -33020, -52700, -6228, -54668, -15356, -27116, -10140, -23180,
    -4924, -21876, -14052, -17964, -8836, -19268, -3620, -20572, -12748, -16660, -7532, -11444,
    -6228, -15356, -10140, -4924, -3620, -14052, -8836, -12748,
)  # fmt: skip
#: PandarQT64: per channel (channel 55 reads 12960, not 129600: nebula's value, kept).
QT64_FIRING_NS = (
    12310, 14370, 16430, 18490, 20540, 22600, 24660, 26710, 29160, 31220, 33280, 35340, 37390,
    39450, 41500, 43560, 46610, 48670, 50730, 52780, 54840, 56900, 58950, 61010, 63450, 65520,
    67580, 69630, 71690, 73740, 75800, 77860, 80900, 82970, 85020, 87080, 89140, 91190, 93250,
    95300, 97750, 99820, 101870, 103930, 105980, 108040, 110100, 112150, 115200, 117260, 119320,
    121380, 123430, 125490, 127540, 12960, 132050, 134110, 136170, 138220, 140280, 142340,
    144390, 146450,
)  # fmt: skip
#: PandarQT128, firing loop 1 (channels 0-31 idle, 0).
QT128_LOOP1_NS = (
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 27656, 53000, 2312, 78344, 81512, 5480, 56168, 30824, 33992, 59336, 8648, 84680, 87848,
    11816, 62504, 37160, 40328, 65672, 14984, 91016, 94184, 18152, 68840, 43496, 46664, 72008,
    21320, 97352, 100520, 24488, 75176, 49832, 1456, 77488, 26800, 52144, 55312, 29968, 80656,
    4624, 7792, 83824, 33136, 58480, 61648, 36304, 86992, 10960, 14128, 90160, 39472, 64816,
    67984, 42640, 93328, 17296, 20464, 96496, 45808, 71152, 74320, 48976, 99664, 23632, 25944,
    51288, 600, 76632, 79800, 3768, 54456, 29112, 32280, 57624, 6936, 82968, 86136, 10104,
    60792, 35448, 38616, 63960, 13272, 89304, 92472, 16440, 67128, 41784, 44952, 70296, 19608,
    95640, 98808, 22776, 73464, 48120,
)  # fmt: skip
#: PandarQT128, firing loop 2 (channels 32-63 idle, 0).
QT128_LOOP2_NS = (
    2312, 78344, 27656, 53000, 56168, 30824, 81512, 5480, 8648, 84680, 33992, 59336, 62504,
    37160, 87848, 11816, 14984, 91016, 40328, 65672, 68840, 43496, 94184, 18152, 21320, 97352,
    46664, 72008, 75176, 49832, 100520, 24488, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 600, 76632, 25944, 51288, 54456, 29112,
    79800, 3768, 6936, 82968, 32280, 57624, 60792, 35448, 86136, 10104, 13272, 89304, 38616,
    63960, 67128, 41784, 92472, 16440, 19608, 95640, 44952, 70296, 73464, 48120, 98808, 22776,
    26800, 52144, 1456, 77488, 80656, 4624, 55312, 29968, 33136, 58480, 7792, 83824, 86992,
    10960, 61648, 36304, 39472, 64816, 14128, 90160, 93328, 17296, 67984, 42640, 45808, 71152,
    20464, 96496, 99664, 23632, 74320, 48976,
)  # fmt: skip
#: PandarAT128: per channel.
AT128_FIRING_NS = (
    0, 0, 8240, 4112, 4144, 8240, 0, 0, 12424, 4144, 4112, 8264, 12376, 12376, 8264, 12424, 0,
    0, 4112, 8240, 4144, 0, 0, 4144, 12424, 8264, 4112, 12376, 12376, 12424, 8264, 848, 2504,
    4976, 6616, 6616, 9112, 2504, 848, 10768, 13280, 13280, 4976, 9112, 14928, 14928, 10768,
    2504, 848, 6616, 4976, 9112, 6616, 848, 2504, 13280, 10768, 4976, 13280, 14928, 9112, 10768,
    14928, 13280, 848, 9112, 13280, 2504, 4976, 848, 2504, 14928, 10768, 10768, 14928, 4976,
    6616, 6616, 9112, 848, 13280, 13280, 9112, 4976, 2504, 2504, 848, 10768, 14928, 14928,
    10768, 6616, 4976, 9112, 6616, 4112, 12424, 0, 4144, 0, 0, 12424, 0, 8264, 4112, 4144, 8240,
    8240, 8264, 12376, 12376, 12424, 4112, 4144, 0, 0, 0, 0, 0, 12424, 8264, 8240, 4144, 8264,
    8240, 12376, 12376, 8264,
)  # fmt: skip
#: Pandar128E4X in standard resolution.
OT128_STANDARD_NS = (
    49758, 43224, 36690, 30156, 21980, 15446, 8912, 2378, 49758, 43224, 36690, 30156, 2378,
    15446, 8912, 21980, 43224, 30156, 49758, 15446, 36690, 2378, 21980, 8912, 34312, 45002,
    38468, 40846, 40846, 34312, 51536, 47380, 31934, 47380, 31934, 51536, 38468, 27778, 27778,
    45002, 38468, 40846, 51536, 45002, 31934, 47380, 34312, 27778, 38468, 40846, 51536, 45002,
    31934, 34312, 27778, 38468, 40846, 51536, 45002, 31934, 47380, 34312, 27778, 45002, 45002,
    51536, 38468, 40846, 47380, 40846, 31934, 45002, 27778, 38468, 40846, 31934, 27778, 38468,
    34312, 34312, 34312, 47380, 51536, 31934, 51536, 47380, 27778, 49758, 21980, 43224, 15446,
    43224, 36690, 8912, 30156, 2378, 49758, 21980, 36690, 15446, 8912, 30156, 2378, 49758,
    43224, 36690, 30156, 21980, 15446, 8912, 2378, 43224, 49758, 30156, 36690, 21980, 15446,
    2378, 8912, 49758, 43224, 36690, 30156, 21980, 15446, 8912, 2378, 30156,
)  # fmt: skip
#: Pandar128E4X in high resolution, azimuth state 0 (-1: idle).
OT128_HIRES_AS0_NS = (
    -1, -1, -1, -1, 21980, 15446, 8912, 2378, -1, -1, -1, -1, 2378, 15446, 8912, 21980, -1,
    2378, 21980, 8912, 6534, 17224, 10690, 13068, 13068, 6534, 23758, 19602, 4156, 19602, 4156,
    23758, 13068, 13068, 23758, 10690, 4156, 19602, 19602, 0, 10690, 6534, 23758, 17224, 23758,
    19602, 6534, 17224, 4156, 0, 6534, 0, 17224, 10690, 17224, 17224, 23758, 23758, 10690,
    13068, 13068, 13068, 19602, 19602, 6534, 13068, 4156, 4156, 17224, 17224, 17224, 0, 10690,
    10690, 13068, 13068, 4156, 0, 10690, 6534, 6534, 6534, 19602, 23758, 4156, 23758, 19602, 0,
    -1, 21980, -1, 15446, -1, 8912, -1, 2378, -1, -1, 21980, -1, 15446, 8912, -1, 2378, -1, -1,
    -1, -1, 21980, 15446, 8912, 2378, -1, -1, -1, -1, 21980, 15446, 2378, 8912, -1, -1, -1, -1,
    21980, 15446, 8912, 2378,
)  # fmt: skip
#: Pandar128E4X in high resolution, other azimuth states.
OT128_HIRES_AS1_NS = (
    21980, 15446, 8912, 2378, -1, -1, -1, -1, 21980, 15446, 8912, 2378, -1, -1, -1, -1, 8912,
    -1, -1, -1, 6534, 17224, 10690, 13068, 13068, 6534, 23758, 19602, 4156, 19602, 4156, 23758,
    13068, 13068, 23758, 10690, 4156, 19602, 19602, 0, 10690, 6534, 23758, 17224, 23758, 19602,
    6534, 17224, 4156, 0, 6534, 0, 17224, 10690, 17224, 17224, 23758, 23758, 10690, 13068,
    13068, 13068, 19602, 19602, 6534, 13068, 4156, 4156, 17224, 17224, 17224, 0, 10690, 10690,
    13068, 13068, 4156, 0, 10690, 6534, 6534, 6534, 19602, 23758, 4156, 23758, 19602, 0, 21980,
    -1, 15446, -1, 8912, -1, 2378, -1, 21980, 15446, -1, 8912, -1, -1, 2378, -1, 21980, 15446,
    8912, 2378, -1, -1, -1, -1, 15446, 21980, 2378, 8912, -1, -1, -1, -1, 21980, 15446, 8912,
    2378, -1, -1, -1, -1,
)  # fmt: skip


def _table(values: tuple[int, ...]) -> np.ndarray:
    return np.array(values, np.int64)


_TABLES = {
    name: _table(values)
    for name, values in {
        "40": PANDAR40_FIRING_NS,
        "64": PANDAR64_FIRING_NS,
        "qt64": QT64_FIRING_NS,
        "loop1": QT128_LOOP1_NS,
        "loop2": QT128_LOOP2_NS,
        "at128": AT128_FIRING_NS,
        "standard": OT128_STANDARD_NS,
        "as0": OT128_HIRES_AS0_NS,
        "as1": OT128_HIRES_AS1_NS,
    }.items()
}


def point_time_offsets(
    model: str,
    block: np.ndarray,
    channel: np.ndarray,
    returns: np.ndarray,
    mode_flag: np.ndarray,
    operational_state: np.ndarray,
    azimuth_state: np.ndarray,
) -> np.ndarray:
    """Offsets (int64 ns) of returns from their packet's stamp (the module docstring's table).

    Args:
        model: nebula's model name.
        block, channel: the return's block and channel (int arrays, broadcast together).
        returns: returns per firing of the packet's return mode.
        mode_flag, operational_state, azimuth_state: the packet's tail fields where the model
            has them (QT128; OT128), ignored otherwise.
    """
    b = np.asarray(block, np.int64)
    c = np.asarray(channel, np.int64)
    n = np.asarray(returns, np.int64)
    t = _TABLES
    if model in ("Pandar40P", "Pandar40M"):
        return -28580 - 55560 * ((9 - b) // n) + t["40"][c]
    if model == "Pandar64":
        return -42580 - 55560 * ((5 - b) // n) + t["64"][c]
    if model == "PandarXT32":
        return 5632 - 50000 * ((7 - b) // n) + 368 + 1512 * c
    if model == "PandarXT16":
        return 5632 - 50000 * ((7 - b) // n) + 368 + 3024 * c
    if model == "PandarXT32M":
        block_ns = np.where(n < 3, 5632 - 50000 * ((7 - b) // n), 5632 - 50000 * ((5 - b) // 3))
        return block_ns + 368 + 2888 * np.where(c >= 16, c - 16, c)
    if model == "PandarQT64":
        return 25710 + (500000 * (b // n)) // 3 + t["qt64"][c]
    if model == "PandarQT128":
        first_loop = np.where(n == 1, b % 2 == 0, (np.asarray(mode_flag, np.int64) & 1) == 1)
        loop = np.where(first_loop, t["loop1"][c], t["loop2"][c])
        return 9000 + (111110 * (1 - b)) // n + loop
    if model == "PandarAT128":
        return np.where(n == 1, -9249 - 41666 * (2 - b), -9249 - 41666) + t["at128"][c]
    if model == "Pandar128E4X":
        block_ns = np.where(n == 1, -55556 * (1 - b), 0)
        state = (np.asarray(azimuth_state, np.int64) >> (14 - 2 * b)) & 3
        hires = np.where(state == 0, t["as0"][c], t["as1"][c])
        table = np.where(np.asarray(operational_state) == 0, hires, t["standard"][c])
        return block_ns + 43346 + table
    raise ValueError(f"no firing times for {model!r}")


def earliest_offsets(
    model: str,
    channels: int,
    start_block: np.ndarray,
    returns: np.ndarray,
    mode_flag: np.ndarray,
    operational_state: np.ndarray,
    azimuth_state: np.ndarray,
) -> np.ndarray:
    """(G,) int64: for block groups starting at ``start_block`` with ``returns`` blocks each,
    the least :func:`point_time_offsets` over the group's blocks and every channel (nebula's
    ``get_earliest_point_time_offset_for_block``)."""
    start = np.asarray(start_block, np.int64)
    n = np.asarray(returns, np.int64)
    best = np.full(start.shape, np.iinfo(np.int32).max, np.int64)
    channel = np.arange(channels)[None, :]
    for offset in range(int(n.max(initial=1))):
        within = offset < n
        block = np.where(within, start + offset, start)[:, None]
        values = point_time_offsets(
            model,
            block,
            channel,
            n[:, None],
            np.asarray(mode_flag)[:, None],
            np.asarray(operational_state)[:, None],
            np.asarray(azimuth_state)[:, None],
        ).min(axis=1)
        best = np.where(within, np.minimum(best, values), best)
    return best
