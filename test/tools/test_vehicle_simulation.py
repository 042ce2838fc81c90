"""The vehicle simulation's pieces: rays from anywhere, the street around the vehicle, and a
sensor's sweeps exact at the decoder's cut."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.pointcloud_io.sensor_kit import Pose
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    DecoderSettings,
    SweepDecoder,
    load_calibration,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.encoder import VelodyneEncoder
from gpu_euclidean_cluster.tools.simulation import (
    VLP16,
    RayGrid,
    SceneBuilder,
    cast,
    street_scene,
)
from gpu_euclidean_cluster.tools.simulation.rays import cast_rays
from gpu_euclidean_cluster.tools.simulation.scene import Scene
from gpu_euclidean_cluster.tools.simulation.vehicle import (
    EGO_CLEARANCE,
    SensorStream,
    SimulatedSensor,
    ground_truth_objects,
    vehicle_street_scene,
)

CALIBRATIONS = Path(__file__).resolve().parents[2] / "config" / "velodyne"
RATE_HZ = 10.0


def grid() -> RayGrid:
    return RayGrid.from_angles(np.asarray(VLP16.elevations_deg), 0.2, 1800)


def test_rays_from_the_origin_hit_what_the_grid_caster_hits():
    scene = street_scene(seed=5)
    directions = grid().directions
    expected = cast(scene, grid())
    hits = cast_rays(scene, np.zeros((directions.size // 3, 3)), directions.reshape(-1, 3))
    assert np.array_equal(hits.object_id, expected.object_id.reshape(-1))
    assert np.allclose(hits.range_m, expected.range_m.reshape(-1), rtol=1e-12, atol=0)
    assert np.allclose(hits.cos_incidence, expected.cos_incidence.reshape(-1), atol=1e-12)


def test_rays_from_elsewhere_and_of_any_length_hit_the_same_surfaces():
    """A sensor moved by ``offset`` in a scene moved by ``offset``: the same hits; directions
    twice as long: the same points at half the parameter."""
    scene = street_scene(seed=6)
    offset = np.array([3.0, -2.0, 0.5])
    moved = Scene(
        tuple(_shifted(obj, offset) for obj in scene.objects),
        ground_z=scene.ground_z + offset[2],
        ground_reflectivity=scene.ground_reflectivity,
    )
    directions = grid().directions.reshape(-1, 3)
    here = cast_rays(scene, np.zeros_like(directions), directions)
    there = cast_rays(moved, np.broadcast_to(offset, directions.shape), 2.0 * directions)
    assert np.array_equal(here.object_id, there.object_id)
    hit = np.isfinite(here.range_m)
    assert hit.mean() > 0.5
    assert np.allclose(2.0 * there.range_m[hit], here.range_m[hit], rtol=1e-12, atol=1e-9)
    assert np.allclose(here.cos_incidence[hit], there.cos_incidence[hit], atol=1e-12)


def _shifted(obj, offset):
    from dataclasses import replace

    from gpu_euclidean_cluster.tools.simulation import Box

    shape = obj.shape
    if isinstance(shape, Box):
        moved = replace(shape, center=tuple(np.add(shape.center, offset)))
    else:
        moved = replace(
            shape,
            center_xy=(shape.center_xy[0] + offset[0], shape.center_xy[1] + offset[1]),
            z_min=shape.z_min + offset[2],
            z_max=shape.z_max + offset[2],
        )
    return replace(obj, shape=moved)


def test_the_street_keeps_clear_of_the_vehicle_and_only_drops_what_would_enter():
    duration_s = 3.0
    street = street_scene(seed=0, ground_z=0.0)
    scene = vehicle_street_scene(0, duration_s)
    assert scene.ground_z == 0.0
    dropped = {o.object_id for o in street.objects} - {o.object_id for o in scene.objects}
    assert dropped and all(street.kinds()[i] == "car" for i in dropped)  # traffic only
    (low_x, low_y), (high_x, high_y) = EGO_CLEARANCE
    for obj in scene.objects:
        for t in np.linspace(0.0, duration_s, 301):
            shape = obj.at(float(t)).shape
            x, y = shape.center[0], shape.center[1]
            gap = math.hypot(max(low_x - x, 0, x - high_x), max(low_y - y, 0, y - high_y))
            assert gap > shape.bounding_radius - 0.05  # sampled every 1 cm of 10 m/s travel
    table = ground_truth_objects([scene, scene.at(0.1)])
    assert table["frame"].tolist() == [0] * len(scene.objects) + [1] * len(scene.objects)
    assert table["center"].shape == table["size"].shape == (2 * len(scene.objects), 3)
    cylinders = table["shape"] == "cylinder"
    assert np.array_equal(table["size"][cylinders, 0], 2 * table["radius"][cylinders])


def crossing_scene() -> Scene:
    """A car driving fast (20 m/s, 2 m a frame) across a VLP-16's cut (scan phase 0: ahead,
    +x), and a wall behind it."""
    builder = SceneBuilder(ground_z=0.0)
    builder.car(8.0, -1.0, yaw=math.pi / 2, speed=20.0)
    builder.wall(12.0, 0.0, 20.0, yaw=math.pi / 2)
    return builder.build()


def test_returns_moved_across_the_cut_are_cast_in_the_next_frame():
    """The decoder moves the returns past the cut to the next sweep: they are cast in the next
    frame's scene, so every point of every sweep lies on that frame's car, 2 m from where it was
    the frame before."""
    settings = DecoderSettings(model="VLP16", return_mode="SingleStrongest", scan_phase=0.0)
    calibration = load_calibration(CALIBRATIONS / "VLP16.yaml")
    sensor = SimulatedSensor(
        "front",
        "velodyne",
        "/velodyne_packets",
        Pose(translation=(0.0, 0.0, 1.8)),
        VelodyneEncoder(calibration, settings),
        1_700_000_000_000_000_000,
    )
    scene = crossing_scene()
    car = scene.objects[0]
    stream = SensorStream(sensor, lambda frame: scene.at(frame / RATE_HZ), RATE_HZ)
    decoder = SweepDecoder(calibration, settings)
    carried_car = 0
    for sweep in stream.sweeps(3):
        message = sweep.message
        [decoded] = decoder.feed(message.packets, message.packet_seconds)
        assert decoded.points.shape[0] == sweep.object_id.size
        on_car = sweep.object_id == car.object_id
        carried_car += np.count_nonzero(on_car[: sweep.carried])
        box = car.at(sweep.frame / RATE_HZ).shape
        xyz = np.stack([decoded.points[a] for a in "xyz"], axis=1).astype(np.float64)
        xyz[:, 2] += 1.8
        relative = xyz[on_car] - np.array(box.center)
        # the car heads along +y: its length on y, its width on x
        outside = np.abs(relative[:, [1, 0, 2]]) - np.array(box.size) / 2
        distance = np.minimum(outside.max(axis=1), 0) + np.linalg.norm(
            np.maximum(outside, 0), axis=1
        )
        assert np.abs(distance).max() <= 0.001 + 1e-4
    assert carried_car > 10  # the cut did move points of the car on


@pytest.mark.parametrize("model", ["VLP16", "VLS128"])
def test_a_tilted_sensor_off_the_origin_decodes_onto_the_street(model: str):
    settings = DecoderSettings(model=model, return_mode="SingleStrongest", scan_phase=90.0)
    calibration = load_calibration(CALIBRATIONS / f"{model}.yaml")
    pose = Pose.from_rpy(1.0, 0.5, 1.9, 0.1, 0.6, 1.2)  # pitched down, turned, to the left
    sensor = SimulatedSensor(
        "tilted", "lidar", "/packets", pose, VelodyneEncoder(calibration, settings), 0
    )
    scene = vehicle_street_scene(1, 0.2)
    stream = SensorStream(sensor, lambda frame: scene.at(frame / RATE_HZ), RATE_HZ)
    [sweep] = list(stream.sweeps(1))
    [decoded] = SweepDecoder(calibration, settings).feed(
        sweep.message.packets, sweep.message.packet_seconds
    )
    assert decoded.points.shape[0] == sweep.object_id.size > 5000
    local = np.stack([decoded.points[a] for a in "xyz"], axis=1).astype(np.float64)
    base = local @ np.array(pose.rotation).T + np.array(pose.translation)
    ground = sweep.object_id == 0
    half = 0.002 if model == "VLS128" else 0.001
    assert np.abs(base[ground, 2]).max() <= half + 1e-4
    assert ground.mean() > 0.3 and (~ground).any()
