"""The hostile-input suite of the robustness suites (``test/robustness/attack.py``): how a
process's end is judged, measured and totalled. The suite itself runs in
``test_bench_reliability.py`` (quick) and ``python -m test.robustness --attack-only``."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from test.robustness.attack import (
    ADDRESS_SPACE_LIMIT,
    ALLOWANCE_MB,
    AttackCase,
    CaseRun,
    build_cases,
    cuda_runtime_mb,
    judge,
    run_process,
    totals,
)
from test.robustness.packet_attack import read_messages, start_up_cases, write_messages

PYTHON = (sys.executable, "-c")


def _has_cuda() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # CuPy missing, or no driver / device: the CPU-only machines
        return False


def _case(valid: bool, statuses: tuple[int, ...], **changes) -> AttackCase:
    return AttackCase(
        name="case",
        group=changes.pop("group", "files"),
        what="a case",
        command=("true",),
        valid=valid,
        statuses=statuses,
        **changes,
    )


def test_a_refusal_is_one_line_with_its_reason():
    case = _case(False, (2,), refusal="truncated")
    good = judge(case, CaseRun(2, "tool: error: x: truncated data\n", 50.0, 0.1))
    assert (good.outcome, good.wrong, good.refused_valid) == ("refused", None, False)
    two_lines = judge(case, CaseRun(2, "[rcl] failed\ntool: error: x: truncated\n", 50.0, 0.1))
    assert two_lines.wrong == "refused in 2 lines, not one"
    silent = judge(case, CaseRun(2, "tool: error: something else\n", 50.0, 0.1))
    assert silent.wrong.startswith("refused without the reason 'truncated'")


def test_valid_input_refused_wrong_output_crash_and_hang_are_told_apart():
    valid = _case(True, (0,), check=lambda run: None if "144" in run.output else "not 144")
    assert judge(valid, CaseRun(2, "tool: error: no\n", 50.0, 0.1)).refused_valid
    assert judge(valid, CaseRun(0, "143\n", 50.0, 0.1)).wrong == "not 144"
    assert judge(valid, CaseRun(0, "144\n", 50.0, 0.1)).wrong is None
    traced = judge(valid, CaseRun(1, "Traceback (most recent call last):\n  x\nValueError\n", 1, 1))
    assert (traced.outcome, traced.traceback) == ("crashed", True)
    assert judge(valid, CaseRun(-11, "", 1.0, 1.0)).outcome == "crashed"
    assert judge(valid, CaseRun(None, "", 1.0, 90.0)).outcome == "hung"


def test_memory_is_judged_against_what_the_input_holds_on_disk(tmp_path):
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as file:
        file.truncate(1 << 40)
    dense = tmp_path / "dense.bin"
    dense.write_bytes(b"\1" * (1 << 20))
    case = _case(False, (2,), inputs=(sparse, dense))
    result = judge(case, CaseRun(2, "tool: error: over the budget\n", 100.0, 0.1))
    assert result.input_bytes == 1 << 20  # the sparse file's terabyte holds nothing
    assert result.memory_bound_mb == 20 + ALLOWANCE_MB and result.within_memory
    over = judge(case, CaseRun(2, "tool: error: over the budget\n", 20 + ALLOWANCE_MB + 1, 0.1))
    assert not over.within_memory
    rows = {t.group: t for t in totals([result, over])}
    assert (rows["all"].cases, rows["all"].over_memory) == (2, 1)


def test_a_process_is_measured_interrupted_and_timed_out(tmp_path):
    allocate = "import time\nb = bytearray(200 << 20)\nb[::4096] = b'x' * len(b[::4096])\n"
    measured = run_process((*PYTHON, allocate), {})
    assert measured.status == 0 and measured.peak_rss_mb >= 200
    limited = run_process((*PYTHON, allocate), {}, address_space=100 << 20)
    assert limited.status == 1 and "MemoryError" in limited.output
    wait = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: (print('stop', flush=True), sys.exit(0)))\n"
        "print('up', flush=True)\ntime.sleep(60)\n"
    )
    stopped = run_process((*PYTHON, wait), {}, stop_when=lambda out: "up" in out)
    assert stopped.status == 0 and "stop" in stopped.output
    hung = run_process((*PYTHON, "import time; time.sleep(60)"), {}, timeout_s=0.5)
    assert hung.status is None and hung.seconds < 30


def test_the_cluster_cases_and_the_node_run_the_backend_given(tmp_path):
    frame = np.random.default_rng(3).uniform(-20, 20, (2_000, 3)).astype(np.float32)
    by_backend = {}
    for backend in ("cpu", "cuda"):
        folder = tmp_path / backend
        folder.mkdir()
        cases, _ = build_cases(folder, frame, 1, damaged_per_storage=0, backend=backend)
        by_backend[backend] = cases
    for backend, cases in by_backend.items():
        clustering = [c for c in cases if c.group in ("memory", "files")]
        node = [c for c in cases if c.group == "node"]
        assert clustering and node
        assert all(c.command[c.command.index("--backend") + 1] == backend for c in clustering)
        assert all(f"backend:={backend}" in c.command for c in node)
    memory = {
        b: {c.address_space for c in cases if c.group == "memory"}
        for b, cases in by_backend.items()
    }
    assert memory["cpu"] == {ADDRESS_SPACE_LIMIT}  # the CPU budget under the attack's limit
    assert memory["cuda"] == {None}  # the CUDA driver reserves more address space than that


def test_a_paper_method_on_identical_points_may_answer_or_refuse_with_the_reason(tmp_path):
    frame = np.random.default_rng(3).uniform(-20, 20, (2_000, 3)).astype(np.float32)
    cases, _ = build_cases(tmp_path, frame, 1, damaged_per_storage=0, backend="cuda")
    identical = [c for c in cases if "identical points" in c.name]
    assert len(identical) == 3
    case = identical[0]
    answered = judge(case, CaseRun(0, '{"clusters": 1}\n', 400.0, 1.0))
    refused = judge(case, CaseRun(2, "cluster: error: x: use method 'union_find'\n", 60.0, 0.1))
    two = judge(case, CaseRun(0, '{"clusters": 2}\n', 400.0, 1.0))
    unexplained = judge(case, CaseRun(2, "cluster: error: x: MemoryError\n", 60.0, 0.1))
    assert (answered.wrong, refused.wrong, refused.refused_valid) == (None, None, False)
    assert two.wrong and unexplained.wrong


def test_the_memory_bound_takes_the_allowance_given():
    case = _case(True, (0,))
    result = judge(case, CaseRun(0, "", 700.0, 0.1), allowance_mb=ALLOWANCE_MB + 400)
    assert result.memory_bound_mb == ALLOWANCE_MB + 400 and result.within_memory
    assert not judge(case, CaseRun(0, "", 700.0, 0.1)).within_memory


@pytest.mark.skipif(_has_cuda(), reason="a CUDA device is here: the probe measures it")
def test_the_cuda_runtime_probe_fails_with_the_reason_without_cuda():
    with pytest.raises(RuntimeError, match="the CUDA runtime probe failed"):
        cuda_runtime_mb({})


def test_the_packet_start_up_cases_name_the_librarys_refusals(tmp_path):
    """Each start-up case's refusal is what the packet input says of its input (in-process here;
    the suite starts the node with it)."""
    from gpu_euclidean_cluster.core.config import ConfigError
    from gpu_euclidean_cluster.ros.node.packet_input import packet_sweeps
    from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS

    defaults = {spec.name: spec.default for spec in PARAMETERS}
    cases = start_up_cases(tmp_path)
    assert len(cases) == 16
    for name, arguments, refusal in cases:
        given = dict(a.split(":=", 1) for a in arguments if a != "-p")
        values = {**defaults, **given}
        for key in ("sensor_min_range", "sensor_max_range"):
            values[key] = float(values[key])
        for key in ("cloud_min_angle", "cloud_max_angle"):
            values[key] = int(values[key])
        with pytest.raises(ConfigError) as refused:
            packet_sweeps(values)
        assert refusal in str(refused.value), (name, str(refused.value))


def test_the_packet_messages_file_gives_back_what_was_written(tmp_path):
    path = tmp_path / "messages.bin"
    messages = [b"", b"\x00\x01\x00\x00abc", bytes(range(256)) * 5]
    write_messages(path, iter(messages))
    assert list(read_messages(path)) == messages
