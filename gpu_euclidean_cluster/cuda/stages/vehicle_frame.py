"""A sweep into the base frame and through its crop boxes on the GPU: the CUDA twin of
``cpu/stages/vehicle_frame.py``, bit for bit.

    >>> result = to_vehicle_frame(points, settings)  # CuPy (N, 3) float32, or (N, 32) uint8 rows
    >>> result.xyz, result.keep                       # CuPy (N, 3) float32 in base_link, (N,) bool

The rules are ``core/vehicle_frame.py``'s; ``cuda/kernels/stages/vehicle_frame.cu`` says how the
kernels follow them. One launch a sweep, no host synchronisation: the settings reach the kernel
as a few doubles (:func:`settings_words`) uploaded once per settings and device and kept
(:func:`device_settings`; only that first upload waits for its copy). Point rows are the GPU
sweep decoder's (``point_rows.py``), read in place. ``vehicle_rows.py`` writes the kept points of
point rows straight into a joined rows buffer with the same kernels.

The twins differ only in the sign and payload of a NaN coordinate of the result's ``xyz`` (IEEE
leaves them open, and NumPy's depend on the processor); a NaN point is never kept.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cupy
import numpy as np

from ...core.vehicle_frame import VehicleFrameResult, VehicleFrameSettings
from ..module import THREADS, KernelSource, blocks, get_kernel
from .point_rows import POINT_ROW_BYTES, field_offset, is_point_rows

#: Doubles of the pose in the settings array (``VehicleFrameSettings.pose_doubles``).
SETTINGS_POSE_WORDS = 12
#: Doubles per crop box after it: min x y z, max x y z, negative, in_sensor_frame.
SETTINGS_BOX_WORDS = 8
#: Settings arrays kept on the devices (one per sensor and device in use; a few hundred bytes).
_KEPT_SETTINGS = 64

VEHICLE_FRAME = KernelSource(
    "vehicle_frame",
    ("widen.cuh", "ieee32.cuh", "stages/vehicle_frame.cu"),
    {
        "VEHICLE_ROW": POINT_ROW_BYTES,
        "VEHICLE_X": field_offset("x", "<f4"),
        "VEHICLE_Y": field_offset("y", "<f4"),
        "VEHICLE_Z": field_offset("z", "<f4"),
        "VEHICLE_POSE_WORDS": SETTINGS_POSE_WORDS,
        "VEHICLE_BOX_WORDS": SETTINGS_BOX_WORDS,
    },
)


def settings_words(settings: VehicleFrameSettings) -> np.ndarray:
    """The float64 array the kernels read: the pose's 12 doubles, then per crop box its float32
    bounds (rule 4, each exactly as a double), ``negative`` and ``in_sensor_frame`` as 0 or 1."""
    words = [settings.pose_doubles()]
    for box in settings.crop_boxes:
        low, high = box.bounds32()
        flags = [float(box.negative), float(box.in_sensor_frame)]
        words.append(np.concatenate((low, high, flags), dtype=np.float64))
    return np.concatenate(words)


def device_settings(settings: VehicleFrameSettings, device_id: int) -> cupy.ndarray:
    """:func:`settings_words` on device ``device_id``: uploaded on the first call for these
    values and that device (which waits for the copy, so that any stream may read it), then
    kept."""
    return _uploaded(settings_words(settings).tobytes(), device_id)


@lru_cache(maxsize=_KEPT_SETTINGS)
def _uploaded(words: bytes, device_id: int) -> cupy.ndarray:
    with cupy.cuda.Device(device_id):
        array = cupy.asarray(np.frombuffer(words, dtype=np.float64))
        cupy.cuda.get_current_stream().synchronize()
    return array


def device_points(points: Any) -> tuple[cupy.ndarray, bool]:
    """``points`` as a C-contiguous CuPy array and whether it holds point rows: (N, 3) float32
    ``x, y, z`` or ``(N, POINT_ROW_BYTES)`` uint8 point rows (``point_rows.py``).

    Raises:
        ValueError: anything else (rule 1 takes float32 coordinates only).
    """
    if is_point_rows(points):
        rows = True
    elif (
        isinstance(points, cupy.ndarray)
        and points.ndim == 2
        and points.shape[1] == 3
        and points.dtype == cupy.float32
    ):
        rows = False
    else:
        raise ValueError(
            f"points must be (N, 3) float32 or (N, {POINT_ROW_BYTES}) uint8 point rows on the "
            f"GPU, got {type(points).__name__} {getattr(points, 'shape', '')} "
            f"{getattr(points, 'dtype', '')}"
        )
    with cupy.cuda.Device(points.device.id):
        return cupy.ascontiguousarray(points), rows


def transform_points(
    points: cupy.ndarray, rows: bool, settings: VehicleFrameSettings
) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Rules 1-6 on :func:`device_points`' array: the (N, 3) float32 coordinates in the base frame
    and the (N,) bool keep mask, new arrays on the points' device (one launch, no
    synchronisation beyond :func:`device_settings`' first upload)."""
    device_id = points.device.id
    with cupy.cuda.Device(device_id):
        n = points.shape[0]
        xyz = cupy.empty((n, 3), dtype=cupy.float32)
        keep = cupy.empty(n, dtype=cupy.bool_)
        if n:
            name = "vehicle_transform_rows" if rows else "vehicle_transform_xyz"
            args = (
                points,
                np.int64(n),
                device_settings(settings, device_id),
                np.int32(len(settings.crop_boxes)),
                xyz,
                keep,
            )
            get_kernel(VEHICLE_FRAME, name, device_id)(blocks(n), (THREADS,), args)
    return xyz, keep


def to_vehicle_frame(points: Any, settings: VehicleFrameSettings) -> VehicleFrameResult:
    """CuPy ``points`` ((N, 3) float32 or point rows) in the base frame and the mask of those
    kept (rules 1-6 of ``core/vehicle_frame.py``), on the points' device."""
    data, rows = device_points(points)
    return VehicleFrameResult(*transform_points(data, rows, settings))
