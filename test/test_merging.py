"""Centroid merging's arithmetic (``core/merging.py``, the CPU twin of ``cuda/merging.py``): the
centroids are the package's fixed-order float64 sums, so a link at exactly the threshold is
decided the same way on both backends. The reference here sums in plain Python, leaf by leaf and
pairwise, independently of ``core/cluster_stats.py``'s NumPy code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_euclidean_cluster.core.cluster_stats import SUM_LEAF
from gpu_euclidean_cluster.core.merging import merge_components


def tree_sum(values: list[float]) -> float:
    """Leaves of ``SUM_LEAF`` values added left to right, then the leaf sums pairwise."""
    level = []
    for start in range(0, len(values), SUM_LEAF):
        total = values[start]
        for value in values[start + 1 : start + SUM_LEAF]:
            total += value
        level.append(total)
    while len(level) > 1:
        level = [
            level[i] + level[i + 1] if i + 1 < len(level) else level[i]
            for i in range(0, len(level), 2)
        ]
    return level[0]


def centroid(xy: np.ndarray) -> tuple[float, float]:
    """The reference centroid of (n, 2) float32 points, in index order."""
    x = [float(v) for v in xy[:, 0]]
    y = [float(v) for v in xy[:, 1]]
    return tree_sum(x) / len(x), tree_sum(y) / len(y)


def two_clusters(seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Two interleaved clusters of a few hundred float32 points (several leaves each; values of
    very different magnitudes, so that their float64 sums round, differently in other orders) and
    the float64 distance of their reference centroids."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(130, 700, 2)
    xy = np.concatenate(
        [rng.normal(c, 3.0, (s, 2)) for c, s in zip(((90.0, 0.0), (92.0, 1.0)), sizes, strict=True)]
    )
    xy[rng.random(len(xy)) < 0.3] *= 1e-9  # fine ulps beside coarse ones: sums that round
    xy = xy.astype(np.float32)
    ids = np.repeat(np.array([7, 3]), sizes)
    order = rng.permutation(len(ids))
    xy, ids = xy[order], ids[order]
    (ax, ay), (bx, by) = (centroid(xy[ids == c]) for c in (7, 3))
    dx, dy = ax - bx, ay - by
    return xy, ids, math.sqrt(dx * dx + dy * dy)


@pytest.mark.parametrize("seed", range(40))
def test_a_link_at_exactly_the_threshold_uses_the_fixed_order_sums(seed):
    xy, ids, distance = two_clusters(seed)
    assert len(set(merge_components(xy, ids, distance, passes=1).tolist())) == 1
    below = math.nextafter(distance, 0.0)
    assert len(set(merge_components(xy, ids, below, passes=1).tolist())) == 2
