"""The robustness suite's RANSAC case judged (``ransac.py``): answered, reported, no traceback."""

from __future__ import annotations

from dataclasses import replace

from .ransac import CAP_LINE, RANSAC_FRAMES, RansacResult, check_ransac, format_ransac

CAPPED = RansacResult(
    iterations=1 << 20,
    frames=RANSAC_FRAMES,
    answered=RANSAC_FRAMES,
    latencies_s=[0.34, 0.32, 0.24],
    alive=True,
    exit_code=0,
    fallbacks=RANSAC_FRAMES,
    last_fallback=CAP_LINE + "17238 points on the cpu backend would take about 363 s ...",
    cap_warnings=1,
    tracebacks=0,
)


def test_a_bounded_node_meets_every_target():
    assert [check.status for check in check_ransac(CAPPED)] == ["met", "met", "met"]
    assert format_ransac(CAPPED).startswith(
        "RANSAC at ground_iterations 1048576: 3 of 3 frames answered in 0.34, 0.32, 0.24 s"
    )


def test_a_stalled_silent_or_failing_node_misses_them():
    stalled = replace(CAPPED, answered=0, latencies_s=[], fallbacks=None, last_fallback="")
    assert [check.status for check in check_ransac(stalled)] == ["missed", "missed", "met"]
    silent = replace(CAPPED, cap_warnings=0)
    assert [check.status for check in check_ransac(silent)] == ["met", "missed", "met"]
    crashed = replace(CAPPED, alive=False, exit_code=1, tracebacks=1)
    assert [check.status for check in check_ransac(crashed)] == ["missed", "met", "missed"]
