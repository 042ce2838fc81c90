"""/diagnostics tells the truth: levels over the window between two reports (ROS-free parts)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.frame import FramePipeline
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz, read_fields
from gpu_euclidean_cluster.ros.node.frame_stats import StatsSnapshot
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

diagnostics = pytest.importorskip("gpu_euclidean_cluster.ros.node.diagnostics")
from diagnostic_msgs.msg import DiagnosticStatus  # noqa: E402

BASE = StatsSnapshot(
    received=100, processed=100, dropped=0, lost=0, rejected={}, fallbacks=0, cpu_fallbacks=0,
    implausible_points=0, last_implausible="", last_rejection="", last_fallback="",
    input_rate_hz=10.0,
    latency_p50_ms=5.0, latency_p99_ms=6.0, stage_ms={},
)  # fmt: skip


def later(**changes: object) -> StatsSnapshot:
    return dataclasses.replace(BASE, **changes)


@pytest.mark.parametrize(
    ("now", "level", "words"),
    [
        (later(received=110, processed=110), DiagnosticStatus.OK, "clustering"),
        (later(received=110, processed=109, dropped=1), DiagnosticStatus.OK, "1 of 10"),
        (later(received=110, processed=101, dropped=9), DiagnosticStatus.WARN, "9 of 10 frame(s)"),
        (
            later(received=110, processed=108, rejected={"malformed": 2}, last_rejection="bad"),
            DiagnosticStatus.WARN,
            "2 frame(s) rejected: bad",
        ),
        (
            later(received=110, rejected={"malformed": 10}, last_rejection="short data"),
            DiagnosticStatus.ERROR,
            "every frame failed; 10 frame(s) rejected: short data",
        ),
        (
            later(received=110, processed=110, implausible_points=3, last_implausible="far"),
            DiagnosticStatus.WARN,
            "3 point(s) excluded: far",
        ),
        (
            later(received=110, processed=110, fallbacks=2, last_fallback="run with union_find"),
            DiagnosticStatus.WARN,
            "2 frame(s) ran otherwise than configured: run with union_find",
        ),
        (
            later(received=110, processed=110, fallbacks=3, cpu_fallbacks=1, last_fallback="oom"),
            DiagnosticStatus.WARN,
            "3 frame(s) ran otherwise than configured, 1 on the CPU: oom",
        ),
    ],
)
def test_window_levels(now, level, words):
    got, message = diagnostics.window_level(now, BASE, warn_share=0.1)
    assert got == level
    assert words in message


def test_waiting_for_input():
    empty = later(received=0, processed=0)
    assert diagnostics.window_level(empty, None, 0.1) == (DiagnosticStatus.OK, "waiting for input")


def test_implausible_points_are_excluded_and_counted():
    xyz = np.array(
        [[0, 0, 0], [0.1, 0, 0], [2e6, 0, 0], [0, -3e30, 0], [np.nan, 0, 0], [5, 5, 5]],
        dtype=np.float32,
    )
    settings = NodeSettings()
    output = FramePipeline(CpuBackend()).process(from_xyz(xyz), settings.cluster, settings.window)
    labels = read_fields(output.labeled, ["cluster_id"])["cluster_id"]
    assert labels.tolist() == [0, 0, -1, -1, -1, 1]
    assert output.implausible_points == 2
    loose_settings = NodeSettings(max_coordinate=float("inf"))
    loose = FramePipeline(CpuBackend()).process(
        from_xyz(xyz), loose_settings.cluster, loose_settings.window
    )
    assert loose.implausible_points == 0
    assert (read_fields(loose.labeled, ["cluster_id"])["cluster_id"] >= 0).sum() == 5


def test_publication_sequence_gaps_count_frames_lost_before_the_node():
    from gpu_euclidean_cluster.ros.node.frame_stats import FrameStats

    stats = FrameStats()
    for publisher, number in [(b"a", 7), (b"a", 8), (b"b", 1), (b"a", 12), (b"b", 2), (b"a", 3)]:
        stats.sequence(publisher, number)  # a: 9, 10, 11 lost; then a restarted at 3
    assert stats.snapshot().lost == 3
    # The window: 10 received and processed, plus the frames lost on the way.
    lossy = later(received=110, processed=110, lost=1)  # 1 of 11 sent: under 10 %
    level, message = diagnostics.window_level(lossy, BASE, warn_share=0.1)
    assert level == DiagnosticStatus.OK and "1 frame(s) lost before reaching the node" in message
    level, _ = diagnostics.window_level(later(received=110, processed=110, lost=5), BASE, 0.1)
    assert level == DiagnosticStatus.WARN


def test_lost_frames_name_the_publisher_transport_and_the_fix():
    level, message = diagnostics.window_level(later(received=105, lost=5), BASE, 0.1)
    assert level == DiagnosticStatus.WARN
    assert "5 frame(s) lost before reaching the node (5 of 10 sent" in message
    assert "shared-memory segment" in message
    assert "FASTDDS_BUILTIN_TRANSPORTS=DEFAULT?sockets_size=8MB" in message


def test_silent_matched_publisher_warns_with_the_reason():
    silence = "no frame arrived on /input/points in the 7 s since 1 publisher(s) matched"
    empty = later(received=0, processed=0)
    level, message = diagnostics.window_level(empty, None, 0.1, silence)
    assert level == DiagnosticStatus.WARN
    assert message.startswith(silence) and "sockets_size=8MB" in message
    assert diagnostics.window_level(empty, None, 0.1, "")[0] == DiagnosticStatus.OK


def test_no_publisher_on_the_input_warns_with_the_remap():
    unmatched = "no publisher on /input/points for 5 s: remap the input (e.g. --ros-args ...)"
    empty = later(received=0, processed=0)
    assert diagnostics.window_level(empty, None, 0.1, "", unmatched) == (
        DiagnosticStatus.WARN,
        unmatched,
    )
    stamp = diagnostics.Time(sec=1)
    report = diagnostics.diagnostics_message(
        "n: c", empty, None, "cpu", "cpu", stamp, 0.1, "", unmatched
    )
    assert report.status[0].level == DiagnosticStatus.WARN
    assert report.status[0].message == unmatched
