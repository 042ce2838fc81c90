"""Range bands: range-dependent clustering tolerances, as Autoware.ai had them (ROS-free).

Autoware.ai's ``lidar_euclidean_cluster_detect`` (``segmentByDistance`` in
``nodes/lidar_euclidean_cluster_detect/lidar_euclidean_cluster_detect.cpp``, with
``use_multiple_thres``) cuts the cloud into bands by each point's horizontal range
``sqrt(x**2 + y**2)`` and clusters every band on its own with its own tolerance, so that sparse far
returns still form clusters. Here (``ClusterConfig.clustering_ranges`` and
``ClusterConfig.clustering_distances``):

* a point's range is computed as Autoware.ai's ``float origin_distance``: ``x*x + y*y`` of the
  float32 coordinates in float64, its square root in float64 (correctly rounded on both backends),
  rounded to float32;
* band ``i`` holds the ranges ``r`` with ``ranges[i-1] <= r < ranges[i]`` (band 0: ``r <
  ranges[0]``; the last band: ``r >= ranges[-1]``), Autoware.ai's chain of ``<`` comparisons with
  its ``double`` ranges, for any number of bands (Autoware.ai has exactly five);
* each band's components get ids of their own (:func:`offset_components`), so points of different
  bands never share a cluster.

Everything here is array code for NumPy and CuPy alike (:func:`~.numbering.array_module`), so both
backends assign the same bands.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .numbering import array_module
from .units import INT32_MAX


def point_ranges(points: Any) -> Any:
    """(N,) float32 horizontal ranges of (N, 3) float32 ``points``: ``sqrt(x*x + y*y)`` in float64,
    rounded to float32 (Autoware.ai's ``origin_distance``)."""
    xp = array_module(points)
    x = points[:, 0].astype(xp.float64)
    y = points[:, 1].astype(xp.float64)
    # Separate operations: no fused multiply-add on either backend, so the sum rounds alike.
    squared = x * x
    squared += y * y
    return xp.sqrt(squared).astype(xp.float32)


def band_of_points(points: Any, ranges: tuple[float, ...]) -> Any:
    """(N,) int32 band index of each point: the number of ``ranges`` at or below its range.

    Band 0 holds ranges below ``ranges[0]``, band ``i`` those in ``[ranges[i-1], ranges[i])``, the
    last band those at or beyond ``ranges[-1]``; a point exactly on an edge belongs to the band
    above it. With no ranges every point is in band 0.
    """
    xp = array_module(points)
    n = int(points.shape[0])
    if not ranges:
        return xp.zeros(n, dtype=xp.int32)
    edges = xp.asarray(np.asarray(ranges, dtype=np.float64))
    r = point_ranges(points).astype(xp.float64)
    return xp.searchsorted(edges, r, side="right").astype(xp.int32)


def band_indices(points: Any, ranges: tuple[float, ...], count: int) -> list[Any]:
    """Per band ``0..count-1`` (:func:`band_of_points`), the indices of its points in index
    order (what ``flatnonzero(band == b)`` gives), from one sort of ``band << 32 | index`` keys
    and one copy of the band sizes to the host: on the GPU, one synchronisation for all bands
    instead of one per band."""
    xp = array_module(points)
    n = int(points.shape[0])
    band = band_of_points(points, ranges)
    keys = (band.astype(xp.uint64) << xp.uint64(32)) | xp.arange(n, dtype=xp.uint64)
    keys.sort()
    order = (keys & xp.uint64(0xFFFFFFFF)).astype(xp.int64)
    sizes = xp.bincount(band, minlength=count)
    sizes = [int(size) for size in (sizes if xp is np else sizes.get())]
    starts = np.concatenate(([0], np.cumsum(sizes)))
    return [order[int(starts[b]) : int(starts[b + 1])] for b in range(count)]


def offset_components(parts: list[tuple[Any, Any]], n: int) -> Any:
    """One (n,) int32 array of component ids from per-band ids.

    Args:
        parts: per band, ``(index, components)``: the band's point indices (into the ``n``
            points) and the component ids ``backend.label`` gave its points (ids >= 0, any
            values). Every point is in exactly one band.
        n: the number of points.

    Each band's ids are shifted past the previous bands' largest id, so that components of
    different bands never share an id; where the shifted ids would not fit int32, each band's ids
    are first made dense (0..C-1).
    """
    if not parts:
        return np.empty(0, dtype=np.int32)
    xp = array_module(parts[0][1])
    # every band's largest id in one copy to the host (one synchronisation on the GPU)
    maxima = [
        components.max() if components.shape[0] else xp.asarray(-1, dtype=components.dtype)
        for _, components in parts
    ]
    stacked = xp.stack(maxima).astype(xp.int64)
    highest = [int(top) + 1 for top in (stacked if xp is np else stacked.get())]
    if sum(highest) > INT32_MAX:
        dense = []
        for index, components in parts:
            _, inverse = xp.unique(components, return_inverse=True)
            dense.append((index, inverse.reshape(-1).astype(xp.int32)))
        parts = dense
        highest = [int(c.max()) + 1 if c.shape[0] else 0 for _, c in parts]
    combined = xp.empty(n, dtype=xp.int32)
    offset = 0
    for (index, components), size in zip(parts, highest, strict=True):
        combined[index] = components.astype(xp.int32) + xp.int32(offset)
        offset += size
    return combined
