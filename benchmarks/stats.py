"""Repeated timings: run a call after warm-up within a time budget, summarise median and p99."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass
class Timed(Generic[T]):
    """Wall-clock samples of the measured (post warm-up) calls and the last call's value."""

    samples_ms: list[float]
    value: T
    warmup_runs: int


def time_calls(fn: Callable[[], T], warmup: int, repeats: int, budget_s: float) -> Timed[T]:
    """Call ``fn`` ``warmup`` times untimed, then up to ``repeats`` times timed.

    The budget bounds slow cases: warm-up stops early once a call alone takes longer than
    ``budget_s``, and timed calls stop once their sum passes ``budget_s`` (at least one timed
    call is always made). ``len(samples_ms)`` tells how many repeats were actually measured.
    """
    warmed = 0
    for _ in range(warmup):
        start = time.perf_counter()
        fn()
        warmed += 1
        if time.perf_counter() - start > budget_s:
            break
    samples: list[float] = []
    spent = 0.0
    value = None
    while len(samples) < max(1, repeats) and (not samples or spent < budget_s):
        start = time.perf_counter()
        value = fn()
        elapsed = time.perf_counter() - start
        samples.append(elapsed * 1e3)
        spent += elapsed
    return Timed(samples_ms=samples, value=value, warmup_runs=warmed)  # type: ignore[arg-type]


def median(samples: Sequence[float]) -> float:
    """The median of ``samples`` (NaN when empty)."""
    return float(np.median(samples)) if len(samples) else float("nan")


def p99(samples: Sequence[float]) -> float:
    """The 99th percentile of ``samples``, linearly interpolated (NaN when empty)."""
    return float(np.percentile(samples, 99)) if len(samples) else float("nan")
