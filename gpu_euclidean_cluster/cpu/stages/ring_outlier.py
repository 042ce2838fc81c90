"""Autoware's ring outlier filter in NumPy: the CPU twin of ``core/ring_outlier.py``'s rules.

    >>> result = filter_rings(points, RingOutlierSettings())
    >>> points[result.mask]          # the kept points, in input order
    >>> points[result.order]         # the kept points in Autoware's output order (ring by ring)

``points`` is anything indexed by field name (a structured array in ``PointXYZIRCAEDT`` layout,
``pointcloud_io/velodyne/packets.py``'s ``POINT_DTYPE``, or a mapping of columns): ``channel``
(an integer column), ``azimuth``, ``distance``, ``x``, ``y``, ``z`` (taken as float32; other float
columns are rounded to float32 first). The steps are the rules' sort and scan steps, vectorised:
a stable sort by channel, one link flag per neighbouring pair, walk numbers by a cumulative sum,
each walk's ends from its boundaries, one decision per walk.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.ring_outlier import (
    AZIMUTH_STEP_LIMIT,
    TWO_PI,
    RingOutlierResult,
    RingOutlierSettings,
)

_F32 = np.float32
_F64 = np.float64


def filter_rings(points: Any, settings: RingOutlierSettings) -> RingOutlierResult:
    """Autoware's keep mask and output order for one sweep (``core/ring_outlier.py``)."""
    channel = np.asarray(points["channel"])
    if channel.dtype.kind not in "ui":
        raise ValueError(f"channel must be an integer column, got dtype {channel.dtype}")
    n = len(channel)
    channel = channel.astype(np.int64)
    in_range = (channel >= 0) & (channel < settings.max_rings_num)
    candidates = np.flatnonzero(in_range)
    # rules 1-2: the points of rings 0..max_rings_num-1, ring by ring, each in input order
    order = candidates[np.argsort(channel[candidates], kind="stable")]
    mask = np.zeros(n, dtype=bool)
    out_of_range = n - len(candidates)
    if len(order) < 2:
        return RingOutlierResult(mask, np.empty(0, dtype=np.int64), out_of_range)
    same_ring = channel[order[1:]] == channel[order[:-1]]
    linked = same_ring & _links(points, order, float(settings.distance_ratio))
    # rule 4: the ring's last point is in no walk; a walk starts after each broken link
    in_walk = np.append(same_ring, False)
    walk_of = np.cumsum(np.insert(~linked, 0, True)) - 1
    positions = np.flatnonzero(in_walk)
    walks = walk_of[positions]
    if len(positions) == 0:
        return RingOutlierResult(mask, np.empty(0, dtype=np.int64), out_of_range)
    boundary = np.flatnonzero(np.diff(walks)) + 1
    firsts = positions[np.insert(boundary, 0, 0)]
    lasts = positions[np.append(boundary - 1, len(positions) - 1)]
    sizes = lasts - firsts + 1
    keep_walk = _long_enough(points, order[firsts], order[lasts], settings)
    if settings.num_points_threshold is not None:
        keep_walk |= sizes > settings.num_points_threshold
    kept_positions = positions[np.repeat(keep_walk, sizes)]
    kept = order[kept_positions]
    mask[kept] = True
    return RingOutlierResult(mask, kept, out_of_range)


def _links(points: Any, order: np.ndarray, distance_ratio: float) -> np.ndarray:
    """Rule 3 for each pair of neighbours in ``order`` (ring boundaries not yet masked)."""
    distance = np.asarray(points["distance"], dtype=_F32)[order]
    azimuth = np.asarray(points["azimuth"], dtype=_F32)[order]
    current, following = distance[:-1], distance[1:]
    high = np.where(current < following, following, current)
    low = np.where(following < current, following, current)
    with np.errstate(invalid="ignore", over="ignore"):
        range_ok = high.astype(_F64) < low.astype(_F64) * _F64(distance_ratio)
        step = azimuth[1:] - azimuth[:-1]
        wrapped = (step.astype(_F64) + TWO_PI).astype(_F32)
        step = np.where(step < 0, wrapped, step)
        azimuth_ok = step.astype(_F64) < AZIMUTH_STEP_LIMIT
    return range_ok & azimuth_ok


def _long_enough(
    points: Any, first: np.ndarray, last: np.ndarray, settings: RingOutlierSettings
) -> np.ndarray:
    """Rule 5's length test for walks from ``first`` to ``last`` (input indices)."""
    squares = []
    for name in ("x", "y", "z"):
        column = np.asarray(points[name], dtype=_F32)
        with np.errstate(invalid="ignore", over="ignore"):
            delta = column[first] - column[last]
            squares.append(delta * delta)
    with np.errstate(invalid="ignore", over="ignore"):
        total = (squares[0] + squares[1]) + squares[2]
    threshold = float(settings.object_length_threshold)
    return total.astype(_F64) >= threshold * threshold
