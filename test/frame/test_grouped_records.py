"""The frame layer's records grouped by cluster (``process(..., group_records=True)``), what
``output/objects_with_feature`` carries: the CPU twin against its definition (the records of
each cluster in input order), the GPU codec's gather model against the CPU twin, and (with CUDA)
the GPU codec itself against the CPU twin, byte for byte, on every cloud layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpu_euclidean_cluster.core.frame import group_records
from gpu_euclidean_cluster.frame import FrameOutput, FramePipeline
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz, point_bytes

from ..conftest import requires_cuda
from . import test_frame_pipeline
from .test_frame_pipeline import (
    EMPTY_CLOUDS,
    LAYOUT_NAMES,
    SETTINGS,
    ModelBackend,
    assert_same_grouping,
    assert_same_output,
    layout_cloud,
    xyzi_cloud,
)

#: the 16000-point frame with odd values of test_frame_pipeline, under its fixture name
base = test_frame_pipeline.base


def grouped_run(pipeline: FramePipeline, cloud: Any, key: str = "default") -> FrameOutput:
    settings = SETTINGS[key]
    return pipeline.process(cloud, settings.cluster, settings.window, group_records=True)


def definition(cloud: Any, output: FrameOutput) -> tuple[np.ndarray, np.ndarray]:
    """Counts and records by the definition: cluster k's records in input order, k = 0, 1, ..."""
    labels = np.asarray(output.result.labels)
    records = point_bytes(cloud)
    k = len(output.table)
    parts = [records[labels == c] for c in range(k)]
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    return counts, np.concatenate(parts) if parts else records[:0]


@pytest.mark.parametrize("name", LAYOUT_NAMES + sorted(EMPTY_CLOUDS))
def test_cpu_grouping_follows_its_definition(base, name):
    cloud = layout_cloud(base, name)
    output = grouped_run(FramePipeline("cpu"), cloud, "window")
    assert output.grouped is not None
    counts, records = definition(cloud, output)
    assert output.grouped.counts.tolist() == counts.tolist()
    assert output.grouped.counts.tolist() == np.asarray(output.result.cluster_sizes).tolist()
    assert output.grouped.records.shape == (int(counts.sum()), cloud.point_step)
    assert output.grouped.records.flags.c_contiguous
    assert output.grouped.records.tobytes() == records.tobytes()


@pytest.mark.parametrize("name", LAYOUT_NAMES + sorted(EMPTY_CLOUDS))
def test_kernel_gather_model_matches_the_cpu_twin(base, name):
    cloud = layout_cloud(base, name)
    expected = grouped_run(FramePipeline("cpu"), cloud, "window")
    got = grouped_run(FramePipeline(ModelBackend()), cloud, "window")
    assert_same_output(got, expected)


def test_grouping_only_when_asked(base):
    cloud = layout_cloud(base, "packed_f32")
    settings = SETTINGS["default"]
    plain = FramePipeline("cpu").process(cloud, settings.cluster, settings.window)
    assert plain.grouped is None
    assert grouped_run(FramePipeline("cpu"), cloud).grouped is not None


def test_group_records_checks_its_labels():
    records = np.arange(12, dtype=np.uint8).reshape(4, 3)
    grouped = group_records(records, np.array([1, -1, 0, 1]), 2)
    assert grouped.counts.tolist() == [1, 2]
    assert grouped.records.tolist() == [[6, 7, 8], [0, 1, 2], [9, 10, 11]]
    with pytest.raises(ValueError, match="labels"):
        group_records(records, np.array([0, 0, 0]), 1)
    with pytest.raises(ValueError, match="beyond"):
        group_records(records, np.array([0, 2, 0, 0]), 2)


def test_no_clusters_group_nothing():
    cloud = from_xyz(np.array([[0.0, 0.0, 0.0], [50.0, 0.0, 0.0]]))
    settings = SETTINGS["default"]
    config = settings.cluster.with_changes(min_cluster_size=3)
    output = FramePipeline("cpu").process(cloud, config, settings.window, group_records=True)
    assert output.grouped is not None and len(output.grouped.counts) == 0
    assert output.grouped.records.shape == (0, cloud.point_step)


# ---------------------------------------------------------------------------------------------
# GPU


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("copy_output", [True, False])
@pytest.mark.parametrize("name", LAYOUT_NAMES + sorted(EMPTY_CLOUDS))
def test_gpu_grouping_matches_the_cpu_twin(base, name, copy_output):
    cloud = layout_cloud(base, name)
    expected = grouped_run(FramePipeline("cpu"), cloud, "window")
    got = grouped_run(FramePipeline("cuda", copy_output=copy_output), cloud, "window")
    assert got.result.backend == "cuda" and got.fallback_reason is None
    assert_same_output(got, expected)


@pytest.mark.gpu
@requires_cuda
def test_gpu_grouping_of_a_real_frame_frame_after_frame(load_frame):
    """kitti_000001 at the node's settings (about 1700 clusters), then a smaller and a larger
    frame through the same reused buffers, then the first again."""
    xyz = load_frame("kitti_000001.bin")
    clouds = [xyzi_cloud(xyz), xyzi_cloud(xyz[:5000]), xyzi_cloud(xyz), xyzi_cloud(xyz[::2])]
    gpu, cpu = FramePipeline("cuda", copy_output=False), FramePipeline("cpu")
    for cloud in clouds:
        got, expected = grouped_run(gpu, cloud), grouped_run(cpu, cloud)
        assert got.grouped is not None and expected.grouped is not None
        assert_same_grouping(got.grouped, expected.grouped)
        plain = gpu.process(cloud, SETTINGS["default"].cluster, SETTINGS["default"].window)
        assert plain.grouped is None
