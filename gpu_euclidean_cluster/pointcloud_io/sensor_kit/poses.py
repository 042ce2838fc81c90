"""Rigid poses in float64 with ROS's conventions, and the frame tree they make.

A :class:`Pose` maps a child frame's coordinates into its parent's: ``p_parent = R p_child + t``
(a ``geometry_msgs/Transform`` from ``header.frame_id`` to ``child_frame_id``, a URDF joint's
``origin``). Conventions, as ROS defines them:

- **URDF ``rpy``** (and Autoware's calibration files, which xacro pastes into ``rpy``): fixed-axis
  roll about X, then pitch about Y, then yaw about Z, ``R = Rz(yaw) Ry(pitch) Rx(roll)``
  (REP 103; urdfdom's ``Rotation::setFromRPY``). :func:`rotation_from_rpy` writes the product
  out element by element, each operation a float64 rounded once, left to right as written.
- **Quaternions** ``(qx, qy, qz, qw)`` (``geometry_msgs/Quaternion``, Hamilton): to a matrix as
  tf2's ``Matrix3x3::setRotation`` does, with ``s = 2 / |q|^2``, so a quaternion a little off
  unit length still gives a rotation; one further off than tf2 accepts
  (:data:`QUATERNION_TOLERANCE` on ``|q|^2``) is refused.
- **Composition**: ``a.compose(b)`` is ``a * b`` (``b``'s child into ``a``'s parent):
  ``R = Ra Rb``, ``t = Ra tb + ta``, each element ``((a0*b0 + a1*b1) + a2*b2)`` and each
  translation ``((r0*x + r1*y) + r2*z) + t``: float64, each operation rounded once, never fused
  (Python floats).

:class:`FrameTree` holds fixed joints parent -> child (every child has one parent, as in tf2)
and composes a frame's pose in a base frame along the chain, from the base outwards:
``((J1 * J2) * J3) ...``. tf2 composes the same chain through quaternions, URDF through KDL: the
results agree with these to float64 rounding (about 1e-16 relative), far below float32's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

Vector3 = tuple[float, float, float]
Matrix3 = tuple[Vector3, Vector3, Vector3]

#: tf2 refuses a quaternion whose squared norm is further than this from 1
#: (``QUATERNION_NORMALIZATION_TOLERANCE`` of tf2's ``buffer_core.cpp``).
QUATERNION_TOLERANCE = 10e-3

IDENTITY: Matrix3 = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))


def rotation_from_rpy(roll: float, pitch: float, yaw: float) -> Matrix3:
    """``Rz(yaw) Ry(pitch) Rx(roll)``: URDF's fixed-axis roll, pitch, yaw (radians)."""
    sr, cr = math.sin(roll), math.cos(roll)
    sp, cp = math.sin(pitch), math.cos(pitch)
    sy, cy = math.sin(yaw), math.cos(yaw)
    return (
        (cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr),
        (sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr),
        (-sp, cp * sr, cp * cr),
    )


def rotation_from_quaternion(qx: float, qy: float, qz: float, qw: float) -> Matrix3:
    """The rotation of ``(qx, qy, qz, qw)`` as tf2's ``Matrix3x3::setRotation`` builds it.

    Raises:
        ValueError: ``|q|^2`` further than :data:`QUATERNION_TOLERANCE` from 1 (tf2's refusal).
    """
    norm2 = qx * qx + qy * qy + qz * qz + qw * qw
    if not abs(norm2 - 1.0) <= QUATERNION_TOLERANCE:
        raise ValueError(f"quaternion ({qx}, {qy}, {qz}, {qw}) is not normalised (|q|^2 {norm2})")
    s = 2.0 / norm2
    xs, ys, zs = qx * s, qy * s, qz * s
    wx, wy, wz = qw * xs, qw * ys, qw * zs
    xx, xy, xz = qx * xs, qx * ys, qx * zs
    yy, yz, zz = qy * ys, qy * zs, qz * zs
    return (
        (1.0 - (yy + zz), xy - wz, xz + wy),
        (xy + wz, 1.0 - (xx + zz), yz - wx),
        (xz - wy, yz + wx, 1.0 - (xx + yy)),
    )


def _dot(row: Vector3, column: Vector3) -> float:
    return (row[0] * column[0] + row[1] * column[1]) + row[2] * column[2]


@dataclass(frozen=True)
class Pose:
    """A child frame in its parent: ``p_parent = rotation @ p_child + translation`` (float64).

    Attributes:
        rotation: 3x3 rotation matrix, row by row.
        translation: ``(x, y, z)`` metres.
    """

    rotation: Matrix3 = IDENTITY
    translation: Vector3 = (0.0, 0.0, 0.0)

    @classmethod
    def from_rpy(cls, x: float, y: float, z: float, roll: float, pitch: float, yaw: float) -> Pose:
        """A URDF ``origin``: ``xyz`` and fixed-axis ``rpy``."""
        return cls(rotation_from_rpy(roll, pitch, yaw), (float(x), float(y), float(z)))

    @classmethod
    def from_quaternion(
        cls, x: float, y: float, z: float, qx: float, qy: float, qz: float, qw: float
    ) -> Pose:
        """A ``geometry_msgs/Transform``: translation and rotation quaternion."""
        return cls(rotation_from_quaternion(qx, qy, qz, qw), (float(x), float(y), float(z)))

    def compose(self, child: Pose) -> Pose:
        """``self * child``: ``child``'s frame expressed in ``self``'s parent."""
        columns = tuple(zip(*child.rotation, strict=True))
        rotation = tuple(tuple(_dot(row, column) for column in columns) for row in self.rotation)
        translation = tuple(
            _dot(row, child.translation) + offset
            for row, offset in zip(self.rotation, self.translation, strict=True)
        )
        return Pose(rotation, translation)  # type: ignore[arg-type]

    def apply(self, point: Vector3) -> Vector3:
        """``point`` (child frame) in the parent frame, float64 as :meth:`compose` rounds."""
        return tuple(  # type: ignore[return-value]
            _dot(row, point) + offset
            for row, offset in zip(self.rotation, self.translation, strict=True)
        )


@dataclass(frozen=True)
class FrameJoint:
    """A fixed transform ``parent -> child`` and where it was read (for messages)."""

    parent: str
    child: str
    pose: Pose
    source: str


class FrameTreeError(ValueError):
    """Joints that do not make a tree, or a frame the tree cannot reach; one line."""


class FrameTree:
    """Fixed joints by child frame; a child given twice is refused, naming both sources."""

    def __init__(self, joints: Iterable[FrameJoint]) -> None:
        self.joints: dict[str, FrameJoint] = {}
        for joint in joints:
            if joint.parent == joint.child:
                raise FrameTreeError(f"{joint.source}: frame {joint.child} is its own parent")
            known = self.joints.get(joint.child)
            if known is not None:
                raise FrameTreeError(
                    f"frame {joint.child} has two parents: {known.parent} ({known.source}) and "
                    f"{joint.parent} ({joint.source})"
                )
            self.joints[joint.child] = joint

    def chain(self, base: str, frame: str) -> list[FrameJoint]:
        """The joints from ``base`` out to ``frame``, base side first (empty when equal).

        Raises:
            FrameTreeError: ``frame`` is not below ``base`` (its chain ends elsewhere or loops).
        """
        chain: list[FrameJoint] = []
        seen = {frame}
        current = frame
        while current != base:
            joint = self.joints.get(current)
            if joint is None:
                how = (
                    "is unknown" if current == frame else f"reaches {current}, which has no parent"
                )
                raise FrameTreeError(f"frame {frame} is not connected to {base}: it {how}")
            chain.append(joint)
            current = joint.parent
            if current in seen:
                raise FrameTreeError(f"frame {frame}: its chain of parents loops at {current}")
            seen.add(current)
        return chain[::-1]

    def pose(self, base: str, frame: str) -> Pose:
        """``frame``'s pose in ``base``: its chain composed from the base outwards (the identity
        when ``frame`` is ``base``)."""
        chain = self.chain(base, frame)
        pose = chain[0].pose if chain else Pose()
        for joint in chain[1:]:
            pose = pose.compose(joint.pose)
        return pose
