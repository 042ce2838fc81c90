"""The node's ROS-free parts: settings validation, the frame intake (newest wins), the frame
counters. The frame layer's pipeline and service: ``test_frame_service.py``."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ClusterConfig, ConfigError
from gpu_euclidean_cluster.cpu.codecs.frame import clip_mask
from gpu_euclidean_cluster.frame import FrameWindow
from gpu_euclidean_cluster.frame.packets import SweepCloud
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz
from gpu_euclidean_cluster.ros.node.frame_stats import FrameStats
from gpu_euclidean_cluster.ros.node.latest_slot import FrameIntake, LatestSlot
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings, settings_from_values
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS

DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}


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


def test_latest_slot_newest_wins():
    slot: LatestSlot[int] = LatestSlot()
    assert slot.put(1) is False
    assert slot.put(2) is True
    assert slot.take(0.0) == 2
    assert slot.take(0.01) is None
    slot.put(3)
    slot.close()
    assert slot.take() is None and slot.closed


def test_frame_intake_hands_the_newest_frame_over_and_books_arrivals_drops_and_gaps():
    stats = FrameStats()
    busy, release, newest = threading.Event(), threading.Event(), threading.Event()
    handled: list[tuple[object, float]] = []

    def handle(frame, received):
        handled.append((frame, received))
        if frame == b"first":
            busy.set()
            release.wait(10.0)
        else:
            newest.set()

    intake = FrameIntake(stats, handle, "test_worker")
    info = {"publisher_gid": {"data": [1, 2]}, "publication_sequence_number": 4}
    intake.message(b"first", info)  # taken at once: the worker is busy with it
    assert busy.wait(10.0)
    intake.message(b"second", {**info, "publication_sequence_number": 7})  # 5 and 6 lost
    intake.put(SweepCloud(from_xyz(np.zeros((1, 3))), 0, "lidar"), 123.0)  # drops "second"
    intake.message(b"newest", {})  # drops the sweep; rmw gave no sequence number: no gap
    release.set()
    assert newest.wait(10.0)
    intake.close()
    snapshot = stats.snapshot()
    assert (snapshot.received, snapshot.dropped, snapshot.lost) == (4, 2, 2)
    assert [frame for frame, _ in handled] == [b"first", b"newest"]
    assert 0 < handled[0][1] <= handled[1][1], "monotonic arrival times"


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
