"""Voxel-grid downsampling before clustering (``ClusterConfig.downsample_leaf_size``), both twins.

Autoware.ai's ``downsample_cloud``/``leaf_size``: PCL ``VoxelGrid`` at ``(L, L, L)``, the voxel
centroids clustered, every point given its voxel's cluster (``core/downsample.py``). The
reference here is the test's own, written from PCL's ``VoxelGrid::applyFilter``: float32 inverse
leaf, float32 minima and maxima, the int64 extent guard, ``floor`` per axis minus the minimum
cell, the linear index, voxels by ascending index (``np.unique``), centroids as float64 sums in
point order (``np.add.at``); the centroids are clustered through a KD-tree's candidate pairs
filtered by the float32 rule, components by SciPy. The clustering tests run on both backends
(``backend`` fixture); the CUDA twin also equals the CPU twin bit for bit: the voxels and
centroids (``Backend.downsample``) and the labels, on the real frames and random and adversarial
clouds (skipped without a CUDA device).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.config import ConfigError, config_problems
from gpu_euclidean_cluster.core.downsample import autoware_leaf, cube_leaf, inverse_leaf
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.core.timing import StageClock
from gpu_euclidean_cluster.core.units import INT32_MAX
from gpu_euclidean_cluster.core.work import WorkTooLargeError
from gpu_euclidean_cluster.cpu.labelling.autoware_voxel import downsample, linear_index
from gpu_euclidean_cluster.pointcloud_io import load_points

from ..conftest import LIDAR_DATA_DIR, cuda_only
from .test_range_bands import AUTOWARE, reference_bands, reference_merge

FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")
LEAVES = (0.1, 0.3)


def load_frame(name: str) -> np.ndarray:
    path = LIDAR_DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"LiDAR frame {path} not found (set LIDAR_DATA_DIR)")
    points = load_points(path).xyz
    return np.ascontiguousarray(points[np.isfinite(points).all(axis=1)], dtype=np.float32)


def run(
    backend: str, points: np.ndarray, mask: np.ndarray | None = None, **config: object
) -> np.ndarray:
    """The labels of the ``backend`` twin's clustering of host ``points``."""
    return EuclideanClusterer(ClusterConfig(**config), backend=backend).cluster(points, mask).labels


def canonical(components: np.ndarray, min_size: int = 1, max_size: int = INT32_MAX) -> np.ndarray:
    return np.asarray(canonical_labels(np.asarray(components), min_size, max_size)[0])


# ---- the reference ------------------------------------------------------------------------------


def pcl_voxel_grid(points: np.ndarray, leaf: float) -> tuple[np.ndarray, np.ndarray]:
    """PCL ``VoxelGrid`` at ``(leaf, leaf, leaf)``: each point's voxel and the centroids (float64
    sums in point order, rounded to float32); the input unchanged past the extent guard."""
    p = np.asarray(points, dtype=np.float32)
    inv = np.float32(1) / np.float32(leaf)  # setLeafSize: Array4f::Ones() / leaf_size_
    low, high = p.min(axis=0), p.max(axis=0)  # getMinMax3D, float
    extent = [int((high[a] - low[a]) * inv) + 1 for a in range(3)]  # static_cast<int64_t>
    if extent[0] * extent[1] * extent[2] > INT32_MAX:
        return np.arange(len(p)), p.copy()  # "output = *input_"
    min_b = np.floor(low * inv).astype(np.int64)
    max_b = np.floor(high * inv).astype(np.int64)
    div = max_b - min_b + 1
    ijk = (np.floor(p * inv) - min_b.astype(np.float32)).astype(np.int64)
    index = ijk[:, 0] + ijk[:, 1] * div[0] + ijk[:, 2] * (div[0] * div[1])
    _, voxel = np.unique(index, return_inverse=True)  # sorted by index: PCL's output order
    voxel = voxel.reshape(-1)
    sums = np.zeros((int(voxel.max()) + 1, 3))
    np.add.at(sums, voxel, p.astype(np.float64))
    counts = np.bincount(voxel)
    return voxel, (sums / counts[:, None]).astype(np.float32)


def reference_components(points: np.ndarray, d_th: float) -> np.ndarray:
    """Exact clusters: a KD-tree's pairs within a slightly larger radius, kept where the float32
    rule ``((dx*dx + dy*dy) + dz*dz) < float32(d_th**2)`` holds; components by SciPy."""
    p = np.asarray(points, dtype=np.float32)
    pairs = cKDTree(p.astype(np.float64)).query_pairs(d_th * 1.001, output_type="ndarray")
    d = p[pairs[:, 0]] - p[pairs[:, 1]]
    sq = (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + d[:, 2] * d[:, 2]
    i, j = pairs[sq < np.float32(np.float64(d_th) ** 2)].T
    n = len(p)
    graph = coo_matrix((np.ones(len(i), dtype=np.int8), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def reference_labels(points, leaf, d_th, min_size=1, max_size=INT32_MAX) -> np.ndarray:
    voxel, centroids = pcl_voxel_grid(points, leaf)
    return canonical(reference_components(centroids, d_th)[voxel], min_size, max_size)


# ---- against the reference on the real frames ---------------------------------------------------


@pytest.mark.parametrize("leaf", LEAVES)
@pytest.mark.parametrize("name", FRAMES)
def test_grid_equals_pcl_reference(name: str, leaf: float) -> None:
    points = load_frame(name)
    voxel, centroids = downsample(points, leaf)
    want_voxel, want_centroids = pcl_voxel_grid(points, leaf)
    assert len(centroids) == len(want_centroids) < len(points)
    np.testing.assert_array_equal(voxel, want_voxel)
    # Float64 sums of a voxel's float32 coordinates are exact here, so the order is immaterial.
    np.testing.assert_array_equal(centroids, want_centroids)


@pytest.mark.parametrize("leaf", LEAVES)
@pytest.mark.parametrize("name", FRAMES)
def test_labels_equal_reference(backend: str, name: str, leaf: float) -> None:
    points = load_frame(name)
    labels = run(backend, points, d_th=0.5, downsample_leaf_size=leaf, min_cluster_size=5)
    np.testing.assert_array_equal(labels, reference_labels(points, leaf, 0.5, min_size=5))


def test_bands_and_merging_on_the_centroids(backend: str) -> None:
    points = load_frame("kitti_000008.bin")[::4]
    leaf = 0.3
    voxel, centroids = pcl_voxel_grid(points, leaf)
    assert len(centroids) < 12000  # the brute-force band reference stays quick
    ranges, distances = AUTOWARE["clustering_ranges"], AUTOWARE["clustering_distances"]
    components = reference_bands(centroids, ranges, distances)
    components = reference_merge(centroids, components, AUTOWARE["cluster_merge_threshold"])
    labels = run(backend, points, downsample_leaf_size=leaf, min_cluster_size=3, **AUTOWARE)
    np.testing.assert_array_equal(labels, canonical(components[voxel], 3))


# ---- the rules, one by one ----------------------------------------------------------------------


def test_float32_inverse_leaf_rule() -> None:
    # x = float32(0.7): float32(x * float32(1 / 0.1)) is 7.0, double x / 0.1 is 6.99999988...
    x = np.float32(0.7)
    inv = np.float32(1) / np.float32(0.1)
    assert inverse_leaf(cube_leaf(0.1))[2] == inv == np.float32(10)
    assert np.floor(x * inv) == 7 and np.floor(np.float64(x) / 0.1) == 6
    points = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, x], [0.0, 0.0, 0.65]], np.float32)
    # Cells along z 0, 7, 6 (the leaf applies to z too, unlike Autoware Universe's).
    assert linear_index(points, cube_leaf(0.1)).tolist() == [0, 7, 6]
    voxel, _ = downsample(points, 0.1)
    assert voxel.tolist() == [0, 2, 1]
    # Autoware Universe's leaf is (L, L, 100000): all three in one voxel.
    assert linear_index(points, autoware_leaf(0.1)).tolist() == [0, 0, 0]
    assert linear_index(points, 0.1).tolist() == [0, 0, 0]


def test_cells_count_from_the_cloud_minima() -> None:
    points = np.array([[-0.05, 0.0, 0.0], [0.04, 0.0, 0.0], [0.06, 0.0, 0.0]], np.float32)
    voxel, centroids = downsample(points, 0.1)
    assert voxel.tolist() == [0, 1, 1]
    mean = (np.float64(np.float32(0.04)) + np.float64(np.float32(0.06))) / 2
    assert centroids[1].tolist() == [np.float32(mean), 0.0, 0.0]


def test_overflow_guard_returns_the_cloud_unchanged() -> None:
    # 1 km x 1 km at 0.1 m: 10001 * 10001 * 21 cells fit INT32_MAX, * 22 do not.
    corners = [[0, 0, 0], [1000, 1000, 0], [0.01, 0, 0], [0.02, 0, 0]]
    fits = np.array([*corners, [0, 0, 2.0]], np.float32)
    over = np.array([*corners, [0, 0, 2.1]], np.float32)
    assert 10001 * 10001 * 21 <= INT32_MAX < 10001 * 10001 * 22
    assert linear_index(fits, cube_leaf(0.1)) is not None
    voxel, centroids = downsample(fits, 0.1)
    assert voxel.tolist() == [0, 1, 0, 0, 2] and len(centroids) == 3
    np.testing.assert_array_equal(voxel, pcl_voxel_grid(fits, 0.1)[0])
    # PCL warns and returns the input: every point its own voxel, the centroids the points.
    assert linear_index(over, cube_leaf(0.1)) is None
    voxel, centroids = downsample(over, 0.1)
    assert voxel.tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(centroids, over)
    np.testing.assert_array_equal(voxel, pcl_voxel_grid(over, 0.1)[0])
    # Past the guard the cloud is clustered as if not downsampled.
    assert (
        run("cpu", over, d_th=0.5, downsample_leaf_size=0.1).tolist()
        == run("cpu", over, d_th=0.5).tolist()
    )


def test_tiny_leaf_is_plain_clustering_without_shared_voxels(backend: str) -> None:
    # Every voxel holds one point: the centroids are the points, bit for bit, so the labels are
    # plain clustering's (a leaf that merges points may join or split clusters instead).
    rng = np.random.default_rng(3)
    points = rng.uniform(0, 1, (3000, 3)).astype(np.float32)
    voxel, centroids = downsample(points, 1e-3)
    assert len(centroids) == len(points)  # no shared voxel (and the grid fits INT32_MAX)
    np.testing.assert_array_equal(centroids[voxel], points)
    for d_th, sizes in ((0.04, {}), (0.06, {"min_cluster_size": 3, "max_cluster_size": 100})):
        plain = run(backend, points, d_th=d_th, **sizes)
        np.testing.assert_array_equal(
            run(backend, points, d_th=d_th, downsample_leaf_size=1e-3, **sizes), plain
        )


def test_cluster_sizes_count_input_points(backend: str) -> None:
    # Five points in one voxel and one point alone: a cluster of 5 points, 1 voxel.
    points = np.array([[0.01 * k, 0, 0] for k in range(5)] + [[5, 0, 0]], np.float32)
    keeps = run(backend, points, d_th=0.5, downsample_leaf_size=0.1, min_cluster_size=5)
    assert keeps.tolist() == [0, 0, 0, 0, 0, -1]
    drops = run(backend, points, d_th=0.5, downsample_leaf_size=0.1, min_cluster_size=6)
    assert drops.tolist() == [-1] * 6
    capped = run(backend, points, d_th=0.5, downsample_leaf_size=0.1, max_cluster_size=4)
    assert capped.tolist() == [-1] * 5 + [0]
    result = EuclideanClusterer(ClusterConfig(d_th=0.5, downsample_leaf_size=0.1), backend).cluster(
        points
    )
    assert result.cluster_sizes.tolist() == [5, 1]


def test_centroids_can_split_what_points_join(backend: str) -> None:
    # Points 0.1 m apart join at 0.15 m; their voxels' centroids (0.0225 and 0.19) do not.
    points = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 0], [0.09, 0, 0], [0.19, 0, 0]], np.float32)
    assert run(backend, points, d_th=0.15).tolist() == [0] * 5
    assert run(backend, points, d_th=0.15, downsample_leaf_size=0.1).tolist() == [0, 0, 0, 0, 1]


def test_non_finite_and_masked_points_take_no_part(backend: str) -> None:
    rng = np.random.default_rng(8)
    points = rng.uniform(-5, 5, (2000, 3)).astype(np.float32)
    mask = rng.uniform(size=2000) < 0.7
    points[::13] = np.nan
    points[5] = [1e6, -1e6, 40]  # masked: would stretch the grid past the guard
    mask[5] = False
    labels = run(backend, points, mask, d_th=0.4, downsample_leaf_size=0.3)
    kept = mask & np.isfinite(points).all(axis=1)
    assert (labels[~kept] == -1).all()
    alone = run(backend, points[kept], d_th=0.4, downsample_leaf_size=0.3)
    np.testing.assert_array_equal(labels[kept], alone)


def test_empty_and_one_point(backend: str) -> None:
    assert run(backend, np.empty((0, 3), np.float32), downsample_leaf_size=0.1).tolist() == []
    nan = np.full((3, 3), np.nan, np.float32)
    assert run(backend, nan, downsample_leaf_size=0.1).tolist() == [-1, -1, -1]
    assert run(backend, np.array([[1, 2, 3]], np.float32), downsample_leaf_size=0.1).tolist() == [0]


@pytest.mark.parametrize("method", ["union_find", "edge", "vertex", "matrix"])
@pytest.mark.parametrize("search", ["range", "exhaustive"])
def test_any_method_same_labels(backend: str, method: str, search: str) -> None:
    rng = np.random.default_rng(5)
    points = (rng.uniform(-8, 8, (40, 1, 3)) + rng.normal(0, 0.4, (40, 100, 3))).reshape(-1, 3)
    points = points.astype(np.float32)
    base = run(backend, points, d_th=0.3, downsample_leaf_size=0.2)
    labels = run(backend, points, d_th=0.3, downsample_leaf_size=0.2, method=method, search=search)
    np.testing.assert_array_equal(labels, base)
    np.testing.assert_array_equal(base, reference_labels(points, 0.2, 0.3))


def test_work_is_estimated_on_the_centroids() -> None:
    rng = np.random.default_rng(6)
    points = rng.normal(0, 0.02, (20000, 3)).astype(np.float32)  # a few dozen voxels at 0.05 m
    config = {"d_th": 0.3, "method": "edge", "search": "exhaustive", "max_work_s": 1e-3}
    with pytest.raises(WorkTooLargeError):
        run("cpu", points, **config)
    labels = run("cpu", points, downsample_leaf_size=0.05, **config)
    assert (labels == 0).all()
    with pytest.raises(WorkTooLargeError):
        run("cpu", points, downsample_leaf_size=0.0001, **config)


def test_timings_and_method_are_reported() -> None:
    points = load_frame("kitti_000008.bin")
    clusterer = EuclideanClusterer(ClusterConfig(downsample_leaf_size=0.1), "cpu")
    result = clusterer.cluster(points)
    assert result.method == "union_find" and result.timings_ms["build"] > 0
    clock = StageClock(lambda: None)
    voxel, centroids = clusterer.backend.downsample(points, 0.1, clock)
    assert clock.totals()["build"] > 0 and voxel.dtype == np.int32
    assert centroids.dtype == np.float32 and centroids.shape[1] == 3


# ---- validation ---------------------------------------------------------------------------------


def test_default_is_off() -> None:
    assert ClusterConfig().downsample_leaf_size == 0.0
    assert config_problems(ClusterConfig(downsample_leaf_size=0.1, **AUTOWARE)) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"downsample_leaf_size": -0.1}, r"downsample_leaf_size must be >= 0 m \(0: no"),
        ({"downsample_leaf_size": math.nan}, "downsample_leaf_size must be a finite number"),
        ({"downsample_leaf_size": math.inf}, "downsample_leaf_size must be a finite number"),
        ({"downsample_leaf_size": True}, "downsample_leaf_size must be a finite number"),
        ({"downsample_leaf_size": "0.1"}, "downsample_leaf_size must be a finite number"),
        ({"downsample_leaf_size": None}, "downsample_leaf_size must be a finite number"),
        (
            {"downsample_leaf_size": 0.1, "algorithm": "voxel_grid"},
            "downsample_leaf_size applies to algorithm 'exact' only: 'voxel_grid' bins the "
            r"points into its own grid \(voxel_leaf_size\)",
        ),
    ],
)
def test_invalid_values_are_refused_with_a_reason(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClusterConfig(**changes)


def test_voxel_grid_with_no_downsampling_is_valid() -> None:
    assert config_problems(ClusterConfig(algorithm="voxel_grid", downsample_leaf_size=0)) == []


# ---- CUDA only: the CUDA twin against the CPU twin, bit for bit ---------------------------------

CONFIGS = {
    "plain": {"d_th": 0.5},
    "sizes": {"d_th": 0.5, "min_cluster_size": 10, "max_cluster_size": 5000},
    "autoware_ai": {**AUTOWARE, "min_cluster_size": 5},
    "edge_range": {"d_th": 0.3, "method": "edge"},
}
#: Configurations whose CPU twin would search too many pairs on a cloud (its leaves all).
TOO_SLOW_ON_CPU = {("dense", "edge_range")}


def _grids(points: np.ndarray, leaf: float) -> None:
    """The CPU and CUDA backends' voxels and centroids are identical."""
    cpu = EuclideanClusterer(backend="cpu").backend
    gpu = EuclideanClusterer(backend="cuda").backend
    clock = StageClock(lambda: None)
    voxel, centroids = cpu.downsample(points, leaf, clock)
    gpu_voxel, gpu_centroids = gpu.downsample(gpu.to_device(points), leaf, clock)
    np.testing.assert_array_equal(gpu_voxel.get(), voxel)
    assert gpu_centroids.get().tobytes() == centroids.tobytes()


def _both(points: np.ndarray, **config: object) -> np.ndarray:
    settings = ClusterConfig(**config)
    cpu = EuclideanClusterer(settings, "cpu").cluster(points)
    gpu = EuclideanClusterer(settings, "cuda").cluster(points)
    np.testing.assert_array_equal(gpu.labels, cpu.labels)
    np.testing.assert_array_equal(gpu.cluster_sizes, cpu.cluster_sizes)
    return cpu.labels


@cuda_only
@pytest.mark.parametrize("leaf", LEAVES)
@pytest.mark.parametrize("name", FRAMES)
def test_frames_cuda_equals_cpu(name: str, leaf: float) -> None:
    points = load_frame(name)
    _grids(points, leaf)
    for config in CONFIGS.values():
        _both(points, downsample_leaf_size=leaf, **config)


@cuda_only
def test_frame_cuda_equals_reference() -> None:
    points = load_frame("kitti_000001.bin")
    labels = _both(points, d_th=0.5, downsample_leaf_size=0.1)
    np.testing.assert_array_equal(labels, reference_labels(points, 0.1, 0.5))


def _clouds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(12)
    blobs = (rng.uniform(-30, 30, (30, 1, 3)) + rng.normal(0, 1.0, (30, 500, 3))).reshape(-1, 3)
    grid = np.stack(np.meshgrid(*[np.arange(15) * 0.1] * 3), -1).reshape(-1, 3)
    boundaries = np.concatenate([grid, grid + np.float32(1e-7), grid - 1e-7, -grid])
    dense = rng.normal(0, 0.02, (20000, 3))  # voxels of hundreds of points: batched sums
    nan = rng.uniform(-10, 10, (3000, 3))
    nan[::7] = np.nan
    far = np.concatenate([rng.uniform(-5, 5, (1000, 3)), [[30000.0, 30000.0, 0.0]]])
    tiny = rng.uniform(0, 1, (3000, 3))
    return {
        "blobs": blobs,
        "boundaries": boundaries,
        "dense": dense,
        "nan": nan,
        "overflow_guard": far,
        "one_voxel_per_point": tiny,
        "one_point": np.array([[1.0, 2.0, 3.0]]),
    }


@cuda_only
@pytest.mark.parametrize("leaf", [1e-3, 0.1, 0.3, 2.0])
@pytest.mark.parametrize("cloud", list(_clouds()))
def test_clouds_cuda_equals_cpu(cloud: str, leaf: float) -> None:
    points = _clouds()[cloud].astype(np.float32)
    finite = points[np.isfinite(points).all(axis=1)]
    _grids(np.ascontiguousarray(finite), leaf)
    for name, config in CONFIGS.items():
        if (cloud, name) not in TOO_SLOW_ON_CPU:
            _both(points, downsample_leaf_size=leaf, **config)


@cuda_only
def test_empty_and_masked_cuda_equals_cpu() -> None:
    _both(np.empty((0, 3), np.float32), downsample_leaf_size=0.1)
    rng = np.random.default_rng(4)
    points = rng.uniform(-5, 5, (5000, 3)).astype(np.float32)
    mask = rng.uniform(size=5000) < 0.5
    settings = ClusterConfig(d_th=0.4, downsample_leaf_size=0.3)
    cpu = EuclideanClusterer(settings, "cpu").cluster(points, mask)
    gpu = EuclideanClusterer(settings, "cuda").cluster(points, mask)
    np.testing.assert_array_equal(gpu.labels, cpu.labels)
