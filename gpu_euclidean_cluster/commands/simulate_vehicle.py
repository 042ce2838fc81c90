"""``simulate --sensor-kit KIT --bag OUT``: a vehicle's LiDARs as one ROS 2 bag of raw packets,
with the ground truth beside it.

The street of ``simulate`` (its ``--seed``) is laid around the vehicle in the kit's base frame
(``tools/simulation/vehicle.py``: the ground at z = 0, nothing within reach of the vehicle's
body), and every packets sensor of the kit sees it from its pose, firing as its model fires and
turning at ``--rate-hz`` (5 to 20 Hz: nebula's 300 to 1200 RPM) from its scan phase. Each
sensor's packets, encoded as its model sends them (``pointcloud_io/velodyne/encoder.py``), go
to its topic as ``velodyne_msgs/msg/VelodyneScan``: one message a turn, cut where nebula's
driver cuts them, stamped with its first packet's time, recorded at its last packet's.
Decoding a sensor's messages with its settings (the node, ``replay``, nebula) gives ``--frames``
whole sweeps whose every point lies on the surface it hit, within the range quantisation.

Time: frame ``n`` is the instant ``--start-time + n / rate``; the scene is frozen at it for
every sensor's sweep ``n``. A sensor's first firing is at ``--start-time`` plus its
``lidar_timestamp_offsets`` entry when the kit's ``concatenation`` matches sweeps the advanced
way (what Autoware's matching expects of a phase-locked vehicle), else at ``--start-time``.

``--tf-static``: one ``tf2_msgs/msg/TFMessage`` on ``/tf_static`` at ``--start-time`` (offered
as a static broadcaster offers it: reliable, transient local, depth 1), one transform from the
kit's base frame to each sensor's frame, the kit's poses composed (a kit whose poses come from
this bag, ``poses: {tf_static: {bag: OUT}}``, gets them back to float64's rounding; it must
leave out ``description``, whose joints this one transform already holds).

The ground truth, ``OUT/ground_truth.npz`` (NumPy's ``savez_compressed``: ``numpy.load`` reads
it; everything in the base frame):

- ``base_frame`` (the kit's), ``rate_hz``, ``ground_z`` (0.0), ``frame_stamp_ns`` (N,) int64:
  each frame's instant;
- ``objects/<field>``, one row per object and frame: ``frame`` (int32), ``id`` (int32, 1 up; the
  ground is 0), ``kind`` (``car``, ``person``, ``pole``, ``wall``), ``shape`` (``box`` or
  ``cylinder``), ``center`` (x y z of the volume's centre), ``size`` (length along the heading,
  width, height; a cylinder's 2r, 2r, height), ``yaw`` (radians), ``radius`` (a cylinder's, 0 for
  a box), ``velocity`` (x y, m/s);
- ``sensors``: the sensors' names; for each, ``<name>/object_id`` (int32): the object each point
  of its decoded sweeps hit (0 the ground), sweep after sweep, each in the decoder's order
  (nebula's: what the node decodes, before the crop boxes), and ``<name>/sweep_start`` (N + 1,)
  int64: where each sweep starts in it.

The output is bounded as ``simulate``'s and ``make-bag``'s are (:mod:`.output_bounds`): the
estimate (each sweep's packets, and its truth with every return kept) is checked before
anything is written; a frame that would fill the disk ends the bag there, complete, with the
truth of the frames written. The bag is written under a temporary name beside ``OUT`` and moved
into place when complete; ``OUT`` must not exist. Every refusal is one line, exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.units import NS_PER_S
from ..ros.parameters.option_values import MAX_STAMP_S, argument, one_line, stamp_seconds
from .errors import CommandError
from .output_bounds import DiskWatch, check_output_size, is_disk_full, size_text

if TYPE_CHECKING:
    import numpy as np

    from ..pointcloud_io.sensor_kit import Pose, Sensor, SensorKit
    from ..tools.simulation.vehicle import SensorSweep, SimulatedSensor

STORAGES = ("sqlite3", "mcap")
#: nebula's rotation_speed, 300 to 1200 RPM, in turns a second.
MIN_RATE_HZ, MAX_RATE_HZ = 5.0, 20.0
TF_STATIC = "/tf_static"
TF_MESSAGE = "tf2_msgs/msg/TFMessage"
GROUND_TRUTH = "ground_truth.npz"
#: Bytes a message takes in a bag beyond its packets, at most: the header, the storage's records.
MESSAGE_OVERHEAD_BYTES = 1024
#: Bytes a bag takes beyond its messages, at most: metadata, schemas, /tf_static.
BAG_OVERHEAD_BYTES = 64 * 1024
#: Bytes of the ground truth's table a scene object takes in a frame, at most.
OBJECT_ROW_BYTES = 256


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``simulate --sensor-kit``."""
    group = parser.add_argument_group(
        "the whole vehicle",
        "--sensor-kit writes a ROS 2 bag of every packets sensor's VelodyneScan messages, and "
        f"the ground truth beside it (OUT/{GROUND_TRUTH}); --sensor, --layout and --out are "
        "for one sensor's .npy sweeps",
    )
    group.add_argument(
        "--sensor-kit",
        type=Path,
        metavar="FILE",
        help="a sensor kit (docs/sensor_kit.md): simulate its LiDARs as raw packets",
    )
    group.add_argument(
        "--bag", type=Path, metavar="OUT", help="the ROS 2 bag directory to write (new)"
    )
    group.add_argument(
        "--storage", choices=STORAGES, default=None, help="bag storage (default sqlite3)"
    )
    group.add_argument(
        "--tf-static",
        action="store_true",
        help=f"also write {TF_STATIC}: the base frame to each sensor's frame, the kit's poses",
    )
    group.add_argument(
        "--start-time",
        type=argument(stamp_seconds),
        default=None,
        metavar="SECONDS",
        help="the first frame's time, seconds since the epoch, 0 to 2^31 - 1 (default: now)",
    )


def run(args: argparse.Namespace) -> int:
    """Write the bag and its ground truth (the module docstring)."""
    import numpy as np

    from ..pointcloud_io.sensor_kit import load_sensor_kit, sensor_poses
    from ..tools.simulation.vehicle import SensorStream, vehicle_street_scene

    given = [f"--{name}" for name in ("sensor", "layout", "out") if getattr(args, name) is not None]
    if given:
        raise CommandError(
            f"{', '.join(given)}: not with --sensor-kit (its sensors and the bag say all that)"
        )
    if args.bag is None:
        raise CommandError("--sensor-kit needs --bag OUT, the ROS 2 bag directory to write")
    if not MIN_RATE_HZ <= args.rate_hz <= MAX_RATE_HZ:
        raise CommandError(
            f"--rate-hz {args.rate_hz:g}: a Velodyne turns at {MIN_RATE_HZ:g} to "
            f"{MAX_RATE_HZ:g} Hz (nebula's rotation_speed 300 to 1200 RPM)"
        )
    bag = _check_bag_path(args.bag)
    start_s = time.time() if args.start_time is None else args.start_time
    start_ns = round(start_s * NS_PER_S)
    kit = load_sensor_kit(args.sensor_kit)
    sensors = _simulated_sensors(kit, sensor_poses(kit), start_ns, args)
    frames, rate_hz = args.frames, args.rate_hz
    estimate = _estimate(sensors, frames, rate_hz)
    check_output_size(
        bag,
        estimate,
        args.max_output_gb,
        f"{frames} frames of {len(sensors)} sensors (up to {size_text(estimate / frames)} each)",
    )
    scene = vehicle_street_scene(args.seed, (frames + 1) / rate_hz)
    scenes = [scene.at(frame / rate_hz) for frame in range(frames + 1)]
    streams = [SensorStream(s, scenes.__getitem__, rate_hz).sweeps(frames) for s in sensors]
    watch = DiskWatch(bag)
    started = time.perf_counter()
    storage = args.storage or "sqlite3"
    with tempfile.TemporaryDirectory(prefix=f".{bag.name}.", dir=bag.parent) as folder:
        written = Path(folder) / bag.name
        truth = {s.name: [] for s in sensors}
        try:
            count = _write_bag(
                written, storage, kit, sensors, streams, truth, watch, args.tf_static, start_ns
            )
        except (OSError, sqlite3.Error) as error:
            if is_disk_full(error):
                raise CommandError(
                    f"the disk filled up writing {bag} ({one_line(error)}); the incomplete "
                    "bag was removed"
                ) from None
            if isinstance(error, OSError):
                raise
            raise CommandError(f"cannot write {bag}: {one_line(error)}") from None
        stamps = start_ns + np.arange(count, dtype=np.int64) * round(NS_PER_S / rate_hz)
        _write_ground_truth(written / GROUND_TRUTH, kit, rate_hz, stamps, scenes[:count], truth)
        if bag.exists():
            raise CommandError(f"{bag} appeared while the bag was written; not overwriting")
        written.rename(bag)
    if watch.stopped:
        raise CommandError(
            f"stopped after {count} of {frames} frames: the disk is nearly full "
            f"({watch.describe()}); {bag} holds the {count} frames, complete"
        )
    elapsed = time.perf_counter() - started
    topics = ", ".join(s.topic for s in sensors) + (f", {TF_STATIC}" if args.tf_static else "")
    print(
        f"wrote {count} frames of {len(sensors)} sensors to {bag} ({storage}: {topics}) and "
        f"its ground truth {bag / GROUND_TRUTH}, a scene of {len(scene.objects)} objects, in "
        f"{elapsed:.2f} s"
    )
    return 0


def _check_bag_path(bag: Path) -> Path:
    """``--bag``: a new directory in an existing folder, not named as a storage file."""
    if bag.suffix in (".bag", ".db3", ".mcap"):
        raise CommandError(f"--bag {bag}: a ROS 2 bag directory, not a {bag.suffix} file")
    if bag.exists() or bag.is_symlink():
        raise CommandError(f"{bag} exists already; not overwriting: give a new --bag")
    if not bag.absolute().parent.is_dir():
        raise CommandError(f"--bag {bag}: no folder {bag.absolute().parent}")
    return bag


def calibration_file(kit: SensorKit, sensor: Sensor) -> Path:
    """The calibration file of a packets sensor (``velodyne_options.kit_calibration``).

    Raises:
        CommandError: not found, or an HDL64 without one (nebula ships an S2 and an S3 file).
    """
    from ..ros.parameters.velodyne_options import kit_calibration

    try:
        return kit_calibration(kit, sensor)
    except ValueError as error:
        raise CommandError(str(error)) from None


def _simulated_sensors(
    kit: SensorKit, poses: dict[str, Pose], start_ns: int, args: argparse.Namespace
) -> list[SimulatedSensor]:
    """The kit's packets sensors, each with its encoder and its first firing's time (frame 0
    at ``start_ns``)."""
    from ..frame.vehicle import concatenation_settings
    from ..pointcloud_io.sensor_kit.model import PACKETS
    from ..pointcloud_io.velodyne import load_calibration
    from ..pointcloud_io.velodyne.encoder import VelodyneEncoder
    from ..tools.simulation.vehicle import SimulatedSensor

    others = [s.name for s in kit.sensors if s.input.kind != PACKETS]
    if others:
        raise CommandError(
            f"sensors {', '.join(others)} of {args.sensor_kit} take points: --sensor-kit "
            "simulates packets sensors only"
        )
    concatenation = concatenation_settings(kit)
    offsets = {}
    if concatenation.strategy == "advanced":
        offsets = dict(zip(concatenation.sensors, concatenation.offsets_ns, strict=True))
    last_s = (start_ns + max(offsets.values(), default=0)) / NS_PER_S + (args.frames + 1) / (
        args.rate_hz
    )
    if last_s >= MAX_STAMP_S + 1:
        raise CommandError(
            f"{args.frames} frames at {args.rate_hz:g} Hz would end {last_s:.0f} s after the "
            f"epoch, past the last ROS 2 stamp ({MAX_STAMP_S} s, in 2038); give an earlier "
            "--start-time or fewer frames"
        )
    sensors = []
    for sensor in kit.sensors:
        encoder = VelodyneEncoder(
            load_calibration(calibration_file(kit, sensor)), sensor.input.decoder
        )
        sensors.append(
            SimulatedSensor(
                sensor.name,
                sensor.frame,
                sensor.input.topic,
                poses[sensor.name],
                encoder,
                start_ns + offsets.get(sensor.name, 0),
            )
        )
    return sensors


def _estimate(sensors: Sequence[SimulatedSensor], frames: int, rate_hz: float) -> int:
    """Bytes of the bag and the truth at most: every sweep's packets (one turn's and one more),
    every return a point of the truth, and the scene's table."""
    from ..pointcloud_io.velodyne.cdr import PACKET_CDR_STRIDE
    from ..tools.simulation.vehicle import packets_per_turn

    frame_bytes = 0
    for sensor in sensors:
        layout = sensor.encoder.layout
        packets = math.ceil(packets_per_turn(layout, rate_hz)) + 1
        returns = packets * layout.firings_per_packet * layout.positions
        frame_bytes += packets * PACKET_CDR_STRIDE + MESSAGE_OVERHEAD_BYTES + 4 * returns
    return frames * (frame_bytes + 100 * OBJECT_ROW_BYTES) + BAG_OVERHEAD_BYTES


def _write_bag(
    path: Path,
    storage: str,
    kit: SensorKit,
    sensors: Sequence[SimulatedSensor],
    streams: list,
    truth: dict[str, list[np.ndarray]],
    watch: DiskWatch,
    tf_static: bool,
    start_ns: int,
) -> int:
    """Write the frames (each sensor's message, in record order) while the disk has room;
    gather each sweep's truth in ``truth``; return the frames written."""
    from rosbags.rosbag2 import StoragePlugin, Writer, WriterError

    from ..pointcloud_io.velodyne.bags import VELODYNE_SCAN, velodyne_typestore
    from ..pointcloud_io.velodyne.cdr import scan_to_cdr

    store = velodyne_typestore()
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    count = 0
    try:
        with Writer(path, version=Writer.VERSION_LATEST, storage_plugin=plugin) as writer:
            connections = {
                s.name: writer.add_connection(s.topic, VELODYNE_SCAN, typestore=store)
                for s in sensors
            }
            if tf_static:
                connection = writer.add_connection(
                    TF_STATIC, TF_MESSAGE, typestore=store, offered_qos_profiles=[_static_qos()]
                )
                writer.write(connection, start_ns, _tf_static_cdr(store, kit, sensors, start_ns))
            for sweeps in zip(*streams, strict=True):
                payloads = [
                    (sweep.message.bag_time_ns, sensor.name, scan_to_cdr(sweep.message))
                    for sensor, sweep in zip(sensors, sweeps, strict=True)
                ]
                size = sum(len(cdr) + MESSAGE_OVERHEAD_BYTES for _, _, cdr in payloads)
                if not watch.room_for(size + sum(sweep.object_id.nbytes for sweep in sweeps)):
                    break
                for bag_time_ns, name, cdr in sorted(payloads, key=lambda item: item[0]):
                    writer.write(connections[name], bag_time_ns, cdr)
                for sensor, sweep in zip(sensors, sweeps, strict=True):
                    truth[sensor.name].append(sweep.object_id)
                print(_frame_line(count, sensors, sweeps))
                count += 1
    except WriterError as error:
        raise CommandError(f"cannot write {path.name}: {one_line(error)}") from None
    return count


def _frame_line(
    frame: int, sensors: Sequence[SimulatedSensor], sweeps: Sequence[SensorSweep]
) -> str:
    """What one frame holds, for the console."""
    import numpy as np

    parts = [
        f"{sensor.name} {sweep.message.packets.shape[0]} packets, {sweep.object_id.size} points"
        for sensor, sweep in zip(sensors, sweeps, strict=True)
    ]
    hit = np.unique(np.concatenate([sweep.object_id for sweep in sweeps]))
    return f"frame {frame}: {'; '.join(parts)}; {np.count_nonzero(hit > 0)} objects hit"


def _static_qos():
    """The QoS a static transform broadcaster offers: reliable, transient local, depth 1."""
    from rosbags.interfaces import (
        Qos,
        QosDurability,
        QosHistory,
        QosLiveliness,
        QosReliability,
        QosTime,
    )

    never = QosTime(0, 0)
    return Qos(
        QosHistory.KEEP_LAST,
        1,
        QosReliability.RELIABLE,
        QosDurability.TRANSIENT_LOCAL,
        never,
        never,
        QosLiveliness.AUTOMATIC,
        never,
        False,
    )


def quaternion_from_rotation(rotation: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """``(x, y, z, w)`` of a rotation matrix (float64, Shepperd's method: the largest of the
    four squares first, so no division by a small number)."""
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = rotation
    trace = m00 + m11 + m22
    if trace > 0:
        s = 2.0 * math.sqrt(trace + 1.0)
        return ((m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s, 0.25 * s)
    if m00 >= m11 and m00 >= m22:
        s = 2.0 * math.sqrt(1.0 + m00 - m11 - m22)
        return (0.25 * s, (m01 + m10) / s, (m02 + m20) / s, (m21 - m12) / s)
    if m11 >= m22:
        s = 2.0 * math.sqrt(1.0 + m11 - m00 - m22)
        return ((m01 + m10) / s, 0.25 * s, (m12 + m21) / s, (m02 - m20) / s)
    s = 2.0 * math.sqrt(1.0 + m22 - m00 - m11)
    return ((m02 + m20) / s, (m12 + m21) / s, 0.25 * s, (m10 - m01) / s)


def _tf_static_cdr(
    store, kit: SensorKit, sensors: Sequence[SimulatedSensor], stamp_ns: int
) -> bytes:
    """One ``TFMessage``: the base frame to each sensor's frame, stamped ``stamp_ns``."""
    types = store.types
    sec, nanosec = divmod(stamp_ns, NS_PER_S)
    transforms = []
    for sensor in sensors:
        x, y, z = sensor.pose.translation
        qx, qy, qz, qw = quaternion_from_rotation(sensor.pose.rotation)
        transforms.append(
            types["geometry_msgs/msg/TransformStamped"](
                header=types["std_msgs/msg/Header"](
                    stamp=types["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec),
                    frame_id=kit.base_frame,
                ),
                child_frame_id=sensor.frame_id,
                transform=types["geometry_msgs/msg/Transform"](
                    translation=types["geometry_msgs/msg/Vector3"](x=x, y=y, z=z),
                    rotation=types["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw),
                ),
            )
        )
    message = types[TF_MESSAGE](transforms=transforms)
    return bytes(store.serialize_cdr(message, TF_MESSAGE))


def _write_ground_truth(
    path: Path,
    kit: SensorKit,
    rate_hz: float,
    stamps_ns: np.ndarray,
    scenes: list,
    truth: dict[str, list[np.ndarray]],
) -> None:
    """``ground_truth.npz`` (the module docstring's format) of the frames written."""
    import numpy as np

    from ..tools.simulation.vehicle import ground_truth_objects

    arrays: dict[str, np.ndarray] = {
        "base_frame": np.array(kit.base_frame),
        "rate_hz": np.array(rate_hz),
        "ground_z": np.array(0.0),
        "frame_stamp_ns": np.asarray(stamps_ns, np.int64),
        "sensors": np.array(list(truth), dtype=str),
    }
    for name, values in ground_truth_objects(scenes).items():
        arrays[f"objects/{name}"] = values
    for name, sweeps in truth.items():
        sizes = [sweep.size for sweep in sweeps]
        arrays[f"{name}/object_id"] = np.concatenate([np.zeros(0, np.int32), *sweeps])
        arrays[f"{name}/sweep_start"] = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    with path.open("wb") as file:
        np.savez_compressed(file, **arrays)
