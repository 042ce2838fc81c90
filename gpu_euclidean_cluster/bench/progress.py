"""A progress bar on stderr: redrawn in place on a terminal, one line per step otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """``[#######.......]  12/40  0:31  <what is running>``"""

    def __init__(self, total: int, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.start = time.monotonic()
        self.interactive = self.stream.isatty()

    def step(self, label: str) -> None:
        """Announce the step about to run (``label``), counting the previous one as done."""
        self._draw(label)
        self.done = min(self.done + 1, self.total)

    def close(self) -> None:
        """Draw the finished bar and end its line."""
        self.done = self.total
        self._draw("done")
        if self.interactive:
            self.stream.write("\n")
        self.stream.flush()

    def _draw(self, label: str) -> None:
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        minutes, seconds = divmod(int(time.monotonic() - self.start), 60)
        line = f"[{bar}] {self.done:>4}/{self.total} {minutes}:{seconds:02d} {label}"
        if self.interactive:
            self.stream.write("\r\033[K" + line[:160])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
