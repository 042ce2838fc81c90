"""Point rows on the device: the ``(N, 32)`` uint8 rows the GPU sweep decoder writes
(:meth:`~gpu_euclidean_cluster.cuda.codecs.velodyne.CudaPacketDecoder.decode`), in
:data:`~gpu_euclidean_cluster.pointcloud_io.velodyne.packets.POINT_DTYPE`'s layout, as the
vehicle stages read them (``vehicle_frame.py``, ``vehicle_rows.py``, ``ring_outlier.py`` beside
this module). CuPy has no structured dtypes: the kernels read each field at its byte offset,
which :func:`field_offset` takes from ``POINT_DTYPE`` and the stages pass as ``-D`` constants.
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from ...pointcloud_io.velodyne.packets import POINT_DTYPE

#: Bytes of one point row (``POINT_DTYPE.itemsize``).
POINT_ROW_BYTES = POINT_DTYPE.itemsize


def field_offset(name: str, dtype: str) -> int:
    """The byte offset of ``POINT_DTYPE``'s field ``name``, checked to be of ``dtype`` (``"<f4"``,
    ``"<u2"``): a kernel reads it as that type.

    Raises:
        ValueError: ``POINT_DTYPE`` has no such field of that type (its layout changed).
    """
    field = POINT_DTYPE.fields.get(name) if POINT_DTYPE.fields else None
    if field is None or field[0] != np.dtype(dtype):
        raise ValueError(f"POINT_DTYPE has no {dtype} field {name!r}: {POINT_DTYPE}")
    return int(field[1])


def is_point_rows(points: Any) -> bool:
    """Whether ``points`` is a CuPy ``(N, POINT_ROW_BYTES)`` uint8 array of point rows."""
    return (
        isinstance(points, cupy.ndarray)
        and points.ndim == 2
        and points.shape[1] == POINT_ROW_BYTES
        and points.dtype == cupy.uint8
    )
