"""Velodyne packet topics of a bag: played as recorded, decoded into the PointCloud2 that
Autoware's driver publishes, or both (``--packets raw|decoded|both``, :func:`packet_plan`).

Played as recorded (``raw``), each ``velodyne_msgs/msg/VelodyneScan`` message goes out as its
stored CDR bytes (a ROS 1 message converted to CDR at byte level), as ``ros2 bag play`` would
publish it: :class:`PacketMessage`, no Python message per packet. That needs the
``velodyne_msgs`` Python package (its type support), which ROS 2 bags do not bring along.

Decoded (``decoded``), a topic is decoded as nebula's ROS driver decodes it, by a decoder of its
own with the settings the options give, or with a sensor kit (``--sensor-kit``) the settings and
calibration of the kit sensor that names the topic: every packet, in arrival order, with its
stamp in seconds (``rclcpp::Time(stamp).seconds()``), goes through the
CPU :class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.SweepDecoder`, a sweep spanning
messages where the packets do. Each completed sweep becomes a ``sensor_msgs/PointCloud2`` in the
``PointXYZIRCAEDT`` layout (:data:`~gpu_euclidean_cluster.pointcloud_io.velodyne.POINT_DTYPE`,
32 bytes a point, one row, ``is_dense`` true as nebula sets it), frame id from the settings,
stamped as nebula stamps it: ``std::chrono::duration_cast<nanoseconds>`` of the sweep stamp in
seconds, i.e. the product with 1e9 truncated. It is encoded straight to CDR bytes
(:func:`~gpu_euclidean_cluster.ros.messages.serialized.publishable_cloud`), no Python message per
point: :class:`SweepMessage`, due at the bag time of the message whose packets completed it, on
Autoware's name for the decoded cloud (:func:`decoded_topic`): the packets topic's namespace plus
``pointcloud_raw_ex`` (nebula publishes ``velodyne_points``, which Autoware's launch remaps).

With ``both``, a message goes out first, then the sweeps it completes.

Hesai packet topics (``pandar_msgs/msg/PandarScan``, a Hesai ``--sensor-model``) are played the
same way: as recorded where ``pandar_msgs`` is importable, and decoded by the CPU
:class:`~gpu_euclidean_cluster.pointcloud_io.hesai.SweepDecoder` (each packet with its ``size``),
each sweep stamped as nebula's Hesai driver stamps it (the same truncation) on the same
``pointcloud_raw_ex`` name. A bag's packet topics are of one sensor line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ...core.units import NS_PER_S
from ...pointcloud_io import hesai
from ...pointcloud_io.bags import BagError
from ...pointcloud_io.hesai.bags import PANDAR_SCAN
from ...pointcloud_io.hesai.calibration import (
    check_calibration_model as check_hesai_calibration_model,
)
from ...pointcloud_io.pointcloud2 import from_structured
from ...pointcloud_io.velodyne import (
    Sweep,
    SweepDecoder,
    VelodyneCalibration,
    load_calibration,
    velodyne_typestore,
)
from ...pointcloud_io.velodyne.bags import VELODYNE_SCAN
from ...pointcloud_io.velodyne.calibration import check_calibration_model
from ...pointcloud_io.velodyne.cdr import scan_from_cdr
from ...pointcloud_io.velodyne.sweeps import PacketsRefusedError
from ..messages import BUILD_MESSAGE_PACKAGES
from ..messages.serialized import publishable_cloud
from ..parameters.option_values import one_line
from ..parameters.velodyne_options import PacketDecoding
from .bag_files import BagFiles
from .replay_options import ReplayOptions

#: A packet topic's calibration: a Velodyne model's, or a Hesai model's (a CSV, the AT128's .dat).
Calibration = VelodyneCalibration | hesai.HesaiCalibration | hesai.HesaiCorrection
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


def sweep_message(sweep: Sweep | hesai.Sweep) -> bytes | PointCloud2:
    """What to publish for ``sweep``: its PointCloud2 as CDR bytes (a message object only where
    the byte encoder does not match this ROS 2 installation)."""
    header = Header(frame_id=sweep.frame_id)
    header.stamp.sec, header.stamp.nanosec = divmod(nebula_stamp_ns(sweep.stamp), NS_PER_S)
    return publishable_cloud(from_structured(sweep.points, is_dense=True), header)


@dataclass(frozen=True)
class PacketMessage:
    """A recorded ``VelodyneScan`` message due for publishing as it is.

    Attributes:
        topic: its packets topic.
        timestamp_ns: its bag time.
        cdr: its serialized bytes (ROS 2 CDR).
    """

    topic: str
    timestamp_ns: int
    cdr: bytes


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
    sweep: Sweep | hesai.Sweep


def scan_cdr(ros1: bool, raw: bytes, msgtype: str = VELODYNE_SCAN) -> bytes:
    """A stored ``VelodyneScan`` (or ``PandarScan``: ``msgtype``) as ROS 2 CDR: the bytes
    themselves, or ROS 1 bytes converted."""
    if not ros1:
        return raw
    store = hesai.pandar_typestore() if msgtype == PANDAR_SCAN else velodyne_typestore()
    return bytes(store.ros1_to_cdr(raw, msgtype))


def velodyne_scan_type() -> type:
    """``velodyne_msgs/msg/VelodyneScan``'s Python class, its type support loaded (what a
    publisher of the recorded bytes needs).

    Raises:
        ImportError: the package is not importable, or its type support libraries are not
            (a ``PYTHONPATH`` without the ``LD_LIBRARY_PATH`` of its ``setup.bash``).
    """
    from velodyne_msgs.msg import VelodyneScan

    if VelodyneScan._TYPE_SUPPORT is None:
        VelodyneScan.__import_type_support__()
    if VelodyneScan._TYPE_SUPPORT is None:
        raise ImportError("velodyne_msgs is importable but its type support libraries are not")
    return VelodyneScan


def pandar_scan_type() -> type:
    """``pandar_msgs/msg/PandarScan``'s Python class, its type support loaded.

    Raises:
        ImportError: as :func:`velodyne_scan_type`.
    """
    from pandar_msgs.msg import PandarScan

    if PandarScan._TYPE_SUPPORT is None:
        PandarScan.__import_type_support__()
    if PandarScan._TYPE_SUPPORT is None:
        raise ImportError("pandar_msgs is importable but its type support libraries are not")
    return PandarScan


#: Each packet message type's Python class loader, its package's name and where to get it.
SCAN_TYPES: dict[str, tuple[Callable[[], type], str, str]] = {
    VELODYNE_SCAN: (
        velodyne_scan_type,
        "velodyne_msgs",
        "install a ROS 2 distribution's ros-<distro>-velodyne-msgs",
    ),
    PANDAR_SCAN: (pandar_scan_type, "pandar_msgs", "install nebula's pandar_msgs"),
}
#: The packet message types a bag's packet topics may hold.
PACKET_TYPES = tuple(SCAN_TYPES)


@dataclass(frozen=True)
class PacketPlan:
    """How a bag's packet topics are played (see :func:`packet_plan`).

    Attributes:
        raw: the recorded messages are published (on the packets topics).
        decodings: how each topic is decoded into sweeps, by topic; empty: not decoded.
        scan_type: the packet message's class (``VelodyneScan``, ``PandarScan``) where ``raw``,
            else None.
        notes: one-line notes on a default that could not be kept.
    """

    raw: bool
    decodings: Mapping[str, PacketDecoding] = field(default_factory=dict)
    scan_type: type | None = None
    notes: tuple[str, ...] = ()


def packet_plan(
    options: ReplayOptions,
    topics: Sequence[str],
    kit_decodings: Mapping[str, PacketDecoding] | None = None,
    msgtype: str = VELODYNE_SCAN,
) -> PacketPlan:
    """How the packet ``topics`` (all of ``msgtype``: ``VelodyneScan`` or ``PandarScan``) are
    played, given ``--packets`` (``options.packets``).

    The default, both, falls back to what can be played, with a note: the packets only when
    neither ``--sensor-model`` nor ``--sensor-params`` names the sensor (decoding needs it; an
    explicit ``both`` too), the decoded sweeps only when ``velodyne_msgs`` is not importable.
    ``kit_decodings`` (a sensor kit's, every topic's own) names the sensors instead of the
    options.

    Raises:
        ValueError: an explicit ``raw`` or ``both`` without ``velodyne_msgs`` (``pandar_msgs``);
            decoding without the sensor, with bad settings or without its calibration file
            (:meth:`~..parameters.velodyne_options.VelodyneOptions.resolve`), or with a model
            of the other sensor line. One line each.
    """
    mode = options.packets
    listed = ", ".join(topics)
    notes: list[str] = []
    scan_type = None
    missing = ""  # why the recorded messages cannot be published
    load_type, package, install = SCAN_TYPES[msgtype]
    if mode != "decoded":
        try:
            scan_type = load_type()
        except ImportError as error:
            missing = (
                f"the {package} Python package ({one_line(error)}): {install}, or "
                f"{BUILD_MESSAGE_PACKAGES}"
            )
            if mode is not None:
                raise ValueError(
                    f"--packets {mode} publishes the recorded messages and needs {missing}"
                ) from None
            notes.append(
                f"note: {listed} play decoded only (--packets decoded): publishing the recorded "
                f"messages too needs {missing}"
            )
            mode = "decoded"
    velodyne = options.velodyne
    sensor_named = kit_decodings is not None or (
        velodyne.sensor_model is not None or velodyne.sensor_params is not None
    )
    if mode == "raw" or (mode != "decoded" and not sensor_named):
        if mode != "raw":
            notes.append(
                f"note: {listed} play as recorded only (--packets raw): decoding them needs "
                "the sensor (--sensor-model or --sensor-params)"
            )
        return PacketPlan(raw=True, scan_type=scan_type, notes=tuple(notes))
    if kit_decodings is not None:
        decodings = {topic: kit_decodings[topic] for topic in topics}
    else:
        try:
            decodings = dict.fromkeys(topics, velodyne.resolve())
        except ValueError as error:
            if missing and not sensor_named:  # neither way to play them works: say both
                raise ValueError(
                    f"{error}; playing them as recorded instead needs {missing}"
                ) from None
            raise
        for decoding in decodings.values():
            if decoding.is_hesai != (msgtype == PANDAR_SCAN):
                raise ValueError(
                    f"--sensor-model {decoding.settings.model} does not decode {msgtype} "
                    "messages: give a model of that sensor line"
                )
    return PacketPlan(
        raw=mode != "decoded", decodings=decodings, scan_type=scan_type, notes=tuple(notes)
    )


#: Refused messages noted one by one in a pass; the rest are counted at its end.
REFUSALS_NOTED = 5


class PacketStream:
    """The messages of a bag's packet topics as :func:`packet_plan` plays them: the recorded
    messages and/or the sweeps decoded from them (afresh on every pass), in bag-time order, a
    message before the sweeps it completes.

    Args:
        path: the bag (read through its own :class:`~.bag_files.BagFiles`, beside the player's).
        topics: ``VelodyneScan`` (or ``PandarScan``: ``msgtype``) topics; each gets its own
            decoder.
        raw: yield the recorded messages (:class:`PacketMessage`).
        decoding: settings and calibration file, one for every topic or each topic's own (a
            topic left out is played, not decoded); each file is read here, once, and checked
            against the sensor model of every topic it decodes; None: no sweeps.
        note: takes the one-line note of each message the decoder refuses (at most
            :data:`REFUSALS_NOTED` a pass, then their count at the pass's end).
        msgtype: the topics' message type.

    Raises:
        ValueError: a calibration file cannot be read, or is not the model's
            (``CalibrationError``).
    """

    def __init__(
        self,
        path: Path,
        topics: Sequence[str],
        raw: bool,
        decoding: PacketDecoding | Mapping[str, PacketDecoding] | None,
        note: Callable[[str], None] = print,
        msgtype: str = VELODYNE_SCAN,
    ) -> None:
        self.path = path
        self.msgtype = msgtype
        self.topics = list(topics)
        self.raw = raw
        if isinstance(decoding, PacketDecoding):
            decoding = dict.fromkeys(self.topics, decoding)
        #: each decoded topic's settings and calibration file
        self.decodings: dict[str, PacketDecoding] = {
            topic: decoding[topic] for topic in self.topics if decoding and topic in decoding
        }
        self.note = note
        loaded: dict[Path, Calibration] = {}
        #: each decoded topic's calibration, read once per file
        self.calibrations: dict[str, Calibration] = {}
        for topic, topic_decoding in self.decodings.items():
            file = topic_decoding.calibration_file
            sensor = topic_decoding.settings.sensor
            if file not in loaded:
                hesai_model = isinstance(sensor, hesai.HesaiModel)
                loaded[file] = (
                    hesai.load_for_model(file, sensor) if hesai_model else load_calibration(file)
                )
            check_model = (
                check_hesai_calibration_model
                if isinstance(sensor, hesai.HesaiModel)
                else check_calibration_model
            )
            check_model(loaded[file], sensor)
            self.calibrations[topic] = loaded[file]

    @property
    def calibration(self) -> Calibration | None:
        """The calibration every decoded topic shares (one file); None when none or several."""
        shared = {id(calibration): calibration for calibration in self.calibrations.values()}
        return next(iter(shared.values())) if len(shared) == 1 else None

    def messages(
        self, start_ns: int | None, stop_ns: int | None
    ) -> Iterator[PacketMessage | SweepMessage]:
        """The messages with bag time in ``[start_ns, stop_ns)`` and the sweeps they complete,
        in time order; decoding starts at ``start_ns`` with empty decoders, as a driver fed from
        there would.

        Raises:
            BagError: a message that is not a ``VelodyneScan`` (``PandarScan``; every one is
                checked, also when only published).
        """
        refused = 0
        msgtype = self.msgtype
        decoders = {
            topic: (hesai.SweepDecoder if decoding.is_hesai else SweepDecoder)(
                self.calibrations[topic], decoding.settings
            )
            for topic, decoding in self.decodings.items()
        }
        parse = hesai.scan_from_cdr if msgtype == PANDAR_SCAN else scan_from_cdr
        with BagFiles(self.path) as bag:
            for part, connection, timestamp, raw in bag.raw_messages(
                self.topics, start_ns, stop_ns
            ):
                try:
                    cdr = scan_cdr(part.is_ros1, raw, msgtype)
                    scan = parse(cdr, connection.topic)
                except Exception as error:  # the CDR parsers'; rosbags' on damaged ROS 1 bytes
                    raise BagError(
                        f"corrupt {msgtype} message on {connection.topic} in {self.path}: "
                        f"{one_line(error)}"
                    ) from None
                if self.raw:
                    yield PacketMessage(scan.topic, timestamp, cdr)
                decoder = decoders.get(scan.topic)
                if decoder is not None:
                    try:
                        timing = scan.sizes if msgtype == PANDAR_SCAN else scan.packet_seconds
                        sweeps = decoder.feed(scan.packets, timing)
                    except (PacketsRefusedError, hesai.PacketsRefusedError) as error:
                        refused += 1  # the budget, another model's packets
                        if refused <= REFUSALS_NOTED:
                            self.note(
                                f"note: {msgtype} message on {scan.topic} at bag time "
                                f"{timestamp} ns not decoded ({error.kind}): {one_line(error)}"
                            )
                        continue
                    for sweep in sweeps:
                        yield SweepMessage(scan.topic, timestamp, sweep_message(sweep), sweep)
        if refused > REFUSALS_NOTED:
            self.note(f"note: {refused} {msgtype} messages not decoded in this pass")
