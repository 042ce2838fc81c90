"""When the node warns that frames are lost before it, and what it says (ROS-free)."""

from __future__ import annotations

from gpu_euclidean_cluster.ros.node.loss_monitor import (
    SILENT_REPEAT_S,
    SILENT_S,
    TRANSPORT_FIX,
    UNMATCHED_S,
    WINDOW_S,
    LossMonitor,
    fix_hint,
)

TOPIC = "/points_raw"


def monitor() -> LossMonitor:
    return LossMonitor(TOPIC, fix_hint("/opt/share/config/fastdds_large_clouds.xml"), start=0.0)


def test_fix_names_the_variable_and_the_profile():
    assert TRANSPORT_FIX == "export FASTDDS_BUILTIN_TRANSPORTS=DEFAULT?sockets_size=8MB"
    assert TRANSPORT_FIX in fix_hint()
    assert "FASTDDS_DEFAULT_PROFILES_FILE=$(ros2 pkg prefix gpu_euclidean_cluster)" in fix_hint()
    assert "FASTDDS_DEFAULT_PROFILES_FILE=/x.xml" in fix_hint("/x.xml")


def test_gaps_over_a_window_are_warned_once_per_window_with_the_share():
    loss = monitor()
    warnings = []
    # 2 frames/s sent, 1 of them lost, for 25 s: one warning per full window
    for second in range(1, 26):
        check = loss.update(second, received=second, lost=second - 1, publishers=1, warn_share=0.1)
        warnings.append(check.warning)
        assert check.silence == ""
    said = [(t + 1, w) for t, w in enumerate(warnings) if w]
    assert [t for t, _ in said] == [WINDOW_S, 2 * WINDOW_S]
    first = said[0][1]
    assert first.startswith("9 of 19 frames (47 %) published on /points_raw in the last 10 s")
    assert "never reached the node" in first and TRANSPORT_FIX in first
    assert "/opt/share/config/fastdds_large_clouds.xml" in first
    assert said[1][1].startswith("10 of 20 frames (50 %)")


def test_a_burst_of_losses_is_judged_whole_wherever_it_falls():
    """One lost frame at 9 s and one at 11 s: windows that followed each other ([0, 10], [10, 20])
    would each see a single gap; the sliding window sees both, once."""
    loss = monitor()
    warned = {}
    for second in range(1, 30):
        lost = (second >= 9) + (second >= 11)
        check = loss.update(second, received=second, lost=lost, publishers=1, warn_share=0.1)
        if check.warning:
            warned[second] = check.warning
    assert list(warned) == [11]
    assert warned[11].startswith("2 of 12 frames (17 %) published on /points_raw in the last 10 s")


def test_no_warning_under_the_share_or_for_a_single_gap():
    loss = monitor()
    assert loss.update(WINDOW_S, received=100, lost=5, publishers=1, warn_share=0.1).warning is None
    loss = monitor()
    assert loss.update(WINDOW_S, received=5, lost=1, publishers=1, warn_share=0.1).warning is None
    loss = monitor()
    assert loss.update(WINDOW_S, received=50, lost=10, publishers=1, warn_share=0.1).warning


def test_matched_silent_publisher_is_warned_about_then_repeated_rarely():
    loss = monitor()
    checks = {t: loss.update(t, 0, 0, publishers=1, warn_share=0.1) for t in range(1, 100)}
    warned = [t for t, c in checks.items() if c.warning]
    assert warned == [1 + SILENT_S, 1 + SILENT_S + SILENT_REPEAT_S]  # matched first seen at 1
    warning = checks[warned[0]].warning
    assert warning.startswith(
        "no frame arrived on /points_raw in the 5 s since 1 publisher(s) matched: if one "
        "publishes, its frames do not reach the node"
    )
    assert TRANSPORT_FIX in warning
    assert checks[3].silence == "" and checks[10].silence.startswith("no frame arrived")


def test_silence_needs_a_matched_publisher_and_ends_with_a_frame():
    loss = monitor()
    checks = [loss.update(t, 0, 0, 0, 0.1) for t in range(1, 20)]  # nobody there
    assert all(not c.silence for c in checks) and all(
        c.unmatched for c in checks[int(UNMATCHED_S) - 1 :]
    )
    assert loss.update(20, 0, 0, 1, 0.1).silence == ""  # matched just now
    assert loss.update(25, 0, 0, 1, 0.1).warning  # 5 s matched, nothing
    assert loss.update(26, 1, 0, 1, 0.1).silence == ""  # a frame came
    assert loss.update(30, 1, 0, 1, 0.1).silence == ""


def test_a_pause_after_frames_arrived_is_no_loss():
    """Frames arrived, then the publisher paused (a bag paused, a driver idle): its transport
    carries its frames, so the node says nothing, however long the pause; frames lost after it
    would show as sequence gaps."""
    loss = monitor()
    checks = [loss.update(t, min(t, 10), 0, publishers=1, warn_share=0.1) for t in range(1, 200)]
    assert not any(c.warning or c.silence for c in checks)


def test_a_publisher_that_reappears_starts_afresh():
    loss = monitor()
    for t in range(1, 10):  # frames arrive from the first publisher
        assert loss.update(t, t, 0, publishers=1, warn_share=0.1).warning is None
    loss.update(10, 9, 0, publishers=0, warn_share=0.1)  # it left ...
    assert loss.update(11, 9, 0, publishers=1, warn_share=0.1).silence == ""  # ... and came back
    restarted = loss.update(16, 9, 0, publishers=1, warn_share=0.1)  # none since: 5 s
    assert restarted.warning and restarted.silence.startswith(
        "no frame arrived on /points_raw in the 5 s since 1 publisher(s) matched"
    )
    loss = monitor()
    for t in range(1, 10):
        loss.update(t, t, 0, publishers=1, warn_share=0.1)
    joined = [loss.update(t, 9, 0, publishers=2, warn_share=0.1) for t in range(10, 16)]
    assert [c.warning is not None for c in joined] == [False] * 5 + [True]  # a second one joined
    assert joined[-1].silence.startswith("no frame arrived on /points_raw in the 5 s since 2")


def test_no_publisher_is_warned_about_with_the_remap_then_repeated_rarely():
    loss = monitor()
    checks = {t: loss.update(t, 0, 0, publishers=0, warn_share=0.1) for t in range(1, 100)}
    warned = [t for t, c in checks.items() if c.warning]
    assert warned == [UNMATCHED_S, UNMATCHED_S + SILENT_REPEAT_S]  # counted from start-up (0)
    assert checks[warned[0]].warning == (
        "no publisher on /points_raw for 5 s: remap the input (e.g. --ros-args "
        "-r input/points:=/points_raw, or the launch argument input_topic:=...)"
    )
    assert checks[UNMATCHED_S - 1].unmatched == "" and checks[UNMATCHED_S].unmatched
    assert not any(c.silence for c in checks.values())  # silence needs a matched publisher


def test_a_publisher_on_any_input_ends_it_and_a_new_absence_is_warned_again():
    inputs = {"input/points": "/input/points", "input/packets": "/input/packets"}
    loss = LossMonitor("/input/points", "fix", start=0.0, inputs=inputs, unmatched_s=2.0)
    assert loss.update(1, 0, 0, 0, 0.1, input_publishers=0).unmatched == ""  # grace
    first = loss.update(2, 0, 0, 0, 0.1, input_publishers=0)
    assert first.warning == first.unmatched
    assert first.unmatched == (
        "no publisher on /input/points or /input/packets for 2 s: remap the input (e.g. --ros-args "
        "-r input/points:=/points_raw or -r input/packets:=/velodyne_packets, or the launch "
        "argument input_topic:=... or packets_topic:=...)"
    )
    assert loss.update(3, 0, 0, 0, 0.1, input_publishers=0).warning is None  # throttled
    packets_only = loss.update(4, 0, 0, publishers=0, warn_share=0.1, input_publishers=1)
    assert packets_only.unmatched == "" and packets_only.warning is None
    assert loss.update(5, 0, 0, 0, 0.1, input_publishers=0).unmatched == ""  # grace again
    again = loss.update(6, 0, 0, 0, 0.1, input_publishers=0)
    assert again.warning and again.unmatched.startswith("no publisher on /input/points or")
