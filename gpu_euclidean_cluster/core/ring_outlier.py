"""Autoware's ring outlier filter: the settings, the rules both twins follow, the result.

Autoware's ``ring_outlier_filter_node`` (autoware_universe,
``sensing/autoware_pointcloud_preprocessor``) walks each laser ring of a ``PointXYZIRCAEDT`` sweep
and drops short runs of points that jump in range from their neighbours (rain, insects, spray).
This is that filter, rule for rule, as a keep mask: ``cpu/stages/ring_outlier.py`` (NumPy)
follows the rules below; a CUDA twin is to give the same mask bit for bit. Input columns:
``channel`` (uint16), ``azimuth`` and ``distance`` (float32, radians and metres) and ``x``,
``y``, ``z`` (float32); the rest of the record is not read.

Rules (float32 and float64 as stated, each operation rounded once, never fused):

1. **Rings.** A point's ring is its ``channel``. A point whose channel is not in
   ``0..max_rings_num-1`` is never kept and is counted (:attr:`RingOutlierResult.out_of_range`):
   Autoware indexes past its ring table there, which is undefined behaviour, so the caller should
   warn.
2. **Ring order.** Each ring's points are walked in input order (Autoware does not sort by
   azimuth; a decoded sweep is in firing order). Number them ``p = 0..m-1``. A ring of fewer
   than 2 points keeps none.
3. **Links.** For ``p = 0..m-2`` the link between ``p`` and ``p+1`` holds when both:

   a. *range*: with ``c = distance[p]`` and ``n = distance[p+1]``, ``hi = n if c < n else c``
      and ``lo = n if n < c else c`` (``std::max``/``std::min``, so a NaN takes the first
      operand's side); the link holds when ``float64(hi) < float64(lo) * distance_ratio`` (the
      product in float64);
   b. *azimuth*: ``d = float32(az[p+1] - az[p])``; when ``d < 0``,
      ``d = float32(float64(d) + 2*pi)`` (``2*pi`` the float64 6.283185307179586); the link holds
      when ``float64(d) < 180/pi`` (the float64 57.29577951308232). Autoware's comment says "one
      degree" but it compares radians with 57.3: every finite step passes, a NaN fails.
4. **Walks.** Positions ``0..m-2`` are cut after every broken link: a position's walk is the
   number of broken links before it (an exclusive prefix sum over the ring). The ring's last
   point ``m-1`` belongs to no walk and is never kept: Autoware's loop closes its last walk at
   ``m-2``. (The ring is not closed either: its first and last walks are not joined.)
5. **Kept walks.** A walk of ``size`` positions from ``first`` to ``last`` is kept when
   ``num_points_threshold`` is set and ``size > num_points_threshold``; otherwise when its end
   points are far enough apart: ``dx = float32(x[first] - x[last])`` (likewise ``dy``, ``dz``),
   ``s = float32(float32(float32(dx*dx) + float32(dy*dy)) + float32(dz*dz))``, kept when
   ``float64(s) >= float64(t) * float64(t)`` with ``t = object_length_threshold`` (the product
   in float64). Every point of a kept walk is kept.
6. **Output order.** Autoware writes the kept points ring by ring (channel 0 first), each ring in
   input order: the kept points stably sorted by channel (:attr:`RingOutlierResult.order`).

Every rule maps onto sort and scan steps: a stable sort of the points by channel, a per-pair link
flag between sorted neighbours of one ring, a segmented exclusive scan for the walk numbers, the
first and last position of each walk from its boundaries, and one keep decision per walk.

Not reproduced (``docs/concatenation.md``): the debug outlier cloud and the "visibility" score
derived from it (with Autoware's defaults its integer bin width is 0 and the score's arithmetic is
undefined); the output's field layout (Autoware writes ``PointXYZIRC``, here the mask keeps every
input field); the transform into another frame.

Two generations of Autoware: until 2025 a walk with more than ``num_points_threshold`` points was
kept whatever its length (``num_points_threshold: 4``, ``object_length_threshold: 0.1``, the
sample sensor kit's file); since autowarefoundation/autoware_universe#10537 only the length test
remains and the default threshold is 0.05 m. ``num_points_threshold=None`` selects the newer rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import ConfigError

#: ``2 * M_PI`` as Autoware adds it to a negative azimuth step (float64).
TWO_PI = 2 * math.pi
#: ``1.0 * (180.0 / M_PI)``: the azimuth step limit Autoware compares with (float64, radians).
AZIMUTH_STEP_LIMIT = 1.0 * (180.0 / math.pi)
#: Largest ring count: ``max_rings_num`` is a uint16 in Autoware.
MAX_RINGS = 65535
#: The parameter names this filter reads from an Autoware parameter file.
PARAMETER_NAMES = (
    "distance_ratio",
    "object_length_threshold",
    "num_points_threshold",
    "max_rings_num",
    "max_points_num_per_ring",
)


@dataclass(frozen=True)
class RingOutlierSettings:
    """Ring outlier filter settings, Autoware's names (validated on creation: :class:`ConfigError`).

    The defaults are the sample sensor kit's ``ring_outlier_filter_node.param.yaml``.

    Attributes:
        distance_ratio: neighbours stay in one walk while the larger range is below the smaller
            times this (> 0; at most 1 cuts every link).
        object_length_threshold: a walk whose end points are at least this far apart (m) is kept.
        num_points_threshold: a walk with more points than this is kept whatever its length;
            None: Autoware's rule since 2025, the length test alone.
        max_rings_num: rings ``0..max_rings_num-1`` are walked (rule 1).
        max_points_num_per_ring: Autoware reserves this many points per ring; it changes no
            output (a longer ring is walked whole), so it is only validated.
    """

    distance_ratio: float = 1.03
    object_length_threshold: float = 0.1
    num_points_threshold: int | None = 4
    max_rings_num: int = 128
    max_points_num_per_ring: int = 4000

    def __post_init__(self) -> None:
        for problem in ring_outlier_problems(self):
            raise ConfigError(problem)

    @classmethod
    def from_autoware_parameters(cls, parameters: Mapping[str, Any]) -> RingOutlierSettings:
        """The settings of an Autoware parameter mapping (``ros__parameters`` of
        ``ring_outlier_filter_node.param.yaml``): the names of :data:`PARAMETER_NAMES` that are
        present; a mapping without ``num_points_threshold`` is the newer generation (None)."""
        values = {name: parameters[name] for name in PARAMETER_NAMES if name in parameters}
        values.setdefault("num_points_threshold", None)
        return cls(**values)


def ring_outlier_problems(settings: RingOutlierSettings) -> list[str]:
    """Every reason ``settings`` is invalid, as human-readable sentences (empty when valid)."""
    problems = []
    ratio = settings.distance_ratio
    if not _is_real(ratio) or not math.isfinite(ratio) or ratio <= 0:
        problems.append(f"distance_ratio must be a finite number > 0, got {ratio!r}")
    length = settings.object_length_threshold
    if not _is_real(length) or not math.isfinite(length) or length < 0:
        problems.append(
            f"object_length_threshold must be a finite number of metres >= 0, got {length!r}"
        )
    count = settings.num_points_threshold
    if count is not None and (not _is_int(count) or not 0 <= count < 2**31):
        problems.append(
            f"num_points_threshold must be an integer in [0, 2**31) or None, got {count!r}"
        )
    rings = settings.max_rings_num
    if not _is_int(rings) or not 1 <= rings <= MAX_RINGS:
        problems.append(f"max_rings_num must be an integer in [1, {MAX_RINGS}], got {rings!r}")
    reserve = settings.max_points_num_per_ring
    if not _is_int(reserve) or reserve < 0:
        problems.append(f"max_points_num_per_ring must be an integer >= 0, got {reserve!r}")
    return problems


@dataclass(frozen=True)
class RingOutlierResult:
    """One sweep's ring outlier decision.

    Attributes:
        mask: (N,) bool, True for the points Autoware keeps (rules 1-5).
        order: (K,) int64 indices of the kept points in Autoware's output order (rule 6).
        out_of_range: points whose channel is ``>= max_rings_num`` (never kept, rule 1).
    """

    mask: Any
    order: Any
    out_of_range: int

    def warning(self, settings: RingOutlierSettings) -> str | None:
        """One line for the log when points were outside the rings (None otherwise)."""
        if not self.out_of_range:
            return None
        return (
            f"ring outlier filter: {self.out_of_range} points have a channel >= max_rings_num "
            f"{settings.max_rings_num} and were dropped (Autoware's behaviour there is undefined)"
        )


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
