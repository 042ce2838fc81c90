"""Catches asyncio's "exception was never retrieved" / "Task was destroyed but it is pending"
reports (a future dropped with its exception unread, e.g. by a launch service torn down early).

asyncio logs them through the ``asyncio`` logger when the future is garbage-collected, often after
the test that made it has finished, and they otherwise end up as a stray line after the summary.
:class:`StrayAsyncioReports` records them with the test that was running; ``conftest.py`` fails
the session when any is left at its end.
"""

from __future__ import annotations

import logging

#: Parts of asyncio's messages about futures and tasks nobody looked at.
STRAY_MARKERS = ("exception was never retrieved", "Task was destroyed but it is pending")


class StrayAsyncioReports(logging.Handler):
    """Records asyncio's reports of unread futures, each with the test running at the time."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.current_test = "(outside any test)"
        self.reports: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(marker in message for marker in STRAY_MARKERS):
            first_line = message.splitlines()[0] if message else message
            self.reports.append(f"{self.current_test}: {first_line}")

    def install(self) -> None:
        logging.getLogger("asyncio").addHandler(self)

    def remove(self) -> None:
        logging.getLogger("asyncio").removeHandler(self)
