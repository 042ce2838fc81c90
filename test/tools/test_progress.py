"""The stage progress line: silent on quick runs, stage by stage once shown, never on stdout."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Callable

import pytest

from gpu_euclidean_cluster.tools.progress import StageProgress

#: Generous: the drawing thread may be slow to run on a loaded host.
DEADLINE_S = 30.0
#: One drawn line: ``[###...]  1/2 0:00 detail`` -> (count, detail).
LINE = re.compile(r"\[[#.]+\] +(\d+/\d+) \d+:\d\d (.*)")


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_quick_run_draws_nothing() -> None:
    stream = Terminal()
    with StageProgress(2, stream, delay_s=DEADLINE_S) as progress:
        progress.stage("reading")
        progress.stage("clustering")
    assert stream.getvalue() == ""


def test_a_disabled_bar_draws_nothing() -> None:
    stream = Terminal()
    with StageProgress(1, stream, enabled=False, delay_s=0.0) as progress:
        progress.stage("reading")
    assert stream.getvalue() == ""


def test_piped_and_forced_one_line_per_stage_then_done() -> None:
    stream = io.StringIO()
    with StageProgress(2, stream, delay_s=0.0) as progress:
        progress.stage("reading a.pcd")
        progress.stage("clustering 3 points")
    lines = [LINE.fullmatch(line) for line in stream.getvalue().splitlines()]
    assert all(lines), stream.getvalue()
    assert [match.groups() for match in lines] == [  # type: ignore[union-attr]
        ("0/2", "reading a.pcd"),
        ("1/2", "clustering 3 points"),
        ("2/2", "done"),
    ]


def test_a_long_stage_shows_after_the_delay_and_its_clock_runs() -> None:
    stream = Terminal()
    progress = StageProgress(3, stream, delay_s=0.05, period_s=0.01)
    progress.stage("reading")
    progress.stage("clustering")
    _wait_for(lambda: "clustering" in stream.getvalue())
    _wait_for(lambda: stream.getvalue().count("clustering") >= 3)  # redrawn while it works
    progress.stage("writing")
    assert stream.getvalue().endswith("writing")
    progress.close("done")
    assert stream.getvalue().endswith("done\n")
    assert all(part.startswith("\033[K") for part in stream.getvalue().split("\r")[1:])


def test_an_error_ends_the_line_without_done() -> None:
    stream = Terminal()
    with pytest.raises(RuntimeError), StageProgress(2, stream, delay_s=0.0) as progress:
        progress.stage("clustering")
        raise RuntimeError("boom")
    assert stream.getvalue().endswith("clustering\n") and "done" not in stream.getvalue()
