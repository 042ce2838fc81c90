"""Large uploads through page-locked staging (``cuda/staging.py``) and the backends'
``to_device`` / ``to_host`` twins.

On the CPU: the chunk planner (chunks cover the array exactly, the last one partial, empty arrays
and single rows, the slot and worker of each chunk), the host side of a staged upload (casts and
strided inputs into a slot, emulating the DMA with a byte copy), the staging's size rule, and the
clusterer's deferred float32 conversion on both twins. On a GPU (``pytest -m gpu``): the staged
upload gives byte-identical device arrays to the plain path around chunk boundaries, for
float64, strided and integer inputs, on other streams and from several threads; large arrays
come back by the plain copy, without the staging; and the whole clustering call, graph or stage
by stage, gives identical labels.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cuda.staging import (
    CHUNKS_PER_WORKER,
    MAX_WORKERS,
    MIN_CHUNK_BYTES,
    SLOT_BYTES,
    SLOTS_PER_WORKER,
    STAGING_MIN_BYTES,
    Chunk,
    PinnedStaging,
    chunk_rows,
    default_workers,
    plan_chunks,
    row_bytes_of,
    stage_chunk,
)

from ..conftest import cuda_only, twin_backend

# --- the chunk planner -------------------------------------------------------------------------


def assert_covers(plan: list[Chunk], rows: int, row_bytes: int, workers: int, slot: int) -> None:
    """``plan`` covers ``0:rows`` in order, whole equal chunks but the last, each in a slot, dealt
    round-robin with alternating slots."""
    assert [c.start for c in plan] == [0, *(c.stop for c in plan[:-1])]
    assert plan[-1].stop == rows
    step = plan[0].rows
    assert all(c.rows == step for c in plan[:-1]) and 0 < plan[-1].rows <= step
    assert step * row_bytes <= slot
    for k, chunk in enumerate(plan):
        assert chunk.worker == k % workers
        assert chunk.slot == (k // workers) % SLOTS_PER_WORKER


@pytest.mark.parametrize(
    ("rows", "row_bytes", "workers", "slot"),
    [
        (2_044_556, 12, 8, SLOT_BYTES),  # 2 M points
        (8_178_224, 12, 8, SLOT_BYTES),  # 8 M points
        (8_178_224, 4, 8, SLOT_BYTES),  # their labels
        (1_000_003, 12, 3, SLOT_BYTES),
        (5000, 12, 1, 4096),
        (341 * 7 + 1, 12, 3, 4096),  # one row past a whole number of chunks
        (341 * 6, 12, 3, 4096),  # exactly six chunks
        (10, 4096, 2, 4096),  # one row fills a slot
    ],
)
def test_chunks_cover_the_array_exactly(rows, row_bytes, workers, slot):
    plan = plan_chunks(rows, row_bytes, workers, slot)
    assert_covers(plan, rows, row_bytes, workers, slot)


def test_last_chunk_is_partial():
    step = chunk_rows(100_000, 12, 2, 4096)
    assert step == 4096 // 12
    plan = plan_chunks(10 * step + 3, 12, 2, 4096)
    assert len(plan) == 11 and plan[-1] == Chunk(10 * step, 10 * step + 3, 0, 1)


def test_empty_array_and_one_row():
    assert plan_chunks(0, 12, 4) == []
    assert plan_chunks(1, 12, 4) == [Chunk(0, 1, 0, 0)]


def test_chunk_sizes_aim_at_a_few_chunks_per_worker():
    """2 M points on 8 workers: about CHUNKS_PER_WORKER chunks each; 8 M points: full slots;
    a small array: one chunk of at least MIN_CHUNK_BYTES."""
    two_m = plan_chunks(2_044_556, 12, 8)
    assert len(two_m) == 8 * CHUNKS_PER_WORKER
    assert MIN_CHUNK_BYTES <= two_m[0].rows * 12 <= SLOT_BYTES
    eight_m = plan_chunks(8_178_224, 12, 8)
    full_slot = SLOT_BYTES // 12
    assert eight_m[0].rows == full_slot and len(eight_m) == -(-8_178_224 // full_slot)
    small = plan_chunks(MIN_CHUNK_BYTES // 12, 12, 8)
    assert len(small) == 1


@pytest.mark.parametrize(
    ("rows", "row_bytes", "workers", "slot"),
    [(10, 0, 1, 4096), (10, 12, 0, 4096), (-1, 12, 1, 4096), (10, 4097, 1, 4096)],
)
def test_plans_that_cannot_be_made_say_why(rows, row_bytes, workers, slot):
    with pytest.raises(ValueError, match=r"cannot plan|does not fit a slot"):
        plan_chunks(rows, row_bytes, workers, slot)


def test_default_workers_are_bounded():
    assert 1 <= default_workers() <= MAX_WORKERS


# --- the host side of a staged upload ----------------------------------------------------------


def emulate_upload(source: np.ndarray, dtype, workers: int, slot_bytes: int) -> bytes:
    """The device's bytes after a staged upload, the DMA emulated by a byte copy from each
    worker's slot (the same slot for the same chunks as the GPU path)."""
    dtype = np.dtype(dtype)
    row_bytes = row_bytes_of(source.shape, dtype)
    device = bytearray(source.shape[0] * row_bytes)
    slots = np.zeros((workers, SLOTS_PER_WORKER, slot_bytes), np.uint8)
    for chunk in plan_chunks(source.shape[0], row_bytes, workers, slot_bytes):
        staged = stage_chunk(slots[chunk.worker, chunk.slot], source, chunk, dtype)
        assert staged.flags.c_contiguous and staged.dtype == dtype
        assert np.shares_memory(staged, slots[chunk.worker, chunk.slot])
        offset = chunk.start * row_bytes
        device[offset : offset + staged.nbytes] = staged.tobytes()
    return bytes(device)


def host_inputs(rows: int) -> dict[str, np.ndarray]:
    """Points as users pass them: float32, float64, strided columns of wider records, a reversed
    view, Fortran order, integers."""
    rng = np.random.default_rng(rows)
    wide = rng.normal(0, 50, (rows, 4))
    return {
        "float32": wide[:, :3].astype(np.float32),
        "float64": np.ascontiguousarray(wide[:, :3]),
        "strided": wide.astype(np.float32)[:, :3],
        "reversed": wide[::-1, 1:],
        "fortran": np.asfortranarray(wide[:, :3]),
        "int16": (wide[:, :3] * 100).astype(np.int16),
    }


@pytest.mark.parametrize("rows", [0, 1, 340, 341, 342, 341 * 6, 341 * 6 + 1, 5000])
def test_staged_upload_bytes_equal_a_plain_conversion(rows):
    for name, source in host_inputs(rows).items():
        want = np.ascontiguousarray(source, dtype=np.float32).tobytes()
        assert emulate_upload(source, np.float32, 3, 4096) == want, name
    keep = host_inputs(rows)["float64"]
    assert emulate_upload(keep, keep.dtype, 2, 4096) == keep.tobytes()


def test_cast_beyond_float32_is_inf_without_a_warning():
    source = np.array([[3e38, -1e39, 1.0], [1e300, 2.0, -np.inf], [np.nan, 0.5, 7.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = np.frombuffer(emulate_upload(source, np.float32, 1, 4096), np.float32)
    with np.errstate(over="ignore"):
        want = np.ascontiguousarray(source, dtype=np.float32)
    assert got.tobytes() == want.tobytes()
    assert np.isinf(got[[1, 3, 5]]).all()


# --- the size rule -----------------------------------------------------------------------------


def test_only_large_numeric_arrays_are_staged():
    staging = PinnedStaging(0, workers=2)  # nothing is allocated before the first staged copy
    rows = -(-STAGING_MIN_BYTES // 12)  # the fewest rows of float32 points that reach it
    assert staging.applies(np.zeros((rows, 3), np.float32))
    assert not staging.applies(np.zeros((rows - 1, 3), np.float32))
    # counted as the device holds it: float64 halves on the way
    assert not staging.applies(np.zeros((rows - 1, 3), np.float64), np.float32)
    assert staging.applies(np.zeros((rows - 1, 3), np.float64))
    assert staging.applies(np.zeros(STAGING_MIN_BYTES, bool))
    assert not staging.applies(np.zeros((), np.float64))
    assert not staging.applies(np.zeros((0, 3), np.float32))
    assert not staging.applies(np.zeros((4, SLOT_BYTES + 1), np.uint8))  # a row over a slot
    assert not staging.applies(np.empty(STAGING_MIN_BYTES, object))
    assert staging.pinned_bytes == 0


# --- the twins' transfers and the clusterer's conversion ---------------------------------------


def test_cpu_twin_converts_on_the_way_and_returns_host_arrays_as_they_are():
    cpu = CpuBackend()
    for name, source in host_inputs(500).items():
        got = cpu.to_device(source, np.float32)
        assert got.flags.c_contiguous and got.dtype == np.float32, name
        assert got.tobytes() == np.ascontiguousarray(source, dtype=np.float32).tobytes(), name
    mask = np.ones(5, bool)
    assert cpu.to_device(mask) is mask
    labels = np.arange(5, dtype=np.int32)
    assert cpu.to_host(labels) is labels
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isinf(cpu.to_device(np.array([[1e300, 0, 0]]), np.float32)[0, 0])


def test_any_real_input_clusters_as_its_float32_copy(backend):
    """The clusterer hands the backend the points as given; the labels equal those of the
    C-contiguous float32 copy, graph and stage by stage."""
    twin = twin_backend(backend)
    rng = np.random.default_rng(11)
    centres = rng.uniform(-20, 20, (30, 3))
    blobs = centres[rng.integers(30, size=3000)] + rng.normal(0, 0.4, (3000, 3))
    wide = np.hstack([blobs, rng.normal(size=(3000, 1))])  # x, y, z, intensity
    wide[5, 0] = 1e300  # beyond float32: inf, in no cluster
    config = ClusterConfig(d_th=0.5, min_cluster_size=2)
    with np.errstate(over="ignore"):
        narrow = wide.astype(np.float32)
    want = EuclideanClusterer(config, "cpu").cluster(np.ascontiguousarray(narrow[:, :3])).labels
    assert want[5] == -1
    sources = (wide[:, :3], narrow[:, :3], np.asfortranarray(wide[:, :3]))
    for whole_call in (True, False):
        clusterer = EuclideanClusterer(config, twin, whole_call=whole_call)
        for source in sources:
            labels = clusterer.cluster(source).labels
            assert isinstance(labels, np.ndarray)
            np.testing.assert_array_equal(labels, want)


# --- on the GPU --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


def small_staging(workers: int = 3) -> PinnedStaging:
    """Slots of 4 KiB and no size threshold: small arrays cross many chunk boundaries."""
    return PinnedStaging(0, workers=workers, slot_bytes=4096, min_bytes=0)


#: Rows around the chunk boundaries of :func:`small_staging` (341 rows of 12 bytes a chunk).
BOUNDARY_ROWS = [1, 340, 341, 342, 341 * 3, 341 * 3 + 1, 341 * 6 - 1, 341 * 6, 341 * 6 + 1, 20011]


@cuda_only
@pytest.mark.parametrize("rows", BOUNDARY_ROWS)
def test_staged_device_arrays_equal_the_plain_path(cupy, rows):
    staging = small_staging()
    for name, source in host_inputs(rows).items():
        plain = cupy.asarray(np.ascontiguousarray(source, dtype=np.float32))
        staged = staging.to_device(source, np.float32)
        assert staged.flags.c_contiguous and staged.dtype == np.float32
        assert staged.get().tobytes() == plain.get().tobytes(), name
    labels = np.random.default_rng(rows).integers(-1, 50, rows).astype(np.int32)
    assert staging.to_device(labels).get().tobytes() == labels.tobytes()
    mask = np.random.default_rng(rows).random(rows) < 0.5
    assert staging.to_device(mask).get().tobytes() == mask.tobytes()
    staging.close()


@cuda_only
def test_large_arrays_come_back_by_the_plain_copy(cupy):
    """``to_host`` of a large device array is CuPy's ``.get()``: a new NumPy array of the same
    bytes, and no page-locked ring made for it."""
    from gpu_euclidean_cluster.cuda.backend import CudaBackend

    backend = CudaBackend(0)
    rows = STAGING_MIN_BYTES // 4 + 4321
    labels = cupy.arange(rows, dtype=cupy.int32) * 7 - 3  # queued just before the copy
    got = backend.to_host(labels)
    assert isinstance(got, np.ndarray) and got.tobytes() == labels.get().tobytes()
    points = cupy.asarray(np.random.default_rng(rows).normal(size=(rows, 3)).astype(np.float32))
    assert backend.to_host(points).tobytes() == points.get().tobytes()
    assert backend.staging.pinned_bytes == 0
    host = np.arange(3, dtype=np.int32)
    assert backend.to_host(host) is host


#: A kernel that keeps one thread busy for ``cycles`` clock ticks: work still queued on a stream.
SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


@cuda_only
def test_staging_orders_with_the_callers_stream(cupy):
    """On a non-blocking stream of the caller's: the staged upload waits for the work queued
    before it (here still reading the device memory the upload lands in, freed to the pool while
    queued), and the work queued after it sees the whole upload."""
    staging = small_staging(workers=4)
    spin = cupy.RawKernel(SPIN, "spin")
    pool = cupy.get_default_memory_pool()
    source = host_inputs(20011)["float64"]
    other = -source
    with cupy.cuda.Stream(non_blocking=True):
        for _ in range(3):
            pool.free_all_blocks()  # no free block left: the next one freed is the one reused
            previous = staging.to_device(source, np.float32)
            address = previous.data.ptr
            spin((1,), (1,), (np.int64(50_000_000),))  # some 25 ms before the next line's work
            tripled = previous * 3  # reads ``previous`` once the spin is done
            del previous  # back to the pool, stream-ordered: the next upload lands there
            device = staging.to_device(other, np.float32)
            assert device.data.ptr == address, "the pool did not reuse the freed block"
            doubled = device * 2  # queued after the upload, on the caller's stream
            assert tripled.get().tobytes() == (source.astype(np.float32) * 3).tobytes()
            assert doubled.get().tobytes() == (other.astype(np.float32) * 2).tobytes()
            del tripled, device, doubled
    staging.close()


@cuda_only
def test_staging_from_several_threads(cupy):
    staging = small_staging(workers=3)
    failures: list[str] = []

    def copy_back_and_forth(seed: int) -> None:
        source = np.random.default_rng(seed).normal(size=(5000 + seed, 3))
        for _ in range(5):
            device = staging.to_device(source, np.float32)
            back = device.get()
            if back.tobytes() != source.astype(np.float32).tobytes():
                failures.append(f"thread {seed}")

    threads = [threading.Thread(target=copy_back_and_forth, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    staging.close()


def _blobs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-30, 30, (max(1, n // 200), 3))
    return centres[rng.integers(len(centres), size=n)] + rng.normal(0, 0.4, (n, 3))


@cuda_only
@pytest.mark.parametrize("rows", [341 * 6, 341 * 6 + 1, 20011])
def test_staged_clustering_gives_the_plain_labels(cupy, rows):
    """Graph and stage by stage, float64, strided and masked: a backend staging every transfer
    gives the plain backend's labels, byte for byte."""
    from gpu_euclidean_cluster.cuda.backend import CudaBackend

    staged_backend = CudaBackend(0)
    staged_backend.staging = small_staging()
    plain_backend = CudaBackend(0, stage_transfers=False)
    wide = np.hstack([_blobs(rows, rows), np.zeros((rows, 1))])
    mask = np.random.default_rng(rows).random(rows) < 0.8
    config = ClusterConfig(d_th=0.5, min_cluster_size=2)
    for whole_call in (True, False):
        for source in (wide[:, :3], wide.astype(np.float32)[:, :3]):
            for point_mask in (None, mask):
                got = EuclideanClusterer(config, staged_backend, whole_call=whole_call)
                want = EuclideanClusterer(config, plain_backend, whole_call=whole_call)
                staged = got.cluster(source, point_mask)
                plain = want.cluster(source, point_mask)
                assert isinstance(staged.labels, np.ndarray)
                assert staged.labels.tobytes() == plain.labels.tobytes()
                assert staged.cluster_sizes.tobytes() == plain.cluster_sizes.tobytes()
                timings = staged.timings_ms
                assert timings["transfer_in"] > 0 and timings["transfer_out"] > 0
                stages = sum(v for k, v in timings.items() if k != "total")
                assert timings["total"] == pytest.approx(stages)
    assert staged_backend.staging.pinned_bytes == 3 * SLOTS_PER_WORKER * 4096


@cuda_only
def test_default_backend_stages_a_cloud_over_the_threshold(cupy):
    """From STAGED_CALL_MIN_POINTS the graph call runs on the staged device copy; the labels
    equal the plain backend's (itself checked against the CPU twin by ``test_cluster_graphs.py``);
    below it the graph copies the cloud itself, no staging."""
    from gpu_euclidean_cluster.cuda.backend import STAGED_CALL_MIN_POINTS, CudaBackend

    points = _blobs(STAGED_CALL_MIN_POINTS + 4321, 5).astype(np.float32)
    config = ClusterConfig(d_th=0.5)
    staged_backend = CudaBackend(0)
    staged = EuclideanClusterer(config, staged_backend).cluster(points)
    assert staged_backend.staging.pinned_bytes > 0
    plain = EuclideanClusterer(config, CudaBackend(0, stage_transfers=False)).cluster(points)
    assert staged.labels.tobytes() == plain.labels.tobytes()
    assert staged.cluster_sizes.tobytes() == plain.cluster_sizes.tobytes()
    small_backend = CudaBackend(0)
    EuclideanClusterer(config, small_backend).cluster(points[: STAGED_CALL_MIN_POINTS - 1])
    assert small_backend.staging.pinned_bytes == 0
