"""The frame layer without ROS: the pipeline's fallbacks and warm-up, and the front ends' frame
service (``frame/service.py``), its stages per frame and the accounting of rejections, fallbacks
and implausible points, on both twins (``backend`` fixture) where the twins are concerned."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gpu_euclidean_cluster import euclidean_cluster
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.diffnormals import DiffNormalsSettings
from gpu_euclidean_cluster.core.ground import GroundSettings
from gpu_euclidean_cluster.core.memory import StructureTooLargeError
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.codecs.frame import CpuFrameCodec
from gpu_euclidean_cluster.cuda.labelling.matrix_memory import MatrixMemoryError
from gpu_euclidean_cluster.frame import DiffNormalsFilter, FramePipeline, GroundRemoval
from gpu_euclidean_cluster.frame.packets import SweepCloud
from gpu_euclidean_cluster.frame.pipeline import is_out_of_memory
from gpu_euclidean_cluster.frame.service import (
    WARNING_THROTTLE_S,
    ClusteredFrame,
    FrameRejection,
    FrameService,
)
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (
    PointCloud2Error,
    RawCloud,
    from_structured,
    from_xyz,
    read_fields,
    to_structured,
)
from gpu_euclidean_cluster.ros.node.frame_stats import FrameStats
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings


def _process(pipeline: FramePipeline, cloud, settings: NodeSettings):
    return pipeline.process(cloud, settings.cluster, settings.window)


def _cloud(xyz: np.ndarray):
    points = np.zeros(len(xyz), dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    for axis, name in enumerate("xyz"):
        points[name] = xyz[:, axis]
    return from_structured(points)


def _blobs(seed: int = 0) -> np.ndarray:
    """Three tight blobs of 20 points, 5 m apart."""
    rng = np.random.default_rng(seed)
    centres = np.repeat([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [0.0, 5.0, 1.0]], 20, axis=0)
    return (centres + rng.uniform(-0.05, 0.05, centres.shape)).astype(np.float32)


def cloud_cdr(cloud: RawCloud, stamp: tuple[int, int], frame_id: str) -> bytes:
    """The serialized sensor_msgs/PointCloud2 of ``cloud`` (little-endian CDR) that a raw
    subscription hands the node, written here: this module runs without ROS."""
    out = bytearray(b"\x00\x01\x00\x00")

    def put(code: str, *values: int) -> None:
        out.extend(bytes(-(len(out) - 4) % struct.calcsize(code)))  # aligned to its size
        out.extend(struct.pack("<" + code * len(values), *values))

    def string(text: str) -> None:
        raw = text.encode() + b"\0"
        put("I", len(raw))
        out.extend(raw)

    put("i", stamp[0])
    put("I", stamp[1])
    string(frame_id)
    put("I", cloud.height, cloud.width, len(cloud.fields))
    for field in cloud.fields:
        string(field.name)
        put("I", field.offset)
        put("B", field.datatype)
        put("I", field.count)
    put("?", cloud.is_bigendian)
    payload = bytes(memoryview(cloud.data).cast("B"))
    put("I", cloud.point_step, cloud.row_step, len(payload))
    return bytes(out) + payload + (b"\x01" if cloud.is_dense else b"\x00")


class _Clock:
    """Monotonic seconds the test sets."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Service:
    """A :class:`FrameService` with the node's ledger, its warnings and its clock at hand."""

    def __init__(self, backend, clock: _Clock | None = None) -> None:
        self.stats = FrameStats()
        self.warnings: list[str] = []
        self.clock = clock or _Clock()
        self.frames = FrameService(backend, 0, self.stats, self.warnings.append, self.clock)


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


class _RecordingBackend(CpuBackend):
    """The CPU backend, recording the size and configuration of every cloud it labels."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, ClusterConfig]] = []

    def label(self, points, config, clock, rings=None):
        self.calls.append((len(points), config))
        return super().label(points, config, clock)


OUT_OF_MEMORY = type("OutOfMemoryError", (MemoryError,), {"__module__": "cupy.cuda.memory"})()

# --- the pipeline ------------------------------------------------------------------------------


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
    assert is_out_of_memory(OUT_OF_MEMORY)
    processor = FramePipeline(_OutOfMemoryGpu(OUT_OF_MEMORY))
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


# --- the service -------------------------------------------------------------------------------


def test_a_serialized_cloud_is_clustered_with_its_header_and_timed(backend):
    service = _Service(backend)
    xyz = _blobs()
    clustered = service.frames.process(
        cloud_cdr(from_xyz(xyz), (12, 345), "velodyne"), NodeSettings()
    )
    assert isinstance(clustered, ClusteredFrame)
    labels = read_fields(clustered.output.labeled, ["cluster_id"])["cluster_id"]
    np.testing.assert_array_equal(labels, euclidean_cluster(xyz, 0.5, backend="cpu").labels)
    assert (clustered.stamp, clustered.frame_id) == ((12, 345), "velodyne")
    assert np.array_equal(read_fields(clustered.cloud, ["x"])["x"], xyz[:, 0])
    assert clustered.output.result.backend == backend == service.frames.backend.name
    total = clustered.output.result.timings_ms["total"]
    assert clustered.stage_ms["cluster"] == total and clustered.stage_ms["decode_build"] > 0
    assert set(clustered.stage_ms) == {"decode_build", "cluster"}
    snapshot = service.stats.snapshot()
    assert (snapshot.total_rejected, snapshot.fallbacks, snapshot.implausible_points) == (0, 0, 0)
    assert service.warnings == []


def test_a_decoded_sweep_keeps_its_stamp_and_frame(backend):
    service = _Service(backend)
    sweep = SweepCloud(from_xyz(_blobs()), 7_000_000_123, "velodyne_top")
    clustered = service.frames.process(sweep, NodeSettings(), group_records=True)
    assert (clustered.stamp, clustered.frame_id) == ((7, 123), "velodyne_top")
    assert clustered.cloud is sweep.cloud and clustered.output.result.num_clusters == 3
    assert (
        clustered.output.grouped is not None and list(clustered.output.grouped.counts) == [20] * 3
    )


@pytest.mark.parametrize(
    ("defect", "kind", "reason"),
    [
        ("truncated", "malformed", "bad PointCloud2: serialized message ends at byte"),
        ("no y", "missing_fields", "bad PointCloud2: "),
        ("too many fields", "malformed", "bad PointCloud2: 3 fields, over the limit of 2"),
    ],
)
def test_an_undecodable_message_is_rejected_booked_and_warned(backend, defect, kind, reason):
    service = _Service(backend)
    cloud = from_xyz(_blobs())
    settings = NodeSettings()
    if defect == "truncated":
        message = cloud_cdr(cloud, (1, 0), "lidar")[:100]
    elif defect == "no y":
        message = cloud_cdr(
            type(cloud)(**{**cloud.__dict__, "fields": cloud.fields[::2]}), (1, 0), ""
        )
    else:
        message = cloud_cdr(cloud, (1, 0), "lidar")
        settings = NodeSettings(max_point_fields=2)  # below what the node accepts: here a limit
    rejection = service.frames.process(message, settings)
    assert isinstance(rejection, FrameRejection) and rejection.kind == kind
    assert rejection.reason.startswith(reason)
    snapshot = service.stats.snapshot()
    assert snapshot.rejected == {kind: 1} and snapshot.last_rejection == rejection.reason
    assert service.warnings == [f"frame rejected ({kind}): {rejection.reason}"]


def test_a_failing_frame_is_a_processing_error_not_an_exception():
    service = _Service(_OutOfMemoryGpu(RuntimeError("kernel failed")))
    sweep = SweepCloud(from_xyz(_blobs()), 0, "lidar")
    rejection = FrameRejection("processing_error", "RuntimeError: kernel failed")
    assert service.frames.process(sweep, NodeSettings()) == rejection
    snapshot = service.stats.snapshot()
    assert snapshot.rejected == {"processing_error": 1}
    assert snapshot.last_rejection == "RuntimeError: kernel failed"
    assert service.warnings == ["frame rejected (processing_error): RuntimeError: kernel failed"]


@pytest.mark.parametrize(
    ("error", "on_cpu"),
    [(OUT_OF_MEMORY, True), (StructureTooLargeError("edge", "E", 9, "b"), False)],
)
def test_a_fallback_is_published_booked_with_where_it_ran_and_warned(error, on_cpu):
    service = _Service(_OutOfMemoryGpu(error))
    settings = NodeSettings(cluster=ClusterConfig(method="matrix"))
    clustered = service.frames.process(SweepCloud(from_xyz(_blobs()), 0, "lidar"), settings)
    assert isinstance(clustered, ClusteredFrame) and clustered.output.result.num_clusters == 3
    snapshot = service.stats.snapshot()
    assert (snapshot.fallbacks, snapshot.cpu_fallbacks, snapshot.total_rejected) == (1, on_cpu, 0)
    assert snapshot.last_fallback == clustered.output.fallback_reason
    assert service.warnings == [clustered.output.fallback_reason]


def test_implausible_points_are_booked_with_the_limit(backend):
    service = _Service(backend)
    xyz = np.concatenate([_blobs(), [[2e6, 0.0, 0.0], [0.0, -3e6, 0.0]]]).astype(np.float32)
    settings = NodeSettings(max_coordinate=1e6)
    clustered = service.frames.process(SweepCloud(from_xyz(xyz), 0, "lidar"), settings)
    assert clustered.output.implausible_points == 2
    snapshot = service.stats.snapshot()
    assert snapshot.implausible_points == 2
    assert snapshot.last_implausible == (
        "2 point(s) beyond max_coordinate 1e+06 m in the last such frame"
    )
    assert service.warnings == [], "booked for /diagnostics, not warned about"


def test_warnings_are_throttled_per_kind_and_every_frame_is_booked():
    clock = _Clock()
    service = _Service(_OutOfMemoryGpu(OUT_OF_MEMORY), clock)
    sweep = SweepCloud(from_xyz(_blobs()), 0, "lidar")
    assert service.frames.reject("malformed", "bad VelodyneScan: short") == FrameRejection(
        "malformed", "bad VelodyneScan: short"
    )
    clock.now += 0.5
    service.frames.reject("malformed", "bad VelodyneScan: shorter")  # booked, not warned
    service.frames.process(sweep, NodeSettings())  # a fallback: throttled apart, warned
    clock.now += WARNING_THROTTLE_S - 0.5
    service.frames.reject("missing_fields", "no y")  # a period after the first: warned
    service.frames.process(sweep, NodeSettings())  # within the period of the first fallback
    reason = "cuda backend out of memory"
    assert [w.split(" (")[0] for w in service.warnings] == [
        "frame rejected",
        reason,
        "frame rejected",
    ]
    assert service.warnings[2] == "frame rejected (missing_fields): no y"
    snapshot = service.stats.snapshot()
    assert snapshot.rejected == {"malformed": 2, "missing_fields": 1}
    assert (snapshot.fallbacks, snapshot.cpu_fallbacks) == (2, 2)


def test_the_stages_are_those_of_each_frames_settings(backend):
    """Ground removal, then Difference of Normals, each when its settings ask for it, with their
    settings of the frame; what the warm-up ran (every stage) does not stay on."""
    rng = np.random.default_rng(5)
    floor = np.column_stack([rng.uniform(-10, 10, (800, 2)), np.full(800, -1.7)])
    pole = np.column_stack([rng.normal(3, 0.05, (200, 2)), rng.uniform(-1.6, 1.0, 200)])
    cloud = from_xyz(np.concatenate([floor, pole, _blobs()]).astype(np.float32))
    ground = GroundSettings(distance_threshold=0.15, seed=3)
    diffnormals = DiffNormalsSettings(small_radius=0.4, large_radius=1.5)
    service = _Service(backend)
    service.frames.warm_up(NodeSettings())
    sweep = SweepCloud(cloud, 0, "lidar")
    for stages, settings in [
        ([], NodeSettings()),
        ([GroundRemoval(ground)], NodeSettings(ground=ground)),
        ([DiffNormalsFilter(diffnormals)], NodeSettings(diffnormals=diffnormals)),
        (
            [GroundRemoval(ground), DiffNormalsFilter(diffnormals)],
            NodeSettings(ground=ground, diffnormals=diffnormals),
        ),
        ([], NodeSettings()),
    ]:
        got = service.frames.process(sweep, settings).output
        expected = FramePipeline(backend, stages=stages).process(
            cloud, settings.cluster, settings.window
        )
        assert np.array_equal(
            read_fields(got.labeled, ["cluster_id"])["cluster_id"],
            read_fields(expected.labeled, ["cluster_id"])["cluster_id"],
        ), [stage.name for stage in stages]
        assert (got.ground is None) == (settings.ground is None)
        assert got.ground_plane == expected.ground_plane


def test_warm_up_runs_every_stage_once_and_the_next_frame_none_it_does_not_ask_for(monkeypatch):
    applied: list[str] = []
    for stage in (GroundRemoval, DiffNormalsFilter):
        original = stage.apply

        def apply(self, frame, original=original):
            applied.append(self.name)
            return original(self, frame)

        monkeypatch.setattr(stage, "apply", apply)
    backend = _RecordingBackend()
    service = _Service(backend)
    settings = NodeSettings(cluster=ClusterConfig(method="vertex"))
    service.frames.warm_up(settings)
    warmed_up, labelled = len(applied), len(backend.calls)
    assert applied[:2] == ["ground_removal", "diffnormals"] and warmed_up == 2 * labelled
    assert backend.calls[0][1] == settings.cluster  # the stages left only some of its points
    service.frames.process(SweepCloud(from_xyz(_blobs()), 0, "lidar"), settings)
    assert len(applied) == warmed_up and len(backend.calls) == labelled + 1
