"""The ``replay`` tool: publish the PointCloud2 topics of a bag with their recorded timing.

Velodyne packet topics (``velodyne_msgs/msg/VelodyneScan``, as Autoware records its LiDARs) are
played as ``--packets`` says (:mod:`.packet_player`): as recorded, as ``ros2 bag play`` would
(for a node that decodes packets itself); decoded as Autoware's driver decodes them and published
as its decoded cloud (the options of :mod:`..parameters.velodyne_options` say how); or both, the
default. With a sensor kit (``--sensor-kit``), each packets topic is decoded with its own
sensor's settings, and ``--concatenate`` joins the sensors' sweeps in the vehicle's base frame as
Autoware does (:mod:`.sensor_kit_player`).

Console script ``replay BAG`` (``ros2 run gpu_euclidean_cluster replay BAG`` in a workspace); the
``gpu-euclidean-cluster replay`` sub-command reuses this module's parser. The module owns the
parser (:func:`add_arguments`, giving :class:`~.replay_options.ReplayOptions`) and imports nothing
of ROS at import time, so that the CLI's help works without it; the player is :mod:`.bag_player`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ..parameters.option_values import (
    OneLineParser,
    argument,
    clock_frequency,
    frame_id,
    frequency,
    offset_seconds,
    one_line,
    positive_integer,
    rate_factor,
    span_seconds,
    topic_name,
)
from ..parameters.specs import SPECS
from ..parameters.velodyne_options import (
    AZIMUTH_TIMING_CHOICES,
    MODEL_CHOICES,
    RETURN_MODE_CHOICES,
    SETTING_PARAMETERS,
    VelodyneOptions,
)
from ..qos import RELIABILITIES
from .replay_options import (
    CONCATENATED_TOPIC,
    PACKET_MODES,
    ReplayOptions,
    parse_remaps,
    queue_depth,
    remap_rule,
)


class ReplayError(Exception):
    """An expected failure of the replay tool; shown to the user as one line."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the replay options on ``parser``."""
    parser.add_argument(
        "bag", type=Path, help="ROS 1 .bag file, ROS 2 bag directory, or .db3/.mcap file"
    )
    parser.add_argument(
        "-r",
        "--rate",
        type=argument(rate_factor),
        default=1.0,
        help="playback speed factor, 1e-6 to 1e6 (default 1)",
    )
    parser.add_argument("-l", "--loop", action="store_true", help="repeat until Ctrl-C")
    parser.add_argument(
        "--repeat",
        type=argument(positive_integer),
        default=1,
        metavar="N",
        help="play the segment N times (default 1; --loop: until Ctrl-C)",
    )
    parser.add_argument(
        "--rate-hz",
        type=argument(frequency),
        default=None,
        metavar="HZ",
        help="publish one message every 1/HZ s whatever the bag's stamps (default: the recorded "
        "timing; a one-message segment that loops or repeats plays at 10 Hz)",
    )
    parser.add_argument(
        "--start",
        type=argument(offset_seconds),
        default=0.0,
        metavar="SECONDS",
        help="skip this many seconds from the start of the bag",
    )
    parser.add_argument(
        "--duration",
        type=argument(span_seconds),
        default=None,
        metavar="SECONDS",
        help="play only this many seconds of bag time",
    )
    parser.add_argument(
        "--topics",
        type=argument(topic_name),
        nargs="+",
        default=[],
        metavar="TOPIC",
        help="PointCloud2 and VelodyneScan topics to play (default: all of them)",
    )
    parser.add_argument(
        "--remap",
        type=argument(remap_rule),
        nargs="+",
        default=[],
        metavar="OLD:=NEW",
        help="publish topic OLD under the name NEW (OLD: a PointCloud2 topic, a packets topic "
        "(its recorded messages; with --packets decoded its sweeps) or a packets topic's decoded "
        "name)",
    )
    parser.add_argument(
        "--qos-reliability",
        choices=RELIABILITIES,
        default="reliable",
        help="publisher reliability (default reliable, like ros2 bag play)",
    )
    parser.add_argument(
        "--qos-depth",
        type=argument(queue_depth),
        default=10,
        help="publisher history depth (default 10)",
    )
    parser.add_argument(
        "--clock",
        type=argument(clock_frequency),
        nargs="?",
        const=40.0,
        default=0.0,
        metavar="HZ",
        help="publish /clock with the bag time at HZ (default 40 when given) for use_sim_time",
    )
    parser.add_argument(
        "--wait-for-subscribers",
        type=argument(offset_seconds),
        default=0.0,
        metavar="SECONDS",
        help="before playing, wait up to this long for subscribers on every output topic (packets "
        "and decoded clouds alike)",
    )
    parser.add_argument(
        "--min-subscribers",
        type=argument(positive_integer),
        default=1,
        metavar="N",
        help="subscribers per topic that --wait-for-subscribers waits for (default 1)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _add_velodyne_arguments(parser)
    _add_vehicle_arguments(parser)


def _add_velodyne_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "Velodyne packet bags",
        "velodyne_msgs/msg/VelodyneScan topics are published as recorded (for a node on "
        "input/packets; needs the velodyne_msgs package) and decoded as Autoware's driver "
        "(nebula) decodes them, published as PointCloud2 (PointXYZIRCAEDT) on the packets "
        "topic's namespace + pointcloud_raw_ex. Decoding needs the sensor model, or nebula's "
        "sensor parameter file; explicit options override the file; the rest has nebula's "
        "defaults.",
    )
    group.add_argument(
        "--packets",
        choices=PACKET_MODES,
        help="play packet topics as recorded (raw), as decoded clouds (decoded) or both "
        "(default: both; raw without a sensor model, decoded without velodyne_msgs, each with "
        "a note)",
    )
    group.add_argument(
        "--sensor-model",
        metavar=MODEL_CHOICES,
        help="the sensor (nebula's sensor_model); a Hesai model (PandarXT32, ...) decodes "
        "pandar_msgs/msg/PandarScan topics (docs/hesai.md)",
    )
    group.add_argument(
        "--sensor-params",
        type=Path,
        metavar="FILE",
        help="nebula's sensor parameter file (*.param.yaml: sensor_model, calibration_file, "
        "return_mode, frame_id, min_range, max_range, scan_phase, cloud_min_angle, "
        "cloud_max_angle)",
    )
    group.add_argument(
        "--calibration",
        type=Path,
        metavar="FILE",
        help="nebula calibration YAML, a Hesai model's CSV or .dat (default: the model's file "
        "shipped in config/velodyne or config/hesai)",
    )
    group.add_argument("--return-mode", metavar=RETURN_MODE_CHOICES, help="default Dual")
    group.add_argument(
        "--frame-id",
        type=argument(frame_id),
        metavar="FRAME",
        help="frame of the clouds (default velodyne)",
    )
    group.add_argument(
        "--min-range", type=float, metavar="M", help=_setting_help("min_range", "default 0.3 m")
    )
    group.add_argument(
        "--max-range", type=float, metavar="M", help=_setting_help("max_range", "default 300 m")
    )
    group.add_argument(
        "--scan-phase",
        type=float,
        metavar="DEG",
        help=_setting_help("scan_phase", "azimuth where sweeps are cut (default 0)"),
    )
    group.add_argument(
        "--cloud-min-angle",
        type=int,
        metavar="DEG",
        help=_setting_help("cloud_min_angle", "azimuth window start (default 0)"),
    )
    group.add_argument(
        "--cloud-max-angle",
        type=int,
        metavar="DEG",
        help=_setting_help("cloud_max_angle", "azimuth window end (default 360)"),
    )
    group.add_argument(
        "--azimuth-timing",
        metavar=AZIMUTH_TIMING_CHOICES,
        help="each return's azimuth with nebula's firing timing (default nebula, bit for bit) or "
        "the sensor manual's (sensor; docs/packets.md)",
    )


def _add_vehicle_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "A whole vehicle",
        "A sensor kit (docs/sensor_kit.md) names a vehicle's LiDARs: each packets topic a kit "
        "sensor names is decoded with that sensor's own model, calibration and settings, its "
        "sweeps on the topic's namespace + pointcloud_raw_ex in the sensor's frame; the per-"
        "sensor decoder options above are then refused.",
    )
    group.add_argument(
        "--sensor-kit",
        metavar="FILE",
        help="the sensor kit: a file, or the name of one shipped in config/ (sample_sensor_kit)",
    )
    group.add_argument(
        "--concatenate",
        action="store_true",
        help=f"also join the kit's sweeps in its base frame as Autoware's concatenation node "
        f"does (grouped in bag time), published on {CONCATENATED_TOPIC} (needs --sensor-kit)",
    )


def _setting_help(name: str, text: str) -> str:
    """The help of the option for the decoder setting ``name``: ``text`` and the range of the
    node's parameter for it, which the option is held to (``VelodyneOptions``)."""
    spec = SPECS[SETTING_PARAMETERS[name]]
    return f"{text}; in {spec.constraints}, as the node's {spec.name}"


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    """Build :class:`ReplayOptions` from arguments parsed by :func:`add_arguments`."""
    return ReplayOptions(
        bag=args.bag,
        rate=args.rate,
        loop=args.loop,
        repeat=args.repeat,
        rate_hz=args.rate_hz,
        start_s=args.start,
        duration_s=args.duration,
        topics=tuple(args.topics),
        remap=parse_remaps(args.remap),
        qos_reliability=args.qos_reliability,
        qos_depth=args.qos_depth,
        clock_hz=args.clock,
        wait_for_subscribers_s=args.wait_for_subscribers,
        min_subscribers=args.min_subscribers,
        progress=not args.quiet,
        packets=args.packets,
        sensor_kit=args.sensor_kit,
        concatenate=args.concatenate,
        velodyne=VelodyneOptions(
            sensor_model=args.sensor_model,
            calibration=args.calibration,
            sensor_params=args.sensor_params,
            return_mode=args.return_mode,
            frame_id=args.frame_id,
            min_range=args.min_range,
            max_range=args.max_range,
            scan_phase=args.scan_phase,
            cloud_min_angle=args.cloud_min_angle,
            cloud_max_angle=args.cloud_max_angle,
            azimuth_timing=args.azimuth_timing,
        ),
    )


def run(options: ReplayOptions) -> int:
    """Replay in the main thread; SIGINT and SIGTERM stop it cleanly. Returns the exit status.

    Raises:
        ReplayError: the ROS 2 Python runtime is missing.
        ValueError: a bad bag, topic or remap (``BagError``).
    """
    try:
        from .bag_player import replay_bag
    except ImportError as error:
        raise ReplayError(
            f"replay needs rclpy and sensor_msgs (pip install -e '.[ros]'): {error}"
        ) from None
    from ..transport import configure_transport

    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        # The tool (not the library function) sets this process's Fast DDS transport.
        stats = replay_bag(options, stop, transport=configure_transport)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(stats.summary(), file=sys.stderr)
    return 0


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split a command line into the tool's own arguments and the ROS arguments.

    As rcl does: every ``--ros-args`` opens a ROS section that runs to the next ``--`` or to the
    end. Only those sections go to ``rclpy.init``, so an option value such as the ``OLD:=NEW``
    of ``--remap`` stays the tool's.
    """
    own: list[str] = []
    ros: list[str] = []
    inside = False
    for arg in argv:
        if arg == "--ros-args":
            inside = True
            ros.append(arg)
        elif inside and arg == "--":
            inside = False
        else:
            (ros if inside else own).append(arg)
    return own, ros


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``replay``: same options as ``gpu-euclidean-cluster replay``."""
    parser = OneLineParser(
        prog="replay",
        description="Replay PointCloud2 topics of a ROS 1 or ROS 2 bag, and Velodyne packet "
        "topics as recorded and decoded to PointCloud2.",
    )
    add_arguments(parser)
    argv = sys.argv[1:] if argv is None else list(argv)
    own_args, ros_args = split_ros_args(argv)
    try:
        args = parser.parse_args(own_args)
        # --ros-args (remapping, namespace, log level, ...) go to rclpy.init
        return run(replace(options_from_args(args), rcl_args=(parser.prog, *ros_args)))
    except (ReplayError, ValueError, OSError) as error:
        print(f"{parser.prog}: error: {one_line(error)}", file=sys.stderr)
        return 2
    except MemoryError as error:
        print(f"{parser.prog}: error: out of memory: {one_line(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
