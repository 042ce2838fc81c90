"""Shared fixtures: real LiDAR frames, the PCL reference counts, a CUDA skip and a brute-force oracle.

The oracle is deliberately independent of the library's neighbour code: it compares all pairs
with its own float32 arithmetic and labels components with its own union-find.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.clusterer import cuda_available

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Frame file -> floats per point (x, y, z first).
FRAME_FIELDS: dict[str, int] = {
    "kitti_000001.bin": 4,
    "kitti_000008.bin": 4,
    "nuscenes_lidar_top.pcd.bin": 5,
}

#: pcl::EuclideanClusterExtraction cluster counts (min cluster size 1): frame -> {d_th: count}.
PCL_CLUSTER_COUNTS: dict[str, dict[float, int]] = {
    "kitti_000001.bin": {0.3: 4506, 0.5: 1724, 1.0: 477},
    "kitti_000008.bin": {0.3: 471, 0.5: 144, 1.0: 46},
    "nuscenes_lidar_top.pcd.bin": {0.3: 3502, 0.5: 2182, 1.0: 931},
}

CUDA_SKIP_REASON = "needs a CUDA device through CuPy"

#: Rows of the brute-force pair matrix evaluated at once.
_ORACLE_ROWS = 256


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every test marked ``gpu`` where CuPy finds no CUDA device."""
    if cuda_available():
        return
    skip = pytest.mark.skip(reason=CUDA_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def lidar_data_dir() -> Path:
    """``$LIDAR_DATA_DIR``, default ``<repo>/../shared/data`` (may not exist)."""
    return Path(os.environ.get("LIDAR_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def load_frame(lidar_data_dir: Path) -> Callable[[str], np.ndarray]:
    """``load(name)``: the frame's (N, 3) float32 x, y, z; skips the test if the file is missing."""

    def load(name: str) -> np.ndarray:
        path = lidar_data_dir / name
        if not path.is_file():
            pytest.skip(f"LiDAR frame {path} not found (set LIDAR_DATA_DIR to the data folder)")
        raw = np.fromfile(path, dtype=np.float32)
        return np.ascontiguousarray(raw.reshape(-1, FRAME_FIELDS[name])[:, :3])

    return load


@pytest.fixture(scope="session")
def pcl_reference() -> dict[str, dict[float, int]]:
    """PCL's cluster counts per frame and tolerance."""
    return PCL_CLUSTER_COUNTS


@pytest.fixture
def requires_cuda() -> None:
    """Request this fixture to skip a test where CuPy finds no CUDA device."""
    if not cuda_available():
        pytest.skip(CUDA_SKIP_REASON)


def oracle_components(points: np.ndarray, d_th: float) -> np.ndarray:
    """Brute-force Euclidean clusters: one component id per point, -1 for non-finite points.

    Neighbours: float32 ``((dx*dx + dy*dy) + dz*dz) < float32(d_th**2)`` over all pairs. Ids are
    the smallest point index of each component, so they are arbitrary but deterministic.
    """
    points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    finite = np.flatnonzero(np.isfinite(points).all(axis=1))
    p = points[finite]
    threshold = np.float32(np.float64(d_th) ** 2)
    parent = np.arange(len(p))
    for start in range(0, len(p), _ORACLE_ROWS):
        rows = p[start : start + _ORACLE_ROWS]
        d = rows[:, None, :] - p[None, :, :]
        sq = (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]
        i, j = np.nonzero(sq < threshold)
        parent = _union(parent, i + start, j)
    ids = np.full(len(points), -1, dtype=np.int64)
    ids[finite] = finite[_roots(parent)]
    return ids


def _roots(parent: np.ndarray) -> np.ndarray:
    """Follow parent pointers to the roots (pointer jumping)."""
    while True:
        grand = parent[parent]
        if np.array_equal(grand, parent):
            return parent
        parent = grand


def _union(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Merge the sets of every pair (a[k], b[k]); roots are always the smaller index."""
    while len(a):
        parent = _roots(parent)
        ra, rb = parent[a], parent[b]
        differ = ra != rb
        a, b, ra, rb = a[differ], b[differ], ra[differ], rb[differ]
        low, high = np.minimum(ra, rb), np.maximum(ra, rb)
        # Hook each high root to its smallest low candidate; repeat until all pairs agree.
        np.minimum.at(parent, high, low)
    return _roots(parent)


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """True when two labellings group the points identically (-1 only where both are -1)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or not np.array_equal(a < 0, b < 0):
        return False
    keep = a >= 0
    pairs = np.unique(np.stack((a[keep], b[keep])), axis=1)
    return pairs.shape[1] == len(np.unique(a[keep])) == len(np.unique(b[keep]))


@pytest.fixture(scope="session")
def oracle() -> Callable[[np.ndarray, float], np.ndarray]:
    """:func:`oracle_components`."""
    return oracle_components


@pytest.fixture(scope="session")
def assert_same_partition() -> Callable[[np.ndarray, np.ndarray], None]:
    """``check(actual, expected)``: fails with a count summary unless the partitions are equal."""

    def check(actual: np.ndarray, expected: np.ndarray) -> None:
        assert same_partition(actual, expected), (
            f"partitions differ: {len(np.unique(actual[actual >= 0]))} clusters vs "
            f"{len(np.unique(expected[expected >= 0]))} expected, "
            f"{int((np.asarray(actual) < 0).sum())} vs {int((np.asarray(expected) < 0).sum())} "
            "unlabelled points"
        )

    return check
