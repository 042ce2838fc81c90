"""Velodyne packet topics of a bag, decoded into the PointCloud2 that Autoware's driver publishes.

A ``velodyne_msgs/msg/VelodyneScan`` topic is decoded as nebula's ROS driver decodes it: every
packet, in arrival order, with its stamp in seconds (``rclcpp::Time(stamp).seconds()``), goes
through the CPU :class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.SweepDecoder`, a sweep
spanning messages where the packets do. Each completed sweep becomes a
``sensor_msgs/PointCloud2`` in the ``PointXYZIRCAEDT`` layout
(:data:`~gpu_euclidean_cluster.pointcloud_io.velodyne.POINT_DTYPE`, 32 bytes a point, one row,
``is_dense`` true as nebula sets it), frame id from the settings, stamped as nebula stamps it:
``std::chrono::duration_cast<nanoseconds>`` of the sweep stamp in seconds, i.e. the product with
1e9 truncated. It is encoded straight to CDR bytes
(:func:`~gpu_euclidean_cluster.ros.messages.serialized.publishable_cloud`), no Python message per
point.

The cloud is due at the bag time of the message whose packets completed it, and goes out on
Autoware's name for the decoded cloud (:func:`decoded_topic`): the packets topic's namespace plus
``pointcloud_raw_ex`` (nebula publishes ``velodyne_points``, which Autoware's launch remaps).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ...core.units import NS_PER_S
from ...pointcloud_io.bags import BagError
from ...pointcloud_io.pointcloud2 import from_structured
from ...pointcloud_io.velodyne import (
    Sweep,
    SweepDecoder,
    VelodyneScanMessage,
    load_calibration,
    velodyne_typestore,
)
from ...pointcloud_io.velodyne.bags import VELODYNE_SCAN
from ...pointcloud_io.velodyne.cdr import scan_from_cdr
from ..messages.serialized import publishable_cloud
from ..parameters.velodyne_options import PacketDecoding
from .bag_files import BagFiles

#: Autoware's name of the decoded cloud, in the namespace of the packets topic.
AUTOWARE_CLOUD = "pointcloud_raw_ex"


def decoded_topic(packets_topic: str) -> str:
    """Autoware's topic of the cloud decoded from ``packets_topic``:
    ``/sensing/lidar/front/velodyne_packets`` -> ``/sensing/lidar/front/pointcloud_raw_ex``."""
    namespace = packets_topic.rpartition("/")[0]
    return f"{namespace}/{AUTOWARE_CLOUD}"


def nebula_stamp_ns(stamp_s: float) -> int:
    """nebula's header stamp of a sweep stamped ``stamp_s`` seconds: ``duration_cast`` to
    nanoseconds, which truncates the double product ``stamp_s * 1e9``."""
    return int(stamp_s * 1e9)


def sweep_message(sweep: Sweep) -> bytes | PointCloud2:
    """What to publish for ``sweep``: its PointCloud2 as CDR bytes (a message object only where
    the byte encoder does not match this ROS 2 installation)."""
    header = Header(frame_id=sweep.frame_id)
    header.stamp.sec, header.stamp.nanosec = divmod(nebula_stamp_ns(sweep.stamp), NS_PER_S)
    return publishable_cloud(from_structured(sweep.points, is_dense=True), header)


@dataclass(frozen=True)
class SweepMessage:
    """A decoded sweep due for publishing.

    Attributes:
        topic: the packets topic it was decoded from.
        timestamp_ns: bag time of the message that completed it.
        cdr: what to publish (see :func:`sweep_message`).
        sweep: the decoded sweep.
    """

    topic: str
    timestamp_ns: int
    cdr: bytes | PointCloud2
    sweep: Sweep


def scan_message(ros1: bool, topic: str, raw: bytes) -> VelodyneScanMessage:
    """A stored ``VelodyneScan`` (CDR, or ROS 1 bytes converted to CDR), its packets a view of
    the bytes (:func:`~gpu_euclidean_cluster.pointcloud_io.velodyne.cdr.scan_from_cdr`)."""
    cdr = velodyne_typestore().ros1_to_cdr(raw, VELODYNE_SCAN) if ros1 else raw
    return scan_from_cdr(cdr, topic)


class PacketStream:
    """The sweeps of a bag's packet topics, decoded afresh on every pass.

    Args:
        path: the bag (read through its own :class:`~.bag_files.BagFiles`, beside the player's).
        topics: ``VelodyneScan`` topics; each gets its own decoder, all the same settings.
        decoding: settings and calibration file (the file is read here, once).

    Raises:
        ValueError: the calibration file cannot be read (``CalibrationError``).
    """

    def __init__(self, path: Path, topics: Sequence[str], decoding: PacketDecoding) -> None:
        self.path = path
        self.topics = list(topics)
        self.decoding = decoding
        self.calibration = load_calibration(decoding.calibration_file)

    def messages(self, start_ns: int | None, stop_ns: int | None) -> Iterator[SweepMessage]:
        """Sweeps completed by the packet messages with bag time in ``[start_ns, stop_ns)``, in
        time order; decoding starts at ``start_ns`` with empty decoders, as a driver fed from
        there would."""
        decoders = {t: SweepDecoder(self.calibration, self.decoding.settings) for t in self.topics}
        with BagFiles(self.path) as bag:
            for part, connection, timestamp, raw in bag.raw_messages(
                self.topics, start_ns, stop_ns
            ):
                try:
                    scan = scan_message(part.is_ros1, connection.topic, raw)
                except Exception as error:  # VelodyneCdrError; rosbags' on damaged ROS 1 bytes
                    reason = " ".join(str(error).split()) or type(error).__name__
                    raise BagError(
                        f"corrupt {VELODYNE_SCAN} message on {connection.topic} in {self.path}: "
                        f"{reason}"
                    ) from None
                for sweep in decoders[scan.topic].feed(scan.packets, scan.packet_seconds):
                    yield SweepMessage(scan.topic, timestamp, sweep_message(sweep), sweep)
