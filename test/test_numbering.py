"""Canonical numbering, the size filter and what ClusterResult reports.

The numbering tests run on both twins (``backend`` fixture: ``core/numbering.py`` and the GPU
filter stage, ``cuda/numbering.py``); the GPU stage also equals the CPU rule label for label on
constructed, random and real-frame components (skipped without a CUDA device).
``python -m test.test_numbering [frame.bin] [d_th]`` times the GPU stage on a real frame's
union-find components (the previous implementation alongside).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.core.result import STAGES

from .conftest import FRAME_FIELDS, canonical_oracle_labels, cuda_only

UNLIMITED = 2**31 - 1

#: Component ids in point order (ids lie in [0, N), as backends produce them): id 0 has 3 points,
#: ids 5 and 2 tie at 2 (5 holds index 0), id 7 has 1.
COMPONENTS = np.array([5, 5, 2, 2, 7, 0, 0, 0], dtype=np.int32)


def number_on(backend: str, ids: np.ndarray, min_size: int, max_size: int):
    """The ``backend`` twin's ``(labels, sizes, count)`` of component ``ids``, labels on the host;
    the GPU stage's result types checked on the way."""
    if backend == "cpu":
        return canonical_labels(ids, min_size, max_size)
    import cupy

    from gpu_euclidean_cluster.cuda.numbering import canonical_labels_gpu

    with cupy.cuda.Device(0):
        labels, sizes, count = canonical_labels_gpu(0, cupy.asarray(ids), min_size, max_size)
    assert isinstance(sizes, np.ndarray) and sizes.dtype == np.int64
    assert labels.dtype == np.int32 and labels.shape == ids.shape
    return labels.get(), sizes, count


def _check(ids: np.ndarray, min_size: int = 1, max_size: int = UNLIMITED) -> None:
    """The GPU stage's numbering of ``ids`` is the CPU rule's."""
    ids = np.asarray(ids)
    labels, sizes, count = number_on("cuda", ids, min_size, max_size)
    want_labels, want_sizes, want_count = canonical_labels(ids, min_size, max_size)
    assert count == want_count
    np.testing.assert_array_equal(sizes, want_sizes)
    np.testing.assert_array_equal(labels, want_labels)


@pytest.mark.parametrize(
    ("min_size", "max_size", "labels", "sizes"),
    [
        (1, UNLIMITED, [1, 1, 2, 2, 3, 0, 0, 0], [3, 2, 2, 1]),
        (2, UNLIMITED, [1, 1, 2, 2, -1, 0, 0, 0], [3, 2, 2]),
        (1, 2, [0, 0, 1, 1, 2, -1, -1, -1], [2, 2, 1]),
        (2, 2, [0, 0, 1, 1, -1, -1, -1, -1], [2, 2]),
        (4, UNLIMITED, [-1] * 8, []),
    ],
)
def test_canonical_numbering_and_filter(backend, min_size, max_size, labels, sizes):
    got, got_sizes, components = number_on(backend, COMPONENTS, min_size, max_size)
    np.testing.assert_array_equal(got, labels)
    np.testing.assert_array_equal(got_sizes, sizes)
    assert got.dtype == np.int32
    assert got_sizes.dtype == np.int64
    assert components == 4


def test_ties_go_to_the_smallest_point_index(backend):
    # Four clusters of two points; their smallest indices are 0, 1, 2, 3 for ids 6, 1, 4, 3.
    ids = np.array([6, 1, 4, 3, 1, 6, 3, 4])
    labels, sizes, _ = number_on(backend, ids, 1, UNLIMITED)
    np.testing.assert_array_equal(labels, [0, 1, 2, 3, 1, 0, 3, 2])
    np.testing.assert_array_equal(sizes, [2, 2, 2, 2])


def test_empty_input(backend):
    labels, sizes, components = number_on(backend, np.empty(0, dtype=np.int32), 1, UNLIMITED)
    assert labels.shape == (0,) and labels.dtype == np.int32
    assert sizes.shape == (0,) and sizes.dtype == np.int64 and components == 0


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("min_size", "max_size"), [(1, UNLIMITED), (3, UNLIMITED), (1, 6), (2, 9)])
def test_random_components_match_the_documented_rule(backend, seed, min_size, max_size):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 120, 600) * 5  # arbitrary, sparse ids in [0, N)
    labels, sizes, components = number_on(backend, ids, min_size, max_size)
    np.testing.assert_array_equal(labels, canonical_oracle_labels(ids, min_size, max_size))
    assert components == len(np.unique(ids))
    np.testing.assert_array_equal(np.bincount(labels[labels >= 0], minlength=len(sizes)), sizes)
    assert np.all(np.diff(sizes) <= 0)
    assert np.all((sizes >= min_size) & (sizes <= max_size))


def _cloud_with_cluster_sizes(sizes: list[int]) -> np.ndarray:
    """Clusters of the given sizes, 10 m apart, points 0.1 m apart along x, shuffled."""
    parts = [
        np.column_stack((np.arange(n) * 0.1, np.full(n, 10.0 * k), np.zeros(n)))
        for k, n in enumerate(sizes)
    ]
    return np.random.default_rng(0).permutation(np.concatenate(parts)).astype(np.float32)


@pytest.mark.parametrize(
    ("min_size", "max_size", "kept"),
    [(1, UNLIMITED, [7, 5, 3, 3, 1]), (3, UNLIMITED, [7, 5, 3, 3]), (2, 5, [5, 3, 3]), (6, 6, [])],
)
def test_clusterer_size_filter(backend, min_size, max_size, kept):
    points = _cloud_with_cluster_sizes([3, 7, 1, 5, 3])
    config = ClusterConfig(d_th=0.15, min_cluster_size=min_size, max_cluster_size=max_size)
    result = EuclideanClusterer(config, backend=backend).cluster(points)
    np.testing.assert_array_equal(result.cluster_sizes, kept)
    assert result.num_clusters == len(kept)
    assert result.num_components == 5
    labels = result.labels
    np.testing.assert_array_equal(np.bincount(labels[labels >= 0], minlength=len(kept)), kept)
    assert int((labels == -1).sum()) == len(points) - sum(kept)
    assert set(np.unique(labels[labels >= 0])) == set(range(len(kept)))


def test_result_summary_is_json_ready():
    points = _cloud_with_cluster_sizes([4, 2])
    result = EuclideanClusterer(ClusterConfig(d_th=0.15, method="edge"), backend="cpu").cluster(
        points
    )
    summary = result.summary()
    assert set(summary) == {
        "points",
        "clusters",
        "components",
        "method",
        "search",
        "backend",
        "device",
        "iterations",
        "num_edges",
        "num_labels_after_initial",
        "peak_bytes",
        "cluster_sizes",
        "timings_ms",
    }
    assert summary["points"] == 6
    assert summary["clusters"] == 2
    assert summary["cluster_sizes"] == [4, 2]
    assert summary["method"] == "edge" and summary["backend"] == "cpu"
    assert summary["num_edges"] == 4
    assert set(summary["timings_ms"]) == {*STAGES, "total"}
    assert json.loads(json.dumps(summary)) == summary


def test_timings_cover_every_stage():
    result = EuclideanClusterer(ClusterConfig(d_th=0.15), backend="cpu").cluster(
        _cloud_with_cluster_sizes([5])
    )
    assert set(result.timings_ms) == {*STAGES, "total"}
    assert all(value >= 0 for value in result.timings_ms.values())
    assert result.timings_ms["total"] == pytest.approx(sum(result.timings_ms[s] for s in STAGES))


# ---- CUDA only: the GPU filter stage against the CPU rule, label for label ---------------------


def _roots(ids: np.ndarray) -> np.ndarray:
    """Relabel each component by its smallest member (the union-find / vertex / edge ids)."""
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)].astype(np.int32)


def _sized(sizes: list[int], rng: np.random.Generator) -> np.ndarray:
    """Components of the given sizes, points shuffled, ids arbitrary in [0, N)."""
    n = int(sum(sizes))
    names = rng.permutation(n)[: len(sizes)]
    return rng.permutation(np.repeat(names, sizes)).astype(np.int32)


def _cases() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    cases: dict[str, np.ndarray] = {}
    cases["one_point"] = np.zeros(1, dtype=np.int32)
    cases["two_singletons"] = np.array([1, 0], dtype=np.int32)
    cases["many_small"] = rng.integers(0, 3000, 9000).astype(np.int32)
    cases["many_small_roots"] = _roots(rng.integers(0, 3000, 9000))
    giant = np.zeros(120_000, dtype=np.int32)
    tail = rng.choice(120_000, 4000, replace=False)
    giant[tail] = rng.integers(0, 120_000, 4000)
    cases["one_giant"] = giant
    cases["one_giant_roots"] = _roots(giant)
    cases["all_one"] = np.full(5000, 4999, dtype=np.int32)
    cases["singletons_fit"] = rng.permutation(5000).astype(np.int32)
    cases["singletons_large"] = rng.permutation(120_000).astype(np.int32)  # K > one block's sort
    cases["ties_pairs"] = _sized([2] * 3000, rng)
    cases["k_8192"] = _sized([3] * 100 + [1] * 8092, rng)
    cases["k_8193"] = _sized([3] * 100 + [1] * 8093, rng)
    cases["k_8193_roots"] = _roots(_sized([5] * 93 + [2] * 8000 + [1] * 100, rng))
    cases["many_distinct_sizes"] = _sized(list(range(1, 300)) * 2, rng)
    cases["scan_order"] = np.repeat(np.arange(0, 40_000, 40), 40).astype(np.int32)
    cases["mixed_large"] = rng.integers(0, 60_000, 300_000).astype(np.int32)
    # Id -1: in no component (the voxel_grid algorithm's dropped and thinned points).
    minus = rng.integers(0, 3000, 9000).astype(np.int32)
    minus[rng.random(9000) < 0.3] = -1
    cases["minus_one"] = minus
    cases["minus_one_first"] = np.array([-1, 3, 3, -1, 0, 3], dtype=np.int32)
    cases["all_minus_one"] = np.full(700, -1, dtype=np.int32)
    large = rng.permutation(120_000).astype(np.int32)
    large[rng.random(120_000) < 0.5] = -1
    cases["minus_one_large"] = large  # K > one block's sort
    return cases


CASES = _cases()
FILTERS = [(1, UNLIMITED), (2, UNLIMITED), (3, 50), (2, 2), (10, 3), (0, 0), (-5, 10**12)]


@cuda_only
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize(("min_size", "max_size"), FILTERS)
def test_cuda_equals_cpu_rule(name, min_size, max_size):
    _check(CASES[name], min_size, max_size)


@cuda_only
@pytest.mark.parametrize("seed", range(12))
def test_random_shapes_cuda_equal_cpu(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40_000))
    spread = int(rng.integers(1, n + 1))
    ids = rng.integers(0, spread, n)
    if seed % 2:
        ids = _roots(ids)
    low = int(rng.integers(0, 5))
    _check(ids.astype(np.int32), low, int(rng.integers(low, n + 2)))


@cuda_only
def test_int64_ids_and_repeated_calls_cuda_equal_cpu():
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 700, 2000)
    _check(ids)  # int64 on the device
    for _ in range(3):
        _check(ids.astype(np.int32), 2, 9)


@cuda_only
def test_real_frame_components_cuda_equal_cpu(load_frame):
    import cupy

    from gpu_euclidean_cluster.cuda.union_find import label_union_find

    points = cupy.asarray(load_frame("kitti_000001.bin"))
    for d_th in (0.3, 0.5, 1.0):
        ids = label_union_find(0, points, d_th, "range").components.get()
        for min_size, max_size in ((1, UNLIMITED), (10, 5000)):
            _check(ids, min_size, max_size)


# --- micro-benchmark (not a test) ---------------------------------------------------------------

_LEGACY_SOURCE = r"""
extern "C" __global__ void component_stats(const int* ids, int n, int* counts, int* first) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int c = ids[i];
    atomicAdd(&counts[c], 1);
    atomicMin(&first[c], i);
}
extern "C" __global__ void component_keys(const long long* present, int k, const int* counts,
                                          const int* first, int n, long long* keys) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= k) return;
    const long long c = present[t];
    keys[t] = ((long long)(n - counts[c]) << 32) | (long long)first[c];
}
extern "C" __global__ void assign_ranks(const long long* present, const long long* order, int lo,
                                        int kept, int* rank) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < kept) rank[present[order[lo + t]]] = t;
}
"""


def _legacy(module, ids, min_size, max_size):
    """The previous implementation (commit 16ae5fd), for the old-vs-new timing."""
    import cupy

    from gpu_euclidean_cluster.cuda.module import THREADS, blocks

    n = int(ids.shape[0])
    counts = cupy.zeros(n, dtype=cupy.int32)
    first = cupy.full(n, n, dtype=cupy.int32)
    module.get_function("component_stats")(blocks(n), (THREADS,), (ids, np.int32(n), counts, first))
    present = cupy.flatnonzero(counts)
    k = int(present.shape[0])
    keys = cupy.empty(k, dtype=cupy.int64)
    module.get_function("component_keys")(
        blocks(k), (THREADS,), (present, np.int32(k), counts, first, np.int32(n), keys)
    )
    order = cupy.argsort(keys)
    sizes = n - (keys[order] >> 32).get()
    lo = int(np.count_nonzero(sizes > max_size))
    hi = int(np.count_nonzero(sizes >= min_size))
    kept = max(hi - lo, 0)
    rank = cupy.full(n, -1, dtype=cupy.int32)
    module.get_function("assign_ranks")(
        blocks(kept), (THREADS,), (present, order, np.int32(lo), np.int32(kept), rank)
    )
    return rank[ids], sizes[lo : lo + kept].astype(np.int64), k


def _time(fn, reps: int) -> tuple[float, float]:
    """Median wall ms (host to results, synchronised) and median device ms (CUDA events)."""
    import time

    import cupy

    stream = cupy.cuda.get_current_stream()
    for _ in range(10):
        fn()
    stream.synchronize()
    wall, device = [], []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        stream.synchronize()
        t0 = time.perf_counter()
        start.record(stream)
        fn()
        stop.record(stream)
        stop.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        device.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(wall)), float(np.median(device))


def benchmark(frame: str = "kitti_000001.bin", d_th: float = 0.5, reps: int = 200) -> None:
    """Print old and new filter-stage timings on ``frame``'s union-find components."""
    import os
    from pathlib import Path

    import cupy

    from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
    from gpu_euclidean_cluster.cuda.numbering import canonical_labels_gpu
    from gpu_euclidean_cluster.cuda.union_find import label_union_find

    path = Path(os.environ.get("LIDAR_DATA_DIR", "../shared/data")) / frame
    raw = np.fromfile(path, dtype=np.float32).reshape(-1, FRAME_FIELDS[frame])[:, :3]
    points = cupy.asarray(np.ascontiguousarray(raw))
    ids = label_union_find(0, points, d_th, "range").components
    legacy = cupy.RawModule(code=_LEGACY_SOURCE)
    for min_size, max_size in ((1, UNLIMITED), (10, 5000)):
        new = canonical_labels_gpu(0, ids, min_size, max_size)
        old = _legacy(legacy, ids, min_size, max_size)
        ref = canonical_labels(ids.get(), min_size, max_size)
        same = (
            np.array_equal(new[0].get(), ref[0])
            and np.array_equal(new[1], ref[1])
            and new[2] == ref[2]
            and np.array_equal(old[0].get(), ref[0])
        )
        t_new = _time(lambda m=min_size, x=max_size: canonical_labels_gpu(0, ids, m, x), reps)
        t_old = _time(lambda m=min_size, x=max_size: _legacy(legacy, ids, m, x), reps)
        print(
            f"{frame} d_th={d_th} N={ids.shape[0]} K={new[2]} filter=[{min_size},{max_size}] "
            f"equal={same}: old {t_old[0]:.3f} ms wall ({t_old[1]:.3f} events), "
            f"new {t_new[0]:.3f} ms wall ({t_new[1]:.3f} events)"
        )
    clusterer = EuclideanClusterer(ClusterConfig(d_th=d_th), backend="cuda")
    host = np.ascontiguousarray(raw)
    stages = [clusterer.cluster(host).timings_ms for _ in range(reps // 2 + 10)][10:]
    print(
        "EuclideanClusterer median ms: "
        + ", ".join(f"{k}={np.median([s[k] for s in stages]):.3f}" for k in stages[0])
    )
    singles = cupy.asarray(np.random.default_rng(0).permutation(ids.shape[0]).astype(np.int32))
    t_new = _time(lambda: canonical_labels_gpu(0, singles, 1, UNLIMITED), reps // 4)
    t_old = _time(lambda: _legacy(legacy, singles, 1, UNLIMITED), reps // 4)
    print(f"all singletons N={ids.shape[0]}: old {t_old[0]:.3f} ms, new {t_new[0]:.3f} ms wall")


def breakdown(frame: str = "kitti_000001.bin", d_th: float = 0.5, reps: int = 200) -> None:
    """Where the clusterer's filter stage goes: number_clusters inside it, the scatter after it,
    and the device time of the two kernels (launched back to back, no host synchronisation)."""
    import os
    import time
    from pathlib import Path

    import cupy

    from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
    from gpu_euclidean_cluster.cuda import numbering
    from gpu_euclidean_cluster.cuda.module import CLUSTERING, THREADS, blocks, get_kernel
    from gpu_euclidean_cluster.cuda.union_find import label_union_find

    path = Path(os.environ.get("LIDAR_DATA_DIR", "../shared/data")) / frame
    raw = np.fromfile(path, dtype=np.float32).reshape(-1, FRAME_FIELDS[frame])[:, :3]
    host = np.ascontiguousarray(raw)
    clusterer = EuclideanClusterer(ClusterConfig(d_th=d_th), backend="cuda")
    backend = clusterer.backend
    original = backend.number_clusters
    inner: list[float] = []

    def timed(components, low, high):
        backend.synchronize()
        t0 = time.perf_counter()
        result = original(components, low, high)
        backend.synchronize()
        inner.append((time.perf_counter() - t0) * 1e3)
        return result

    backend.number_clusters = timed
    stages = [clusterer.cluster(host).timings_ms["filter"] for _ in range(reps)][20:]
    print(
        f"clusterer filter stage median {np.median(stages):.3f} ms, "
        f"number_clusters inside it {np.median(inner[20:]):.3f} ms"
    )
    n = host.shape[0]
    ids = label_union_find(0, cupy.asarray(host), d_th, "range").components
    valid_index = cupy.arange(n, dtype=cupy.int64)
    labels = numbering.canonical_labels_gpu(0, ids, 1, UNLIMITED)[0]

    def scatter():
        full = cupy.full(n, -1, dtype=cupy.int32)
        full[valid_index] = labels

    print(f"clusterer's full + scatter: {_time(scatter, reps)[0]:.3f} ms wall")
    stats = get_kernel(CLUSTERING, "numbering_stats", 0)
    gather = get_kernel(CLUSTERING, "numbering_gather", 0)
    stream = cupy.cuda.get_current_stream()
    work = cupy.empty(3 * n + 4096, dtype=cupy.uint64)
    out = cupy.empty(n, dtype=cupy.int32)
    cap = min(numbering.sort_capacity(0), 1 << (n - 1).bit_length())
    args = (ids, np.int32(n), work, np.int32(cap), np.int32(1), np.int32(UNLIMITED))

    def launches(count: int) -> float:
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        for _ in range(count):
            cupy.cuda.runtime.memsetAsync(work.data.ptr, 0, 8 * (1 + n), stream.ptr)
            stats(((n + 1023) // 1024,), (1024,), args, shared_mem=8 * cap)
            gather(blocks(n), (THREADS,), (ids, np.int32(n), work, out))
        stop.record(stream)
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / count

    launches(20)
    print(f"memset + stats + gather back to back: {launches(500):.4f} ms per call")
    # device time alone: queue behind a long kernel so the host is never the bottleneck
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    cupy.cuda.Stream.null.synchronize()
    cupy.cuda.runtime.deviceSynchronize()
    _sleep = cupy.RawKernel(
        r"""extern "C" __global__ void spin(long long t) {
            long long s = clock64(); while (clock64() - s < t) {} }""",
        "spin",
    )
    _sleep((1,), (1,), (np.int64(200_000_000),))
    start.record(stream)
    for _ in range(100):
        cupy.cuda.runtime.memsetAsync(work.data.ptr, 0, 8 * (1 + n), stream.ptr)
        stats(((n + 1023) // 1024,), (1024,), args, shared_mem=8 * cap)
        gather(blocks(n), (THREADS,), (ids, np.int32(n), work, out))
    stop.record(stream)
    stop.synchronize()
    print(f"device time per call (queued): {cupy.cuda.get_elapsed_time(start, stop) / 100:.4f} ms")


if __name__ == "__main__":
    import sys

    frame_args = (*(sys.argv[1:2] or ["kitti_000001.bin"]), *(float(a) for a in sys.argv[2:3]))
    benchmark(*frame_args)
    breakdown(*frame_args)
