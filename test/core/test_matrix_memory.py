"""The matrix method's memory need (Section 4.3, bit-packed) and its refusal when it cannot fit."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.config import SEARCHES
from gpu_euclidean_cluster.core.units import format_bytes
from gpu_euclidean_cluster.cuda.labelling.matrix_memory import (
    MatrixMemoryError,
    check_matrix_memory,
    matrix_bytes,
    matrix_bytes_needed,
    matrix_row_words,
)
from gpu_euclidean_cluster.tools.synthetic import synthetic_cloud

from ..conftest import requires_cuda

GIB = 1024**3


@pytest.mark.parametrize(
    ("labels", "words", "one_matrix"),
    [
        (0, 0, 0),
        (1, 1, 4),
        (32, 1, 128),
        (33, 2, 264),
        (256, 8, 8192),
        (65536, 2048, 512 * 1024**2),
    ],
)
def test_need_is_two_bit_packed_matrices(labels, words, one_matrix):
    assert matrix_row_words(labels) == words
    assert matrix_bytes(labels) == one_matrix == labels * words * 4
    assert matrix_bytes_needed(labels) == 2 * one_matrix


def test_need_grows_quadratically():
    assert matrix_bytes_needed(262144) == 16 * GIB
    assert matrix_bytes_needed(2 * 262144) == 4 * matrix_bytes_needed(262144)


def test_check_returns_the_need_when_it_fits():
    need = matrix_bytes_needed(65536)
    assert check_matrix_memory(65536, need) == need  # exactly enough is enough
    assert check_matrix_memory(65536, 10 * GIB) == need
    assert check_matrix_memory(0, 0) == 0


def test_check_raises_with_need_and_free_memory_named():
    with pytest.raises(MatrixMemoryError) as caught:
        check_matrix_memory(65536, matrix_bytes_needed(65536) - 1)
    error = caught.value
    assert isinstance(error, MemoryError)
    assert (error.num_labels, error.need_bytes) == (65536, GIB)
    assert error.free_bytes == GIB - 1
    message = str(error)
    assert "needs 1.0 GiB" in message
    assert "over the 1024.0 MiB of free GPU memory" in message
    assert "|R| = 65536" in message
    assert "use method 'union_find' or 'auto'" in message
    assert "'union_find' or 'auto'" in message


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 * 1024**2, "5.0 MiB"),
        (3 * GIB, "3.0 GiB"),
        (2 * 1024**4, "2.0 TiB"),
    ],
)
def test_format_bytes(count, text):
    assert format_bytes(count) == text


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("search", SEARCHES)
def test_gpu_matrix_method_refuses_when_memory_is_short(search, monkeypatch):
    import gpu_euclidean_cluster.cuda.backend as cuda_backend

    # Fully interleaved clusters: INITIAL_EC merges nothing within a block, |R| = n.
    cloud = synthetic_cloud(8192, 256, 8, 256, seed=0, d_th=0.5)
    monkeypatch.setattr(cuda_backend, "free_device_memory", lambda *args, **kwargs: 4096)
    config = ClusterConfig(d_th=cloud.d_th, method="matrix", search=search)
    with pytest.raises(MatrixMemoryError) as caught:
        EuclideanClusterer(config, backend="cuda").cluster(cloud.points)
    assert caught.value.free_bytes == 4096
    assert caught.value.need_bytes > 4096
    assert "over the 4.0 KiB of free GPU memory" in str(caught.value)
    for method in ("vertex", "edge"):
        result = EuclideanClusterer(config.with_changes(method=method), backend="cuda").cluster(
            cloud.points
        )
        np.testing.assert_array_equal(result.labels, cloud.labels)


@pytest.mark.gpu
@requires_cuda
def test_gpu_matrix_method_runs_with_enough_memory(monkeypatch):
    import gpu_euclidean_cluster.cuda.backend as cuda_backend

    cloud = synthetic_cloud(8192, 256, 8, 256, seed=0, d_th=0.5)
    calls: list[int] = []
    real = cuda_backend.free_device_memory

    def spy(*args: object, **kwargs: object) -> int:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(cuda_backend, "free_device_memory", spy)
    config = ClusterConfig(d_th=cloud.d_th, method="matrix", search="range")
    result = EuclideanClusterer(config, backend="cuda").cluster(cloud.points)
    assert calls, "the matrix method must check free memory before allocating"
    assert result.num_labels_after_initial is not None
    assert result.num_labels_after_initial >= cloud.num_components
    np.testing.assert_array_equal(result.labels, cloud.labels)
