"""The vehicle-frame stage's rules (``core/vehicle_frame.py``) against a straightforward reference:
Python floats, one point at a time; and Autoware's crop box semantics at the edges."""

from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ConfigError
from gpu_euclidean_cluster.core.vehicle_frame import (
    MAX_CROP_BOXES,
    CropBoxSettings,
    VehicleFrameSettings,
)
from gpu_euclidean_cluster.cpu.stages.vehicle_frame import to_vehicle_frame
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import load_sensor_kit, sensor_poses
from gpu_euclidean_cluster.pointcloud_io.sensor_kit.poses import rotation_from_rpy

from ..conftest import REPO_ROOT

IDENTITY = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
INF = math.inf


def f32(value: float) -> float:
    """``value`` rounded once to float32 (C's cast: nearest, ties to even), as a Python float."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:
        return math.copysign(INF, value)


def reference(point: tuple, settings: VehicleFrameSettings) -> tuple[tuple, bool]:
    """One point by the rules, written out with Python floats."""
    x, y, z = point
    out = tuple(
        f32(((r[0] * x + r[1] * y) + r[2] * z) + t)
        for r, t in zip(settings.rotation, settings.translation, strict=True)
    )
    keep = all(math.isfinite(v) for v in (*point, *out))
    for box in settings.crop_boxes:
        p = point if box.in_sensor_frame else out
        inside = all(
            f32(lo) < v < f32(hi) for v, lo, hi in zip(p, box.minimum, box.maximum, strict=True)
        )
        keep = keep and (not inside if box.negative else inside)
    return out, keep


def check_against_reference(points: np.ndarray, settings: VehicleFrameSettings) -> np.ndarray:
    result = to_vehicle_frame(points, settings)
    assert result.xyz.dtype == np.float32 and result.xyz.shape == points.shape
    for i, point in enumerate(points.tolist()):
        out, keep = reference(tuple(point), settings)
        np.testing.assert_array_equal(result.xyz[i], np.array(out, np.float32), err_msg=str(i))
        assert bool(result.keep[i]) == keep, (i, point)
    return result.keep


def random_points(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-3, 3, (n, 1))
    points = (rng.normal(size=(n, 3)) * scale).astype(np.float32)
    points[::37, 1] = np.nan
    points[5::41, 2] = np.inf
    points[9::43, 0] = -np.inf
    return points


@pytest.mark.parametrize("seed", range(3))
def test_random_poses_and_boxes_follow_the_rules_point_by_point(seed: int):
    rng = np.random.default_rng(100 + seed)
    boxes = tuple(
        CropBoxSettings(tuple(low), tuple(low + rng.uniform(0.5, 50, 3)), bool(negative), bool(s))
        for low, negative, s in zip(rng.uniform(-30, 10, (3, 3)), (1, 0, 1), (0, 0, 1), strict=True)
    )
    settings = VehicleFrameSettings(
        rotation_from_rpy(*rng.uniform(-math.pi, math.pi, 3)),
        tuple(rng.uniform(-5, 5, 3)),
        boxes,
    )
    points = random_points(400, seed)
    keep = check_against_reference(points, settings)
    finite = np.isfinite(points).all(axis=1)
    assert 0 < keep[finite].sum() < finite.sum()  # the boxes drop some finite points, not all


def cancelling_points(rotation: tuple) -> np.ndarray:
    """Points whose first two terms of an output axis nearly cancel: ``x / y`` is a best
    rational approximation of ``-r1 / r0`` with float32 integers (continued fractions), so the
    sum keeps only the products' rounding, where the order and each rounding show."""
    points = []
    for r0, r1, _ in rotation:
        ratio = Fraction(-r1) / Fraction(r0)
        for bits in range(8, 25):
            if abs(ratio) <= 1:
                approximation = ratio.limit_denominator(1 << bits)
            else:
                approximation = 1 / (1 / ratio).limit_denominator(1 << bits)
            for z in (0.0, 1e-6 * bits):
                points.append((approximation.numerator, approximation.denominator, z))
    return np.array(points, np.float32)


def test_cancelling_sums_pin_the_order_and_the_single_roundings():
    settings = VehicleFrameSettings(rotation_from_rpy(0.3, 0.2, 0.1), (0.0, 0.0, 0.0))
    points = cancelling_points(settings.rotation)
    check_against_reference(points, settings)
    x, y, z = (points[:, axis].astype(np.float64) for axis in range(3))
    regrouped = fused = 0
    for (r0, r1, r2), out in zip(
        settings.rotation, to_vehicle_frame(points, settings).xyz.T, strict=True
    ):
        regrouped += np.count_nonzero((r0 * x + (r1 * y + r2 * z)).astype(np.float32) != out)
        exact = [
            float(Fraction(r0) * Fraction(float(a)) + Fraction(r1 * b))
            for a, b in zip(x, y, strict=True)
        ]
        fused += np.count_nonzero((np.array(exact) + r2 * z).astype(np.float32) != out)
    assert regrouped > 0 and fused > 0  # another grouping or a fused multiply-add would differ


def test_sample_kit_poses_follow_the_rules():
    kit = load_sensor_kit(REPO_ROOT / "config" / "sample_sensor_kit.yaml")
    for sensor, pose in zip(kit.sensors, sensor_poses(kit).values(), strict=True):
        boxes = tuple(
            CropBoxSettings(b.minimum, b.maximum, b.negative, b.in_sensor_frame)
            for b in sensor.crop_boxes
        )
        settings = VehicleFrameSettings(pose.rotation, pose.translation, boxes)
        points = random_points(300, 7)
        keep = check_against_reference(points, settings)
        finite = np.isfinite(points).all(axis=1)
        assert 0 < keep[finite].sum() < finite.sum()


def test_a_point_on_a_face_is_not_inside():
    face = np.float32(0.1)  # the float32 the bound 0.1 rounds to
    above = np.nextafter(face, np.float32(1))
    points = np.array([[face, 0, 0], [above, 0, 0], [0.5, 0, 0], [0.5, 1.0, 0]], np.float32)
    for negative, expected in ((True, [1, 0, 0, 1]), (False, [0, 1, 1, 0])):
        box = CropBoxSettings((0.1, -1.0, -1.0), (1.0, 1.0, 1.0), negative)
        result = to_vehicle_frame(points, VehicleFrameSettings(IDENTITY, (0.0, 0.0, 0.0), (box,)))
        assert result.keep.tolist() == [bool(e) for e in expected]
    check_against_reference(points, VehicleFrameSettings(IDENTITY, (0.0, 0.0, 0.0), (box,)))


def test_non_finite_points_are_dropped_whatever_the_box_says():
    points = np.array([[np.nan, 0, 0], [0, np.inf, 0], [0, 0, -np.inf], [5, 5, 5]], np.float32)
    for negative in (True, False):
        box = CropBoxSettings((-INF, -INF, -INF), (INF, INF, INF), negative)
        for boxes in ((), (box,)):
            settings = VehicleFrameSettings(IDENTITY, (0.0, 0.0, 0.0), boxes)
            keep = to_vehicle_frame(points, settings).keep
            assert keep[:3].tolist() == [False, False, False]
            assert keep[3] == (not boxes or not negative)


def test_overflow_to_infinity_is_dropped():
    big = np.finfo(np.float32).max
    points = np.array([[big, 0, 0], [-big, 0, 0]], np.float32)
    settings = VehicleFrameSettings(IDENTITY, (1e38, 0.0, 0.0))
    result = to_vehicle_frame(points, settings)
    assert result.xyz[0, 0] == np.inf and result.keep.tolist() == [False, True]
    check_against_reference(points, settings)


def test_sensor_frame_boxes_test_the_input_coordinates():
    points = np.array([[0.5, 0.5, 0.5]], np.float32)
    moved = (0.0, 0.0, 10.0)
    in_sensor = CropBoxSettings((0, 0, 0), (1, 1, 1), False, in_sensor_frame=True)
    in_base = CropBoxSettings((0, 0, 0), (1, 1, 1), False)
    assert to_vehicle_frame(points, VehicleFrameSettings(IDENTITY, moved, (in_sensor,))).keep[0]
    assert not to_vehicle_frame(points, VehicleFrameSettings(IDENTITY, moved, (in_base,))).keep[0]


def test_structured_input_and_empty_sweeps():
    points = random_points(50, 3)
    structured = np.zeros(50, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("i", "u1")])
    for axis, name in enumerate("xyz"):
        structured[name] = points[:, axis]
    settings = VehicleFrameSettings(rotation_from_rpy(0.1, 0.2, 0.3), (1.0, 2.0, 3.0))
    a, b = to_vehicle_frame(points, settings), to_vehicle_frame(structured, settings)
    np.testing.assert_array_equal(a.xyz, b.xyz)
    np.testing.assert_array_equal(a.keep, b.keep)
    empty = to_vehicle_frame(np.zeros((0, 3), np.float32), settings)
    assert empty.xyz.shape == (0, 3) and empty.keep.shape == (0,)
    with pytest.raises(ValueError, match=r"\(N, 3\) float32"):
        to_vehicle_frame(points.astype(np.float64), settings)


UNIT_BOX = CropBoxSettings((0, 0, 0), (1, 1, 1), True)
SCALED = ((2, 0, 0), (0, 1, 0), (0, 0, 1))
MIRRORED = ((-1, 0, 0), (0, 1, 0), (0, 0, 1))
TOO_MANY = (UNIT_BOX,) * (MAX_CROP_BOXES + 1)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: CropBoxSettings((0, 0, 1), (1, 1, 1), True), "z: min 1 must be below max 1"),
        (lambda: CropBoxSettings((math.nan, 0, 0), (1, 1, 1), True), "x: min nan"),
        (lambda: CropBoxSettings((0, 0), (1, 1, 1), True), "three numbers"),
        (lambda: CropBoxSettings((0, 0, 0), (1, 1, 1), 1), "true or false"),
        (lambda: VehicleFrameSettings(SCALED, (0, 0, 0)), "not a rotation"),
        (lambda: VehicleFrameSettings(MIRRORED, (0, 0, 0)), "not a rotation"),
        (lambda: VehicleFrameSettings(IDENTITY, (0, math.inf, 0)), "translation"),
        (lambda: VehicleFrameSettings(IDENTITY, (0, 0, 0), TOO_MANY), f"at most {MAX_CROP_BOXES}"),
    ],
)
def test_bad_settings_are_refused(make, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make()


def test_pose_doubles_are_the_rows_and_translation():
    settings = VehicleFrameSettings(rotation_from_rpy(0.1, 0.2, 0.3), (1.0, 2.0, 3.0))
    doubles = settings.pose_doubles()
    assert doubles.dtype == np.float64 and doubles.shape == (12,)
    assert doubles[3::4].tolist() == [1.0, 2.0, 3.0]
    assert doubles.reshape(3, 4)[:, :3].tolist() == [list(r) for r in settings.rotation]
