"""Scenes for the LiDAR simulator: a ground plane plus boxes (cars, walls) and vertical cylinders
(people, poles), each with an object id and an optional constant velocity.

Coordinates are in the sensor frame (x forward, y left, z up, sensor at the origin); the ground
plane lies at ``z = ground_z`` (minus the sensor's mounting height). Object id 0 is the ground;
objects have ids 1, 2, ... that stay the same in every frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

GROUND_ID = 0
KITTI_SENSOR_HEIGHT_M = 1.73


@dataclass(frozen=True)
class Box:
    """An oriented box standing on its base (a car, a truck, a wall segment).

    ``center`` is the centre of the box volume; ``size`` is (length along the heading, width,
    height); ``yaw`` is the heading in radians about z.
    """

    center: tuple[float, float, float]
    size: tuple[float, float, float]
    yaw: float = 0.0

    @property
    def bounding_radius(self) -> float:
        """Radius of the horizontal circle around ``center`` that contains the box."""
        return 0.5 * float(np.hypot(self.size[0], self.size[1]))


@dataclass(frozen=True)
class Cylinder:
    """A vertical cylinder (a person, a pole): axis at ``center_xy``, between ``z_min`` and
    ``z_max``."""

    center_xy: tuple[float, float]
    radius: float
    z_min: float
    z_max: float

    @property
    def center(self) -> tuple[float, float, float]:
        return (self.center_xy[0], self.center_xy[1], 0.5 * (self.z_min + self.z_max))

    @property
    def bounding_radius(self) -> float:
        return self.radius


Shape = Box | Cylinder


@dataclass(frozen=True)
class SceneObject:
    """An object of the scene: id, kind (``car``, ``person``, ...), shape, velocity and
    reflectivity in [0, 1] (scales the simulated intensity)."""

    object_id: int
    kind: str
    shape: Shape
    velocity_xy: tuple[float, float] = (0.0, 0.0)
    reflectivity: float = 0.5

    def __post_init__(self) -> None:
        if self.object_id <= GROUND_ID:
            raise ValueError(f"object ids start at {GROUND_ID + 1}, got {self.object_id}")
        if not 0 <= self.reflectivity <= 1:
            raise ValueError(f"reflectivity must be in [0, 1], got {self.reflectivity}")

    @property
    def moving(self) -> bool:
        return self.velocity_xy != (0.0, 0.0)

    def at(self, t_s: float) -> SceneObject:
        """This object after ``t_s`` seconds of constant-velocity motion."""
        if not self.moving:
            return self
        dx, dy = self.velocity_xy[0] * t_s, self.velocity_xy[1] * t_s
        shape = self.shape
        if isinstance(shape, Box):
            cx, cy, cz = shape.center
            moved: Shape = replace(shape, center=(cx + dx, cy + dy, cz))
        else:
            moved = replace(shape, center_xy=(shape.center_xy[0] + dx, shape.center_xy[1] + dy))
        return replace(self, shape=moved)


@dataclass(frozen=True)
class Scene:
    """Ground plane and objects at time ``t_s`` = 0; :meth:`at` moves the moving ones."""

    objects: tuple[SceneObject, ...] = field(default_factory=tuple)
    ground_z: float = -KITTI_SENSOR_HEIGHT_M
    ground_reflectivity: float = 0.3

    def __post_init__(self) -> None:
        ids = [obj.object_id for obj in self.objects]
        if len(set(ids)) != len(ids):
            raise ValueError("object ids of a scene must be unique")

    def at(self, t_s: float) -> Scene:
        """The scene after ``t_s`` seconds."""
        return replace(self, objects=tuple(obj.at(t_s) for obj in self.objects))

    def kinds(self) -> dict[int, str]:
        """Kind of every id, the ground included."""
        return {GROUND_ID: "ground", **{obj.object_id: obj.kind for obj in self.objects}}


class SceneBuilder:
    """Adds objects with consecutive ids, standing on the ground of the scene being built."""

    def __init__(self, ground_z: float = -KITTI_SENSOR_HEIGHT_M) -> None:
        self.ground_z = ground_z
        self.objects: list[SceneObject] = []

    def _add(
        self, kind: str, shape: Shape, velocity: tuple[float, float], reflectivity: float
    ) -> SceneObject:
        obj = SceneObject(len(self.objects) + 1, kind, shape, velocity, reflectivity)
        self.objects.append(obj)
        return obj

    def box(
        self,
        kind: str,
        x: float,
        y: float,
        size: tuple[float, float, float],
        yaw: float = 0.0,
        velocity: tuple[float, float] = (0.0, 0.0),
        reflectivity: float = 0.6,
    ) -> SceneObject:
        """A box of ``size`` (length, width, height) whose base centre is at (x, y)."""
        center = (x, y, self.ground_z + 0.5 * size[2])
        return self._add(kind, Box(center, size, yaw), velocity, reflectivity)

    def cylinder(
        self,
        kind: str,
        x: float,
        y: float,
        radius: float,
        height: float,
        velocity: tuple[float, float] = (0.0, 0.0),
        reflectivity: float = 0.4,
    ) -> SceneObject:
        """A vertical cylinder standing on the ground at (x, y)."""
        shape = Cylinder((x, y), radius, self.ground_z, self.ground_z + height)
        return self._add(kind, shape, velocity, reflectivity)

    def car(self, x: float, y: float, yaw: float = 0.0, speed: float = 0.0) -> SceneObject:
        velocity = (speed * float(np.cos(yaw)), speed * float(np.sin(yaw)))
        return self.box("car", x, y, (4.5, 1.8, 1.5), yaw, velocity, reflectivity=0.7)

    def person(self, x: float, y: float, velocity: tuple[float, float] = (0.0, 0.0)) -> SceneObject:
        return self.cylinder("person", x, y, 0.25, 1.75, velocity)

    def pole(self, x: float, y: float) -> SceneObject:
        return self.cylinder("pole", x, y, 0.12, 5.0, reflectivity=0.5)

    def wall(self, x: float, y: float, length: float, yaw: float = 0.0) -> SceneObject:
        return self.box("wall", x, y, (length, 0.3, 3.0), yaw, reflectivity=0.35)

    def build(self) -> Scene:
        return Scene(tuple(self.objects), ground_z=self.ground_z)


def street_scene(seed: int = 0, ground_z: float = -KITTI_SENSOR_HEIGHT_M) -> Scene:
    """An urban street along x: building walls, parked and moving cars, pedestrians and poles.

    Placement is random (``seed``) but objects keep at least about a metre apart so that each is
    its own Euclidean cluster at the usual 0.3-0.5 m thresholds.
    """
    rng = np.random.default_rng(seed)
    scene = SceneBuilder(ground_z)
    for side in (1.0, -1.0):
        for start in range(-60, 60, 24):  # wall segments with doorway-sized gaps
            scene.wall(start + 10.0 + rng.uniform(-1, 1), side * 13.0, 20.0)
        for x in np.arange(-45.0, 50.0, 15.0):
            scene.pole(float(x + rng.uniform(-2, 2)), side * 10.5)
        parked = np.arange(-40.0, 45.0, 8.0) + rng.uniform(-1.0, 1.0, 11)
        for x in parked[rng.random(parked.size) < 0.6]:
            scene.car(float(x), side * 6.5, yaw=float(rng.normal(0, 0.05)))
        for _ in range(4):
            x = float(rng.uniform(-30, 30))
            scene.person(
                x,
                side * (8.5 + rng.uniform(-0.3, 0.3)),
                velocity=(side * float(rng.uniform(0.8, 1.6)), 0.0),
            )
    # moving traffic in both lanes; the lanes are 3.5 m apart, clear of the parked cars
    for x in (-25.0, 12.0, 35.0):
        scene.car(x + float(rng.uniform(-3, 3)), 1.75, yaw=0.0, speed=float(rng.uniform(8, 12)))
    for x in (-10.0, 22.0):
        scene.car(x + float(rng.uniform(-3, 3)), -1.75, yaw=np.pi, speed=float(rng.uniform(8, 12)))
    return scene.build()
