"""Range bands and centroid merging (Autoware.ai's ``lidar_euclidean_cluster_detect``), both twins.

``ClusterConfig.clustering_ranges``/``clustering_distances`` cluster each horizontal-range band
on its own with its own tolerance (``core/range_bands.py``); ``cluster_merge_threshold`` merges
clusters whose x-y centroids are close (``core/merging.py``). The reference here is independent
of both: every pair of a band compared with its own float32 arithmetic, components by SciPy, then
every pair of centroids compared, components by SciPy again, twice. The clustering tests run on
both backends (``backend`` fixture); on real frames the CUDA twin's labels equal the CPU twin's,
with Autoware.ai's defaults and with each part alone (skipped without a CUDA device). Real frames
come from ``$LIDAR_DATA_DIR`` (default ``../shared/data`` beside the repository) and skip when
absent.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.config import ConfigError, config_problems
from gpu_euclidean_cluster.core.merging import (
    MERGE_PASSES,
    centroid_groups,
    merge_components,
    union_find,
)
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.core.range_bands import (
    band_indices,
    band_of_points,
    offset_components,
    point_ranges,
)
from gpu_euclidean_cluster.core.timing import StageClock
from gpu_euclidean_cluster.pointcloud_io import load_points
from gpu_euclidean_cluster.tools.simulation import (
    GROUND_ID,
    VLP16,
    LidarSimulator,
    street_scene,
)

from ..conftest import LIDAR_DATA_DIR, cuda_only

#: Autoware.ai's defaults (``config/params.yaml`` of ``lidar_euclidean_cluster_detect``).
AUTOWARE_RANGES = (15.0, 30.0, 45.0, 60.0)
AUTOWARE_DISTANCES = (0.5, 1.1, 1.6, 2.1, 2.6)
AUTOWARE_MERGE = 1.5
AUTOWARE = {
    "clustering_ranges": AUTOWARE_RANGES,
    "clustering_distances": AUTOWARE_DISTANCES,
    "cluster_merge_threshold": AUTOWARE_MERGE,
}


def run(backend: str, points: np.ndarray, **config: object) -> np.ndarray:
    """The labels of the ``backend`` twin's clustering of host ``points``."""
    return EuclideanClusterer(ClusterConfig(**config), backend=backend).cluster(points).labels


def canonical(components: np.ndarray, min_size: int = 1, max_size: int = 2**31 - 1) -> np.ndarray:
    return np.asarray(canonical_labels(np.asarray(components), min_size, max_size)[0])


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(canonical(a), canonical(b))


# ---- the reference ------------------------------------------------------------------------------


def reference_components(points: np.ndarray, d_th: float) -> np.ndarray:
    """Brute force over all pairs with the float32 rule; component ids from SciPy."""
    p = np.asarray(points, dtype=np.float32)
    n = len(p)
    rows, cols = [], []
    thr = np.float32(np.float64(d_th) ** 2)
    for s in range(0, n, 512):
        d = p[s : s + 512, None, :] - p[None, :, :]
        sq = (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]
        i, j = np.nonzero(sq < thr)
        rows.append(i + s)
        cols.append(j)
    i = np.concatenate(rows) if rows else np.empty(0, np.int64)
    j = np.concatenate(cols) if cols else np.empty(0, np.int64)
    graph = coo_matrix((np.ones(len(i), dtype=np.int8), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def reference_bands(points: np.ndarray, ranges: tuple, distances: tuple) -> np.ndarray:
    """Autoware.ai's segmentByDistance, written out: float range, a chain of ``<``."""
    r = np.sqrt(points[:, 0].astype(np.float64) ** 2 + points[:, 1].astype(np.float64) ** 2)
    r = r.astype(np.float32)
    band = np.full(len(points), len(ranges), dtype=np.int64)
    for i in reversed(range(len(ranges))):
        band[r < ranges[i]] = i
    components = np.empty(len(points), dtype=np.int64)
    offset = 0
    for b in range(len(distances)):
        index = np.flatnonzero(band == b)
        if index.size:
            ids = reference_components(points[index], distances[b])
            components[index] = ids + offset
            offset += int(ids.max()) + 1
    return components


def reference_merge(points: np.ndarray, components: np.ndarray, threshold: float) -> np.ndarray:
    """Every pair of x-y centroids (float64, summed point by point) compared, twice."""
    ids = np.unique(components, return_inverse=True)[1].reshape(-1)
    for _ in range(MERGE_PASSES):
        k = int(ids.max()) + 1
        sums = np.zeros((k, 2))
        np.add.at(sums, ids, points[:, :2].astype(np.float64))
        centroid = sums / np.bincount(ids, minlength=k)[:, None]
        d = centroid[:, None, :] - centroid[None, :, :]
        close = np.sqrt(d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) <= threshold
        i, j = np.nonzero(close)
        graph = coo_matrix((np.ones(len(i), dtype=np.int8), (i, j)), shape=(k, k))
        ids = connected_components(graph, directed=False)[1][ids]
    return ids


def reference_labels(points: np.ndarray, ranges, distances, merge, min_size=1, max_size=2**31 - 1):
    components = reference_bands(points, ranges, distances)
    if merge > 0:
        components = reference_merge(points, components, merge)
    return canonical(components, min_size, max_size)


# ---- validation ---------------------------------------------------------------------------------


def test_defaults_are_off_and_valid():
    config = ClusterConfig()
    assert config.clustering_ranges == ()
    assert config.clustering_distances == ()
    assert config.cluster_merge_threshold == 0.0
    assert config_problems(ClusterConfig(**AUTOWARE)) == []


def test_lists_become_tuples():
    config = ClusterConfig(clustering_ranges=[15, 30], clustering_distances=[0.5, 1, 1.5])
    assert config.clustering_ranges == (15, 30)
    assert config.clustering_distances == (0.5, 1, 1.5)
    hash(config)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"clustering_ranges": (15, 15), "clustering_distances": (1, 2, 3)}, "strictly increasing"),
        ({"clustering_ranges": (30, 15), "clustering_distances": (1, 2, 3)}, "strictly increasing"),
        ({"clustering_ranges": (0, 15), "clustering_distances": (1, 2, 3)}, r"> 0 m"),
        ({"clustering_ranges": (float("nan"),), "clustering_distances": (1, 2)}, "finite"),
        ({"clustering_ranges": (True,), "clustering_distances": (1, 2)}, "finite"),
        ({"clustering_ranges": "15", "clustering_distances": (1, 2)}, "tuple of finite"),
        ({"clustering_ranges": (15,), "clustering_distances": (1, 0)}, r"all be > 0 m"),
        ({"clustering_ranges": (15,), "clustering_distances": (1, float("inf"))}, "finite"),
        ({"clustering_ranges": (15,), "clustering_distances": (1,)}, "one entry more"),
        ({"clustering_ranges": (15,), "clustering_distances": ()}, "one entry more"),
        ({"clustering_ranges": (15, 30), "clustering_distances": (1, 2, 3, 4)}, "need 3 distances"),
        ({"clustering_distances": (0.7,)}, "needs clustering_ranges"),
        ({"cluster_merge_threshold": -1.0}, r">= 0 m \(0: no merging\)"),
        ({"cluster_merge_threshold": float("inf")}, "finite number of metres"),
        ({"cluster_merge_threshold": True}, "finite number of metres"),
        ({"algorithm": "voxel_grid", "cluster_merge_threshold": 1.5}, "'exact' only"),
        (
            {
                "algorithm": "voxel_grid",
                "clustering_ranges": (15,),
                "clustering_distances": (0.5, 1.0),
            },
            "'exact' only",
        ),
    ],
)
def test_invalid_values_are_refused_with_a_reason(changes, message):
    with pytest.raises(ConfigError, match=message):
        ClusterConfig(**changes)


# ---- bands --------------------------------------------------------------------------------------


def test_band_edges_belong_to_the_band_above():
    below_15 = np.nextafter(np.float32(15), np.float32(0))
    points = np.array(
        [
            [0, 0, 0],
            [below_15, 0, 0],
            [15, 0, 0],
            [9, 12, 7],  # range exactly 15
            [0, -30, 0],
            [44.9, 0, 0],
            [60, 0, -100],
            [1e6, 1e6, 0],
        ],
        dtype=np.float32,
    )
    assert band_of_points(points, AUTOWARE_RANGES).tolist() == [0, 0, 1, 1, 2, 2, 4, 4]
    assert band_of_points(points, ()).tolist() == [0] * 8


def test_range_is_rounded_to_float32_as_autoware_ai():
    # sqrt(x*x + y*y) is just below 15 in float64 but rounds to 15.0 in float32: band 1, as
    # Autoware.ai's ``float origin_distance < 15`` is false.
    x = np.nextafter(np.float32(15), np.float32(0))
    point = np.array([[x, 0.005, 0]], dtype=np.float32)
    exact = np.sqrt(np.float64(x) ** 2 + np.float64(np.float32(0.005)) ** 2)
    assert exact < 15 and np.float32(exact) == 15
    assert point_ranges(point)[0] == np.float32(15)
    assert band_of_points(point, AUTOWARE_RANGES).tolist() == [1]


def test_points_of_different_bands_never_join(backend):
    points = np.array([[14.9, 0, 0], [15.1, 0, 0], [15.3, 0, 0]], dtype=np.float32)
    assert run(backend, points, d_th=0.5).tolist() == [0, 0, 0]
    labels = run(backend, points, clustering_ranges=(15.0,), clustering_distances=(0.5, 0.5))
    assert labels.tolist() == [1, 0, 0]


def test_each_band_uses_its_own_tolerance(backend):
    # Two pairs 0.8 m apart: the near one (tolerance 0.5) splits, the far one (1.0) joins.
    points = np.array([[5, 0, 0], [5.8, 0, 0], [20, 0, 0], [20.8, 0, 0]], dtype=np.float32)
    labels = run(backend, points, clustering_ranges=(10.0,), clustering_distances=(0.5, 1.0))
    assert labels[2] == labels[3] and len({labels[0], labels[1], labels[2]}) == 3


def test_band_indices_are_each_bands_points_in_index_order():
    rng = np.random.default_rng(3)
    points = rng.uniform(-80, 80, (5000, 3)).astype(np.float32)
    band = band_of_points(points, AUTOWARE_RANGES)
    members = band_indices(points, AUTOWARE_RANGES, 6)  # a sixth band, empty
    assert len(members) == 6 and members[5].shape == (0,)
    for number, index in enumerate(members):
        assert index.tolist() == np.flatnonzero(band == number).tolist()


def test_offset_components_keeps_bands_apart_and_fits_int32():
    parts = [(np.array([0, 2]), np.array([1, 1])), (np.array([1, 3]), np.array([1, 0]))]
    combined = offset_components(parts, 4)
    assert combined.dtype == np.int32
    assert len(set(combined.tolist())) == 3 and combined[0] == combined[2]
    huge = [(np.array([0]), np.array([2**31 - 2])), (np.array([1]), np.array([2**31 - 2]))]
    assert offset_components(huge, 2).tolist() == [0, 1]


def load_frame(name: str) -> np.ndarray:
    path = LIDAR_DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"LiDAR frame {path} not found (set LIDAR_DATA_DIR)")
    return load_points(path).xyz


def test_default_config_is_unchanged_on_a_real_frame():
    points = load_frame("kitti_000001.bin")
    clusterer = EuclideanClusterer(ClusterConfig(), backend="cpu")
    result = clusterer.cluster(points)
    # The pipeline as it was: one labelling with d_th, then the canonical numbering.
    finite = np.isfinite(points).all(axis=1)
    clock = StageClock(lambda: None)
    components = clusterer.backend.label(points[finite], ClusterConfig(), clock).components
    expected = np.full(len(points), -1, dtype=np.int32)
    expected[finite] = canonical(components)
    np.testing.assert_array_equal(result.labels, expected)
    assert result.num_clusters == 1724  # pcl::EuclideanClusterExtraction's count at 0.5 m
    # One band holding every point is plain clustering with its tolerance.
    one_band = run("cpu", points, clustering_ranges=(1e9,), clustering_distances=(0.5, 3.0))
    np.testing.assert_array_equal(one_band, result.labels)


# ---- merging ------------------------------------------------------------------------------------


def test_merging_is_transitive(backend):
    # Three single points 1 m apart in a row: A-B and B-C within 1.2 m, A-C not.
    points = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [9, 0, 0]], dtype=np.float32)
    labels = run(backend, points, d_th=0.5, cluster_merge_threshold=1.2)
    assert labels.tolist() == [0, 0, 0, 1]
    assert run(backend, points, d_th=0.5).tolist() == [0, 1, 2, 3]


def test_merging_is_inclusive_and_two_dimensional(backend):
    # Centroids exactly 1.5 m apart in x-y, 10 m apart in z: merged (Autoware.ai: <=, x-y only).
    points = np.array([[0, 0, 0], [1.5, 0, 10], [3.25, 0, 0]], dtype=np.float32)
    assert run(backend, points, d_th=0.5, cluster_merge_threshold=1.5).tolist() == [0, 0, 1]


def test_second_pass_uses_the_merged_centroids(backend):
    # A and B merge (1.4 m); C is 1.61 m from both but 1.45 m from their merged centroid.
    points = np.array([[0, 0, 0], [1.4, 0, 0], [0.7, 1.45, 0]], dtype=np.float32)
    ids = np.arange(3)
    assert same_partition(merge_components(points, ids, 1.5, passes=1), np.array([0, 0, 1]))
    assert same_partition(merge_components(points, ids, 1.5), np.array([0, 0, 0]))
    assert run(backend, points, d_th=0.5, cluster_merge_threshold=1.5).tolist() == [0, 0, 0]


def test_merging_is_deterministic_under_any_point_order_and_ids(backend):
    rng = np.random.default_rng(7)
    points = rng.uniform(-20, 20, (800, 3)).astype(np.float32)
    points[:, 2] *= 0.1
    config = {"clustering_ranges": (8.0, 16.0), "clustering_distances": (0.9, 1.3, 1.8)}
    labels = run(backend, points, cluster_merge_threshold=2.0, **config)
    order = rng.permutation(len(points))
    shuffled = run(backend, points[order], cluster_merge_threshold=2.0, **config)
    assert same_partition(shuffled, labels[order])
    # Renaming the components changes nothing.
    components = reference_bands(
        points, config["clustering_ranges"], config["clustering_distances"]
    )
    renamed = rng.permutation(components.max() + 1)[components] * 37 + 5
    assert same_partition(
        merge_components(points, components, 2.0), merge_components(points, renamed, 2.0)
    )


def test_merging_applies_before_the_size_filter(backend):
    # Two clusters of 3 points whose centroids are 1 m apart.
    left = np.array([[0, 0, 0], [0.1, 0, 0], [0.2, 0, 0]], dtype=np.float32)
    points = np.concatenate([left, left + np.float32([1, 0, 0])])
    assert run(backend, points, d_th=0.15, min_cluster_size=5).tolist() == [-1] * 6
    merged = run(backend, points, d_th=0.15, min_cluster_size=5, cluster_merge_threshold=1.5)
    assert merged.tolist() == [0] * 6
    assert run(backend, points, d_th=0.15, max_cluster_size=5).tolist() == [0, 0, 0, 1, 1, 1]
    too_big = run(backend, points, d_th=0.15, max_cluster_size=5, cluster_merge_threshold=1.5)
    assert too_big.tolist() == [-1] * 6


def test_close_pairs_include_pairs_at_exactly_the_threshold():
    # Centroids on an integer lattice, threshold 1: the grid must find every axis neighbour.
    gx, gy = np.meshgrid(np.arange(-5, 6, dtype=np.float64), np.arange(0, 3, dtype=np.float64))
    cx, cy = gx.ravel() * 1.0, gy.ravel() * 1.0
    assert (centroid_groups(cx, cy, 1.0) == 0).all()
    assert (centroid_groups(cx, cy, 0.999) == np.arange(len(cx))).all()


@pytest.mark.parametrize("seed", range(4))
def test_centroid_groups_equal_all_pairs(seed):
    rng = np.random.default_rng(seed)
    k = 300
    cx = rng.uniform(-50, 50, k)
    cy = rng.uniform(-50, 50, k)
    if seed % 2:  # far outliers: cells wider than the threshold, keys still within int64
        cx[:2] = (-5e6, 5e6)
    threshold = 3.0
    i, j = np.nonzero(np.sqrt((cx[:, None] - cx) ** 2 + (cy[:, None] - cy) ** 2) <= threshold)
    graph = coo_matrix((np.ones(len(i), dtype=np.int8), (i, j)), shape=(k, k))
    expected = connected_components(graph, directed=False)[1]
    assert same_partition(centroid_groups(cx, cy, threshold), expected)


def test_union_find_gives_each_group_its_smallest_node():
    a = np.array([5, 4, 3, 9, 8])
    b = np.array([4, 3, 2, 8, 7])
    assert union_find(10, a, b).tolist() == [0, 1, 2, 2, 2, 2, 6, 7, 7, 7]
    assert union_find(3, np.empty(0, np.int64), np.empty(0, np.int64)).tolist() == [0, 1, 2]


def test_merge_components_with_sparse_ids_and_nothing_to_merge():
    points = np.array([[0, 0, 0], [50, 0, 0]], dtype=np.float32)
    ids = np.array([2**30, 7])
    assert same_partition(merge_components(points, ids, 1.5), ids)
    assert merge_components(points, ids, 0.0).tolist() == ids.tolist()
    assert merge_components(points[:0], ids[:0], 1.5).shape == (0,)


# ---- against the reference ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("merge", [0.0, 1.5, 3.0])
def test_random_clouds_equal_the_reference(backend, seed, merge):
    rng = np.random.default_rng(seed)
    n = 700
    points = np.empty((n, 3), dtype=np.float32)
    points[:, :2] = rng.uniform(-40, 40, (n, 2))
    points[:, 2] = rng.uniform(-1, 2, n)
    ranges, distances = (10.0, 20.0, 30.0), (0.9, 1.4, 1.9, 2.4)
    expected = reference_labels(points, ranges, distances, merge)
    labels = run(
        backend,
        points,
        clustering_ranges=ranges,
        clustering_distances=distances,
        cluster_merge_threshold=merge,
    )
    np.testing.assert_array_equal(labels, expected)


@pytest.mark.parametrize("seed", range(2))
def test_simulated_scenes_equal_the_reference(backend, seed):
    scan = LidarSimulator(VLP16, seed=seed).scan(street_scene(seed=seed))
    points = scan.xyz[scan.object_id != GROUND_ID]  # as Autoware.ai, which removes the ground
    for min_size in (1, 20):
        expected = reference_labels(
            points, AUTOWARE_RANGES, AUTOWARE_DISTANCES, AUTOWARE_MERGE, min_size, 100000
        )
        labels = run(
            backend, points, min_cluster_size=min_size, max_cluster_size=100000, **AUTOWARE
        )
        np.testing.assert_array_equal(labels, expected)
    bands_only = reference_labels(points, AUTOWARE_RANGES, AUTOWARE_DISTANCES, 0.0)
    labels = run(
        backend, points, clustering_ranges=AUTOWARE_RANGES, clustering_distances=AUTOWARE_DISTANCES
    )
    np.testing.assert_array_equal(labels, bands_only)


def test_masked_and_non_finite_points_stay_out(backend):
    points = np.array(
        [[0, 0, 0], [np.nan, 0, 0], [0.3, 0, 0], [20, 0, 0], [20.4, 0, 0]], dtype=np.float32
    )
    mask = np.array([True, True, True, False, True])
    result = EuclideanClusterer(ClusterConfig(**AUTOWARE), backend=backend).cluster(points, mask)
    assert result.labels.tolist() == [0, -1, 0, -1, 1]
    empty = EuclideanClusterer(ClusterConfig(**AUTOWARE), backend=backend).cluster(points[:0])
    assert empty.labels.shape == (0,)


# ---- CUDA only: the CUDA twin against the CPU twin on real frames -------------------------------

FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")
CUDA_CONFIGS: dict[str, dict[str, object]] = {
    "autoware": AUTOWARE,
    "autoware_sizes": {**AUTOWARE, "min_cluster_size": 20, "max_cluster_size": 100000},
    "bands": {"clustering_ranges": AUTOWARE_RANGES, "clustering_distances": AUTOWARE_DISTANCES},
    "merge": {"cluster_merge_threshold": AUTOWARE_MERGE},
}


@cuda_only
@pytest.mark.parametrize("config", sorted(CUDA_CONFIGS))
@pytest.mark.parametrize("frame", FRAMES)
def test_cuda_equals_cpu_on_real_frames(frame, config):
    points = load_frame(frame)
    cfg = ClusterConfig(**CUDA_CONFIGS[config])
    cpu = EuclideanClusterer(cfg, backend="cpu").cluster(points)
    cuda = EuclideanClusterer(cfg, backend="cuda").cluster(points)
    assert isinstance(cuda.labels, np.ndarray)
    np.testing.assert_array_equal(cuda.labels, cpu.labels)
    np.testing.assert_array_equal(cuda.cluster_sizes, cpu.cluster_sizes)
    assert cuda.num_components == cpu.num_components
    assert cpu.num_clusters > 0


@cuda_only
def test_cupy_input_gives_cupy_labels_equal_to_the_cpu():
    import cupy

    points = load_frame("kitti_000001.bin")
    cfg = ClusterConfig(**CUDA_CONFIGS["autoware"])
    cpu = EuclideanClusterer(cfg, backend="cpu").cluster(points)
    cuda = EuclideanClusterer(cfg, backend="cuda").cluster(cupy.asarray(points))
    assert isinstance(cuda.labels, cupy.ndarray)
    np.testing.assert_array_equal(cuda.labels.get(), cpu.labels)
