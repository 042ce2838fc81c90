"""A whole frame as one CUDA graph (``cuda/graphs/frame_graphs.py``,
``cuda/kernels/codecs/pc2_sort.cu``).

CPU tests model the table's radix sort (``cuda/codecs/frame_steps.py``) and the graph's bounds the
kernels' way in NumPy (tile counts, digit-major offsets, ranks by warp then lane; the chunked scan
of the thread offsets) and hold them to NumPy's sort of the keys and to the host's prefix sums (the
staged codec's bounds). GPU tests (marked ``gpu``, skipped without CUDA) hold the frame graph to the
CPU pipeline byte for byte on every odd layout and setting, on clouds of different sizes replaying
one graph, and check that a frame the graph cannot finish runs staged with the same output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gpu_euclidean_cluster.core.cluster_stats import SUM_LEAF
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.cuda.codecs.frame_steps import RADIX_BITS, SORT_TILE, cluster_threads
from gpu_euclidean_cluster.frame import FramePipeline
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

from ..conftest import requires_cuda
from .test_frame_pipeline import (
    LAYOUT_NAMES,
    SETTINGS,
    assert_same_output,
    base_points,
    layout_cloud,
    padded_rows,
    run,
    xyzi_cloud,
)

DIGITS = 1 << RADIX_BITS
SCAN_THREADS = 1024  # pc2_scan_counts and pc2_table_offsets run as one block of 1024


# ---------------------------------------------------------------------------------------------
# NumPy models of pc2_sort.cu


def block_scan_chunks(values: np.ndarray) -> np.ndarray:
    """pc2_table_offsets' scan: chunks of one block, each an exclusive block scan plus the sum
    of the chunks before it; one more entry (the total) at the end."""
    out = np.empty(len(values) + 1, dtype=np.int64)
    base = 0
    for first in range(0, len(values) + 1, SCAN_THREADS):
        chunk = np.zeros(SCAN_THREADS, dtype=np.int64)
        part = values[first : first + SCAN_THREADS]
        chunk[: len(part)] = part
        before = np.cumsum(chunk) - chunk
        take = min(SCAN_THREADS, len(values) + 1 - first)
        out[first : first + take] = base + before[:take]
        base += int(chunk.sum())
    return out


def radix_pass(keys: np.ndarray, n: int, size: int, shift: int) -> np.ndarray:
    """One pass the kernels' way: per tile digit counts, their exclusive scan digit-major, each
    live key to its digit's offset for its tile + the warp prefix + its rank in its warp."""
    tiles = -(-size // SORT_TILE)
    digits = ((keys[:n] >> np.uint64(shift)) & np.uint64(DIGITS - 1)).astype(np.int64)
    counts = np.zeros((DIGITS, tiles), dtype=np.int64)
    np.add.at(counts, (digits, np.arange(n) // SORT_TILE), 1)
    flat = counts.reshape(-1)
    offsets = (np.cumsum(flat) - flat).reshape(DIGITS, tiles)
    out = np.zeros(size, dtype=np.uint64)
    for tile in range(tiles):
        live = digits[tile * SORT_TILE : (tile + 1) * SORT_TILE]
        warps = -(-len(live) // 32)
        per_warp = np.zeros((max(warps, 1), DIGITS), dtype=np.int64)
        for warp in range(warps):
            np.add.at(per_warp[warp], live[warp * 32 : (warp + 1) * 32], 1)
        before = np.cumsum(per_warp, axis=0) - per_warp
        for k, digit in enumerate(live):
            warp, lane = divmod(k, 32)
            rank = int(np.count_nonzero(live[warp * 32 : warp * 32 + lane] == digit))
            position = offsets[digit, tile] + before[warp, digit] + rank
            out[position] = keys[tile * SORT_TILE + k]
    return out


def radix_sort_model(keys: np.ndarray, n: int, size: int, max_label: int) -> np.ndarray:
    """The passes over the label bits (``frame_steps.sort_steps``)."""
    passes = max(1, -(-(max_label + 1).bit_length() // RADIX_BITS))
    for p in range(passes):
        keys = radix_pass(keys, n, size, 32 + RADIX_BITS * p)
    return keys[:n]


def bounds_model(sorted_keys: np.ndarray) -> tuple[np.ndarray, int]:
    """pc2_table_bounds: starts (K + 1) and K from the sorted keys."""
    labels = (sorted_keys >> np.uint64(32)).astype(np.int64)
    n = len(labels)
    k = int(labels[-1])
    starts = np.full(k + 1, -1, dtype=np.int64)
    for p in range(n):
        previous = labels[p - 1] if p else 0
        starts[previous : labels[p]] = p
    starts[k] = n
    return starts, k


def keys_of(labels: np.ndarray) -> np.ndarray:
    """pc2_encode's sort keys."""
    index = np.arange(len(labels), dtype=np.uint64)
    return ((labels.astype(np.int64) + 1).astype(np.uint64) << np.uint64(32)) | index


def random_labels(rng: np.random.Generator, n: int, sizes: list[int]) -> np.ndarray:
    labels = np.full(n, -1, dtype=np.int32)
    chosen = rng.permutation(n)[: sum(sizes)]
    labels[chosen] = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    return labels


CASES = {
    # name: (n, bucket, sizes)
    "few_large": (5000, 5120, [2000, 1500, 700, 3]),
    "many_small_three_passes": (70000, 73728, [1] * 66000),
    "all_unlabelled": (3000, 3072, []),
    "all_labelled_one_point_per_tile_edge": (2049, 2304, [1024, 1024, 1]),
    "size_filter_bound": (40000, 40960, [10] * 3000 + [5000]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_radix_model_sorts_like_the_staged_sort(case):
    """The passes give a sort of the full keys: by label, then index (stable)."""
    n, size, sizes = CASES[case]
    labels = random_labels(np.random.default_rng(len(sizes)), n, sizes)
    keys = np.zeros(size, dtype=np.uint64)
    keys[:n] = keys_of(labels)
    max_label = size  # the graph's bound with min_cluster_size <= 1
    got = radix_sort_model(keys, n, size, max_label)
    assert got.tobytes() == np.sort(keys[:n]).tobytes()


def test_one_radix_pass_is_not_enough_for_labels_above_its_digits():
    """The pass count matters: a single pass orders labels 256 apart as equal (a failing
    model would show the test above cannot pass by accident)."""
    labels = np.array([256, 0, 256, 0], dtype=np.int32)  # keys' labels 257 and 1: digit 1 both
    keys = keys_of(labels)
    one_pass = radix_pass(keys, 4, 4, 32)[:4]
    assert one_pass.tobytes() != np.sort(keys).tobytes()
    assert radix_sort_model(keys, 4, 4, 300).tobytes() == np.sort(keys).tobytes()


@pytest.mark.parametrize("case", list(CASES))
def test_bounds_and_offsets_equal_the_hosts_prefix_sums(case):
    """pc2_table_bounds and pc2_table_offsets give what the staged codec computes on the host:
    starts = unlabelled count + cumulative sizes, offsets = cumulative threads per cluster."""
    n, _, sizes = CASES[case]
    labels = random_labels(np.random.default_rng(3), n, sizes)
    starts, k = bounds_model(np.sort(keys_of(labels)))
    assert k == len(sizes)
    expected = np.concatenate([[n - sum(sizes)], n - sum(sizes) + np.cumsum(sizes)])
    assert np.array_equal(starts, expected.astype(np.int64))
    threads = ((np.diff(starts) + SUM_LEAF - 1) // SUM_LEAF).astype(np.int64)
    assert np.array_equal(threads, cluster_threads(np.array(sizes, dtype=np.int64)))
    offsets = block_scan_chunks(threads)
    assert np.array_equal(offsets, np.concatenate([[0], np.cumsum(threads)]))


# ---------------------------------------------------------------------------------------------
# GPU tests


def sort_capacity(device_id: int) -> int:
    from gpu_euclidean_cluster.cuda.labelling.numbering import sort_capacity as capacity

    return capacity(device_id)


@pytest.fixture(scope="module")
def base(load_frame: Callable[[str], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return base_points(load_frame)


@pytest.fixture(scope="module")
def graph_pipeline() -> FramePipeline:
    return FramePipeline("cuda")


def whole_run(pipeline: FramePipeline, cloud: Any, settings: NodeSettings) -> Any:
    """``run`` on ``pipeline``, returning the output and the frame graph's call (None: staged)."""
    frame_graphs = pipeline._codec.frame_graphs
    frame_graphs.last_call = None
    output = run(pipeline, cloud, settings)
    return output, frame_graphs.last_call


@pytest.mark.parametrize("key", ["default", "window", "window_flat", "implausible", "no_limit"])
@pytest.mark.parametrize("name", LAYOUT_NAMES)
@pytest.mark.gpu
@requires_cuda
def test_whole_frames_match_the_cpu_pipeline(graph_pipeline, base, name, key):
    cloud = layout_cloud(base, name)
    settings = SETTINGS[key]
    got, call = whole_run(graph_pipeline, cloud, settings)
    if call is None:  # integer centimetres: more clusters than the numbering's block ranks
        assert len(got.result.cluster_sizes) > sort_capacity(0)
    else:
        assert call.points == cloud.num_points and call.host_syncs == 1
    assert got.fallback_reason is None
    assert_same_output(got, run(FramePipeline("cpu"), cloud, settings))


@pytest.mark.gpu
@requires_cuda
def test_the_compact_layout_runs_whole_too(graph_pipeline, base):
    cloud = layout_cloud(base, "unaligned_step29_big")
    settings = SETTINGS["default"]
    window, config = settings.window, settings.cluster
    graph_pipeline._codec.frame_graphs.last_call = None
    got = graph_pipeline.process(cloud, config, window, labeled_layout="compact")
    assert graph_pipeline._codec.frame_graphs.last_call is not None
    expected = FramePipeline("cpu").process(cloud, config, window, labeled_layout="compact")
    assert_same_output(got, expected)


@pytest.mark.gpu
@requires_cuda
def test_one_graph_serves_every_cloud_of_its_bucket(load_frame):
    """kitti_000001 cut to sizes of one bucket (114 689 .. 122 880 points), in a shuffled order:
    the first frame captures, the others replay, and each equals the CPU pipeline's."""
    xyz = load_frame("kitti_000001.bin")
    pipeline = FramePipeline("cuda")
    settings = NodeSettings(cluster=ClusterConfig(d_th=0.3))
    sizes = [120268, 114689, 119000, 117500, 120268]
    captured = []
    for n in sizes:
        cloud = xyzi_cloud(xyz[:n])
        got, call = whole_run(pipeline, cloud, settings)
        captured.append(call.captured)
        assert call.bucket == 122880
        assert_same_output(got, run(FramePipeline("cpu"), cloud, settings))
    assert captured == [True, False, False, False, False]


@pytest.mark.gpu
@requires_cuda
def test_a_frame_the_numbering_block_cannot_rank_runs_staged():
    """More kept clusters than the numbering's sorting block ranks: the frame graph gives up on
    the frame and the pipeline runs it staged, with the CPU pipeline's output."""
    side = 130  # 16 900 isolated points, 1 m apart
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side), [0.0]), -1).reshape(-1, 3)
    cloud = xyzi_cloud(grid.astype(np.float32))
    settings = NodeSettings(cluster=ClusterConfig(d_th=0.5, min_cluster_size=1))
    pipeline = FramePipeline("cuda")
    got, call = whole_run(pipeline, cloud, settings)
    assert call is None
    assert len(got.table) == side * side
    assert_same_output(got, run(FramePipeline("cpu"), cloud, settings))


@pytest.mark.gpu
@requires_cuda
def test_only_the_kept_clusters_need_ranking_in_the_graph():
    """16 900 single points and 50 pairs, min_cluster_size 2: more components than the sorting
    block holds, but only the 50 kept clusters are ranked, so the frame runs as a graph, with the
    CPU pipeline's output (a VLS-128 sweep's thousands of lone points are this case)."""
    side = 130
    grid = np.stack(np.meshgrid(np.arange(side), np.arange(side), [0.0]), -1).reshape(-1, 3)
    pairs = grid[:50] + np.array([0.0, 0.0, 0.2])
    cloud = xyzi_cloud(np.concatenate([grid, pairs]).astype(np.float32))
    settings = NodeSettings(cluster=ClusterConfig(d_th=0.5, min_cluster_size=2))
    got, call = whole_run(FramePipeline("cuda"), cloud, settings)
    assert got.result.num_components > sort_capacity(0) and len(got.table) == 50
    assert call is not None and call.host_syncs == 1
    assert_same_output(got, run(FramePipeline("cpu"), cloud, settings))


@pytest.mark.gpu
@requires_cuda
def test_unranked_components_stay_within_the_graphs_buffers():
    """131 072 points scattered over 500 m: most are alone, far more kept clusters than the
    numbering ranks, so the labels in the graph are not valid; the graph's
    kernels must stay within their buffers (an illegal address would end the process's CUDA
    context), the frame runs staged, and the next frames still run as graphs."""
    rng = np.random.default_rng(0)
    scattered = rng.uniform((-250.0, -250.0, -2.0), (250.0, 250.0, 2.0), (131072, 3))
    settings = SETTINGS["default"]
    pipeline = FramePipeline("cuda")
    for _ in range(3):
        got, call = whole_run(pipeline, xyzi_cloud(scattered.astype(np.float32)), settings)
        assert call is None and len(got.result.cluster_sizes) > sort_capacity(0)
    cloud = xyzi_cloud(scattered[:5000].astype(np.float32) / 100.0)
    got, call = whole_run(pipeline, cloud, settings)
    assert call is not None
    assert_same_output(got, run(FramePipeline("cpu"), cloud, settings))


@pytest.mark.gpu
@requires_cuda
def test_a_longer_payload_of_the_same_layout_grows_the_graphs_buffer(base):
    """Rows padded past the captured graph's payload buffer: the graph is captured again with
    room for them, and both frames equal the CPU pipeline's."""
    pipeline = FramePipeline("cuda")
    settings = SETTINGS["default"]
    organised = layout_cloud(base, "organised")
    padded = padded_rows(layout_cloud(base, "packed_f32"), 16, 40000)
    assert padded.fields == organised.fields and padded.row_step > 2 * organised.row_step
    for cloud in (organised, padded):
        got, call = whole_run(pipeline, cloud, settings)
        assert call is not None and call.captured
        assert_same_output(got, run(FramePipeline("cpu"), cloud, settings))


@pytest.mark.parametrize("name", LAYOUT_NAMES)
@pytest.mark.gpu
@requires_cuda
def test_records_grouped_by_cluster_in_the_graph_match_the_cpu_pipeline(graph_pipeline, base, name):
    """The object outputs' records: gathered in the graph, in 4-byte units or bytes as the
    layout allows, equal to the CPU pipeline's grouping."""
    cloud = layout_cloud(base, name)
    settings = SETTINGS["window"]
    window, config = settings.window, settings.cluster
    frame_graphs = graph_pipeline._codec.frame_graphs
    frame_graphs.last_call = None
    got = graph_pipeline.process(cloud, config, window, group_records=True)
    if frame_graphs.last_call is None:  # integer centimetres: too many clusters, staged
        assert len(got.result.cluster_sizes) > sort_capacity(0)
    else:
        assert frame_graphs.last_call.outside_copies == 4
    expected = FramePipeline("cpu").process(cloud, config, window, group_records=True)
    assert got.grouped is not None
    assert_same_output(got, expected)


@pytest.mark.gpu
@requires_cuda
def test_stages_and_boxes_run_staged(graph_pipeline, base):
    cloud = layout_cloud(base, "packed_f32")
    settings = SETTINGS["default"]
    frame_graphs = graph_pipeline._codec.frame_graphs
    frame_graphs.last_call = None
    got = graph_pipeline.process(cloud, settings.cluster, settings.window, oriented_boxes=True)
    assert frame_graphs.last_call is None
    expected = FramePipeline("cpu").process(
        cloud, settings.cluster, settings.window, oriented_boxes=True
    )
    assert_same_output(got, expected)
    assert got.boxes is not None and got.boxes.tobytes() == expected.boxes.tobytes()
