"""The package's one progress bar, on stderr: redrawn in place on a terminal.

``[#######.......]  12/40 0:31 <detail>``. The benchmark announces steps with :meth:`step` and,
when its output is piped into a log, writes one line per step; the bag replay redraws frame counts
with :meth:`show`, at most every ``min_period_s``, and stays silent when piped.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """A bar over ``total`` items (or a plain count when ``total`` is None)."""

    def __init__(
        self,
        total: int | None,
        stream: TextIO | None = None,
        *,
        width: int = 30,
        enabled: bool = True,
        log_when_piped: bool = True,
        min_period_s: float = 0.0,
    ) -> None:
        self.total = None if total is None else max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.start = time.monotonic()
        self.interactive = self.stream.isatty()
        self.enabled = enabled and (self.interactive or log_when_piped)
        self.min_period_s = min_period_s
        self._last_draw = -float("inf")

    def step(self, label: str) -> None:
        """Announce the step about to run (``label``), counting the previous one as done."""
        self.show(self.done, label, force=True)
        self.done = self.done + 1 if self.total is None else min(self.done + 1, self.total)

    def show(self, done: int, detail: str, force: bool = False) -> None:
        """Draw ``done`` items with ``detail``; skipped within ``min_period_s`` unless ``force``."""
        now = time.monotonic()
        if not self.enabled or (not force and now - self._last_draw < self.min_period_s):
            return
        self._last_draw = now
        self.done = done
        minutes, seconds = divmod(int(now - self.start), 60)
        if self.total is None:
            count = f"{done}"
        else:
            filled = self.width * min(done, self.total) // self.total
            count = f"[{'#' * filled}{'.' * (self.width - filled)}] {done:>4}/{self.total}"
        line = f"{count} {minutes}:{seconds:02d} {detail}"
        if self.interactive:
            self.stream.write("\r\033[K" + line[:160])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self, detail: str | None = None) -> None:
        """Draw the final state with ``detail`` (when given) and end the bar's line."""
        if not self.enabled:
            return
        if detail is not None:
            self.show(self.done, detail, force=True)
        if self.interactive:
            self.stream.write("\n")
        self.stream.flush()
