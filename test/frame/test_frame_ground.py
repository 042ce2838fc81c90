"""The ground stage's work bound in the frame layer: a frame whose RANSAC fit is estimated over
its ``max_work_s`` is fitted with the hypotheses that fit, published, booked as a fallback and
warned about (throttled) with the stage's one line, on both twins (``backend`` fixture); with the
pipeline's CPU fallback, both reasons are kept. The capped fit itself:
test/backends/test_ground.py; the bound's arithmetic: test/core/test_work_estimate.py."""

from __future__ import annotations

import re

import numpy as np

from gpu_euclidean_cluster.core.ground import MAX_ITERATIONS, GroundSettings
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.stages.ground import fit_ground
from gpu_euclidean_cluster.frame import FramePipeline, GroundRemoval
from gpu_euclidean_cluster.frame.packets import SweepCloud
from gpu_euclidean_cluster.frame.service import WARNING_THROTTLE_S, ClusteredFrame, FrameService
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz
from gpu_euclidean_cluster.ros.node.frame_stats import FrameStats
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

#: Hypotheses the bound of these tests leaves (and a half, against rounding).
CAPPED = 40


def floor_and_blobs() -> np.ndarray:
    """A floor 1.7 m below the sensor (800 points) and three blobs of 20 points above it."""
    rng = np.random.default_rng(3)
    floor = np.column_stack([rng.uniform(-10, 10, (800, 2)), np.full(800, -1.7)])
    centres = np.repeat([[2.0, 0.0, 0.0], [5.0, 3.0, 0.0], [0.0, 5.0, 1.0]], 20, axis=0)
    blobs = centres + rng.uniform(-0.05, 0.05, centres.shape)
    return np.concatenate([floor, blobs]).astype(np.float32)


def declared_rate(backend: str) -> float:
    if backend == "cpu":
        from gpu_euclidean_cluster.cpu.stages.ground import TESTS_PER_SECOND
    else:
        from gpu_euclidean_cluster.cuda.stages.ground import TESTS_PER_SECOND
    return TESTS_PER_SECOND


def capped_settings(points: int, backend: str) -> GroundSettings:
    """The largest ``iterations`` under a bound that fits :data:`CAPPED` hypotheses of
    ``points`` points on ``backend``."""
    limit = (CAPPED + 0.5) * (points + 64) / declared_rate(backend)
    return GroundSettings(iterations=MAX_ITERATIONS, max_work_s=limit, seed=1)


class _Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_a_capped_frame_is_published_booked_as_a_fallback_and_warned_once(backend: str):
    xyz = floor_and_blobs()
    stats, warnings, clock = FrameStats(), [], _Clock()
    service = FrameService(backend, 0, stats, warnings.append, clock)
    settings = NodeSettings(ground=capped_settings(len(xyz), backend))
    sweep = SweepCloud(from_xyz(xyz), 0, "lidar")
    first = service.process(sweep, settings)
    clock.now += WARNING_THROTTLE_S / 2
    second = service.process(sweep, settings)
    assert isinstance(first, ClusteredFrame) and isinstance(second, ClusteredFrame)
    reason = first.output.fallback_reason
    assert reason == second.output.fallback_reason
    assert re.fullmatch(
        rf"ground removal: {MAX_ITERATIONS} RANSAC hypotheses against {len(xyz)} points on the "
        rf"{backend} backend would take about \S+ s \(\S+ distance tests\), over "
        rf"ground_max_work_s \S+ s; plane fitted with the first {CAPPED} hypotheses only "
        rf"\(as ground_iterations {CAPPED} gives\)",
        reason,
    ), reason
    expected = fit_ground(xyz, None, GroundSettings(iterations=CAPPED, seed=1))
    np.testing.assert_array_equal(first.output.ground, expected.mask)
    assert first.output.ground_plane == expected.plane and expected.mask[:800].all()
    assert first.output.result.num_clusters == 3  # the blobs, the floor removed
    snapshot = stats.snapshot()
    assert (snapshot.fallbacks, snapshot.cpu_fallbacks, snapshot.total_rejected) == (2, 0, 0)
    assert snapshot.last_fallback == reason
    assert warnings == [reason]  # throttled: one line for the two frames
    within = NodeSettings(ground=GroundSettings(iterations=CAPPED, seed=1))
    third = service.process(sweep, within)
    assert isinstance(third, ClusteredFrame) and third.output.fallback_reason is None
    assert third.output.ground_plane == expected.plane and stats.snapshot().fallbacks == 2


class _OutOfMemoryGpu(CpuBackend):
    """A 'GPU' whose labelling always runs out of memory (CuPy's error), so that every frame runs
    again on the host pipeline."""

    name = "cuda"
    device = "Fake GPU"

    def label(self, points, config, clock, rings=None):
        raise type("OutOfMemoryError", (MemoryError,), {"__module__": "cupy.cuda.memory"})()


def test_a_frame_run_on_the_cpu_keeps_its_capped_fits_reason_too():
    xyz = floor_and_blobs()
    settings = NodeSettings(ground=capped_settings(len(xyz), "cpu"))
    pipeline = FramePipeline(_OutOfMemoryGpu(), stages=[GroundRemoval(settings.ground)])
    output = pipeline.process(from_xyz(xyz), settings.cluster, settings.window)
    assert output.result.backend == "cpu"
    on_cpu, capped = output.fallback_reason.split("; frame run on the CPU; ")
    assert on_cpu.startswith("cuda backend out of memory")
    assert capped.startswith("ground removal: ") and f"the first {CAPPED} hypotheses" in capped
