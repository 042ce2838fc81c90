"""A sensor's sweep brought into the vehicle's base frame and cropped: the settings, the rules
both twins follow, the result.

Autoware brings each LiDAR's points into ``base_link`` inside its crop box filters
(``CropBoxFilterComponent`` of ``autoware_pointcloud_preprocessor``, ``input_frame: base_link``):
the self box (the vehicle body, from ``vehicle_info``) and the mirror box, both ``negative``.
This stage is that step for one sensor, made exactly reproducible: ``cpu/stages/vehicle_frame.py``
(NumPy) and its CUDA twin follow the rules below and return the same coordinates and the same
mask, bit for bit. The pose comes from a sensor kit (``pointcloud_io/sensor_kit/``), composed in
float64 on the host; both twins receive the same 12 doubles.

Rules (every point on its own: one GPU thread a point):

1. **Input**: the point's ``x, y, z``, float32 (the PointCloud2 fields), taken exactly as float64.
2. **Transform**: for each output axis ``i``, with the pose's float64 rotation row
   ``(r0, r1, r2)`` and translation ``t``: ``v = ((r0*x + r1*y) + r2*z) + t`` in float64,
   each operation rounded once (to nearest, ties to even), never fused (no FMA; CUDA:
   ``__dmul_rn``/``__dadd_rn``), then ``v`` rounded once to float32 (to nearest, ties to even,
   ``__double2float_rn``; IEEE's overflow to +-inf beyond float32's range). Non-finite inputs
   propagate as IEEE arithmetic says (NaN stays NaN, inf may become NaN). Every point is
   transformed, kept or not.
3. **Non-finite points are dropped**: a point whose input ``x``, ``y`` or ``z`` is NaN or
   +-inf is never kept, whatever its boxes say (Autoware's filter skips it before transforming
   and counts it in its "points contained NaN values" warning); nor is one whose transformed
   coordinates are not all finite (float32 overflow; Autoware would keep such a point as inf).
4. **Box bounds**: each bound is rounded once from float64 to float32 (to nearest, ties to even),
   as Autoware's ``CropBox`` holds them (``float min_x``, ...).
5. **Inside**: ``min < p < max`` on all three axes, strictly (Autoware's
   ``is_point_inside_crop_box``), ``p`` the point's float32 coordinates in the box's frame: the
   transformed ones (rule 2) for a box in the base frame, the input ones for a box in the
   sensor's frame. A point on a face is not inside.
6. **Keep**: a ``negative`` box keeps the points not inside (Autoware's self and mirror boxes),
   another keeps only the points inside. A point is kept when it is finite (rule 3) and every
   box keeps it; the order of the boxes does not matter. Without boxes every finite point is
   kept.

Where Autoware differs: it multiplies a float32 ``Eigen::Matrix4f`` (the tf2 transform rounded to
float) in float32, with whatever fusing its compiler chose, and later moves the points back to
the sensor frame (ring outlier filter) and again to ``base_link`` (the concatenation): its
coordinates can differ from rule 2's by a float32 ulp or two, and a point within that of a face
can fall on the other side. Autoware's optional ``use_ray_intersection`` mode is not reproduced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .config import ConfigError

#: Most crop boxes one sensor's stage applies (a kernel argument array of this size).
MAX_CROP_BOXES = 16
#: How far the rotation may be from orthonormal (``|R R^T - I|`` per element) and ``det R`` from
#: 1: float64 rounding of a composed chain is about 1e-16; a typo in a matrix is far more.
ROTATION_TOLERANCE = 1e-9

Vector3 = tuple[float, float, float]


@dataclass(frozen=True)
class CropBoxSettings:
    """One crop box (validated on creation: :class:`ConfigError`).

    Attributes:
        minimum, maximum: ``(x, y, z)`` bounds in metres (float64; rule 4 rounds them), not NaN,
            ``minimum < maximum`` per axis; infinite bounds leave that axis open.
        negative: True removes the points inside, False keeps only them (rule 6).
        in_sensor_frame: True tests the input coordinates, False (Autoware's ``base_link``
            boxes) the transformed ones (rule 5).
    """

    minimum: Vector3
    maximum: Vector3
    negative: bool
    in_sensor_frame: bool = False

    def __post_init__(self) -> None:
        for problem in crop_box_problems(self):
            raise ConfigError(problem)

    def bounds32(self) -> tuple[np.ndarray, np.ndarray]:
        """The bounds as (3,) float32 arrays, rounded once (rule 4)."""
        return np.array(self.minimum, np.float32), np.array(self.maximum, np.float32)


@dataclass(frozen=True)
class VehicleFrameSettings:
    """A sensor's pose in the base frame and its crop boxes (validated: :class:`ConfigError`).

    Attributes:
        rotation: 3x3 float64 rotation, row by row (``p_base = R p_sensor + t``).
        translation: ``t``, metres.
        crop_boxes: at most :data:`MAX_CROP_BOXES` boxes.
    """

    rotation: tuple[Vector3, Vector3, Vector3]
    translation: Vector3
    crop_boxes: tuple[CropBoxSettings, ...] = ()

    def __post_init__(self) -> None:
        for problem in vehicle_frame_problems(self):
            raise ConfigError(problem)

    def pose_doubles(self) -> np.ndarray:
        """(12,) float64 ``r00 r01 r02 t0 r10 r11 r12 t1 r20 r21 r22 t2``: what both twins read."""
        rows = [(*row, t) for row, t in zip(self.rotation, self.translation, strict=True)]
        return np.array(rows, dtype=np.float64).reshape(12)


@dataclass(frozen=True)
class VehicleFrameResult:
    """One sweep in the base frame.

    Attributes:
        xyz: (N, 3) float32 transformed coordinates of every input point (rule 2), in input order;
            NumPy or CuPy, on the device the stage ran on.
        keep: (N,) bool, True for the points kept (rules 3 and 6).
    """

    xyz: Any
    keep: Any


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _triple(value: object) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 3 and all(map(_is_real, value))


def crop_box_problems(box: CropBoxSettings) -> list[str]:
    """Every reason ``box`` is invalid, as sentences (empty when valid)."""
    if not (_triple(box.minimum) and _triple(box.maximum)):
        return [f"crop box bounds must be three numbers each, got {box.minimum!r}, {box.maximum!r}"]
    problems = []
    for axis, low, high in zip("xyz", box.minimum, box.maximum, strict=True):
        if math.isnan(low) or math.isnan(high) or not low < high:
            problems.append(f"crop box {axis}: min {low} must be below max {high}")
    if not isinstance(box.negative, bool) or not isinstance(box.in_sensor_frame, bool):
        problems.append("crop box negative and in_sensor_frame must be true or false")
    return problems


def vehicle_frame_problems(settings: VehicleFrameSettings) -> list[str]:
    """Every reason ``settings`` is invalid, as sentences (empty when valid)."""
    rotation, translation = settings.rotation, settings.translation
    problems = []
    if not (
        isinstance(rotation, (tuple, list)) and len(rotation) == 3 and all(map(_triple, rotation))
    ):
        return [f"rotation must be 3 rows of 3 numbers, got {rotation!r}"]
    matrix = np.array(rotation, dtype=np.float64)
    if not np.isfinite(matrix).all():
        problems.append("rotation must be finite")
    elif (
        np.abs(matrix @ matrix.T - np.eye(3)).max() > ROTATION_TOLERANCE
        or abs(np.linalg.det(matrix) - 1.0) > ROTATION_TOLERANCE
    ):
        problems.append(f"rotation is not a rotation (orthonormal, det 1): {rotation!r}")
    if not _triple(translation) or not all(math.isfinite(t) for t in translation):
        problems.append(f"translation must be three finite numbers, got {translation!r}")
    boxes = settings.crop_boxes
    if not isinstance(boxes, tuple) or not all(isinstance(b, CropBoxSettings) for b in boxes):
        problems.append("crop_boxes must be a tuple of CropBoxSettings")
    elif len(boxes) > MAX_CROP_BOXES:
        problems.append(f"at most {MAX_CROP_BOXES} crop boxes, got {len(boxes)}")
    return problems
