"""Sensors' sweeps joined into one buffer of point rows, in the base frame and cropped, in NumPy:
the CPU twin of ``cuda/stages/vehicle_rows.py``, by the rules of ``core/vehicle_frame.py``.

    >>> start = 0
    >>> for rows, settings in sweeps:          # (N_s, 32) uint8 point rows, one per sensor
    ...     count = transform_rows_into(rows, settings, out_rows, start)
    ...     start = start + count               # a 0-d int64 array
    >>> joined = out_rows[: int(start)]

Point rows are ``(N, 32)`` uint8 arrays in ``pointcloud_io/velodyne/packets.py``'s
``POINT_DTYPE`` layout (the rows the GPU sweep decoder writes; a ``POINT_DTYPE`` array's bytes).
The kept points of ``to_vehicle_frame`` (``vehicle_frame.py`` beside this module) are copied, in
input order, to the rows of ``out_rows`` from ``out_start`` on, with x, y, z replaced by the
transformed coordinates; every other byte of the row is copied as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.vehicle_frame import VehicleFrameSettings
from ...pointcloud_io.velodyne.packets import POINT_DTYPE
from .vehicle_frame import to_vehicle_frame


def is_point_rows(points: Any) -> bool:
    """Whether ``points`` is a NumPy ``(N, 32)`` uint8 array of ``POINT_DTYPE`` point rows."""
    return (
        isinstance(points, np.ndarray)
        and points.ndim == 2
        and points.shape[1] == POINT_DTYPE.itemsize
        and points.dtype == np.uint8
    )


def rows_as_points(rows: np.ndarray) -> np.ndarray:
    """(N,) ``POINT_DTYPE`` points of (N, 32) uint8 point rows (a view where ``rows`` is
    C-contiguous)."""
    return np.ascontiguousarray(rows).view(POINT_DTYPE).reshape(-1)


def transform_rows_into(
    rows: Any, settings: VehicleFrameSettings, out_rows: Any, out_start: Any
) -> np.ndarray:
    """Writes the kept points of the point rows ``rows`` into ``out_rows`` (point rows, not
    overlapping ``rows``) from row ``out_start`` on, in the base frame (rules 1-6 of
    ``core/vehicle_frame.py``), and returns their count as a 0-d int64 array.

    Raises:
        ValueError: rows or out_rows are not point rows, ``out_start`` is not one integer, or
            ``out_start + len(rows)`` passes ``len(out_rows)`` (the CUDA twin's check of a host
            start).
    """
    if not is_point_rows(rows) or not is_point_rows(out_rows):
        raise ValueError(
            f"rows and out_rows must be (N, {POINT_DTYPE.itemsize}) uint8 point rows, got "
            f"{getattr(rows, 'shape', type(rows).__name__)} and "
            f"{getattr(out_rows, 'shape', type(out_rows).__name__)}"
        )
    n, capacity = rows.shape[0], out_rows.shape[0]
    start = _host_start(out_start)
    if start < 0 or start + n > capacity:
        raise ValueError(
            f"out_rows has {capacity} rows: no room for {n} from row {start} (out_start >= 0 and "
            "out_start + len(rows) <= len(out_rows))"
        )
    points = rows_as_points(rows)
    result = to_vehicle_frame(points, settings)
    kept = np.flatnonzero(result.keep)
    written = points[kept]
    for axis, name in enumerate("xyz"):
        written[name] = result.xyz[kept, axis]
    out_rows[start : start + len(kept)] = written.view(np.uint8).reshape(-1, POINT_DTYPE.itemsize)
    return np.array(len(kept), dtype=np.int64)


def _host_start(out_start: Any) -> int:
    """``out_start`` as a Python int: an integer, or a one-element integer array."""
    if isinstance(out_start, np.ndarray) and out_start.size == 1 and out_start.dtype.kind in "iu":
        return int(out_start.reshape(()))
    if isinstance(out_start, bool) or not isinstance(out_start, (int, np.integer)):
        raise ValueError(f"out_start must be an integer, got {out_start!r}")
    return int(out_start)
