"""The robustness suite ``python -m test.robustness`` (quick, CPU): flood, soak, malformed-message
matrix and hostile input against the node as its own process, and its command line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks.errors import BenchError
from test.robustness.reliability import (
    QUICK_OPTIONS,
    ReliabilityOptions,
    ReliabilityReport,
    format_reliability,
    run_reliability,
)

FLOOD_KEYS = {
    "reliability", "rate_hz", "sent", "received", "processed", "dropped", "rejected",
    "outputs_observed", "drops_reported", "drops_observed", "drops_match", "window_levels",
    "diagnostics_truthful",
}  # fmt: skip
CASE_KEYS = {
    "name", "expected", "outcome", "rejection_kind", "reason", "alive", "good_frame_processed",
    "recovery_s", "traceback", "peak_rss_mb", "as_expected",
}  # fmt: skip
ZERO_TARGETS = (
    "0 crashes over the malformed-message matrix",
    "0 tracebacks over the malformed-message matrix",
    "hostile input: 0 crashes",
    "hostile input: 0 tracebacks",
)
#: the groups of the hostile-input suite that run wherever the node runs
ATTACK_GROUPS = {"memory", "files", "bags", "options", "node"}


@pytest.fixture(scope="module")
def typed_report(tmp_path_factory: pytest.TempPathFactory) -> ReliabilityReport:
    pytest.importorskip("rclpy")
    from .._ros2_tools import own_domain_id

    # the benchmark's node processes on this test process's own domain (see _ros2_tools)
    options = replace(
        QUICK_OPTIONS, log_dir=tmp_path_factory.mktemp("reliability"), domain_id=own_domain_id()
    )
    return run_reliability(options)


@pytest.fixture(scope="module")
def report(typed_report: ReliabilityReport) -> dict:
    """The report as written to reliability.json."""
    return json.loads(json.dumps(typed_report.as_dict()))


@pytest.mark.ros
@pytest.mark.slow
def test_quick_report_has_every_part(report, typed_report):
    assert report["meta"]["backend"] == "cpu"
    flood = report["flood"]
    assert [(s["reliability"], s["rate_hz"]) for s in flood] == [
        ("reliable", 50.0),
        ("reliable", 200.0),
    ]
    for step in flood:
        assert step.keys() >= FLOOD_KEYS
        assert step["sent"] == round(step["rate_hz"] * QUICK_OPTIONS.flood_duration_s)
        assert step["received"] <= step["sent"]
        assert step["outputs_observed"] <= step["processed"] <= step["received"]
    soak = report["soak"]
    assert soak["sent"] == QUICK_OPTIONS.soak_frames
    frames = [frame for frame, _ in soak["rss_samples"]]
    every = QUICK_OPTIONS.rss_every
    assert frames == [1, *range(every, QUICK_OPTIONS.soak_frames + 1, every)]
    assert soak["rss_slope_mb_per_1000_frames"] is not None
    matrix = report["matrix"]
    assert len(matrix) >= 20
    for case in matrix:
        assert case.keys() >= CASE_KEYS
        assert case["outcome"] != "rejected" or case["reason"], case
    assert {"missing_z", "truncated_data", "bigendian_flag_over_le_data"} <= {
        c["name"] for c in matrix
    }
    attack = report["attack"]
    assert {case["group"] for case in attack["cases"]} >= ATTACK_GROUPS
    assert [row["group"] for row in attack["totals"]][-1] == "all"
    assert attack["totals"][-1]["cases"] == len(attack["cases"]) >= 50
    assert {t["name"] for t in report["targets"]} >= set(ZERO_TARGETS)
    summary = format_reliability(typed_report)
    assert "hostile input totals:" in summary
    assert all(t["name"] in summary for t in report["targets"])


@pytest.mark.ros
@pytest.mark.slow
def test_quick_run_has_no_crash_and_no_traceback(report):
    targets = {t["name"]: t for t in report["targets"]}
    for name in ZERO_TARGETS:
        assert targets[name]["status"] == "met", targets[name]
    assert report["soak"]["crashed"] is False
    for node in report["nodes"]:
        assert node["tracebacks"] == 0, node["first_traceback"]
        assert node["exit_code"] == 0, node  # stopped with SIGINT, cleanly
        assert not Path(f"/proc/{node['pid']}").exists()  # and gone


@pytest.mark.parametrize(
    "changes",
    [{"backend": "tpu"}, {"flood_rates_hz": ()}, {"soak_frames": 0}, {"max_points": 0}],
)
def test_options_reject_bad_values(changes):
    with pytest.raises(BenchError, match="reliability options"):
        ReliabilityOptions(**changes)
