"""A sweep into the base frame and through its crop boxes, in NumPy: the CPU twin of the CUDA
stage, by the rules of ``core/vehicle_frame.py``.

    >>> result = to_vehicle_frame(points, settings)    # (N, 3) float32 or structured x y z
    >>> result.xyz, result.keep                         # (N, 3) float32 in base_link, (N,) bool

Each output axis is one float64 expression over whole columns, evaluated in the rule's order:
NumPy applies each ``*`` and ``+`` to the arrays on its own (one rounding each, never fused),
and ``astype(np.float32)`` rounds to nearest, ties to even.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.vehicle_frame import VehicleFrameResult, VehicleFrameSettings


def input_xyz(points: Any) -> np.ndarray:
    """(N, 3) float32 ``x, y, z`` of ``points``: an (N, 3) float32 array, or a structured array
    with float32 fields ``x``, ``y`` and ``z`` (a PointCloud2's points).

    Raises:
        ValueError: another shape or dtype (rule 1 takes float32 coordinates only).
    """
    points = np.asarray(points)
    if points.dtype.names is not None:
        missing = [name for name in "xyz" if name not in points.dtype.names]
        if missing or any(points.dtype[name] != np.float32 for name in "xyz"):
            raise ValueError(f"points need float32 fields x, y, z; got {points.dtype}")
        return np.stack([points[name].reshape(-1) for name in "xyz"], axis=1)
    if points.ndim != 2 or points.shape[1] != 3 or points.dtype != np.float32:
        raise ValueError(f"points must be (N, 3) float32, got {points.shape} {points.dtype}")
    return points


def transform_xyz(xyz: np.ndarray, settings: VehicleFrameSettings) -> np.ndarray:
    """(N, 3) float32 coordinates of ``xyz`` (N, 3) float32 in the base frame (rule 2)."""
    x, y, z = (xyz[:, axis].astype(np.float64) for axis in range(3))
    out = np.empty(xyz.shape, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for axis, ((r0, r1, r2), t) in enumerate(
            zip(settings.rotation, settings.translation, strict=True)
        ):
            value = ((float(r0) * x + float(r1) * y) + float(r2) * z) + float(t)
            out[:, axis] = value.astype(np.float32)
    return out


def to_vehicle_frame(points: Any, settings: VehicleFrameSettings) -> VehicleFrameResult:
    """``points`` in the base frame and the mask of those kept (rules 1-6 of
    ``core/vehicle_frame.py``)."""
    xyz = input_xyz(points)
    transformed = transform_xyz(xyz, settings)
    keep = np.isfinite(xyz).all(axis=1) & np.isfinite(transformed).all(axis=1)
    for box in settings.crop_boxes:
        low, high = box.bounds32()
        coordinates = xyz if box.in_sensor_frame else transformed
        with np.errstate(invalid="ignore"):
            inside = ((coordinates > low) & (coordinates < high)).all(axis=1)
        keep &= ~inside if box.negative else inside
    return VehicleFrameResult(transformed, keep)
