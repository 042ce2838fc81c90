"""Reading ``pandar_msgs/msg/PandarScan`` messages from ROS 2 bags with ``rosbags``.

The two message definitions (nebula's ``pandar_msgs``, Apache-2.0) are short enough to carry
here as text (:data:`PANDAR_MESSAGES`); they are registered on a ROS 2 Humble type store, so no
ROS installation is needed. A bag whose metadata leaves ``storage_identifier`` or
``serialization_format`` empty (nebula's own QT128 bag does) is read as sqlite3 and CDR, with a
warning: its storage files are then read one by one, in the metadata's order.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

PANDAR_SCAN = "pandar_msgs/msg/PandarScan"
PANDAR_PACKET = "pandar_msgs/msg/PandarPacket"
#: Bytes of ``PandarPacket.data``.
DATA_BYTES = 1500
#: The ``.msg`` text of each type (nebula's ``src/nebula_hesai/pandar_msgs/msg``).
PANDAR_MESSAGES = {
    PANDAR_PACKET: "builtin_interfaces/Time stamp\nuint8[1500] data\nuint32 size\n",
    PANDAR_SCAN: "std_msgs/Header header\nPandarPacket[] packets\n",
}


class HesaiBagError(ValueError):
    """A packet bag cannot be read; the message names the bag and the reason."""


@dataclass(frozen=True)
class PandarScanMessage:
    """One ``PandarScan`` message, its packets stacked.

    Attributes:
        topic: the topic.
        bag_time_ns: the bag's record time of the message (ns; 0 when not from a bag).
        stamp_ns: ``header.stamp`` (ns).
        frame_id: ``header.frame_id``.
        packets: (P, 1500) uint8 ``packets[i].data``.
        sizes: (P,) int64 ``packets[i].size``: the bytes of each packet.
        stamp_sec, stamp_nanosec: (P,) int64 ``packets[i].stamp``.
    """

    topic: str
    bag_time_ns: int
    stamp_ns: int
    frame_id: str
    packets: np.ndarray
    sizes: np.ndarray
    stamp_sec: np.ndarray
    stamp_nanosec: np.ndarray


@lru_cache(maxsize=1)
def pandar_typestore():
    """A ROS 2 Humble type store with ``pandar_msgs`` registered."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    types = {}
    for name, text in PANDAR_MESSAGES.items():
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store


_EMPTY_SETTING = re.compile(
    r"(?:storage_identifier|serialization_format):[ \t]*(?:''|\"\")?[ \t]*$", re.M
)
_STORAGE_FILE = re.compile(r"^[ \t]*-[ \t]*(?:path:[ \t]*)?(\S+\.(?:db3|mcap))[ \t]*$", re.M)


def _storage_files(path: Path, text: str) -> list[Path]:
    """The bag's storage files in metadata order (``relative_file_paths``), each once."""
    names = dict.fromkeys(Path(m).name for m in _STORAGE_FILE.findall(text))
    return [path / name for name in names] or sorted(path.glob("*.db3")) + sorted(
        path.glob("*.mcap")
    )


def read_pandar_scans(
    path: str | Path, topics: Sequence[str] | None = None
) -> Iterator[PandarScanMessage]:
    """Yield the ``PandarScan`` messages of a ROS 2 bag directory in record order; compressed
    chunks and messages are expanded within the bounds of
    :mod:`~gpu_euclidean_cluster.pointcloud_io.bag_chunks`.

    Args:
        path: the bag directory (with ``metadata.yaml``).
        topics: topics to read; default every ``PandarScan`` topic.

    Raises:
        HesaiBagError: not a bag, a requested topic missing or of another type, no
            ``PandarScan`` topic, a corrupt bag, or a chunk over its budget.
    """
    from rosbags.rosbag2 import Reader

    from ..bag_chunks import bound_decompression
    from ..bag_records import ChunkError, check_records

    path = Path(path)
    metadata = path / "metadata.yaml"
    if not metadata.is_file():
        raise HesaiBagError(f"not a ROS 2 bag directory (no metadata.yaml): {path}")
    text = metadata.read_text(errors="replace")
    store = pandar_typestore()
    sources: list[Path] = [path]
    if _EMPTY_SETTING.search(text):
        # rosbags refuses the directory; its storage files read alone carry no such setting
        log.warning("%s: empty storage or serialization setting in metadata.yaml", path)
        sources = _storage_files(path, text)
    for source in sources:
        try:
            for file in sorted(source.glob("*.mcap")) if source.is_dir() else [source]:
                check_records(file)
            bound_decompression()
            with Reader(source) as reader:
                present = {c.topic: c.msgtype for c in reader.connections}
                if topics is None:
                    wanted = {t for t, kind in present.items() if kind == PANDAR_SCAN}
                    if not wanted:
                        raise HesaiBagError(f"no {PANDAR_SCAN} topic in {path}")
                else:
                    for topic in topics:
                        if present.get(topic) != PANDAR_SCAN:
                            kind = present.get(topic, "absent")
                            raise HesaiBagError(f"topic {topic} in {path}: {kind}")
                    wanted = set(topics)
                connections = [c for c in reader.connections if c.topic in wanted]
                for connection, timestamp, raw in reader.messages(connections=connections):
                    message = store.deserialize_cdr(raw, connection.msgtype)
                    yield _scan(connection.topic, timestamp, message)
        except HesaiBagError:
            raise
        except ChunkError as error:  # a chunk over its budget (bag_records, bag_chunks)
            raise HesaiBagError(f"refused bag {path}: {error}") from None
        except Exception as error:  # rosbags' and its back ends' errors on damaged bytes
            reason = " ".join(str(error).split()) or type(error).__name__
            raise HesaiBagError(f"corrupt or unreadable bag {path}: {reason}") from None


def _scan(topic: str, timestamp: int, message) -> PandarScanMessage:
    packets = message.packets
    if packets:
        data = np.stack([np.asarray(p.data, np.uint8) for p in packets])
    else:
        data = np.zeros((0, DATA_BYTES), np.uint8)
    stamp = message.header.stamp
    return PandarScanMessage(
        topic=topic,
        bag_time_ns=int(timestamp),
        stamp_ns=int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec),
        frame_id=message.header.frame_id,
        packets=data,
        sizes=np.array([p.size for p in packets], np.int64),
        stamp_sec=np.array([p.stamp.sec for p in packets], np.int64),
        stamp_nanosec=np.array([p.stamp.nanosec for p in packets], np.int64),
    )
