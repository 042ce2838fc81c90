"""nebula's scan cutter (``nebula_core_decoders/scan_cutter.hpp``), vectorised over block groups.

Two point buffers take turns: each channel writes into the buffer its azimuth has reached, and
a sweep is one buffer's points, emitted when every channel has moved on to the other. Per block
group (its channels' corrected azimuths, float32 radians, :mod:`.angles`; ``cut``, ``start``
and ``end`` the settings' normalised float32 radians; ``between`` is nebula's
``angle_is_between``, :func:`.sensors.angle_between`):

1. **In the field of view**: a channel is when ``start == end`` (the whole circle) or
   ``between(start, end, azimuth)`` (both inclusive).
2. **First group of the stream**: when both extreme channels (the lagging and the leading one,
   :class:`.angles.CorrectedAzimuths`) lie within a quarter turn of the cut
   (``between(norm(cut - T / 4), norm(cut + T / 4), a)``, ``T = 2 * M_PIf``, differences in
   float) and exactly one of them is past it (``between(cut, norm(cut + T / 2), a)``, start
   exclusive), each channel past the cut starts in buffer 1, the others in buffer 0, and each
   buffer holding a channel in the field of view is stamped; otherwise every channel starts in
   buffer 0, stamped when an extreme channel is in the field of view. The buffer state (one
   buffer for all, or split) and the field-of-view state (all in, all out, or split) are taken
   over every channel.
3. **Every later group**: a channel whose azimuth moved from ``last`` to ``azimuth`` with
   ``between(last, azimuth, cut)`` (start inclusive, end exclusive: the cut belongs to the
   sweep before; a repeated azimuth counts as a whole turn) switches buffer. The buffer and
   field-of-view states are then the two extreme channels' (same value: that value; else
   split).
4. **The state machine** of the mode (:attr:`.sensors.DecoderSettings.cuts_at_fov_end`:
   nebula's ``FsmCutAtFovEnd``; otherwise its ``FsmCutInFov``) turns the states before and
   after the group into actions (:data:`IN_FOV_ACTIONS`, :data:`AT_FOV_END_ACTIONS`): stamp a
   buffer (its sweep stamp becomes this packet's stamp plus :func:`.timing.earliest_offsets`
   of the group), then emit a buffer (its points are a sweep; the current buffer moves on).
   States: ``F0``/``F1`` every channel in buffer 0/1, ``C0``/``C1`` split while the current
   buffer is 0/1, and for ``FsmCutAtFovEnd`` ``O0``/``O1``: every channel in buffer 0/1 and
   every one outside the field of view. ``FsmCutInFov``: ``F0 -> C0`` stamps 1, ``F0 -> F1``
   stamps 1 and emits 0, ``C0 -> F1`` emits 0, and the same with 0 and 1 swapped.
   ``FsmCutAtFovEnd``: ``O0 -> F0`` and ``O0 -> C0`` stamp 0; ``O0 -> O1``, ``F0 -> F1`` and
   ``C0 -> F1`` stamp 1 and emit 0; ``F0 -> O1`` and ``C0 -> O1`` emit 0; and swapped. Any
   other change does nothing.
5. The group's returns are decoded when the field-of-view state is split or all in, each
   channel's into its buffer when the channel is in the field of view.

The per-group work (1, 3, the states) is array arithmetic; only the groups whose states change
(a few per sweep) step the state machine in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .angles import CorrectedAzimuths
from .sensors import TWO_PI_F32, DecoderSettings, angle_between, normalize_f32

#: A buffer or field-of-view state of split channels.
SPLIT = 2
#: Actions of the state machine.
STAMP, EMIT = "stamp", "emit"


@dataclass(frozen=True)
class CutterState:
    """The cutter between calls: the current buffer, each channel's last azimuth and buffer,
    and the last group's buffer and field-of-view states (0/1, or :data:`SPLIT`)."""

    current: int
    last: np.ndarray
    buffer: np.ndarray
    buffer_state: int
    fov_state: int


@dataclass(frozen=True)
class Cut:
    """What the cutter decided for ``G`` groups.

    Attributes:
        buffer: (G, C) int8: each channel's buffer after its group's step.
        keep_channel: (G, C) bool: the channel's returns are decoded (rule 5).
        events: ``(group, action, buffer)`` in order, action :data:`STAMP` or :data:`EMIT`.
    """

    buffer: np.ndarray
    keep_channel: np.ndarray
    events: list[tuple[int, str, int]]


def inside_fov(azimuth: np.ndarray, settings: DecoderSettings) -> np.ndarray:
    """Rule 1."""
    start, end = settings.fov_radians
    if start == end:
        return np.ones(np.shape(azimuth), bool)
    return np.asarray(angle_between(start, end, azimuth))


def _state(values: np.ndarray, lagging: np.ndarray, leading: np.ndarray) -> np.ndarray:
    rows = np.arange(values.shape[0])
    low, high = values[rows, lagging].astype(np.int64), values[rows, leading].astype(np.int64)
    return np.where(low == high, low, SPLIT)


def _whole_state(values: np.ndarray) -> int:
    first = int(values[0])
    return first if bool(np.all(values == values[0])) else SPLIT


def _first_group(
    azimuth: np.ndarray, in_fov: np.ndarray, lagging: int, leading: int, settings: DecoderSettings
) -> tuple[np.ndarray, list[int]]:
    """Rule 2: the first group's buffers and the buffers it stamps."""
    cut = settings.cut_radians
    quarter = TWO_PI_F32 / np.float32(4)
    half = TWO_PI_F32 / np.float32(2)
    region = (normalize_f32(cut - quarter)[()], normalize_f32(cut + quarter)[()])
    beyond_end = normalize_f32(cut + half)[()]
    extremes = azimuth[[lagging, leading]]
    near = bool(np.all(angle_between(region[0], region[1], extremes)))
    past = int(np.count_nonzero(angle_between(cut, beyond_end, extremes, False, True)))
    if not (near and past == 1):
        stamped = [0] if bool(in_fov[[lagging, leading]].any()) else []
        return np.zeros(azimuth.shape, np.int8), stamped
    buffer = np.asarray(angle_between(cut, beyond_end, azimuth, False, True)).astype(np.int8)
    stamped = [b for b in (0, 1) if bool(np.any(in_fov & (buffer == b)))]
    return buffer, stamped


def _fsm_state(buffer_state: int, fov_state: int, current: int, at_fov_end: bool) -> str:
    if buffer_state == SPLIT:
        return f"C{current}"
    if at_fov_end and fov_state == 0:
        return f"O{buffer_state}"
    return f"F{buffer_state}"


#: ``FsmCutInFov``: (state before, after) -> (stamped buffer, emitted buffer). ``F0``/``F1``:
#: every channel in buffer 0/1; ``C0``/``C1``: split while the current buffer is 0/1.
IN_FOV_ACTIONS: dict[tuple[str, str], tuple[int | None, int | None]] = {
    ("F0", "C0"): (1, None),
    ("F0", "F1"): (1, 0),
    ("C0", "F1"): (None, 0),
    ("F1", "C1"): (0, None),
    ("F1", "F0"): (0, 1),
    ("C1", "F0"): (None, 1),
}
#: ``FsmCutAtFovEnd``, with ``O0``/``O1``: every channel in buffer 0/1 and outside the field
#: of view.
AT_FOV_END_ACTIONS: dict[tuple[str, str], tuple[int | None, int | None]] = {
    ("O0", "F0"): (0, None),
    ("O0", "C0"): (0, None),
    ("O0", "O1"): (1, 0),
    ("F0", "O1"): (None, 0),
    ("F0", "F1"): (1, 0),
    ("C0", "O1"): (None, 0),
    ("C0", "F1"): (1, 0),
    ("O1", "F1"): (1, None),
    ("O1", "C1"): (1, None),
    ("O1", "O0"): (0, 1),
    ("F1", "O0"): (None, 1),
    ("F1", "F0"): (0, 1),
    ("C1", "O0"): (None, 1),
    ("C1", "F0"): (0, 1),
}


def cut_groups(
    state: CutterState | None, corrected: CorrectedAzimuths, settings: DecoderSettings
) -> tuple[CutterState, Cut]:
    """Rules 1-5 for ``G`` groups after ``state`` (None: the stream's first group).

    Returns:
        ``(state after the groups, the cut)``.
    """
    azimuth = corrected.azimuth
    count = azimuth.shape[0]
    cut = settings.cut_radians
    at_fov_end = settings.cuts_at_fov_end
    in_fov = inside_fov(azimuth, settings)
    lagging, leading = corrected.lagging, corrected.leading
    events: list[tuple[int, str, int]] = []
    buffers = np.empty(azimuth.shape, np.int8)
    buffer_state = np.empty(count, np.int64)
    fov_state = np.empty(count, np.int64)
    first = 0
    if state is None:
        start_buffer, stamped = _first_group(
            azimuth[0], in_fov[0], int(lagging[0]), int(leading[0]), settings
        )
        events += [(0, STAMP, b) for b in stamped]
        buffers[0] = start_buffer
        buffer_state[0] = _whole_state(start_buffer)
        fov_state[0] = _whole_state(in_fov[0])
        state = CutterState(0, azimuth[0], start_buffer, buffer_state[0], fov_state[0])
        first = 1
    rest = slice(first, count)
    if first < count:
        previous = np.concatenate([state.last[None, :], azimuth[first : count - 1]])
        crossed = np.asarray(angle_between(previous, azimuth[rest], cut, True, False))
        buffers[rest] = (state.buffer[None, :] + np.cumsum(crossed, axis=0, dtype=np.int64)) % 2
        buffer_state[rest] = _state(buffers[rest], lagging[rest], leading[rest])
        fov_state[rest] = _state(in_fov[rest], lagging[rest], leading[rest])
    current = state.current
    before_b, before_f = state.buffer_state, state.fov_state
    changed = np.flatnonzero(
        (buffer_state[rest] != np.concatenate([[before_b], buffer_state[first : count - 1]]))
        | (fov_state[rest] != np.concatenate([[before_f], fov_state[first : count - 1]]))
    )
    actions = AT_FOV_END_ACTIONS if at_fov_end else IN_FOV_ACTIONS
    for index in changed + first:
        before = _fsm_state(before_b, before_f, current, at_fov_end)
        after = _fsm_state(int(buffer_state[index]), int(fov_state[index]), current, at_fov_end)
        stamp, emit = actions.get((before, after), (None, None))
        if stamp is not None:
            events.append((int(index), STAMP, stamp))
        if emit is not None:
            events.append((int(index), EMIT, emit))
            current = 1 - current
        before_b, before_f = int(buffer_state[index]), int(fov_state[index])
    intersects = fov_state != 0
    final = CutterState(
        current,
        azimuth[-1].copy(),
        buffers[-1].copy(),
        int(buffer_state[-1]),
        int(fov_state[-1]),
    )
    return final, Cut(buffers, in_fov & intersects[:, None], events)
