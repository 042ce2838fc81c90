"""What ``replay`` reads from a bag's messages before it plays them, trusting no claim about them.

- The time range. A bag states one (a ROS 2 bag's ``metadata.yaml``, an MCAP's statistics, a
  ROS 1 bag's chunk infos), and it may lie: a ``starting_time`` of -1 had ``replay`` wait 53
  years for the first message, one after the messages had it play none. The schedule starts at
  the first message read, of any topic, at or after bag time 0 (:func:`plan_segment`);
  ``--start`` counts from there; ``--start`` is past the end when no message of the topics
  played comes at or after it.
- Stamps before bag time 0 (the int64 bag time of a ROS 2 bag; a ROS time is never negative)
  have no place on the schedule: those messages are skipped, and a note per topic says how many
  and when the first is (:func:`negative_stamp_notes`).
- Message types. A topic's type is what its connection declares; the first message of each
  topic played must be one (:func:`check_declared_types`): a PointCloud2 parses as CDR with a
  consistent layout (:func:`~gpu_euclidean_cluster.pointcloud_io.pointcloud2.from_cdr`,
  :func:`~gpu_euclidean_cluster.pointcloud_io.pointcloud2.check_layout`), a VelodyneScan as its
  CDR layout with its packets filling the message. A topic whose bytes are another type (a
  VelodyneScan declared as PointCloud2 would be republished as a cloud of packet bytes) is
  refused, naming the topic and the type.

Each check reads a message or a few (a ROS 1 or MCAP bag decompresses a chunk for each: within
the bounds of :mod:`~gpu_euclidean_cluster.pointcloud_io.bag_chunks`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ...core.units import NS_PER_S
from ...pointcloud_io import hesai
from ...pointcloud_io.bags import BagError
from ...pointcloud_io.hesai.bags import PANDAR_SCAN
from ...pointcloud_io.pointcloud2 import check_layout, from_cdr
from ...pointcloud_io.velodyne.cdr import scan_from_cdr, scan_to_cdr
from ..parameters.option_values import one_line
from .bag_files import BagFiles
from .packet_player import scan_cdr

#: Bytes a serialized VelodyneScan may hold past its last packet (the alignment padding to 4
#: that some serializers add).
PADDING_BYTES = 3


@dataclass(frozen=True)
class Segment:
    """The part of a bag a pass plays, found from its messages.

    Attributes:
        start_ns: the schedule's origin: the bag time of the bag's first message (any topic, at
            or after bag time 0) plus ``--start``.
        stop_ns: the bag time to stop before (``--duration``); None: the end of the bag.
        first_ns: the bag time of the first message played.
    """

    start_ns: int
    stop_ns: int | None
    first_ns: int


def plan_segment(
    bag: BagFiles, topics: Sequence[str], start_s: float, duration_s: float | None
) -> Segment:
    """The segment of ``topics`` that ``--start`` and ``--duration`` select.

    Raises:
        BagError: no message at or after bag time 0 at all, or none of ``topics`` at or after
            the start (``--start`` past the end).
    """
    first = bag.first_message(start_ns=0)
    if first is None:
        raise BagError(f"no message in {bag.path} is stamped at or after bag time 0")
    start_ns = first[2] + round(start_s * NS_PER_S)
    played = bag.first_message(topics, start_ns)
    if played is None:
        where = f"--start {start_s} s is past the end of the bag" if start_s else "nothing to play"
        raise BagError(
            f"{where}: no message of {', '.join(topics)} at or after bag time {start_ns}"
        )
    stop_ns = None if duration_s is None else start_ns + round(duration_s * NS_PER_S)
    return Segment(start_ns, stop_ns, played[2])


def spans_instant(bag: BagFiles, topics: Sequence[str], segment: Segment, span_ns: int) -> bool:
    """Whether the segment's messages all come within ``span_ns`` of its first (one message, or
    a burst): no timing of its own to repeat."""
    later = bag.first_message(topics, segment.first_ns + span_ns, segment.stop_ns)
    return later is None


def negative_stamp_notes(bag: BagFiles, topics: Sequence[str]) -> list[str]:
    """One note per topic of ``topics`` whose messages are stamped before bag time 0: how many
    are skipped, the first one's stamp, and why."""
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    for _, connection, timestamp, _ in bag.raw_messages(topics, stop_ns=0):
        counts[connection.topic] += 1
        first.setdefault(connection.topic, timestamp)
    return [
        f"note: skipping {count} message(s) of {topic} stamped before bag time 0 (the first at "
        f"{first[topic]} ns): a negative bag time has no place on the schedule"
        for topic, count in counts.items()
    ]


def check_declared_types(bag: BagFiles, clouds: Sequence[str], packets: Sequence[str]) -> None:
    """The first message of each topic is of the type its connection declares (see the module
    docstring).

    Raises:
        BagError: naming the topic, its declared type, the message's bag time and what does not
            parse.
    """
    for topic in [*clouds, *packets]:
        first = bag.first_message([topic])
        if first is None:
            continue
        part, connection, timestamp, raw = first
        try:
            if topic in clouds:
                cloud, _ = from_cdr(part.to_cdr(connection, raw))
                check_layout(cloud)
            else:
                _check_scan(scan_cdr(part.is_ros1, raw, connection.msgtype), connection.msgtype)
        except Exception as error:  # the parsers' errors, rosbags' on converting ROS 1 bytes
            raise BagError(
                f"topic {topic} declares {connection.msgtype}, but its first message (bag time "
                f"{timestamp} ns) is not one: {one_line(error)}"
            ) from None


def _check_scan(cdr: bytes, msgtype: str) -> None:
    """Raise ValueError unless ``cdr`` is a VelodyneScan (a PandarScan: ``msgtype``) whose
    packets fill it."""
    if msgtype == PANDAR_SCAN:
        pandar = hesai.scan_from_cdr(cdr)
        count, expected = len(pandar.packets), len(hesai.scan_to_cdr(pandar))
    else:
        scan = scan_from_cdr(cdr)
        count, expected = len(scan.packets), len(scan_to_cdr(scan))
    if abs(len(cdr) - expected) > PADDING_BYTES:
        name = msgtype.rpartition("/")[2]
        raise ValueError(f"{len(cdr)} bytes, where a {name} of {count} packets takes {expected}")
