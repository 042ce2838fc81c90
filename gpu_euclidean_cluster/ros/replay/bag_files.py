"""Opening the bag that ``replay`` plays, also when its ``metadata.yaml`` is damaged. ROS-free.

:class:`BagFiles` reads a bag as
:class:`~gpu_euclidean_cluster.pointcloud_io.bags.PointCloudBag` does. When rosbags refuses a
ROS 2 bag directory (real Autoware bags leave ``serialization_format`` empty in their metadata,
and others have wrong counts or missing entries), each storage file of the directory (``*.db3``,
``*.mcap``) is opened on its own instead, as a single-file bag, and their messages are merged in
time order; a one-line note says so. When those fail as well, the directory's own error stands.
What a bag claims about its time range is not read here: :meth:`BagFiles.first_message` reads
the messages themselves (for :mod:`.bag_checks`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path

from rosbags.interfaces import Connection

from ...pointcloud_io.bags import (
    ROS2_SUFFIXES,
    BagError,
    BagMessage,
    BagTopic,
    PointCloudBag,
    corrupt_bag,
)

#: One raw message: the single-file bag it comes from, its connection, bag time (ns) and bytes.
RawMessage = tuple[PointCloudBag, Connection, int, bytes]


class BagFiles:
    """A bag opened for reading (use as a context manager), through its metadata or, where that
    is damaged, through its storage files (see the module docstring).

    Args:
        path: ROS 1 ``.bag`` file, ROS 2 bag directory, or ``.db3``/``.mcap`` file.
        note: called with the one-line note when the storage files are read directly.
    """

    def __init__(self, path: str | Path, note: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        self._note = note
        self.parts: list[PointCloudBag] = []

    def __enter__(self) -> BagFiles:
        bag = PointCloudBag(self.path)
        try:
            bag.__enter__()
        except BagError as error:
            self.parts = self._storage_files(error)
        else:
            self.parts = [bag]
        return self

    def __exit__(self, *exc: object) -> None:
        for part in self.parts:
            part.__exit__(None, None, None)
        self.parts = []

    def _storage_files(self, error: BagError) -> list[PointCloudBag]:
        """The storage files of a bag directory rosbags refused, each opened; else ``error``."""
        files = [p for p in sorted(self.path.glob("*")) if p.suffix in ROS2_SUFFIXES]
        if not (self.path.is_dir() and (self.path / "metadata.yaml").is_file() and files):
            raise error
        parts: list[PointCloudBag] = []
        try:
            for file in files:
                part = PointCloudBag(file)
                part.__enter__()
                parts.append(part)
        except BagError:
            for part in parts:
                part.__exit__(None, None, None)
            raise error from None
        if self._note is not None:
            reason = str(error).removeprefix(f"corrupt or truncated bag {self.path}: ")
            self._note(
                f"note: {self.path / 'metadata.yaml'} is damaged or incomplete ({reason}); "
                f"reading its {len(files)} storage file(s) directly"
            )
        return parts

    @property
    def is_ros1(self) -> bool:
        return self.parts[0].is_ros1

    @property
    def topics(self) -> dict[str, BagTopic]:
        """All topics by name (message counts summed over the storage files)."""
        merged: dict[str, BagTopic] = {}
        for part in self.parts:
            for name, topic in part.topics.items():
                seen = merged.get(name)
                count = topic.count + (seen.count if seen else 0)
                merged[name] = BagTopic(name, seen.msgtype if seen else topic.msgtype, count)
        return merged

    def messages(
        self, topics: Sequence[str], start_ns: int | None = None, stop_ns: int | None = None
    ) -> Iterator[BagMessage]:
        """PointCloud2 messages of ``topics`` in time order, as ROS 2 CDR
        (:meth:`~gpu_euclidean_cluster.pointcloud_io.bags.PointCloudBag.messages`)."""
        streams = [part.messages(topics, start_ns, stop_ns) for part in self.parts]
        return streams[0] if len(streams) == 1 else heapq.merge(*streams, key=_bag_time)

    def raw_messages(
        self, topics: Sequence[str], start_ns: int | None = None, stop_ns: int | None = None
    ) -> Generator[RawMessage, None, None]:
        """Messages of ``topics`` in time order, as stored (ROS 1 or CDR bytes), any type.

        Raises:
            BagError: the bag turns out corrupt or truncated while reading.
        """
        streams = [self._raw(part, topics, start_ns, stop_ns) for part in self.parts]
        if len(streams) == 1:
            return streams[0]
        return heapq.merge(*streams, key=lambda message: message[2])

    def first_message(
        self,
        topics: Sequence[str] | None = None,
        start_ns: int | None = None,
        stop_ns: int | None = None,
    ) -> RawMessage | None:
        """The first message (in time order) of ``topics`` (default: every topic of the bag)
        with bag time in ``[start_ns, stop_ns)``, read from the messages themselves, not from
        what the metadata or an index claims; None: there is none.

        Raises:
            BagError: the bag turns out corrupt or truncated while reading.
        """
        stream = self.raw_messages(
            list(self.topics) if topics is None else topics, start_ns, stop_ns
        )
        try:
            return next(stream, None)
        finally:
            stream.close()

    def _raw(
        self, part: PointCloudBag, topics: Sequence[str], start_ns: int | None, stop_ns: int | None
    ) -> Generator[RawMessage, None, None]:
        wanted = set(topics)
        connections = [c for c in part.reader.connections if c.topic in wanted]
        if not connections:
            return
        iterator = part.reader.messages(connections, start=start_ns, stop=stop_ns)
        while True:
            try:
                connection, timestamp, raw = next(iterator)
            except StopIteration:
                return
            except Exception as error:  # the readers' and storage back ends' own errors
                raise corrupt_bag(self.path, error) from None
            yield part, connection, timestamp, raw


def _bag_time(message: BagMessage) -> int:
    return message.timestamp_ns
