"""The package's one progress bar, on stderr: redrawn in place on a terminal.

``[#######.......]  12/40 0:31 <detail>``. The benchmark announces steps with :meth:`step` and,
when its output is piped into a log, writes one line per step; the bag replay redraws frame counts
with :meth:`show`, at most every ``min_period_s``, and stays silent when piped.
:class:`StageProgress` puts the stages of one long command (``cluster``: reading, clustering,
writing) on the bar once the run has lasted a second, its clock running while a stage works.
"""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
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


class StageProgress:
    """The stages of one run on a :class:`ProgressBar`: ``[##....] 1/3 0:02 clustering ...``.

    The bar counts the stages finished and names the one running; it never guesses a share of a
    stage's work. Nothing is drawn until the run has lasted ``delay_s`` (a quick run prints
    nothing); from then on every stage is drawn as it starts and, on a terminal, redrawn every
    ``period_s`` so that the elapsed time runs. Piped into a file, an enabled bar writes one line
    per stage. Use as a context manager: a run that ends normally draws ``done``; one that raises
    only ends the bar's line, so that an error message starts a line of its own.

    Args:
        stages: how many stages the run will announce.
        stream: where to draw (default stderr).
        enabled: draw at all (callers pass ``stream.isatty()`` or a ``--progress`` option).
    """

    def __init__(
        self,
        stages: int,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        delay_s: float = 1.0,
        period_s: float = 0.5,
    ) -> None:
        self._bar = ProgressBar(stages, stream, enabled=enabled)
        self._finished = -1  # stages finished: one less than those announced
        self._label = ""
        self._shown = delay_s <= 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._bar.enabled and (not self._shown or self._bar.interactive):
            self._thread = threading.Thread(
                target=self._tick, args=(delay_s, period_s), name="stage_progress", daemon=True
            )
            self._thread.start()

    def stage(self, label: str) -> None:
        """Announce the stage starting now (the previous one counts as finished)."""
        with self._lock:
            self._finished += 1
            self._label = label
            if self._shown:
                self._draw()

    def close(self, detail: str | None = None) -> None:
        """Stop redrawing; where the bar was shown, draw ``detail`` (when given, every stage
        counted finished) and end its line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if not (self._bar.enabled and self._shown and self._label):
                return
            if detail is not None:
                self._finished = self._bar.total or 0
                self._label = detail
                self._draw()
            self._bar.close()

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close("done" if kind is None else None)

    def _tick(self, delay_s: float, period_s: float) -> None:
        """Show the bar after ``delay_s``; on a terminal, redraw it every ``period_s``."""
        if not self._shown:
            if self._stop.wait(delay_s):
                return
            with self._lock:
                self._shown = True
                self._draw()
        while self._bar.interactive and not self._stop.wait(period_s):
            with self._lock:
                self._draw()

    def _draw(self) -> None:
        if self._label:
            self._bar.show(max(self._finished, 0), self._label, force=True)
