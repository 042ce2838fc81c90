"""The CUDA graph path of a whole ``union_find`` call (``cuda/graphs/cluster_graphs.py``) against
the staged path and the CPU backend, label for label (skipped without a CUDA device).

Each check clusters the same cloud three ways: the CUDA backend's graph (the default), the CUDA
backend stage by stage (``whole_call=False``) and the CPU backend; and checks from the backend's
``ClusterGraphs.last_call`` that the graph really ran (captured on the first call of a bucket and
configuration, replayed after, one host synchronisation).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.clusterer import make_backend

from ..conftest import requires_cuda

pytestmark = [pytest.mark.gpu, requires_cuda]


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def backend():
    """One CUDA backend for the module (its graphs are reused across tests, as in a node)."""
    return make_backend("cuda")


def _sort_capacity() -> int:
    from gpu_euclidean_cluster.cuda.labelling.numbering import sort_capacity

    return sort_capacity(0)


def _blobs(n: int, seed: int, nan_fraction: float = 0.0) -> np.ndarray:
    """``n`` points: blobs of ~0.5 m spread in sparse noise, some coordinates NaN or infinite."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-20, 20, (max(1, n // 300), 3))
    points = centres[rng.integers(len(centres), size=n)] + rng.normal(0, 0.5, (n, 3))
    noise = rng.random(n) < 0.2
    points[noise] = rng.uniform(-25, 25, (int(noise.sum()), 3))
    points = points.astype(np.float32)
    bad = rng.random(n) < nan_fraction
    points[bad, rng.integers(3, size=int(bad.sum()))] = rng.choice(
        np.float32([np.nan, np.inf, -np.inf]), int(bad.sum())
    )
    return points


def _three_ways(backend, points, config: ClusterConfig, mask=None):
    """Graph result, its ``last_call``, and the staged CUDA and CPU labels and sizes."""
    graph = EuclideanClusterer(config, backend).cluster(points, mask)
    call = backend.graphs.last_call
    staged = EuclideanClusterer(config, backend, whole_call=False).cluster(points, mask)
    host = points.get() if hasattr(points, "get") else points
    host_mask = mask.get() if hasattr(mask, "get") else mask
    cpu = EuclideanClusterer(config, "cpu").cluster(host, host_mask)
    return graph, call, staged, cpu


def _assert_equal(graph, staged, cpu) -> None:
    labels = graph.labels.get() if hasattr(graph.labels, "get") else graph.labels
    staged_labels = staged.labels.get() if hasattr(staged.labels, "get") else staged.labels
    assert labels.dtype == np.int32
    np.testing.assert_array_equal(labels, staged_labels)
    np.testing.assert_array_equal(labels, cpu.labels)
    np.testing.assert_array_equal(graph.cluster_sizes, cpu.cluster_sizes)
    assert graph.cluster_sizes.dtype == np.int64
    assert graph.num_components == cpu.num_components == staged.num_components


@pytest.mark.parametrize("search", ["range", "exhaustive"])
@pytest.mark.parametrize("d_th", [0.3, 1.0])
@pytest.mark.parametrize("n", [1, 2, 37, 1024, 1025, 5000, 30000])
def test_graph_equals_staged_and_cpu(backend, n, d_th, search):
    points = _blobs(n, seed=n, nan_fraction=0.02)
    config = ClusterConfig(d_th=d_th, search=search)
    graph, call, staged, cpu = _three_ways(backend, points, config)
    _assert_equal(graph, staged, cpu)
    assert call.points == n and call.bucket >= n and call.graph_launches == 1
    assert call.host_syncs == (1 if len(graph.cluster_sizes) <= _sort_capacity() else 2)
    assert call.outside_copies == 1  # the points in
    # A second call replays the graph of this bucket and configuration.
    again = EuclideanClusterer(config, backend).cluster(points)
    assert not backend.graphs.last_call.captured
    np.testing.assert_array_equal(again.labels, graph.labels)


def test_smaller_cloud_in_the_same_bucket_leaves_no_trace(backend):
    """Points of a larger earlier cloud of the bucket must not leak into a smaller one."""
    config = ClusterConfig(d_th=0.5)
    clusterer = EuclideanClusterer(config, backend)
    big = _blobs(1150, seed=3)
    clusterer.cluster(big)
    first = backend.graphs.last_call
    small = _blobs(1030, seed=4)
    result = clusterer.cluster(small)
    second = backend.graphs.last_call
    assert first.bucket == second.bucket and not second.captured
    cpu = EuclideanClusterer(config, "cpu").cluster(small)
    np.testing.assert_array_equal(result.labels, cpu.labels)
    np.testing.assert_array_equal(result.cluster_sizes, cpu.cluster_sizes)


@pytest.mark.parametrize("on_device", [False, True])
def test_masks_and_size_filter(backend, cupy, on_device):
    points = _blobs(20000, seed=5, nan_fraction=0.01)
    rng = np.random.default_rng(6)
    mask = rng.random(len(points)) < 0.7
    config = ClusterConfig(d_th=0.5, min_cluster_size=3, max_cluster_size=400)
    cloud, cloud_mask = (cupy.asarray(points), cupy.asarray(mask)) if on_device else (points, mask)
    graph, call, staged, cpu = _three_ways(backend, cloud, config, cloud_mask)
    assert isinstance(graph.labels, cupy.ndarray if on_device else np.ndarray)
    _assert_equal(graph, staged, cpu)
    assert call.host_syncs == 1  # fewer components than one block sorts
    assert call.outside_copies == (3 if on_device else 2)  # points, mask (, labels) beside it
    # Host points with a device mask, and the other way round.
    mixed = EuclideanClusterer(config, backend).cluster(points, cupy.asarray(mask))
    np.testing.assert_array_equal(mixed.labels, cpu.labels)
    mixed = EuclideanClusterer(config, backend).cluster(cupy.asarray(points), mask)
    np.testing.assert_array_equal(mixed.labels.get(), cpu.labels)


def test_more_components_than_one_block_sorts(backend):
    """20 000 isolated points: the keys are sorted after the graph (a second synchronisation)."""
    points = (np.arange(20000, dtype=np.float32)[:, None] * np.float32([3.0, 0, 0])).copy()
    points[::7] += np.float32([1.0, 0, 0])  # pairs 1 m apart at d_th 1.5: some clusters of 2
    graph, call, staged, cpu = _three_ways(backend, points, ClusterConfig(d_th=1.5))
    _assert_equal(graph, staged, cpu)
    assert call.host_syncs == 2 and graph.num_components > 8192


def test_clouds_the_grid_cannot_hold_and_clouds_with_no_finite_point(backend):
    points = _blobs(3000, seed=7)
    points[0] = (3e38, -3e38, 1e30)  # stretches the clique-cell grid past its index range
    graph, _, staged, cpu = _three_ways(backend, points, ClusterConfig(d_th=0.4))
    _assert_equal(graph, staged, cpu)
    nothing = np.full((5000, 3), np.nan, dtype=np.float32)
    graph, _, staged, cpu = _three_ways(backend, nothing, ClusterConfig(d_th=0.4))
    _assert_equal(graph, staged, cpu)
    assert graph.num_components == 0 and (graph.labels == -1).all()
    tiny = ClusterConfig(d_th=1e-40)  # T rounds to 0 in float32: no pair can be neighbours
    graph, _, staged, cpu = _three_ways(backend, _blobs(2000, seed=8, nan_fraction=0.1), tiny)
    _assert_equal(graph, staged, cpu)


def test_real_frame(backend, load_frame):
    points = load_frame("kitti_000001.bin")
    for d_th, count in {0.3: 4506, 0.5: 1724, 1.0: 477}.items():
        graph, call, staged, cpu = _three_ways(backend, points, ClusterConfig(d_th=d_th))
        _assert_equal(graph, staged, cpu)
        assert graph.num_components == count
        assert call.kernel_nodes == 10 and call.copy_nodes == 4


def test_large_cloud_labels_copied_beside_the_graph(cupy, load_frame):
    """Over PINNED_LABELS_MAX_POINTS the labels go straight into the returned array (the graph's
    own copies: staged transfers off, ``test_staging.py`` covers them); kitti_000001 tiled 10x
    has more clusters than one block sorts (a second synchronisation)."""
    from gpu_euclidean_cluster.cuda.backend import CudaBackend
    from gpu_euclidean_cluster.cuda.graphs.cluster_graphs import PINNED_LABELS_MAX_POINTS

    backend = CudaBackend(0, stage_transfers=False)

    frame = load_frame("kitti_000001.bin").astype(np.float64)
    shifts = np.zeros((10, 1, 3))
    shifts[:, 0, 0] = 200.0 * np.arange(10)
    points = (frame[None] + shifts).reshape(-1, 3).astype(np.float32)
    assert len(points) > PINNED_LABELS_MAX_POINTS
    config = ClusterConfig(d_th=0.3)
    graph = EuclideanClusterer(config, backend).cluster(points)
    call = backend.graphs.last_call
    staged = EuclideanClusterer(config, backend, whole_call=False).cluster(points)
    np.testing.assert_array_equal(graph.labels, staged.labels)
    np.testing.assert_array_equal(graph.cluster_sizes, staged.cluster_sizes)
    # The sort after the graph, then the labels' copy into the returned array.
    assert len(graph.cluster_sizes) > _sort_capacity() and call.host_syncs == 3
    assert call.outside_copies == 2 and call.copy_nodes == 3  # points in, labels out
    device = EuclideanClusterer(config, backend).cluster(cupy.asarray(points))
    np.testing.assert_array_equal(device.labels.get(), staged.labels)
    assert backend.graphs.last_call.host_syncs == 2  # the labels' device copy needs none


def test_configurations_outside_the_graph_run_staged(backend):
    points = _blobs(3000, seed=9)
    backend.graphs.last_call = None
    for config in (
        ClusterConfig(d_th=0.5, method="edge"),
        ClusterConfig(d_th=0.5, cluster_merge_threshold=1.0),
        ClusterConfig(d_th=0.5, clustering_ranges=(10.0,), clustering_distances=(0.5, 1.0)),
    ):
        result = EuclideanClusterer(config, backend).cluster(points)
        cpu = EuclideanClusterer(config, "cpu").cluster(points)
        np.testing.assert_array_equal(result.labels, cpu.labels)
    assert backend.graphs.last_call is None


def test_release_drops_the_graphs(backend):
    config = ClusterConfig(d_th=0.5)
    points = _blobs(4000, seed=10)
    EuclideanClusterer(config, backend).cluster(points)
    backend.release_memory()
    assert backend.graphs.held_bytes == 0
    EuclideanClusterer(config, backend).cluster(points)
    assert backend.graphs.last_call.captured and backend.graphs.held_bytes > 0


def test_failed_capture_falls_back_to_the_stages(monkeypatch, caplog, cupy):
    """A step that synchronises during capture invalidates it: graphs go off on that backend
    with one warning, and the call is answered stage by stage with the same labels."""
    from gpu_euclidean_cluster.cuda.graphs.launches import Memset

    original = Memset.issue

    def synchronising(self, device_id):
        original(self, device_id)
        cupy.cuda.get_current_stream().synchronize()

    fresh = make_backend("cuda")
    monkeypatch.setattr(Memset, "issue", synchronising)
    points = _blobs(3000, seed=11)
    config = ClusterConfig(d_th=0.5)
    with caplog.at_level(logging.WARNING):
        result = EuclideanClusterer(config, fresh).cluster(points)
    assert fresh.graphs.disabled is not None and fresh.graphs.last_call is None
    assert "CUDA graph capture failed" in caplog.text
    cpu = EuclideanClusterer(config, "cpu").cluster(points)
    np.testing.assert_array_equal(result.labels, cpu.labels)


def test_buckets():
    from gpu_euclidean_cluster.cuda.graphs.cluster_graphs import (
        BUCKETS_PER_OCTAVE,
        MIN_BUCKET,
        bucket_size,
    )

    sizes = [bucket_size(n) for n in range(1, 300_000, 97)]
    assert sizes == sorted(sizes)
    for n in [1, MIN_BUCKET, MIN_BUCKET + 1, 120_000, 2_044_556, 8_178_224, 2**23]:
        size = bucket_size(n)
        assert size >= n and size >= MIN_BUCKET
        assert n <= MIN_BUCKET or size - n < n / BUCKETS_PER_OCTAVE
