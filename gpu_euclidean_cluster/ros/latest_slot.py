"""A one-slot, newest-wins hand-over between the subscription callback and the worker. ROS-free."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class LatestSlot(Generic[T]):
    """Holds at most one item: a new ``put`` replaces a waiting one, so nothing queues up."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._item: T | None = None
        self._closed = False

    def put(self, item: T) -> bool:
        """Store ``item`` and wake the taker; True if it overwrote an item not yet taken."""
        with self._condition:
            replaced = self._item is not None
            self._item = item
            self._condition.notify()
            return replaced

    def take(self, timeout: float | None = None) -> T | None:
        """Remove and return the waiting item; wait up to ``timeout`` s (None: timeout, close)."""
        with self._condition:
            self._condition.wait_for(lambda: self._item is not None or self._closed, timeout)
            item, self._item = self._item, None
            return None if self._closed else item

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Wake every taker for good; later ``take`` calls return None at once."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
