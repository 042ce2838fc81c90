"""Runs a list of cases through a :class:`CaseRunner` into a :class:`ResultStore`, with progress."""

from __future__ import annotations

import logging

from gpu_euclidean_cluster.tools.progress import ProgressBar

from .cases import Case
from .results import ResultStore
from .runner import CaseRunner

log = logging.getLogger(__name__)


def run_cases(cases: list[Case], runner: CaseRunner, store: ResultStore, resume: bool) -> None:
    """Measure each case not already in ``store`` (with ``resume``), writing after each one."""
    done = store.resume() if resume else set()
    todo = [case for case in cases if case.key not in done]
    if done:
        log.info(
            "resuming: %d case(s) already measured, %d to go", len(cases) - len(todo), len(todo)
        )
    store.write()
    progress = ProgressBar(len(todo) * len(runner.implementations()))
    for case in todo:
        store.add(runner.run(case, on_step=progress.step))
    progress.close("done")
