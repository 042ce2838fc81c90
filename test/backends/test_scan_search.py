"""The scan-structured search (``search: scan``): exact pairs on sweeps, rings in every layer.

CPU tests compare the pairs found through the ring x sector bins with an all-pairs computation on
simulated VLP-16 / HDL-32E / HDL-64E sweeps (their rings), on clouds built to break a careless
window (points about the vertical axis, windows across azimuth +-pi, rings that say nothing about
elevation), on the oracle's probe clouds without rings, and the partition with range search's on
kitti_000001 (rings from elevation, as ``make-bag`` assigns them) and nebula's real sweeps
(``channel`` as ring); then rings through ``cluster()`` and the frame layer. GPU tests (marked
``gpu``) check the CUDA bins against the CPU twin.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer, euclidean_cluster
from gpu_euclidean_cluster.core.config import LABELLING_METHODS
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.kdtree import search_radius
from gpu_euclidean_cluster.core.neighbour_rule import threshold_sq
from gpu_euclidean_cluster.core.scan_search import (
    AXIS_FACTOR,
    MAX_RINGS,
    SECTORS,
    VIRTUAL_RINGS,
    check_rings,
)
from gpu_euclidean_cluster.cpu.search.scan_search import bin_points, scan_pair_chunks
from gpu_euclidean_cluster.frame.pipeline import FramePipeline
from gpu_euclidean_cluster.pointcloud_io.bags import ring_from_elevation
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (
    PointCloud2Error,
    from_structured,
    read_rings,
)
from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene

from ..conftest import ORACLE_CLOUDS, requires_cuda, same_partition
from .test_kdtree import all_pairs, gpu_pairs, pair_set

SENSORS = ("vlp16", "hdl32e", "hdl64e")


def simulated_sweep(sensor: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    scan = LidarSimulator(get_sensor(sensor), seed=seed).scan(street_scene(seed=seed))
    return scan.xyz, scan.ring


def sampled(points: np.ndarray, rings: np.ndarray, count: int, seed: int = 0):
    """``count`` points of a sweep (the all-pairs reference is quadratic)."""
    keep = np.sort(np.random.default_rng(seed).choice(len(points), count, replace=False))
    return points[keep], rings[keep]


def axis_cloud(rng: np.random.Generator) -> np.ndarray:
    """Points about the vertical axis through the origin (axis points, the collar and just
    beyond), on it, and exactly at the origin."""
    rho = np.concatenate((rng.uniform(0, 2.5, 900), [0.0, 0.0, 0.5, 1.0000001]))
    phi = rng.uniform(-np.pi, np.pi, len(rho))
    z = rng.uniform(-1.5, 1.5, len(rho))
    z[-4] = 0.0
    return np.stack((rho * np.cos(phi), rho * np.sin(phi), z), axis=1).astype(np.float32)


def seam_cloud(rng: np.random.Generator) -> np.ndarray:
    """Points about azimuth +-pi (negative x, y near 0): windows wrap around the sector table."""
    x = -rng.uniform(1.0, 20.0, 800)
    y = rng.uniform(-0.6, 0.6, 800)
    y[:40] = 0.0  # atan2 gives exactly +pi for y = +0, x < 0
    y[40:60] = -0.0
    z = rng.uniform(-1.0, 1.0, 800)
    return np.stack((x, y, z), axis=1).astype(np.float32)


@pytest.mark.parametrize("sensor", SENSORS)
@pytest.mark.parametrize("d_th", [0.3, 1.0])
def test_simulated_sweep_pairs_are_exactly_the_rule_pairs(sensor, d_th):
    points, rings = sampled(*simulated_sweep(sensor), 3000)
    expected = all_pairs(points, d_th)
    assert pair_set(scan_pair_chunks(points, d_th, rings)) == expected
    assert pair_set(scan_pair_chunks(points, d_th)) == expected  # elevation bands


@pytest.mark.parametrize(
    "rings_of",
    [
        lambda n, rng: rng.integers(0, 64, n),  # rings unrelated to elevation
        lambda n, rng: np.zeros(n, np.int64),  # one ring
        lambda n, rng: np.full(n, MAX_RINGS - 1),  # the largest id
    ],
    ids=["random", "one", "largest"],
)
@pytest.mark.parametrize("cloud", [axis_cloud, seam_cloud], ids=["axis", "seam"])
def test_windows_hold_every_neighbour_whatever_the_rings(cloud, rings_of):
    rng = np.random.default_rng(5)
    points = cloud(rng)
    rings = rings_of(len(points), rng)
    for d_th in (0.2, 0.5, 1.0):
        assert pair_set(scan_pair_chunks(points, d_th, rings)) == all_pairs(points, d_th)


def test_axis_points_are_the_ones_near_the_vertical_axis():
    points = axis_cloud(np.random.default_rng(1))
    bins = bin_points(points, None)
    radius = search_radius(threshold_sq(0.5))
    near = np.hypot(points[:, 0].astype(np.float64), points[:, 1]) <= radius * AXIS_FACTOR
    assert near.any() and not near.all()
    np.testing.assert_array_equal(bins.rho <= radius * AXIS_FACTOR, near)


def test_bins_hold_each_point_once_in_ring_and_sector_order():
    points, rings = simulated_sweep("vlp16")
    bins = bin_points(points, check_rings(rings, len(points)))
    assert sorted(bins.order.tolist()) == list(range(len(points)))
    assert bins.starts.shape == (16 * SECTORS + 1,) and bins.starts[-1] == len(points)
    ring_sorted = rings[bins.order]
    assert np.all(np.diff(ring_sorted.astype(np.int64)) >= 0)
    for ring in range(16):
        elevation = bins.elevation[rings == ring]
        assert bins.ring_low[ring] == elevation.min() and bins.ring_high[ring] == elevation.max()
    virtual = bin_points(points, None)
    assert virtual.starts.shape == (VIRTUAL_RINGS * SECTORS + 1,)


@pytest.mark.parametrize("name", sorted(ORACLE_CLOUDS))
def test_oracle_clouds_without_rings(name):
    points, d_th = ORACLE_CLOUDS[name]
    points = np.asarray(points, dtype=np.float32)
    points = points[np.isfinite(points).all(axis=1)]
    assert pair_set(scan_pair_chunks(points, d_th)) == all_pairs(points, d_th)


@pytest.mark.parametrize(
    ("rings", "message"),
    [
        (np.zeros(5, np.int32), r"shape \(4,\)"),
        (np.zeros(4, np.float32), "must be integers"),
        (np.array([0, 1, -1, 2]), r"\[0, 4096\); got ids from -1 to 2"),
        (np.array([0, 1, MAX_RINGS, 2]), "got ids from 0 to 4096"),
    ],
)
def test_bad_rings_are_refused_with_the_reason(rings, message):
    points = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match=message):
        euclidean_cluster(points, 0.5, search="scan", rings=rings, backend="cpu")


def test_rings_are_read_by_the_scan_search_only():
    points, rings = simulated_sweep("vlp16")
    bad = np.full(len(points), -5)  # refused by scan, never read by the others
    ranged = euclidean_cluster(points, 0.5, search="range", rings=bad, backend="cpu")
    scanned = euclidean_cluster(points, 0.5, search="scan", rings=rings, backend="cpu")
    np.testing.assert_array_equal(scanned.labels, ranged.labels)
    assert scanned.search == "scan"


def test_rings_follow_the_mask_and_range_bands():
    points, rings = simulated_sweep("hdl32e")
    points = points.copy()
    points[::97] = np.nan
    mask = np.random.default_rng(2).random(len(points)) < 0.8
    config = {"clustering_ranges": (15.0, 30.0), "clustering_distances": (0.4, 0.8, 1.2)}
    expected = EuclideanClusterer(ClusterConfig(search="range", **config), "cpu").cluster(
        points, mask
    )
    result = EuclideanClusterer(ClusterConfig(search="scan", **config), "cpu").cluster(
        points, mask, rings
    )
    np.testing.assert_array_equal(result.labels, expected.labels)


@pytest.mark.parametrize("method", LABELLING_METHODS)
def test_every_method_with_scan_equals_range_search(method):
    points, rings = sampled(*simulated_sweep("hdl64e"), 6000)
    expected = euclidean_cluster(points, 0.5, method=method, search="range", backend="cpu")
    result = euclidean_cluster(
        points, 0.5, method=method, search="scan", rings=rings, backend="cpu"
    )
    np.testing.assert_array_equal(result.labels, expected.labels)


@pytest.mark.parametrize("d_th", [0.3, 0.5, 1.0])
def test_kitti_with_rings_from_elevation_equals_pcl(d_th, load_frame, pcl_reference):
    points = load_frame("kitti_000001.bin")
    rings = ring_from_elevation(points, get_sensor("hdl64e").elevations_deg)
    result = euclidean_cluster(points, d_th, search="scan", rings=rings, backend="cpu")
    assert result.num_clusters == pcl_reference["kitti_000001.bin"][d_th]


def nebula_sweep(lidar_data_dir: Path, sensor: str) -> np.ndarray:
    """The first sweep decoded from nebula's packet bag of ``sensor`` (its ``channel`` field)."""
    from gpu_euclidean_cluster.pointcloud_io.velodyne import (
        SweepDecoder,
        load_calibration,
        read_velodyne_scans,
    )

    from ..pointcloud_io.test_velodyne_decoder import CASES

    bag, _, settings, calibration = CASES[sensor]
    path = lidar_data_dir / "nebula" / sensor / bag
    if not path.is_dir():
        pytest.skip(f"{path} is absent (the nebula packet bags)")
    pytest.importorskip("rosbags.rosbag2")
    decoder = SweepDecoder(
        load_calibration(lidar_data_dir / "nebula/calibration" / calibration), settings
    )
    for scan in read_velodyne_scans(path):
        for sweep in decoder.feed(scan.packets, scan.packet_seconds):
            return sweep.points
    pytest.fail(f"no sweep decoded from {path}")


@pytest.mark.parametrize("sensor", ["vlp16", "vlp32", "vls128"])
def test_nebula_sweeps_through_the_frame_layer(sensor, lidar_data_dir):
    records = nebula_sweep(lidar_data_dir, sensor)
    cloud = from_structured(records)
    rings = read_rings(cloud)
    np.testing.assert_array_equal(rings, records["channel"])
    pipeline = FramePipeline("cpu")
    window = FrameWindow()
    ranged = pipeline.process(cloud, ClusterConfig(d_th=0.5, search="range"), window)
    scanned = pipeline.process(cloud, ClusterConfig(d_th=0.5, search="scan"), window)
    np.testing.assert_array_equal(scanned.result.labels, ranged.result.labels)
    assert scanned.result.search == "scan" and scanned.result.num_clusters > 10


def test_read_rings_takes_ring_then_channel_and_refuses_floats():
    xyz = np.zeros(3, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4")])
    assert read_rings(from_structured(xyz)) is None
    both = np.zeros(
        3, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("ring", "u2"), ("channel", "u2")]
    )
    both["ring"], both["channel"] = [1, 2, 3], [7, 8, 9]
    np.testing.assert_array_equal(read_rings(from_structured(both)), [1, 2, 3])
    floats = np.zeros(3, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("channel", "f4")])
    with pytest.raises(PointCloud2Error, match="channel must be one integer per point"):
        read_rings(from_structured(floats))


# ---- GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("sensor", SENSORS)
def test_gpu_scan_pairs_equal_the_rule_pairs(sensor):
    points, rings = sampled(*simulated_sweep(sensor), 4000)
    for d_th in (0.3, 1.0):
        expected = all_pairs(points, d_th)
        assert gpu_pairs(points, d_th, "scan", rings.astype(np.int32)) == expected
        assert gpu_pairs(points, d_th, "scan") == expected


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("cloud", [axis_cloud, seam_cloud], ids=["axis", "seam"])
def test_gpu_scan_windows_and_axis_fallback(cloud):
    rng = np.random.default_rng(5)
    points = cloud(rng)
    rings = rng.integers(0, 64, len(points)).astype(np.int32)
    for d_th in (0.2, 1.0):
        assert gpu_pairs(points, d_th, "scan", rings) == all_pairs(points, d_th)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("name", sorted(set(ORACLE_CLOUDS) - {"empty", "all_nan"}))
def test_gpu_scan_on_the_oracle_clouds(name, oracle):
    points, d_th = ORACLE_CLOUDS[name]
    for method in LABELLING_METHODS:
        result = euclidean_cluster(points, d_th, method=method, search="scan", backend="cuda")
        assert same_partition(result.labels, oracle(points, d_th)), method


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("method", LABELLING_METHODS)
@pytest.mark.parametrize("d_th", [0.3, 0.5, 1.0])
def test_gpu_kitti_scan_equals_pcl_and_the_cpu(d_th, method, load_frame, pcl_reference):
    points = load_frame("kitti_000001.bin")
    rings = ring_from_elevation(points, get_sensor("hdl64e").elevations_deg)
    config = ClusterConfig(d_th=d_th, method=method, search="scan")
    result = EuclideanClusterer(config, "cuda").cluster(points, rings=rings)
    assert result.num_clusters == pcl_reference["kitti_000001.bin"][d_th]
    cpu = euclidean_cluster(points, d_th, method="union_find", search="range", backend="cpu")
    np.testing.assert_array_equal(result.labels, cpu.labels)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("sensor", ["vlp16", "vlp32", "vls128"])
def test_gpu_nebula_sweeps_through_the_frame_layer(sensor, lidar_data_dir):
    cloud = from_structured(nebula_sweep(lidar_data_dir, sensor))
    window = FrameWindow()
    cpu = FramePipeline("cpu").process(cloud, ClusterConfig(d_th=0.5, search="range"), window)
    gpu = FramePipeline("cuda")
    for search in ("scan", "kdtree"):
        out = gpu.process(cloud, ClusterConfig(d_th=0.5, search=search), window)
        np.testing.assert_array_equal(out.result.labels.get(), cpu.result.labels)


def test_node_search_parameter_takes_the_new_searches_live():
    from gpu_euclidean_cluster.ros.parameters.settings import settings_from_values
    from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS

    spec = next(spec for spec in PARAMETERS if spec.name == "search")
    assert {"kdtree", "scan"} <= set(spec.choices) and not spec.read_only
    defaults = {spec.name: spec.default for spec in PARAMETERS}
    for search in ("kdtree", "scan"):
        assert settings_from_values({**defaults, "search": search}).cluster.search == search
