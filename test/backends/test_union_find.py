"""Tests of the ``union_find`` method: the CPU twin and the GPU kernels against a float32 oracle.

The oracle is independent of both: every pair compared with its own float32 arithmetic
(``((dx*dx + dy*dy) + dz*dz) < float32(d_th**2)``), components by SciPy. Partitions are compared
through the package's canonical numbering. GPU tests skip without CuPy and a CUDA device; real
frames come from ``$LIDAR_DATA_DIR`` (default ``../shared/data`` beside the repository) and
skip when absent.
"""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

import gpu_euclidean_cluster
from gpu_euclidean_cluster.core.clique_cells import FORWARD_OFFSETS, clique_cell_side
from gpu_euclidean_cluster.core.neighbour_rule import threshold_sq
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.cpu.labelling import union_find
from gpu_euclidean_cluster.cpu.labelling.union_find import (
    build_clique_grid,
    build_gapped_grid,
    clique_geometry,
    union_find_components,
)

from ..conftest import LIDAR_DATA_DIR

KERNELS = Path(gpu_euclidean_cluster.__file__).resolve().parent / "cuda" / "kernels"
SEARCHES = ("range", "exhaustive")

#: Frame file -> floats per point (x, y, z first) and pcl::EuclideanClusterExtraction's counts.
FRAMES: dict[str, tuple[int, dict[float, int]]] = {
    "kitti_000001.bin": (4, {0.3: 4506, 0.5: 1724, 1.0: 477}),
    "kitti_000008.bin": (4, {0.3: 471, 0.5: 144, 1.0: 46}),
    "nuscenes_lidar_top.pcd.bin": (5, {0.3: 3502, 0.5: 2182, 1.0: 931}),
}


#: GPU tests: marked ``gpu`` and skipped without a CUDA device (conftest).
gpu = pytest.mark.gpu


# ---- oracle and helpers -----------------------------------------------------------------------


def oracle_components(points: np.ndarray, d_th: float) -> np.ndarray:
    """Brute force over all pairs with the float32 rule; component ids from SciPy."""
    p = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    n = len(p)
    rows, cols = [], []
    with np.errstate(over="ignore", invalid="ignore"):
        thr = np.float32(np.float64(d_th) ** 2)
        for s in range(0, n, 256):
            d = p[s : s + 256, None, :] - p[None, :, :]
            sq = (d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1]) + d[..., 2] * d[..., 2]
            i, j = np.nonzero(sq < thr)
            rows.append(i + s)
            cols.append(j)
    i = np.concatenate(rows) if rows else np.empty(0, np.int64)
    j = np.concatenate(cols) if cols else np.empty(0, np.int64)
    graph = coo_matrix((np.ones(len(i), dtype=np.int8), (i, j)), shape=(n, n))
    return connected_components(graph, directed=False)[1]


def canonical(components: np.ndarray) -> np.ndarray:
    """The package's canonical numbering (size descending, ties by smallest member)."""
    return np.asarray(canonical_labels(np.asarray(components), 1, 2**31 - 1)[0])


def pair_sq(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = np.subtract(points[a], points[b], dtype=np.float32)
    return (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + d[:, 2] * d[:, 2]


def load_frame(name: str) -> np.ndarray:
    path = LIDAR_DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"LiDAR frame {path} not found (set LIDAR_DATA_DIR)")
    raw = np.fromfile(path, dtype=np.float32).reshape(-1, FRAMES[name][0])
    return np.ascontiguousarray(raw[:, :3])


# ---- clouds -----------------------------------------------------------------------------------


def _uniform(seed: int) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 1500))
    side = float(rng.choice([0.3, 1.0, 3.0, 10.0]))
    d_th = float(rng.choice([0.05, 0.1, 0.3, 0.5, 1.0, 2.0]))
    points = rng.random((n, 3)) * side - side / 2
    if seed % 3 == 0:  # a third of the points duplicated
        points[rng.integers(0, n, n // 3)] = points[rng.integers(0, n, n // 3)]
    return points.astype(np.float32), d_th


def _ulp_ties(seed: int, d_th: float) -> tuple[np.ndarray, float]:
    """Pairs at distance d_th along random directions, nudged by -2..2 ulps per axis."""
    rng = np.random.default_rng(seed)
    m = 300
    p = (rng.random((m, 3)) * 10 - 5).astype(np.float32)
    u = rng.normal(size=(m, 3))
    u[: m // 3, 1:] = 0.0  # a third along x alone: exact float32 ties are likely there
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    q = (p + d_th * u).astype(np.float32)
    for axis in range(3):
        for _ in range(2):
            step = rng.integers(-1, 2, m)
            q[:, axis] = np.where(
                step > 0,
                np.nextafter(q[:, axis], np.float32(np.inf)),
                np.where(step < 0, np.nextafter(q[:, axis], np.float32(-np.inf)), q[:, axis]),
            )
    # Chain the pairs loosely so that ties decide whether clusters merge.
    return np.concatenate((p, q)), d_th


def _lattice(spacing: float, d_th: float, shape=(7, 6, 5)) -> tuple[np.ndarray, float]:
    idx = np.indices(shape).reshape(3, -1).T.astype(np.float32)
    return (idx * np.float32(spacing)).astype(np.float32), d_th


def _clumps(seed: int) -> tuple[np.ndarray, float]:
    """Tight blobs (dense cells) a little under or over d_th apart, and a sparse background."""
    rng = np.random.default_rng(seed)
    d_th = 0.5
    centres = np.cumsum(rng.choice([0.45, 0.55, 0.8, 0.98, 1.02], size=(8, 1)), axis=0)
    centres = np.hstack((centres, np.zeros((8, 2))))
    blobs = [c + rng.normal(scale=0.02, size=(200, 3)) for c in centres]
    background = rng.random((300, 3)) * [8.0, 2.0, 2.0] - [0.0, 1.0, 1.0]
    return np.concatenate((*blobs, background)).astype(np.float32), d_th


def _walls(gap: float) -> tuple[np.ndarray, float]:
    """Two dense parallel planes `gap` apart (clique cells facing each other across the gap)."""
    rng = np.random.default_rng(7)
    a = rng.random((1500, 3)) * [2.0, 2.0, 0.0]
    b = rng.random((1500, 3)) * [2.0, 2.0, 0.0] + [0.0, 0.0, gap]
    return np.concatenate((a, b)).astype(np.float32), 0.5


def _cube(seed: int, n: int, side: float, d_th: float) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(seed)
    return (rng.random((n, 3)) * side).astype(np.float32), d_th


def _signed_zeros() -> tuple[np.ndarray, float]:
    p = np.array(
        [
            [0.0, 0.0, 0.0],
            [-0.0, -0.0, -0.0],
            [0.0, -0.0, 0.1],
            [-0.1, 0.0, -0.0],
            [0.25, 0.0, 0.0],
            [-0.25, -0.0, 0.0],
        ],
        dtype=np.float32,
    )
    return p, 0.2


def _tiny_coords() -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(11)
    return (rng.random((600, 3)) * 1e-4).astype(np.float32), 1e-5


def _tiny_dth() -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(12)
    p = rng.random((500, 3)).astype(np.float32)
    p[250:300] = p[0]  # exact duplicates are still neighbours
    p[300:310] = p[1] + np.float32(2e-7)
    return p, 1e-6


def _far_from_origin() -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(13)
    return (1e5 + rng.random((800, 3)) * 5).astype(np.float32), 0.3


def _subnormal_threshold() -> tuple[np.ndarray, float]:
    """T = float32(1e-40) is subnormal: the grid is off, points 7e-21 apart are still neighbours."""
    x = np.arange(40, dtype=np.float64) * 7e-21
    x[20:] += 1e-19  # a gap splits the chain
    return np.stack((x, np.zeros(40), np.zeros(40)), axis=1).astype(np.float32), 1e-20


def _zero_threshold() -> tuple[np.ndarray, float]:
    """T = float32(1e-60) = 0: not even identical points are neighbours (S < 0 never holds)."""
    return np.zeros((30, 3), dtype=np.float32), 1e-30


def _infinite_threshold() -> tuple[np.ndarray, float]:
    """T = inf: every pair is a neighbour unless its squared distance overflows to inf."""
    rng = np.random.default_rng(14)
    p = rng.random((200, 3)) * 2e38 - 1e38
    p[:100, 0] = np.abs(p[:100, 0]) + 2e38
    p[100:, 0] = -np.abs(p[100:, 0]) - 2e38
    return p.astype(np.float32), 1e20


def _huge_threshold() -> tuple[np.ndarray, float]:
    """T = 1e36 (normal): clique cells of 5.8e17, sums that overflow to inf for far pairs."""
    rng = np.random.default_rng(15)
    return (rng.random((500, 3)) * 4e19 - 2e19).astype(np.float32), 1e18


def _subnormal(k: int) -> tuple[np.ndarray, float]:
    """T = k * 2^-149 (subnormal): random points a few reaches apart, pairs at the reach along
    random directions nudged by an ulp, and on x from 0 a chain whose last link, a neighbour
    pair a hair under the reach, spans as many gapped-grid cells as it can (3 for k = 3)."""
    d_th = float(np.sqrt(k * 2.0**-149))
    rng = np.random.default_rng(100 + k)
    p = rng.random((200, 3)) * 6 * d_th + 2.0**-60
    u = rng.normal(size=(200, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    q = (p + d_th * u).astype(np.float32)
    q = np.nextafter(q, np.where(rng.random((200, 3)) < 0.5, np.float32(0), np.float32(1)))
    side, reach = clique_geometry(threshold_sq(d_th))
    start = np.float32(side * 0.99)  # the same cell as 0, near its far end
    link = np.nextafter(np.float32(reach), np.float32(0))  # the longest neighbour difference
    chain = np.zeros((3, 3), dtype=np.float32)
    chain[1:, 0] = (start, start + link)
    return np.concatenate((p.astype(np.float32), q, chain)), d_th


def _infinite_threshold_near() -> tuple[np.ndarray, float]:
    """T = inf with points 1e19 to 1e20 apart: squared distances overflow for some pairs only."""
    rng = np.random.default_rng(17)
    return (rng.random((300, 3)) * 6e19).astype(np.float32), 1e25


def _blob_and_far_outliers() -> tuple[np.ndarray, float]:
    """A dense blob, a chain, and outliers at float32's ends: the bounding box is too wide."""
    rng = np.random.default_rng(18)
    blob = rng.random((1500, 3)) * 0.3
    chain = np.zeros((200, 3))
    chain[:, 0] = 5.0 + np.arange(200) * 0.4 + rng.random(200) * 0.2
    far = [[1e9, 0.0, 0.0], [-3e38, 3e38, 0.0], [3e38, 3e38, 3e38], [1e9, 0.3, 0.0]]
    return np.concatenate((blob, chain, far)).astype(np.float32), 0.5


def _wide_cloud() -> tuple[np.ndarray, float]:
    """More than 2^30 cells across: the grid is off (CPU) or falls back on the device (GPU)."""
    rng = np.random.default_rng(16)
    base = rng.random((300, 3)) * 10
    far = rng.random((100, 3)) * 10 + [3e9, 0.0, 0.0]
    return np.concatenate((base, far)).astype(np.float32), 1.0


CLOUDS: dict[str, Callable[[], tuple[np.ndarray, float]]] = {
    **{f"uniform-{s}": (lambda s=s: _uniform(s)) for s in range(24)},
    **{f"ulp-ties-{d}": (lambda d=d: _ulp_ties(3, d)) for d in (0.5, 0.3, 1.0, 0.1)},
    "lattice-exact-ties": lambda: _lattice(0.5, 0.5),
    "lattice-below": lambda: _lattice(float(np.nextafter(np.float32(0.5), np.float32(0))), 0.5),
    "lattice-0.3": lambda: _lattice(0.3, 0.3),
    "lattice-0.1": lambda: _lattice(0.1, 0.1, (12, 12, 3)),
    "identical": lambda: (np.full((2000, 3), 1.25, dtype=np.float32), 0.5),
    "clumps-0": lambda: _clumps(0),
    "clumps-1": lambda: _clumps(1),
    "walls-touching": lambda: _walls(0.499),
    "walls-apart": lambda: _walls(0.501),
    "walls-exact": lambda: _walls(0.5),
    "dense-cube": lambda: _cube(5, 3000, 0.6, 0.5),
    "dense-cube-small-dth": lambda: _cube(6, 3000, 0.6, 0.05),
    "signed-zeros": _signed_zeros,
    "tiny-coords": _tiny_coords,
    "tiny-dth": _tiny_dth,
    "far-from-origin": _far_from_origin,
    "subnormal-threshold": _subnormal_threshold,
    "zero-threshold": _zero_threshold,
    "infinite-threshold": _infinite_threshold,
    "huge-threshold": _huge_threshold,
    "wide-cloud": _wide_cloud,
    **{f"subnormal-threshold-{k}": (lambda k=k: _subnormal(k)) for k in (1, 2, 3, 4, 6, 9)},
    "infinite-threshold-near": _infinite_threshold_near,
    "blob-and-far-outliers": _blob_and_far_outliers,
}


@pytest.fixture(scope="module")
def oracle_cache() -> dict[str, np.ndarray]:
    return {}


def _oracle(cache: dict[str, np.ndarray], name: str) -> tuple[np.ndarray, float, np.ndarray]:
    points, d_th = CLOUDS[name]()
    if name not in cache:
        cache[name] = canonical(oracle_components(points, d_th))
    return points, d_th, cache[name]


def components_on(backend: str, points: np.ndarray, d_th: float, search: str) -> np.ndarray:
    """The ``backend`` twin's union-find component ids of ``points``, on the host."""
    if backend == "cuda":
        return gpu_components(0, points, d_th, search)[0]
    got = union_find_components(points, d_th, search)
    assert got.dtype == np.int32 and got.shape == (len(points),)
    assert got.size == 0 or (got.min() >= 0 and got.max() < len(points))
    return got


# ---- both twins -------------------------------------------------------------------------------


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("name", list(CLOUDS))
def test_matches_oracle(backend: str, name: str, search: str, oracle_cache) -> None:
    """Every oracle cloud on both twins, the subnormal-threshold one included: on CUDA,
    common.cuh evaluates the rule in inline PTX without .ftz, so CuPy's -ftz=true cannot flush
    subnormal values."""
    points, d_th, expected = _oracle(oracle_cache, name)
    got = components_on(backend, points, d_th, search)
    assert np.array_equal(canonical(got), expected)


@pytest.mark.parametrize("n", [0, 1, 2])
@pytest.mark.parametrize("search", SEARCHES)
def test_tiny_clouds(backend: str, n: int, search: str) -> None:
    points = np.array([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0]], dtype=np.float32)[:n]
    near = components_on(backend, points, 0.5, search)
    far = components_on(backend, points, 0.3, search)  # 0.3 apart: not below 0.3
    assert near.dtype == np.int32 and len(near) == n
    assert len(np.unique(near)) == min(n, 1)
    assert len(np.unique(far)) == n


# ---- CPU twin ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CLOUDS))
def test_cpu_gapped_grid_matches_oracle(
    name: str, oracle_cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gapped grid (where the bounding-box grid cannot hold the cloud), forced for every
    cloud, gives the oracle's partition."""
    monkeypatch.setattr(union_find, "clique_cell_side", lambda thr: None)
    points, d_th, expected = _oracle(oracle_cache, name)
    assert np.array_equal(canonical(union_find_components(points, d_th)), expected)


def test_subnormal_clouds_reach_across_three_cells() -> None:
    for k in (1, 2, 3, 4, 6, 9):
        assert threshold_sq(_subnormal(k)[1]) == np.float32(k * 2.0**-149)
    points, d_th = _subnormal(3)
    grid = build_gapped_grid(points, threshold_sq(d_th))
    assert grid is not None and np.abs(grid.offsets).max() == 3  # D / h = 2.27 there
    first, last = grid.coords[grid.cell_of[-2:]]
    assert (last - first).tolist() == [3, 0, 0]  # a neighbour pair three cells apart
    assert pair_sq(points, np.array([-2]), np.array([-1]))[0] < threshold_sq(d_th)


THRESHOLDS = [np.float32(k * 2.0**-149) for k in range(1, 40)] + [
    threshold_sq(d) for d in (1e-20, 1e-15, 0.05, 0.5, 3.3, 1e18, 1e19)
]


@pytest.mark.parametrize("thr", [*THRESHOLDS, np.float32(np.inf)], ids=repr)
def test_clique_geometry_follows_the_float32_rule(thr: np.float32) -> None:
    """A cell's widest pair (m per axis, m above h(1 + 2^-18)) satisfies S < T; the reach D is
    the smallest float32 whose square rounds to T or more."""
    side, reach = clique_geometry(thr)
    m = np.nextafter(np.float32(side * (1 + 2.0**-18)), np.float32(np.inf))
    with np.errstate(over="ignore"):
        assert (m * m + m * m) + m * m < thr
        d = np.float32(reach)
        below = np.nextafter(d, np.float32(0))
        assert below * below < thr <= d * d
    assert 1.0 <= reach / side < 2.3


def test_ulp_ties_really_tie() -> None:
    """The tie clouds hold pairs exactly at T and one ulp either side, so the rule is exercised."""
    points, d_th = _ulp_ties(3, 0.5)
    m = len(points) // 2
    sq = pair_sq(points, np.arange(m), np.arange(m) + m)
    thr = threshold_sq(d_th)
    assert np.any(sq == thr)
    assert np.any(sq < thr) and np.any(sq > thr)


def test_search_must_be_known() -> None:
    with pytest.raises(ValueError):
        union_find_components(np.zeros((3, 3), np.float32), 0.5, "kdtree")


def test_offsets_cover_each_cell_pair_once_and_match_cuda_table() -> None:
    offsets = {tuple(o) for o in FORWARD_OFFSETS.tolist()}
    mirrored = {tuple(-a for a in o) for o in offsets}
    stencil = {(x, y, z) for x in range(-2, 3) for y in range(-2, 3) for z in range(-2, 3)}
    assert len(FORWARD_OFFSETS) == 62 and not offsets & mirrored
    assert offsets | mirrored == stencil - {(0, 0, 0)}
    table = (KERNELS / "labelling" / "union_find.cu").read_text()
    body = table[table.index("uf_offsets[UF_NUM_OFFSETS][3] = {") :].split("};")[0]
    triples = [tuple(map(int, t)) for t in re.findall(r"\{(-?\d), (-?\d), (-?\d)\}", body)]
    assert triples == [tuple(o) for o in FORWARD_OFFSETS.tolist()]


@pytest.mark.parametrize("d_th", [1e-3, 0.05, 0.1234567, 0.3, 0.5, 1.0, 3.3, 100.0, 7.77e10, 1e18])
def test_clique_cells_hold_only_neighbours(d_th: float) -> None:
    """Opposite corners of cells (the farthest pairs a cell can hold) satisfy the float32 rule."""
    rng = np.random.default_rng(int(d_th * 1000) % 2**32)
    thr = threshold_sq(d_th)
    side = clique_cell_side(thr)
    assert side is not None
    origin = np.float32(rng.random() * 10 * d_th)
    # Two points per cell as far apart as float32 allows: the first and the last float32 values
    # of the cell along each axis, for many cells (the grid decides which cell each lands in).
    cells = rng.integers(0, 1000, size=(400, 3)).astype(np.float64)
    lo = (origin + cells * side).astype(np.float32)
    hi = (origin + (cells + 1) * side).astype(np.float32)
    for _ in range(3):  # three ulps inside the cell on each side
        lo = np.nextafter(lo, np.float32(np.inf))
        hi = np.nextafter(hi, np.float32(-np.inf))
    points = np.concatenate(([np.full(3, origin)], lo, hi)).astype(np.float32)
    grid = build_clique_grid(points, side)
    assert grid is not None
    same = grid.cell_of[1:401] == grid.cell_of[401:]
    assert same.sum() > 300  # most corner pairs did land in one cell
    sq = pair_sq(points, np.arange(1, 401)[same], np.arange(401, 801)[same])
    assert np.all(sq < thr)


@pytest.mark.parametrize(
    ("d_th", "usable"),
    [(0.5, True), (1e-15, True), (8e-16, False), (1e-20, False), (1e-30, False), (1e20, False)],
)
def test_clique_side_needs_a_finite_threshold_of_2_pow_minus_100(d_th: float, usable: bool) -> None:
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    assert (clique_cell_side(thr) is not None) == usable


def test_grid_refuses_clouds_too_wide() -> None:
    points, d_th = _wide_cloud()
    assert build_clique_grid(points, clique_cell_side(threshold_sq(d_th))) is None


def test_cpu_memory_is_bounded_on_dense_clouds() -> None:
    """100 000 identical points (5e9 neighbour pairs) in a few MB; a dense cube in O(chunk)."""
    tracemalloc.start()
    try:
        labels = union_find_components(np.full((100_000, 3), 2.0, np.float32), 0.5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(np.unique(labels)) == 1 and peak < 32 * 2**20
    points, d_th = _cube(9, 60_000, 1.0, 0.5)
    assert len(np.unique(union_find_components(points, d_th))) == 1


@pytest.mark.parametrize("frame", list(FRAMES))
def test_cpu_real_frames_match_pcl(frame: str) -> None:
    """The range search only: the CPU's exhaustive search compares all pairs, too slow here."""
    points = load_frame(frame)
    for d_th, count in FRAMES[frame][1].items():
        assert len(np.unique(union_find_components(points, d_th))) == count, d_th


# ---- GPU --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def device_id() -> int:
    """CUDA device 0, the union_find kernels compiled for it once for this module's tests."""
    from gpu_euclidean_cluster.cuda.labelling.union_find import UNION_FIND
    from gpu_euclidean_cluster.cuda.module import compile_source

    compile_source(UNION_FIND, 0)
    return 0


def gpu_components(device_id: int, points: np.ndarray, d_th: float, search: str):
    import cupy

    from gpu_euclidean_cluster.cuda.labelling.union_find import label_union_find

    with cupy.cuda.Device(device_id):
        result = label_union_find(device_id, cupy.asarray(points), d_th, search)
    got = result.components.get()
    assert got.dtype == np.int32 and got.shape == (len(points),)
    assert got.size == 0 or (got.min() >= 0 and got.max() < len(points))
    return got, result


@gpu
def test_gpu_grid_use_is_reported(device_id) -> None:
    points, d_th = _uniform(1)
    _, ran = gpu_components(device_id, points, d_th, "range")
    assert ran.dense_cells_used and ran.launches == 7 and 0 < ran.num_cells <= len(points)
    points, d_th = _wide_cloud()
    _, wide = gpu_components(device_id, points, d_th, "range")
    assert wide.grid_attempted and not wide.dense_cells_used
    points, d_th = _subnormal_threshold()
    _, sub = gpu_components(device_id, points, d_th, "range")
    assert not sub.grid_attempted and not sub.dense_cells_used
    _, es = gpu_components(device_id, *_uniform(1), "exhaustive")
    assert es.launches == 3 and not es.dense_cells_used


@gpu
@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("frame", list(FRAMES))
def test_gpu_real_frames_match_pcl_and_cpu(frame: str, search: str, device_id) -> None:
    points = load_frame(frame)
    for d_th, count in FRAMES[frame][1].items():
        got, _ = gpu_components(device_id, points, d_th, search)
        assert len(np.unique(got)) == count, d_th
        cpu = union_find_components(points, d_th)
        assert np.array_equal(canonical(got), canonical(cpu)), d_th


def _dense_cases() -> dict[str, Callable[[], tuple[np.ndarray, float]]]:
    def kitti(d_th: float) -> Callable[[], tuple[np.ndarray, float]]:
        return lambda: (load_frame("kitti_000001.bin"), d_th)

    return {
        "identical-100k": lambda: (np.full((100_000, 3), 1.5, dtype=np.float32), 0.5),
        "cube-200k-2m": lambda: _cube(21, 200_000, 2.0, 0.5),
        "kitti-5m": kitti(5.0),
        "kitti-20m": kitti(20.0),
        "kitti-100m": kitti(100.0),
    }


@gpu
@pytest.mark.parametrize("name", list(_dense_cases()))
def test_gpu_dense_clouds_match_cpu(name: str, device_id) -> None:
    points, d_th = _dense_cases()[name]()
    got, result = gpu_components(device_id, points, d_th, "range")
    assert result.dense_cells_used
    assert np.array_equal(canonical(got), canonical(union_find_components(points, d_th)))
