"""Both backends (``backend`` fixture) against the brute-force oracle, for every method and search.

Partition equality with the oracle shows the neighbour rule and the labelling are right; label
equality with the oracle's canonical numbering and between all six method x search combinations
shows the numbering is the documented one and independent of the method. The CUDA backend also
gives the CPU backend's labels exactly, for NumPy and CuPy input, with masks, size filters, pointer
jumping and every matrix block size (these tests skip without a CUDA device).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer, euclidean_cluster
from gpu_euclidean_cluster.core.config import METHODS, SEARCHES
from gpu_euclidean_cluster.core.numbering import canonical_labels

from ..conftest import canonical_oracle_labels, cuda_only, oracle_components

COMBOS = list(itertools.product(METHODS, SEARCHES))
#: The labelling loops of the vertex and edge methods with pointer jumping on.
JUMPING_COMBOS = list(itertools.product(("vertex", "edge"), SEARCHES))


def _cluster(points, d_th: float, method: str, search: str, backend: str, **options):
    config = ClusterConfig(d_th=d_th, method=method, search=search, **options)
    return EuclideanClusterer(config, backend=backend).cluster(points)


@pytest.fixture(scope="module")
def random_cloud() -> np.ndarray:
    """20 000 points: dense blobs in sparse noise (many merges and many singletons)."""
    rng = np.random.default_rng(99)
    centres = rng.uniform(-30, 30, (40, 3))
    blobs = (centres[:, None, :] + rng.normal(0, 0.8, (40, 400, 3))).reshape(-1, 3)
    noise = rng.uniform(-35, 35, (4000, 3))
    return rng.permutation(np.concatenate((blobs, noise))).astype(np.float32)


@pytest.mark.parametrize(("method", "search"), COMBOS)
def test_partition_equals_oracle(backend, oracle_cloud, method, search, assert_same_partition):
    name, points, d_th = oracle_cloud
    result = _cluster(points, d_th, method, search, backend)
    expected = oracle_components(points, d_th)
    assert result.backend == backend
    assert isinstance(result.labels, np.ndarray) and result.labels.dtype == np.int32
    assert result.labels.shape == (len(points),)
    assert_same_partition(result.labels, expected)
    assert result.num_clusters == len(np.unique(expected[expected >= 0])), name
    np.testing.assert_array_equal(result.labels, canonical_oracle_labels(expected))


def test_labels_identical_across_methods_and_searches(backend, oracle_cloud):
    _, points, d_th = oracle_cloud
    expected = canonical_oracle_labels(oracle_components(points, d_th))
    for method, search in COMBOS:
        result = _cluster(points, d_th, method, search, backend)
        np.testing.assert_array_equal(result.labels, expected, err_msg=f"{method}/{search}")
        np.testing.assert_array_equal(
            result.cluster_sizes, np.bincount(expected[expected >= 0], minlength=0)
        )


def test_non_finite_points_are_unlabelled(backend, oracle_cloud):
    _, points, d_th = oracle_cloud
    labels = _cluster(points, d_th, "edge", "range", backend).labels
    finite = np.isfinite(np.asarray(points, dtype=np.float32)).all(axis=1)
    assert np.all(labels[~finite] == -1)
    assert np.all(labels[finite] >= 0)


def test_exact_threshold_pairs_are_not_neighbours(backend):
    points = np.array([[0, 0, 0], [5, 0, 0], [-3, -4, 0], [0, 0, 5]], dtype=np.float32)
    for method, search in COMBOS:
        # All pairs from the first point are exactly d_th = 5 apart: strict "<" keeps them apart.
        result = _cluster(points, 5.0, method, search, backend)
        assert result.num_clusters == 4
        result = _cluster(
            points, float(np.nextafter(np.float32(5), np.float32(6))), method, search, backend
        )
        assert result.num_clusters == 1


def _pairs_where_float32_disagrees(d_th: float) -> tuple[np.ndarray, np.ndarray]:
    """Two point pairs: one beyond d_th in exact arithmetic yet a float32 neighbour, one within
    d_th yet not a float32 neighbour (rounding of the coordinates' differences and sums)."""
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (20000, 3)).astype(np.float32)
    direction = rng.normal(size=(20000, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    scale = d_th * (1 + rng.uniform(-1e-7, 1e-7, (20000, 1)))
    b = (a + direction * scale).astype(np.float32)
    d = b - a
    sq32 = (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + d[:, 2] * d[:, 2]
    sq_exact = np.sum((b.astype(np.float64) - a.astype(np.float64)) ** 2, axis=1)
    neighbour32 = sq32 < np.float32(d_th**2)
    far_but_neighbour = np.flatnonzero((sq_exact >= d_th**2) & neighbour32)[0]
    near_but_not = np.flatnonzero((sq_exact < d_th**2) & ~neighbour32)[0]
    pair = lambda i: np.stack((a[i], b[i]))  # noqa: E731
    return pair(far_but_neighbour), pair(near_but_not)


def test_rule_is_float32_not_exact_arithmetic(backend):
    d_th = 0.3
    far_but_neighbour, near_but_not = _pairs_where_float32_disagrees(d_th)
    for method, search in COMBOS:
        assert _cluster(far_but_neighbour, d_th, method, search, backend).num_clusters == 1
        assert _cluster(near_but_not, d_th, method, search, backend).num_clusters == 2


def test_mask_excludes_points(backend, assert_same_partition):
    rng = np.random.default_rng(3)
    points = rng.uniform(0, 5, (500, 3)).astype(np.float32)
    mask = rng.uniform(size=500) < 0.7
    for method, search in COMBOS:
        config = ClusterConfig(d_th=0.45, method=method, search=search)
        labels = EuclideanClusterer(config, backend=backend).cluster(points, mask=mask).labels
        assert np.all(labels[~mask] == -1)
        expected = np.full(len(points), -1, dtype=np.int64)
        expected[mask] = oracle_components(points[mask], 0.45)
        assert_same_partition(labels, expected)


def test_float64_and_integer_input_are_clustered_in_float32(backend):
    points64 = np.array([[0.0, 0.0, 0.0], [0.1 + 1e-12, 0.0, 0.0], [10.0, 0.0, 0.0]])
    result = euclidean_cluster(points64, 0.2, backend=backend)
    np.testing.assert_array_equal(result.labels, [0, 0, 1])
    integers = np.array([[0, 0, 0], [1, 0, 0], [3, 0, 0]], dtype=np.int16)
    np.testing.assert_array_equal(
        euclidean_cluster(integers, 1.5, backend=backend).labels, [0, 0, 1]
    )


def test_larger_random_cloud_exhaustive_equals_range(backend):
    rng = np.random.default_rng(11)
    points = rng.normal(0, 4, (3000, 3)).astype(np.float32)
    exhaustive = _cluster(points, 0.5, "edge", "exhaustive", backend)
    ranged = _cluster(points, 0.5, "edge", "range", backend)
    np.testing.assert_array_equal(exhaustive.labels, ranged.labels)
    assert exhaustive.num_edges == ranged.num_edges
    np.testing.assert_array_equal(
        exhaustive.labels, canonical_oracle_labels(oracle_components(points, 0.5))
    )


def test_clusterer_is_reusable(backend, random_cloud):
    clusterer = EuclideanClusterer(ClusterConfig(d_th=0.5), backend=backend, device_id=0)
    first = clusterer.cluster(random_cloud)
    second = clusterer.cluster(random_cloud[::-1].copy())
    third = clusterer.cluster(random_cloud)
    np.testing.assert_array_equal(first.labels, third.labels)
    assert first.num_clusters == second.num_clusters


# ---- CUDA only: the CUDA backend against the CPU backend, and its device arrays ---------------


@cuda_only
@pytest.mark.parametrize(("method", "search"), COMBOS)
@pytest.mark.parametrize("d_th", [0.3, 1.0])
def test_random_cloud_cuda_equals_cpu(random_cloud, method, search, d_th):
    gpu = _cluster(random_cloud, d_th, method, search, "cuda")
    cpu = _cluster(random_cloud, d_th, method, "range", "cpu")
    np.testing.assert_array_equal(gpu.labels, cpu.labels)
    np.testing.assert_array_equal(gpu.cluster_sizes, cpu.cluster_sizes)
    assert gpu.num_components == cpu.num_components
    if method != "matrix":
        assert gpu.num_edges == cpu.num_edges
    else:
        assert cpu.num_components <= gpu.num_labels_after_initial <= len(random_cloud)


@cuda_only
@pytest.mark.parametrize(("method", "search"), JUMPING_COMBOS)
def test_pointer_jumping_gives_the_same_labels(oracle_cloud, random_cloud, method, search):
    _, points, d_th = oracle_cloud
    for cloud, threshold in ((points, d_th), (random_cloud, 0.5)):
        plain = _cluster(cloud, threshold, method, search, "cuda", pointer_jumping=False)
        jumping = _cluster(cloud, threshold, method, search, "cuda", pointer_jumping=True)
        np.testing.assert_array_equal(jumping.labels, plain.labels)
        assert jumping.iterations <= plain.iterations


@cuda_only
@pytest.mark.parametrize(("method", "search"), COMBOS)
def test_cupy_input_gives_cupy_labels(random_cloud, method, search):
    import cupy

    host = _cluster(random_cloud, 0.5, method, search, "cuda")
    device_points = cupy.asarray(random_cloud, dtype=cupy.float64)
    result = _cluster(device_points, 0.5, method, search, "cuda")
    assert isinstance(result.labels, cupy.ndarray) and result.labels.dtype == cupy.int32
    np.testing.assert_array_equal(result.labels.get(), host.labels)
    assert isinstance(result.cluster_sizes, np.ndarray)


@cuda_only
@pytest.mark.parametrize(("method", "search"), COMBOS)
def test_mask_and_size_filter_cuda_equals_cpu(random_cloud, method, search):
    import cupy

    mask = np.random.default_rng(5).uniform(size=len(random_cloud)) < 0.6
    options = {"min_cluster_size": 3, "max_cluster_size": 300}
    cpu_config = ClusterConfig(d_th=0.5, method=method, search="range", **options)
    cpu = EuclideanClusterer(cpu_config, backend="cpu").cluster(random_cloud, mask=mask)
    clusterer = EuclideanClusterer(cpu_config.with_changes(search=search), backend="cuda")
    for gpu_mask in (mask, cupy.asarray(mask)):
        gpu = clusterer.cluster(random_cloud, mask=gpu_mask)
        np.testing.assert_array_equal(gpu.labels, cpu.labels)
        np.testing.assert_array_equal(gpu.cluster_sizes, cpu.cluster_sizes)
    assert np.all(cpu.labels[~mask] == -1)


@cuda_only
@pytest.mark.parametrize("block", [32, 64, 128, 512, 1024])
@pytest.mark.parametrize("search", SEARCHES)
def test_every_matrix_block_size(random_cloud, block, search):
    gpu = _cluster(random_cloud, 0.5, "matrix", search, "cuda", matrix_block=block)
    cpu = _cluster(random_cloud, 0.5, "matrix", "range", "cpu")
    np.testing.assert_array_equal(gpu.labels, cpu.labels)


@cuda_only
def test_result_fields(random_cloud):
    result = _cluster(random_cloud, 0.5, "edge", "range", "cuda")
    assert result.backend == "cuda"
    assert isinstance(result.device, str) and result.device and result.device != "cpu"
    assert result.iterations >= 1
    assert set(result.timings_ms) >= {"transfer_in", "build", "label", "filter", "transfer_out"}
    assert all(value >= 0 for value in result.timings_ms.values())
    assert result.summary()["backend"] == "cuda"


@cuda_only
def test_canonical_labels_on_device_equal_host():
    import cupy

    rng = np.random.default_rng(1)
    ids = (rng.integers(0, 300, 5000) * 13).astype(np.int32)
    for bounds in [(1, 2**31 - 1), (5, 2**31 - 1), (2, 20)]:
        host = canonical_labels(ids, *bounds)
        device = canonical_labels(cupy.asarray(ids), *bounds)
        assert isinstance(device[0], cupy.ndarray)
        np.testing.assert_array_equal(device[0].get(), host[0])
        np.testing.assert_array_equal(device[1], host[1])
        assert device[2] == host[2]
