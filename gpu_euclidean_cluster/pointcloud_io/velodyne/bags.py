"""Reading ``velodyne_msgs/msg/VelodyneScan`` messages from ROS 2 bags with ``rosbags``.

The message definitions ship with this package (``msg/VelodyneScan.msg``,
``msg/VelodynePacket.msg``, from ros-drivers/velodyne, BSD licence, see ``msg/LICENSE``) and are
registered on a ROS 2 Humble type store, so no ROS installation is needed. A bag whose metadata
leaves ``serialization_format`` empty (real Autoware bags do) is read as CDR, with a warning:
its storage files are then read one by one, in the metadata's order.
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

VELODYNE_SCAN = "velodyne_msgs/msg/VelodyneScan"
VELODYNE_PACKET = "velodyne_msgs/msg/VelodynePacket"
MSG_DIR = Path(__file__).resolve().parent / "msg"


class VelodyneBagError(ValueError):
    """A packet bag cannot be read; the message names the bag and the reason."""


@dataclass(frozen=True)
class VelodyneScanMessage:
    """One ``VelodyneScan`` message, its packets stacked.

    Attributes:
        topic: the topic.
        bag_time_ns: the bag's record time of the message (ns).
        stamp_ns: ``header.stamp`` (ns).
        frame_id: ``header.frame_id``.
        packets: (P, 1206) uint8 ``packets[i].data``.
        stamp_sec, stamp_nanosec: (P,) int64 ``packets[i].stamp``.
    """

    topic: str
    bag_time_ns: int
    stamp_ns: int
    frame_id: str
    packets: np.ndarray
    stamp_sec: np.ndarray
    stamp_nanosec: np.ndarray

    @property
    def packet_seconds(self) -> np.ndarray:
        """(P,) float64 packet stamps as nebula's ROS driver gives them to its decoder
        (``rclcpp::Time(stamp).seconds()``: the nanosecond count divided by 1e9)."""
        return (self.stamp_sec * 1_000_000_000 + self.stamp_nanosec).astype(np.float64) / 1e9

    @property
    def packet_whole_seconds(self) -> np.ndarray:
        """(P,) float64 ``stamp.sec`` only, as nebula's decoder tests feed their decoder."""
        return self.stamp_sec.astype(np.float64)


@lru_cache(maxsize=1)
def velodyne_typestore():
    """A ROS 2 Humble type store with ``velodyne_msgs`` registered from the shipped ``.msg``."""
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    types = {}
    for name in (VELODYNE_PACKET, VELODYNE_SCAN):
        text = (MSG_DIR / f"{name.rsplit('/', 1)[1]}.msg").read_text()
        types.update(get_types_from_msg(text, name))
    store.register(types)
    return store


_EMPTY_FORMAT = re.compile(r"serialization_format:[ \t]*(?:''|\"\")?[ \t]*$", re.M)
_STORAGE_FILE = re.compile(r"^[ \t]*-[ \t]*(?:path:[ \t]*)?(\S+\.(?:db3|mcap))[ \t]*$", re.M)


def _has_empty_format(path: Path) -> bool:
    return bool(_EMPTY_FORMAT.search((path / "metadata.yaml").read_text()))


def _storage_files(path: Path) -> list[Path]:
    """The bag's storage files in metadata order (``relative_file_paths``), each once."""
    names = dict.fromkeys(
        Path(m).name for m in _STORAGE_FILE.findall((path / "metadata.yaml").read_text())
    )
    return [path / name for name in names] or sorted(path.glob("*.db3")) + sorted(
        path.glob("*.mcap")
    )


def read_velodyne_scans(
    path: str | Path, topics: Sequence[str] | None = None
) -> Iterator[VelodyneScanMessage]:
    """Yield the ``VelodyneScan`` messages of a ROS 2 bag directory in record order; compressed
    chunks and messages are expanded within the bounds of
    :mod:`~gpu_euclidean_cluster.pointcloud_io.bag_chunks`.

    Args:
        path: the bag directory (with ``metadata.yaml``).
        topics: topics to read; default every ``VelodyneScan`` topic.

    Raises:
        VelodyneBagError: not a bag, a requested topic missing or of another type, a corrupt
            bag (record lengths past the end of its MCAP files, or whatever rosbags raises on
            damaged bytes), or a chunk over its budget.
    """
    from rosbags.rosbag2 import Reader

    from ..bag_chunks import bound_decompression
    from ..bag_records import ChunkError, check_records

    path = Path(path)
    if not (path / "metadata.yaml").is_file():
        raise VelodyneBagError(f"not a ROS 2 bag directory (no metadata.yaml): {path}")
    store = velodyne_typestore()
    sources: list[Path] = [path]
    if _has_empty_format(path):
        # rosbags refuses the directory; its storage files read alone carry no format check
        log.warning("%s: empty serialization_format in metadata.yaml, read as cdr", path)
        sources = _storage_files(path)
    for source in sources:
        try:
            for file in sorted(source.glob("*.mcap")) if source.is_dir() else [source]:
                check_records(file)
            bound_decompression()
            with Reader(source) as reader:
                present = {c.topic: c.msgtype for c in reader.connections}
                if topics is None:
                    wanted = {t for t, kind in present.items() if kind == VELODYNE_SCAN}
                    if not wanted:
                        raise VelodyneBagError(f"no {VELODYNE_SCAN} topic in {path}")
                else:
                    for topic in topics:
                        if present.get(topic) != VELODYNE_SCAN:
                            kind = present.get(topic, "absent")
                            raise VelodyneBagError(f"topic {topic} in {path}: {kind}")
                    wanted = set(topics)
                connections = [c for c in reader.connections if c.topic in wanted]
                for connection, timestamp, raw in reader.messages(connections=connections):
                    message = store.deserialize_cdr(raw, connection.msgtype)
                    yield _scan(connection.topic, timestamp, message)
        except VelodyneBagError:
            raise
        except ChunkError as error:  # a chunk over its budget (bag_records, bag_chunks)
            raise VelodyneBagError(f"refused bag {path}: {error}") from None
        except Exception as error:  # rosbags' and its back ends' errors on damaged bytes
            reason = " ".join(str(error).split()) or type(error).__name__
            raise VelodyneBagError(f"corrupt or unreadable bag {path}: {reason}") from None


def _scan(topic: str, timestamp: int, message) -> VelodyneScanMessage:
    packets = message.packets
    if packets:
        data = np.stack([np.asarray(p.data, np.uint8) for p in packets])
    else:
        data = np.zeros((0, 1206), np.uint8)
    sec = np.array([p.stamp.sec for p in packets], np.int64)
    nanosec = np.array([p.stamp.nanosec for p in packets], np.int64)
    stamp = message.header.stamp
    return VelodyneScanMessage(
        topic=topic,
        bag_time_ns=int(timestamp),
        stamp_ns=int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec),
        frame_id=message.header.frame_id,
        packets=data,
        stamp_sec=sec,
        stamp_nanosec=nanosec,
    )
