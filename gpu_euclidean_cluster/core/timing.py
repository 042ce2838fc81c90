"""Stage timing of a clustering run, in one place for the library and both backends.

The stages are those of the paper's Section 5 breakdown (:data:`~.result.STAGES`). The clusterer
makes one :class:`StageClock` per run and passes it into the backend, which wraps its build and
labelling steps in ``with clock("build"):`` / ``with clock("label"):``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .result import STAGES


class StageClock:
    """Adds the wall time of each ``with clock(stage):`` block, device work included.

    Args:
        synchronize: waits for queued device work; called at both ends of every block so that
            asynchronous GPU work is charged to the stage that queued it.
    """

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._synchronize = synchronize
        self.timings_ms: dict[str, float] = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        if stage not in self.timings_ms:
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
        self._synchronize()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._synchronize()
            self.timings_ms[stage] += (time.perf_counter() - start) * 1e3

    def totals(self) -> dict[str, float]:
        """Milliseconds per stage plus ``total``."""
        return {**self.timings_ms, "total": sum(self.timings_ms.values())}
