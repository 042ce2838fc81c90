"""The GPU numbering stage (``cuda/labelling/numbering.py``) timed on a real frame's union-find
components, beside the previous implementation (commit 16ae5fd), run on a CUDA machine from the
repository root:

    python -m benchmarks.numbering [frame.bin] [d_th]

``benchmark`` prints old against new per call; ``breakdown`` the new stage's kernels one by one.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.pointcloud_io.loader import load_points

#: No upper bound on a cluster's size.
UNLIMITED = 2**31 - 1


def _frame_points(frame: str) -> np.ndarray:
    """The (N, 3) float32 points of ``frame`` under ``$LIDAR_DATA_DIR`` (default ../shared/data)."""
    return load_points(Path(os.environ.get("LIDAR_DATA_DIR", "../shared/data")) / frame).xyz


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

    import cupy

    from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
    from gpu_euclidean_cluster.cuda.labelling.numbering import canonical_labels_gpu
    from gpu_euclidean_cluster.cuda.labelling.union_find import label_union_find

    raw = _frame_points(frame)
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
    import time

    import cupy

    from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
    from gpu_euclidean_cluster.cuda.labelling import numbering
    from gpu_euclidean_cluster.cuda.labelling.union_find import label_union_find
    from gpu_euclidean_cluster.cuda.module import CLUSTERING, THREADS, blocks, get_kernel

    raw = _frame_points(frame)
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
