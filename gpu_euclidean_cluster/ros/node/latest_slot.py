"""A one-slot, newest-wins hand-over between the subscription callbacks and the worker. ROS-free."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from ...frame.packets import SweepCloud
from .frame_stats import FrameStats

#: A received frame: a PointCloud2 message still serialized (the subscription is raw: the payload
#: is decoded straight from these bytes), or a sweep decoded from packets.
ReceivedFrame = bytes | SweepCloud

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


class FrameIntake:
    """The node's frames from the subscription callbacks to a worker thread through a
    :class:`LatestSlot` (a frame the worker has not taken yet is replaced by a newer one), booked
    in ``stats`` on the way: arrivals, gaps in the publishers' sequence numbers (frames lost
    before the node), frames replaced (dropped)."""

    def __init__(
        self, stats: FrameStats, handle: Callable[[ReceivedFrame, float], None], name: str
    ) -> None:
        """Start the worker thread ``name``, which calls ``handle(frame, received)`` on each frame
        it takes (``received``: its monotonic arrival time)."""
        self._stats = stats
        self._slot: LatestSlot[tuple[ReceivedFrame, float]] = LatestSlot()
        self._thread = threading.Thread(target=self._run, args=(handle,), name=name, daemon=True)
        self._thread.start()

    def message(self, cdr: bytes, info: Mapping[str, Any]) -> None:
        """A raw subscription's callback: a serialized message and rmw's message info."""
        received = time.monotonic()
        gid, sequence = info.get("publisher_gid"), info.get("publication_sequence_number")
        if gid is not None and sequence is not None:  # gaps: lost before reaching the node
            self._stats.sequence(bytes(gid.get("data", b"")), int(sequence))
        self.put(cdr, received)

    def put(self, frame: ReceivedFrame, received: float) -> None:
        """Hand ``frame``, received at monotonic time ``received``, to the worker."""
        self._stats.received(received)
        if self._slot.put((frame, received)):
            self._stats.dropped()

    def close(self) -> None:
        """Stop taking frames and wait for the one in hand."""
        self._slot.close()
        self._thread.join()

    def _run(self, handle: Callable[[ReceivedFrame, float], None]) -> None:
        while (taken := self._slot.take()) is not None:  # None: the slot was closed
            handle(*taken)
