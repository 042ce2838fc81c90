"""The node's ROS-free parts: settings validation, the frame pipeline, GPU OOM fallback."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_euclidean_cluster import euclidean_cluster
from gpu_euclidean_cluster.core.config import ClusterConfig, ConfigError
from gpu_euclidean_cluster.core.memory import StructureTooLargeError
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.frame import CpuFrameCodec, clip_mask
from gpu_euclidean_cluster.cuda.matrix_memory import MatrixMemoryError
from gpu_euclidean_cluster.frame import FramePipeline, FrameWindow
from gpu_euclidean_cluster.frame.pipeline import is_out_of_memory
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (
    PointCloud2Error,
    from_structured,
    to_structured,
)
from gpu_euclidean_cluster.ros.frame_stats import FrameStats
from gpu_euclidean_cluster.ros.latest_slot import LatestSlot
from gpu_euclidean_cluster.ros.parameters import PARAMETERS
from gpu_euclidean_cluster.ros.settings import NodeSettings, settings_from_values

DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}


def _process(pipeline: FramePipeline, cloud, settings: NodeSettings):
    return pipeline.process(cloud, settings.cluster, settings.window)


def _cloud(xyz: np.ndarray):
    points = np.zeros(len(xyz), dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    for axis, name in enumerate("xyz"):
        points[name] = xyz[:, axis]
    return from_structured(points)


class _OutOfMemoryGpu(CpuBackend):
    """A 'GPU' whose labelling runs out of memory (CuPy's error: always; a structure too large:
    for every method but union_find)."""

    name = "cuda"
    device = "Fake GPU"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def label(self, points, config, clock, rings=None):
        if isinstance(self.error, StructureTooLargeError) and config.method == "union_find":
            return super().label(points, config, clock)
        raise self.error


def test_defaults_are_the_library_defaults():
    assert settings_from_values(DEFAULTS) == NodeSettings()
    assert NodeSettings().cluster == ClusterConfig(max_work_s=1.0)
    assert not NodeSettings().window.clips
    assert NodeSettings().window == FrameWindow()


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"method": "bogus"}, "unknown method 'bogus'"),
        ({"search": "kd"}, "unknown search 'kd'"),
        ({"d_th": 0.0}, "d_th must be > 0 m"),
        ({"d_th": math.nan}, "d_th must be a finite number"),
        ({"min_cluster_size": 20, "max_cluster_size": 10}, "must not exceed"),
        ({"min_range": 5.0, "max_range": 5.0}, "min_range (5.0) must be below max_range"),
        ({"min_z": math.nan}, "min_z must be a number"),
        ({"min_range": -1.0}, "min_range must be >= 0"),
    ],
)
def test_invalid_settings_rejected_with_reason(changes, reason):
    with pytest.raises(ConfigError) as error:
        settings_from_values({**DEFAULTS, **changes})
    assert reason in str(error.value)


def test_several_problems_reported_together():
    with pytest.raises(ConfigError) as error:
        settings_from_values({**DEFAULTS, "d_th": -1.0, "min_z": 2.0, "max_z": 1.0})
    assert "d_th" in str(error.value) and "min_z" in str(error.value)


def test_clip_mask_windows():
    xyz = np.array([[1, 0, 0], [3, 4, 0], [30, 0, 0], [3, 4, 5], [np.nan, 0, 0]], float)
    settings = NodeSettings(min_range=2.0, max_range=10.0, max_z=1.0)
    assert settings.window.clips
    assert clip_mask(xyz, settings.window).tolist() == [False, True, False, False, False]


def test_frame_matches_library_and_flattening_merges_layers():
    rng = np.random.default_rng(0)
    low = rng.uniform(0, 0.2, (30, 3))
    xyz = np.concatenate([low, low + np.array([0.0, 0.0, 3.0])])
    processor = FramePipeline("cpu")
    output = _process(processor, _cloud(xyz), NodeSettings())
    expected = euclidean_cluster(xyz, 0.5, backend="cpu")
    np.testing.assert_array_equal(to_structured(output.labeled)["cluster_id"], expected.labels)
    assert output.clusters.width == 2 and output.fallback_reason is None
    flat = _process(processor, _cloud(xyz), NodeSettings(use_height=False))
    assert flat.result.num_clusters == 1
    assert flat.table[0]["max_z"] == pytest.approx(xyz[:, 2].max()), "boxes use the real z"


def test_out_of_memory_frame_falls_back_to_cpu():
    error = type("OutOfMemoryError", (MemoryError,), {"__module__": "cupy.cuda.memory"})()
    assert is_out_of_memory(error)
    processor = FramePipeline(_OutOfMemoryGpu(error))
    xyz = np.random.default_rng(1).uniform(0, 5, (200, 3))
    output = _process(processor, _cloud(xyz), NodeSettings())
    assert output.result.backend == "cpu" and "out of memory" in output.fallback_reason
    expected = euclidean_cluster(xyz, 0.5, backend="cpu")
    np.testing.assert_array_equal(output.result.labels, expected.labels)


@pytest.mark.parametrize(
    "error",
    [MatrixMemoryError(100_000, 2**34, 2**30), StructureTooLargeError("edge", "E", 9, "budget")],
)
def test_structure_too_large_frame_runs_with_union_find_on_the_same_backend(error):
    assert not is_out_of_memory(error)
    processor = FramePipeline(_OutOfMemoryGpu(error))
    xyz = np.random.default_rng(1).uniform(0, 5, (200, 3))
    settings = NodeSettings(cluster=ClusterConfig(method="matrix"))
    output = _process(processor, _cloud(xyz), settings)
    assert output.result.backend == "cuda" and output.result.method == "union_find"
    assert "frame run with union_find" in output.fallback_reason
    assert "use method 'union_find' or 'auto'" in output.fallback_reason
    expected = euclidean_cluster(xyz, 0.5, backend="cpu")
    np.testing.assert_array_equal(output.result.labels, expected.labels)


class _RecordingBackend(CpuBackend):
    """The CPU backend, recording the size and configuration of every cloud it labels."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ClusterConfig]] = []

    def label(self, points, config, clock, rings=None):
        self.calls.append((len(points), config))
        return super().label(points, config, clock)


def test_warm_up_clusters_a_small_cloud_with_the_settings_in_force():
    backend = _RecordingBackend()
    processor = FramePipeline(backend)
    settings = NodeSettings(cluster=ClusterConfig(d_th=0.7, method="vertex"))
    processor.warm_up(settings.cluster, settings.window)
    assert backend.calls == [(CpuFrameCodec.warm_up_points, settings.cluster)]
    output = _process(processor, _cloud(np.zeros((3, 3), np.float32)), settings)
    assert output.result.num_clusters == 1 and len(backend.calls) == 2


def test_other_backend_errors_are_not_swallowed():
    processor = FramePipeline(_OutOfMemoryGpu(RuntimeError("kernel failed")))
    assert not is_out_of_memory(RuntimeError("kernel failed"))
    with pytest.raises(RuntimeError, match="kernel failed"):
        _process(processor, _cloud(np.zeros((3, 3))), NodeSettings())


def test_undecodable_cloud_raises_pointcloud2_error():
    cloud = _cloud(np.zeros((3, 3)))
    broken = type(cloud)(**{**cloud.__dict__, "data": b"\0" * 4})
    with pytest.raises(PointCloud2Error, match="fewer than row_step"):
        _process(FramePipeline("cpu"), broken, NodeSettings())


def test_latest_slot_newest_wins():
    slot: LatestSlot[int] = LatestSlot()
    assert slot.put(1) is False
    assert slot.put(2) is True
    assert slot.take(0.0) == 2
    assert slot.take(0.01) is None
    slot.put(3)
    slot.close()
    assert slot.take() is None and slot.closed


def test_frame_stats_rate_latency_and_counts():
    stats = FrameStats()
    for k in range(11):
        stats.received(100.0 + 0.1 * k)
    for latency_ms in range(1, 101):
        stats.published(latency_ms / 1e3)
    stats.dropped()
    stats.rejected("malformed", "data too short")
    stats.rejected("malformed", "row_step too small")
    stats.fell_back("out of memory; frame run on the CPU", on_cpu=True)
    stats.fell_back("method vertex needs 14 GB; frame run with union_find", on_cpu=False)
    snapshot = stats.snapshot(now=101.0)
    assert snapshot.input_rate_hz == pytest.approx(10.0)
    assert snapshot.latency_p50_ms == pytest.approx(50.5)
    assert snapshot.latency_p99_ms == pytest.approx(99.01)
    assert (snapshot.received, snapshot.processed, snapshot.dropped) == (11, 100, 1)
    assert snapshot.rejected == {"malformed": 2} and snapshot.total_rejected == 2
    assert snapshot.last_rejection == "row_step too small"
    assert (snapshot.fallbacks, snapshot.cpu_fallbacks) == (2, 1)
    assert snapshot.last_fallback.endswith("frame run with union_find")
    assert stats.snapshot(now=110.0).input_rate_hz == 0.0, "stale arrivals give no rate"


def test_memory_budget_parameter_reaches_the_clustering_config():
    assert settings_from_values(DEFAULTS).cluster.memory_budget is None  # 0: automatic
    budget = settings_from_values({**DEFAULTS, "memory_budget_mb": 64}).cluster.memory_budget
    assert budget == 64 << 20
    with pytest.raises(ConfigError, match="memory_budget must be"):
        settings_from_values({**DEFAULTS, "memory_budget_mb": -1})
