"""The CUDA backend against the oracle and the CPU backend (skipped without a CUDA device).

Every method x search combination must give the CPU backend's labels exactly, for NumPy and CuPy
input, with masks, size filters and every matrix block size.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.config import METHODS, SEARCHES
from gpu_euclidean_cluster.core.numbering import canonical_labels

from .conftest import canonical_oracle_labels, oracle_components, requires_cuda

pytestmark = [pytest.mark.gpu, requires_cuda]

COMBOS = list(itertools.product(METHODS, SEARCHES))
#: The labelling loops of the vertex and edge methods with pointer jumping on.
JUMPING_COMBOS = list(itertools.product(("vertex", "edge"), SEARCHES))


def _cluster(points, d_th: float, method: str, search: str, backend: str = "cuda", **options):
    config = ClusterConfig(d_th=d_th, method=method, search=search, **options)
    return EuclideanClusterer(config, backend=backend).cluster(points)


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def random_cloud() -> np.ndarray:
    """20 000 points: dense blobs in sparse noise (many merges and many singletons)."""
    rng = np.random.default_rng(99)
    centres = rng.uniform(-30, 30, (40, 3))
    blobs = (centres[:, None, :] + rng.normal(0, 0.8, (40, 400, 3))).reshape(-1, 3)
    noise = rng.uniform(-35, 35, (4000, 3))
    return rng.permutation(np.concatenate((blobs, noise))).astype(np.float32)


@pytest.mark.parametrize(("method", "search"), COMBOS)
def test_oracle_clouds(oracle_cloud, method, search, assert_same_partition):
    _, points, d_th = oracle_cloud
    result = _cluster(points, d_th, method, search)
    expected = oracle_components(points, d_th)
    assert result.backend == "cuda"
    assert isinstance(result.labels, np.ndarray) and result.labels.dtype == np.int32
    assert_same_partition(result.labels, expected)
    np.testing.assert_array_equal(result.labels, canonical_oracle_labels(expected))


@pytest.mark.parametrize(("method", "search"), COMBOS)
@pytest.mark.parametrize("d_th", [0.3, 1.0])
def test_random_cloud_equals_cpu(random_cloud, method, search, d_th):
    gpu = _cluster(random_cloud, d_th, method, search)
    cpu = _cluster(random_cloud, d_th, method, "range", backend="cpu")
    np.testing.assert_array_equal(gpu.labels, cpu.labels)
    np.testing.assert_array_equal(gpu.cluster_sizes, cpu.cluster_sizes)
    assert gpu.num_components == cpu.num_components
    if method != "matrix":
        assert gpu.num_edges == cpu.num_edges
    else:
        assert cpu.num_components <= gpu.num_labels_after_initial <= len(random_cloud)


@pytest.mark.parametrize(("method", "search"), JUMPING_COMBOS)
def test_pointer_jumping_gives_the_same_labels(oracle_cloud, random_cloud, method, search):
    _, points, d_th = oracle_cloud
    for cloud, threshold in ((points, d_th), (random_cloud, 0.5)):
        plain = _cluster(cloud, threshold, method, search, pointer_jumping=False)
        jumping = _cluster(cloud, threshold, method, search, pointer_jumping=True)
        np.testing.assert_array_equal(jumping.labels, plain.labels)
        assert jumping.iterations <= plain.iterations


@pytest.mark.parametrize(("method", "search"), COMBOS)
def test_cupy_input_gives_cupy_labels(cupy, random_cloud, method, search):
    host = _cluster(random_cloud, 0.5, method, search)
    device_points = cupy.asarray(random_cloud, dtype=cupy.float64)
    result = _cluster(device_points, 0.5, method, search)
    assert isinstance(result.labels, cupy.ndarray) and result.labels.dtype == cupy.int32
    np.testing.assert_array_equal(result.labels.get(), host.labels)
    assert isinstance(result.cluster_sizes, np.ndarray)


@pytest.mark.parametrize(("method", "search"), COMBOS)
def test_mask_and_size_filter_equal_cpu(cupy, random_cloud, method, search):
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


@pytest.mark.parametrize("block", [32, 64, 128, 512, 1024])
@pytest.mark.parametrize("search", SEARCHES)
def test_every_matrix_block_size(random_cloud, block, search):
    gpu = _cluster(random_cloud, 0.5, "matrix", search, matrix_block=block)
    cpu = _cluster(random_cloud, 0.5, "matrix", "range", backend="cpu")
    np.testing.assert_array_equal(gpu.labels, cpu.labels)


def test_result_fields(random_cloud):
    result = _cluster(random_cloud, 0.5, "edge", "range")
    assert result.backend == "cuda"
    assert isinstance(result.device, str) and result.device and result.device != "cpu"
    assert result.iterations >= 1
    assert set(result.timings_ms) >= {"transfer_in", "build", "label", "filter", "transfer_out"}
    assert all(value >= 0 for value in result.timings_ms.values())
    assert result.summary()["backend"] == "cuda"


def test_clusterer_is_reusable(random_cloud):
    clusterer = EuclideanClusterer(ClusterConfig(d_th=0.5), backend="cuda", device_id=0)
    first = clusterer.cluster(random_cloud)
    second = clusterer.cluster(random_cloud[::-1].copy())
    third = clusterer.cluster(random_cloud)
    np.testing.assert_array_equal(first.labels, third.labels)
    assert first.num_clusters == second.num_clusters


def test_canonical_labels_on_device_equal_host(cupy):
    rng = np.random.default_rng(1)
    ids = (rng.integers(0, 300, 5000) * 13).astype(np.int32)
    for bounds in [(1, 2**31 - 1), (5, 2**31 - 1), (2, 20)]:
        host = canonical_labels(ids, *bounds)
        device = canonical_labels(cupy.asarray(ids), *bounds)
        assert isinstance(device[0], cupy.ndarray)
        np.testing.assert_array_equal(device[0].get(), host[0])
        np.testing.assert_array_equal(device[1], host[1])
        assert device[2] == host[2]
