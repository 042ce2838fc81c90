"""Memory is known before it is spent: the paper's methods refuse a graph over budget, naming
``union_find``, which clusters the same clouds in O(N) memory."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.memory import StructureTooLargeError, host_memory_budget
from gpu_euclidean_cluster.cpu.graph import EDGE_BYTES, neighbour_edges

DENSE = np.zeros((3000, 3), dtype=np.float32)  # 4.5 M neighbour pairs


@pytest.mark.parametrize("search", ["range", "exhaustive"])
@pytest.mark.parametrize("method", ["vertex", "edge", "matrix"])
def test_dense_cloud_over_budget_is_refused_before_allocating(method, search):
    config = ClusterConfig(d_th=0.5, method=method, search=search, memory_budget=1 << 20)
    with pytest.raises(StructureTooLargeError) as caught:
        EuclideanClusterer(config, backend="cpu").cluster(DENSE)
    message = str(caught.value)
    assert f"method {method} needs" in message and "4498500 neighbour pairs" in message
    assert "use method 'union_find' or 'auto'" in message and "\n" not in message


@pytest.mark.parametrize("search", ["range", "exhaustive"])
def test_union_find_clusters_the_same_cloud_in_bounded_memory(search):
    config = ClusterConfig(d_th=0.5, method="union_find", search=search, memory_budget=1 << 20)
    result = EuclideanClusterer(config, backend="cpu").cluster(DENSE)
    assert result.cluster_sizes.tolist() == [len(DENSE)]


def test_a_loose_bound_is_checked_exactly_before_refusing():
    # 2000 points 1 m apart along x: 2 M candidate pairs exhaustively, no neighbour at 0.5 m.
    points = np.zeros((2000, 3), dtype=np.float32)
    points[:, 0] = np.arange(2000)
    budget = 2000 * EDGE_BYTES
    assert len(neighbour_edges(points, 0.5, "exhaustive", "edge", budget)) == 0
    assert len(neighbour_edges(points, 1.5, "exhaustive", "edge", budget)) == 1999
    with pytest.raises(StructureTooLargeError):
        neighbour_edges(points, 2.5, "exhaustive", "edge", budget)  # 3997 pairs


def test_default_budget_is_a_share_of_available_memory():
    assert host_memory_budget() > 0


def test_budget_is_validated():
    with pytest.raises(ValueError, match="memory_budget must be"):
        ClusterConfig(memory_budget=0)
