"""The session's guard against asyncio's stray "exception was never retrieved" lines can fail."""

from __future__ import annotations

import asyncio
import gc
import logging

from .._stray_asyncio import StrayAsyncioReports


def test_an_unread_future_exception_is_recorded_with_its_test():
    reports = StrayAsyncioReports()
    reports.current_test = "test_x"
    logger = logging.getLogger("asyncio")
    session_handlers = logger.handlers[:]  # the session's guard must not see this one
    logger.handlers = []
    reports.install()
    try:
        loop = asyncio.new_event_loop()
        future = loop.create_future()
        future.set_exception(RuntimeError("nobody reads this"))
        del future
        gc.collect()
        loop.close()
    finally:
        reports.remove()
        logger.handlers = session_handlers
    assert reports.reports == ["test_x: Future exception was never retrieved"]
