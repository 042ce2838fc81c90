"""Sensors' sweeps joined into one device buffer of point rows, in the base frame and cropped: the
CUDA twin of ``cpu/stages/vehicle_rows.py``, bit for bit.

    >>> start = 0
    >>> for rows, settings in sweeps:          # CuPy (N_s, 32) uint8 point rows, one per sensor
    ...     count = transform_rows_into(rows, settings, out_rows, start)
    ...     start = start + count               # a CuPy int64 scalar: no host round trip
    >>> joined = out_rows[: int(start)]         # the one synchronisation, where the host asks

``out_rows`` holds at least the sum of the sweeps' N rows. Each call is ``vehicle_frame.py``'s
transform of the rows (one launch), an inclusive scan of the keep mask (``cupy.cumsum``) and
``vehicle_scatter_rows`` (``cuda/kernels/stages/vehicle_frame.cu``): the kept point i goes to row
``out_start + (kept points before i)``, its input row with x, y, z replaced by the transformed
coordinates, so the kept points stay in input order; its count stays on the device. No host
synchronisation (beyond the settings' first upload, ``vehicle_frame.device_settings``).
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from ...core.vehicle_frame import VehicleFrameSettings
from ..module import THREADS, blocks, get_kernel
from .point_rows import POINT_ROW_BYTES, is_point_rows
from .vehicle_frame import VEHICLE_FRAME, transform_points


def transform_rows_into(
    rows: Any, settings: VehicleFrameSettings, out_rows: Any, out_start: Any
) -> cupy.ndarray:
    """Writes the kept points of the point rows ``rows`` (CuPy, ``(N, 32)`` uint8) into
    ``out_rows`` (CuPy point rows, C-contiguous, on the same device, not overlapping ``rows``)
    from row ``out_start`` on, in the base frame (rules 1-6 of ``core/vehicle_frame.py``), and
    returns their count: a 0-d int64 CuPy array, written on the device.

    ``out_start`` is an integer, or a one-element integer CuPy array on the device (a previous
    call's start plus its count). A host integer is checked here: ``out_start + N`` must not pass
    ``len(out_rows)``. A device one cannot be checked without a synchronisation: rows that would
    fall past the buffer's end are not written (the count still counts them).

    Raises:
        ValueError: rows or out_rows are not point rows, out_rows is not C-contiguous or on
            another device, or a host ``out_start`` leaves too little room.
    """
    if not is_point_rows(rows) or not is_point_rows(out_rows):
        raise ValueError(
            f"rows and out_rows must be (N, {POINT_ROW_BYTES}) uint8 point rows on the GPU, got "
            f"{getattr(rows, 'shape', type(rows).__name__)} and "
            f"{getattr(out_rows, 'shape', type(out_rows).__name__)}"
        )
    device_id = rows.device.id
    if out_rows.device.id != device_id or not out_rows.flags.c_contiguous:
        raise ValueError("out_rows must be C-contiguous and on the device of rows")
    n, capacity = rows.shape[0], out_rows.shape[0]
    with cupy.cuda.Device(device_id):
        start = _device_start(out_start, n, capacity, device_id)
        count = cupy.zeros((), dtype=cupy.int64)
        if n == 0:
            return count
        data = cupy.ascontiguousarray(rows)
        xyz, keep = transform_points(data, True, settings)
        where = cupy.cumsum(keep, dtype=cupy.int64)
        args = (data, np.int64(n), xyz, keep, where, start, np.int64(capacity), out_rows, count)
        get_kernel(VEHICLE_FRAME, "vehicle_scatter_rows", device_id)(blocks(n), (THREADS,), args)
    return count


def _device_start(out_start: Any, n: int, capacity: int, device_id: int) -> cupy.ndarray:
    """``out_start`` as a one-element int64 device array (a host integer checked first)."""
    if isinstance(out_start, cupy.ndarray):
        if out_start.size != 1 or out_start.dtype.kind not in "iu":
            raise ValueError(
                f"out_start must be one integer, got {out_start.shape} {out_start.dtype}"
            )
        if out_start.device.id != device_id:
            raise ValueError("out_start must be on the device of rows")
        return out_start.reshape(()).astype(cupy.int64, copy=False)
    if isinstance(out_start, bool) or not isinstance(out_start, (int, np.integer)):
        raise ValueError(f"out_start must be an integer, got {out_start!r}")
    start = int(out_start)
    if start < 0 or start + n > capacity:
        raise ValueError(
            f"out_rows has {capacity} rows: no room for {n} from row {start} (out_start >= 0 and "
            "out_start + len(rows) <= len(out_rows))"
        )
    return cupy.full((), start, dtype=cupy.int64)
