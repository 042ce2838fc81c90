"""Property tests: every method x search equals a brute-force float32 oracle on generated clouds.

Clouds mix clusters at the scale of ``d_th``, exact ties at ``d_th``, duplicates, far outliers up
to the float32 limit, NaN/Inf and tiny thresholds. The number of generated clouds per test is
``GEC_PROPERTY_EXAMPLES`` (default 5000, two tests: 10 000 a run); the GPU twin of the test runs
the same clouds on every CUDA variant.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.config import METHODS, SEARCHES

from ..conftest import GPU_VARIANTS, oracle_components, requires_cuda, same_partition

EXAMPLES = int(os.environ.get("GEC_PROPERTY_EXAMPLES", "5000"))
PROPERTY_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
F32_MAX = float(np.finfo(np.float32).max)


@st.composite
def clouds(draw: st.DrawFn) -> tuple[np.ndarray, float]:
    """``(points, d_th)``: a small cloud built to probe the neighbour rule and the voxel grid."""
    d_th = draw(st.sampled_from([1e-40, 1e-6, 0.125, 0.3, 0.5, 1.0, 3.0, 1e6, 1e30]))
    n = draw(st.integers(0, 40))
    spread = draw(st.sampled_from([0.5, 2.0, 6.0]))  # cloud extent in units of d_th
    offset = draw(st.sampled_from([0.0, 1e3, -7e5, 1e20]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    points = offset + rng.uniform(-spread, spread, (n, 3)) * d_th
    if n >= 2:
        # Exact ties: a point d_th from another along one axis (exact when representable).
        for i in rng.choice(n, size=min(n // 2, draw(st.integers(0, 6))), replace=False):
            j = rng.integers(n)
            points[i] = points[j]
            points[i, rng.integers(3)] += d_th
        # Duplicates.
        for i in rng.choice(n, size=min(n // 2, draw(st.integers(0, 6))), replace=False):
            points[i] = points[rng.integers(n)]
        # Far outliers up to the float32 limit, on one axis or all three.
        for i in rng.choice(n, size=min(n // 3, draw(st.integers(0, 4))), replace=False):
            axes = rng.integers(3) if rng.random() < 0.5 else slice(None)
            points[i, axes] = rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(0, 38.53)
    points = np.clip(points, -F32_MAX, F32_MAX).astype(np.float32)
    if n and draw(st.booleans()):
        bad = rng.choice(n, size=max(1, n // 8), replace=False)
        values = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
        points[bad, rng.integers(3, size=len(bad))] = rng.choice(values, len(bad))
    return points, d_th


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(cloud=clouds(), search=st.sampled_from(SEARCHES), method=st.sampled_from(METHODS))
def test_cpu_partition_equals_oracle(cloud, search, method):
    points, d_th = cloud
    config = ClusterConfig(d_th=d_th, method=method, search=search)
    labels = EuclideanClusterer(config, backend="cpu").cluster(points).labels
    assert same_partition(labels, oracle_components(points, d_th))


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(cloud=clouds())
def test_cpu_searches_agree_label_for_label(cloud):
    points, d_th = cloud
    exhaustive, ranged = (
        EuclideanClusterer(ClusterConfig(d_th=d_th, search=s), backend="cpu").cluster(points)
        for s in ("exhaustive", "range")
    )
    np.testing.assert_array_equal(exhaustive.labels, ranged.labels)


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize(("method", "search", "pointer_jumping"), GPU_VARIANTS)
@settings(max_examples=max(EXAMPLES // 10, 50), deadline=None, derandomize=True)
@given(cloud=clouds())
def test_gpu_labels_equal_cpu(cloud, method, search, pointer_jumping):
    points, d_th = cloud
    config = ClusterConfig(d_th=d_th, method=method, search=search, pointer_jumping=pointer_jumping)
    gpu = EuclideanClusterer(config, backend="cuda").cluster(points).labels
    cpu = EuclideanClusterer(config, backend="cpu").cluster(points).labels
    np.testing.assert_array_equal(gpu, cpu)
