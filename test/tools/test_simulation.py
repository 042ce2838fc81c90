"""LiDAR simulator: beam tables, rings, ground truth across frames, geometry, clustering."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_euclidean_cluster import euclidean_cluster
from gpu_euclidean_cluster.commands.cli import main as cli_main
from gpu_euclidean_cluster.pointcloud_io import load_points
from gpu_euclidean_cluster.pointcloud_io.bags import ring_from_elevation
from gpu_euclidean_cluster.tools.simulation import (
    GROUND_ID,
    HDL32E,
    HDL64E,
    SENSORS,
    VLP16,
    BeamModel,
    Box,
    LidarSimulator,
    SceneBuilder,
    get_sensor,
    street_scene,
)

FRAME_S = 0.1


@pytest.fixture(scope="module")
def street_scans():
    simulator = LidarSimulator(HDL64E, seed=3)
    return street_scene(seed=3), list(simulator.sequence(street_scene(seed=3), 3))


def test_beam_tables_match_the_datasheets():
    assert VLP16.num_beams == 16
    assert sorted(VLP16.elevations_deg) == list(range(-15, 16, 2))
    assert HDL32E.num_beams == 32
    np.testing.assert_allclose(np.diff(sorted(HDL32E.elevations_deg)), 4 / 3, atol=0.01)
    assert (min(HDL32E.elevations_deg), max(HDL32E.elevations_deg)) == (-30.67, 10.67)
    assert HDL64E.num_beams == 64
    assert (min(HDL64E.elevations_deg), max(HDL64E.elevations_deg)) == (-24.33, 2.0)
    for model in SENSORS.values():
        assert sorted(model.rings.tolist()) == list(range(model.num_beams))
        lowest = int(np.argmin(model.elevations_deg))
        assert model.rings[lowest] == 0


def test_unknown_sensor_and_bad_model():
    with pytest.raises(ValueError, match="unknown sensor 'hdl128'"):
        get_sensor("hdl128")
    with pytest.raises(ValueError, match="dropout"):
        BeamModel("bad", (0.0,), 0.2, 0.5, 100.0, 0.01, dropout=1.0)


@pytest.mark.parametrize("name", sorted(SENSORS))
def test_ring_field_matches_the_beam_model(name):
    model = get_sensor(name)
    scan = LidarSimulator(model, seed=0).scan(street_scene(seed=0))
    assert scan.ring.dtype == np.uint16
    assert scan.xyz.dtype == np.float32
    # every point lies on the elevation of its laser: the ring derived from geometry agrees
    np.testing.assert_array_equal(ring_from_elevation(scan.xyz, model.elevations_deg), scan.ring)
    assert np.unique(scan.ring).size == model.num_beams
    per_ring = np.bincount(scan.ring, minlength=model.num_beams)
    assert per_ring.max() <= model.azimuths_per_sweep
    ranges = np.linalg.norm(scan.xyz, axis=1)
    assert ranges.min() >= model.min_range_m
    assert ranges.max() <= model.max_range_m


def test_same_seed_same_scan_other_seed_other_noise():
    scene = street_scene(seed=1)
    first = LidarSimulator(VLP16, seed=5).scan(scene)
    again = LidarSimulator(VLP16, seed=5).scan(scene)
    other = LidarSimulator(VLP16, seed=6).scan(scene)
    np.testing.assert_array_equal(first.xyz, again.xyz)
    assert len(first) != len(other) or not np.array_equal(first.xyz, other.xyz)


def test_ground_truth_points_lie_on_their_objects(street_scans):
    scene, scans = street_scans
    for index, scan in enumerate(scans):
        posed = scene.at(index * FRAME_S)
        ground = scan.object_id == GROUND_ID
        np.testing.assert_allclose(scan.xyz[ground, 2], scene.ground_z, atol=0.15)
        for obj in posed.objects:
            points = scan.xyz[scan.object_id == obj.object_id].astype(np.float64)
            if points.size == 0:
                continue
            shape = obj.shape
            if isinstance(shape, Box):
                cos_yaw, sin_yaw = np.cos(shape.yaw), np.sin(shape.yaw)
                offset = points - np.asarray(shape.center)
                local_x = offset[:, 0] * cos_yaw + offset[:, 1] * sin_yaw
                local_y = -offset[:, 0] * sin_yaw + offset[:, 1] * cos_yaw
                half = 0.5 * np.asarray(shape.size) + 0.15
                assert np.all(np.abs(local_x) <= half[0])
                assert np.all(np.abs(local_y) <= half[1])
                assert np.all(np.abs(offset[:, 2]) <= half[2])
            else:
                radial = np.hypot(
                    points[:, 0] - shape.center_xy[0], points[:, 1] - shape.center_xy[1]
                )
                assert np.all(radial <= shape.radius + 0.15)
                assert np.all(points[:, 2] <= shape.z_max + 0.15)


def test_ground_truth_ids_are_consistent_across_frames(street_scans):
    scene, scans = street_scans
    kinds = scene.kinds()
    visible = [set(np.unique(scan.object_id).tolist()) for scan in scans]
    assert visible[0] <= set(kinds)
    # the same objects stay visible from frame to frame (none is more than ~1 m from its place)
    assert len(visible[0] ^ visible[1]) <= 2
    assert any(obj.moving for obj in scene.objects), "the street scene has moving objects"


def test_ground_truth_ids_follow_a_moving_object():
    builder = SceneBuilder()
    car = builder.car(0.0, 8.0, yaw=0.0, speed=10.0)  # broadside to the sensor, 1 m per frame
    person = builder.person(6.0, -5.0)
    scene = builder.build()
    scans = list(LidarSimulator(HDL64E, seed=0).sequence(scene, 2, rate_hz=1 / FRAME_S))
    car_x = [scan.xyz[scan.object_id == car.object_id, 0] for scan in scans]
    assert min(x.size for x in car_x) > 500
    assert car_x[1].min() - car_x[0].min() == pytest.approx(1.0, abs=0.1)
    assert car_x[1].max() - car_x[0].max() == pytest.approx(1.0, abs=0.1)
    person_xy = [scan.xyz[scan.object_id == person.object_id, :2].mean(axis=0) for scan in scans]
    np.testing.assert_allclose(person_xy[0], person_xy[1], atol=0.05)


def test_clustering_recovers_well_separated_objects():
    # Objects taller than the sensor (1.73 m): grazing hits on low roofs are sparse and would
    # legitimately form clusters of their own at 0.5 m.
    builder = SceneBuilder()
    builder.box("van", 9.0, 3.0, (4.5, 1.9, 2.2), yaw=0.3)
    builder.box("van", -8.0, -4.0, (5.0, 2.0, 2.4))
    builder.person(4.0, -6.0)
    builder.person(-5.0, 6.0)
    builder.pole(12.0, -6.0)
    builder.box("container", 0.0, 10.0, (1.0, 1.0, 2.0))
    scene = builder.build()
    scan = LidarSimulator(HDL64E, seed=0).scan(scene)
    above_ground = scan.xyz[:, 2] > scene.ground_z + 0.25
    result = euclidean_cluster(scan.xyz[above_ground], 0.5, backend="cpu", min_cluster_size=5)
    truth = scan.object_id[above_ground]
    assert result.num_clusters == len(scene.objects)
    for label in range(result.num_clusters):
        ids = np.unique(truth[result.labels == label])
        assert ids.size == 1 and ids[0] != GROUND_ID  # each cluster is exactly one object
    found = {int(truth[result.labels == label][0]) for label in range(result.num_clusters)}
    assert found == {obj.object_id for obj in scene.objects}


def test_simulate_command_writes_loadable_scans(tmp_path, capsys):
    out = tmp_path / "sim"
    assert cli_main(["simulate", "--sensor", "vlp16", "--frames", "2", "--out", str(out)]) == 0
    files = sorted(out.glob("scan_*.npy"))
    assert [f.name for f in files] == ["scan_0000.npy", "scan_0001.npy"]
    cloud = load_points(files[0])
    assert cloud.xyz.shape[1] == 3 and cloud.xyz.shape[0] > 1000
    assert cloud.fields["ring"].max() == 15
    assert GROUND_ID in cloud.fields["object_id"]
    assert cli_main(["simulate", "--frames", "1", "--out", str(out)]) == 2
    assert "already holds scan_" in capsys.readouterr().err
