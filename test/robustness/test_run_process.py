"""A case's process is measured on its own: its peak RSS, its exit status, its signals."""

from __future__ import annotations

import signal
import sys

import numpy as np

from .attack import run_process

PYTHON = sys.executable


def test_a_big_test_process_does_not_count_in_its_cases_peak():
    """The test process holds 800 MB when it starts the case (as pytest does late in a long
    session): the case, a bare Python, peaks far below that."""
    ballast = np.ones(100 * 2**20, dtype=np.float64)  # 800 MB, resident
    run = run_process((PYTHON, "-c", "pass"), {}, timeout_s=60)
    assert ballast.sum() == ballast.size
    assert run.status == 0
    assert 1.0 < run.peak_rss_mb < 200.0, run.peak_rss_mb


def test_the_cases_own_memory_is_measured_and_limited():
    grow = "import numpy; a = numpy.ones(50 * 2**20); print(a.sum())"
    run = run_process((PYTHON, "-c", grow), {}, timeout_s=60)
    assert run.status == 0 and run.peak_rss_mb > 400.0, run
    limited = run_process((PYTHON, "-c", grow), {}, timeout_s=60, address_space=300 * 2**20)
    assert limited.status == 1 and "MemoryError" in limited.output, limited.output


def test_exit_status_and_signals_reach_the_case():
    assert run_process((PYTHON, "-c", "raise SystemExit(3)"), {}, timeout_s=60).status == 3
    wait = "import time\nprint('ready', flush=True)\ntime.sleep(60)"
    run = run_process(
        (PYTHON, "-c", wait), {}, timeout_s=60, stop_when=lambda text: "ready" in text
    )
    assert run.status == -signal.SIGINT and "KeyboardInterrupt" in run.output, run.output
    terminate = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert run_process((PYTHON, "-c", terminate), {}, timeout_s=60).status == -signal.SIGTERM
    missing = run_process(("/no/such/program",), {}, timeout_s=60)
    assert missing.status == 127 and "No such file" in missing.output
