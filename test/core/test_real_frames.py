"""Real LiDAR frames: cluster counts equal PCL's, and the GPU's labels equal the CPU's exactly.

The frames come from ``$LIDAR_DATA_DIR`` (default ``../shared/data``); tests skip without them.
On the CPU every method shares the same range search, so each (frame, tolerance) runs one method,
rotated so that every method meets every frame (about 30 s in all on two cores).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from gpu_euclidean_cluster import (
    ClusterConfig,
    ClusterResult,
    EuclideanClusterer,
    euclidean_cluster,
)
from gpu_euclidean_cluster.core.config import METHODS

from ..conftest import GPU_VARIANTS, PCL_CLUSTER_COUNTS, requires_cuda

TOLERANCES = (0.3, 0.5, 1.0)
CASES = [(frame, d_th) for frame in PCL_CLUSTER_COUNTS for d_th in TOLERANCES]
#: The CPU method of each case: the nine cases meet every method, the slow vertex adjacency list
#: (Algorithm 1) on a small neighbour graph (kitti_000008 at 0.5 m).
CPU_METHOD = {
    case: METHODS[(3 * frame_no + tol_no + 3) % len(METHODS)]
    for frame_no, frame in enumerate(PCL_CLUSTER_COUNTS)
    for tol_no, d_th in enumerate(TOLERANCES)
    for case in [(frame, d_th)]
}


@pytest.fixture(scope="module")
def cpu_result(load_frame) -> Callable[[str, float], ClusterResult]:
    """``get(frame, d_th)``: the CPU range-search result, computed once per module."""
    cache: dict[tuple[str, float], ClusterResult] = {}

    def get(frame: str, d_th: float) -> ClusterResult:
        if (frame, d_th) not in cache:
            cache[frame, d_th] = euclidean_cluster(
                load_frame(frame),
                d_th,
                method=CPU_METHOD[frame, d_th],
                search="range",
                backend="cpu",
            )
        return cache[frame, d_th]

    return get


def test_every_method_meets_a_real_frame():
    assert set(CPU_METHOD.values()) == set(METHODS)
    assert CPU_METHOD["kitti_000008.bin", 0.5] == "vertex"


@pytest.mark.parametrize(("frame", "d_th"), CASES)
def test_cpu_cluster_count_equals_pcl(frame, d_th, cpu_result, load_frame, pcl_reference):
    result = cpu_result(frame, d_th)
    points = load_frame(frame)
    assert result.num_clusters == pcl_reference[frame][d_th]
    assert result.num_components == result.num_clusters
    finite = np.isfinite(points).all(axis=1)
    assert np.all(result.labels[finite] >= 0)
    assert int(result.cluster_sizes.sum()) == int(finite.sum())


@pytest.mark.gpu
@pytest.mark.slow
@requires_cuda
@pytest.mark.parametrize(("method", "search", "jumping"), GPU_VARIANTS)
@pytest.mark.parametrize(("frame", "d_th"), CASES)
def test_gpu_equals_pcl_and_cpu(
    frame, d_th, method, search, jumping, cpu_result, load_frame, pcl_reference
):
    config = ClusterConfig(d_th=d_th, method=method, search=search, pointer_jumping=jumping)
    result = EuclideanClusterer(config, backend="cuda").cluster(load_frame(frame))
    assert result.backend == "cuda"
    assert result.num_clusters == pcl_reference[frame][d_th]
    expected = cpu_result(frame, d_th)
    np.testing.assert_array_equal(result.cluster_sizes, expected.cluster_sizes)
    np.testing.assert_array_equal(result.labels, expected.labels)
