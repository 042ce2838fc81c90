"""``gpu-euclidean-cluster make-bag``: write point-cloud files or simulated sweeps to a bag.

Autoware style: topic ``/points_raw``, frame ``velodyne``, 10 Hz stamps, the fields of
``--layout`` (see ``gpu_euclidean_cluster.pointcloud_io.bags``): ``xyzir`` (default) x y z
intensity (float32) and ring (uint16), Autoware.ai's ``PointXYZIR`` fields packed; ``xyzir32``
the same fields as Autoware.ai's PCL ``PointXYZIR`` lays them out (32 bytes); ``xyzirc`` Autoware
Universe's ``PointXYZIRC``; ``xyzircaedt`` nebula's ``PointXYZIRCAEDT``.

Simulated sweeps (``--simulate``) have every field (``simulate``'s module docstring says how).
Files: sources without intensity are refused (no invented values); a ring comes from the file's
``ring`` (or ``channel``) field, else from each point's elevation and the beam table of
``--ring-sensor``. For ``xyzirc``/``xyzircaedt`` the intensity is clipped to [0, 255] and rounded
to uint8, and a file whose intensities all lie in [0, 1] with fractions (KITTI's reflectance) is
refused rather than rounded to 0 and 1; ``return_type`` is the file's, else 0 (nebula's UNKNOWN).
``xyzircaedt`` takes the file's ``time_stamp`` field (integer ns after the cloud's stamp) and
refuses files without one; azimuth, elevation and distance are the file's fields where present,
else computed from x y z as nebula defines them (``bags.polar_fields``).

The output is never an existing path (an input least of all), and is bounded
(:mod:`.output_bounds`): before anything is written, the bag's size (the frames' points, each
simulated sweep as its sensor's every ray returning, plus each message's overhead) must be within
``--max-output-gb`` and the free disk; while writing, a frame that would fill the disk ends the
bag there, complete and in place, and the command says so; a bag that a full disk cuts short all
the same is removed (it is written under a temporary name). Each is one line, exit status 2.
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.units import NS_PER_S
from ..ros.parameters.option_values import (
    MAX_STAMP_S,
    argument,
    frame_id,
    one_line,
    positive_integer,
    stamp_seconds,
    topic_name,
)
from .errors import CommandError
from .output_bounds import DiskWatch, add_max_output_argument, check_output_size, is_disk_full
from .simulate import add_layout_argument, add_simulation_arguments, sweep_bytes_at_most

if TYPE_CHECKING:
    import numpy as np

    from ..pointcloud_io import Cloud

# Same values as gpu_euclidean_cluster.pointcloud_io.bags (kept here so that building the parser
# does not import rosbags; test_bags checks that they agree).
STORAGES = ("ros1", "sqlite3", "mcap")
STORAGE_OF_SUFFIX = {".bag": "ros1", ".mcap": "mcap", ".db3": "sqlite3"}
DEFAULT_TOPIC = "/points_raw"
DEFAULT_FRAME_ID = "velodyne"
#: Bytes a message takes in a bag beyond its points, at most: the PointCloud2 header and field
#: list, the storage's record header and index entries.
MESSAGE_OVERHEAD_BYTES = 1024
#: Bytes a bag takes beyond its messages, at most: connection, schema and metadata records.
BAG_OVERHEAD_BYTES = 64 * 1024


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..pointcloud_io import FORMATS
    from ..tools.simulation.beams import SENSORS

    parser = subparsers.add_parser(
        "make-bag",
        help="write KITTI/nuScenes/PCD/npy files or simulated sweeps to a ROS 1 or ROS 2 bag",
        description="Write point clouds (one file per frame, in the order given) or simulated "
        "sweeps (--simulate) as Autoware-style PointCloud2 messages to a ROS 1 .bag or a ROS 2 "
        "bag directory (sqlite3 or MCAP).",
    )
    parser.add_argument(
        "output",
        type=Path,
        help="OUT.bag (ROS 1), OUT.mcap / OUT.db3 (one ROS 2 storage file), or a ROS 2 bag "
        "directory (any other name)",
    )
    parser.add_argument("inputs", type=Path, nargs="*", help="point-cloud files, one per frame")
    parser.add_argument(
        "--storage",
        choices=STORAGES,
        default=None,
        help="bag storage (default: ros1 for .bag, mcap for .mcap, sqlite3 for .db3 and "
        "directories)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, default=None, help="input format (default: from the name)"
    )
    parser.add_argument(
        "--simulate", action="store_true", help="write simulated sweeps instead of files"
    )
    parser.add_argument(
        "--repeat",
        type=argument(positive_integer),
        default=1,
        metavar="N",
        help="write the input files N times over, one frame per --rate-hz period (e.g. one file "
        "as a 30-frame bag)",
    )
    add_simulation_arguments(parser, frames=20)
    add_layout_argument(parser)
    parser.add_argument(
        "--ring-sensor",
        choices=tuple(SENSORS),
        default="hdl64e",
        help="beam table for rings of inputs that have none (default hdl64e, KITTI's sensor)",
    )
    parser.add_argument(
        "--topic",
        type=argument(topic_name),
        default=DEFAULT_TOPIC,
        help=f"a ROS 2 topic name (default {DEFAULT_TOPIC})",
    )
    parser.add_argument(
        "--frame-id",
        type=argument(frame_id),
        default=DEFAULT_FRAME_ID,
        help=f"header.frame_id of every message, not empty (default {DEFAULT_FRAME_ID})",
    )
    parser.add_argument(
        "--start-time",
        type=argument(stamp_seconds),
        default=None,
        metavar="SECONDS",
        help="stamp of the first frame, seconds since the epoch, 0 to 2^31 - 1 (ROS 2 stamps "
        "end in 2038; default: now)",
    )
    add_max_output_argument(parser)
    parser.set_defaults(run=run)


def storage_for(output: Path, storage: str | None) -> str:
    """The storage to write: explicit, or from the output name (``.bag`` ROS 1, ``.mcap`` MCAP,
    ``.db3`` sqlite3; another name is a ROS 2 bag directory, sqlite3 unless ``--storage``)."""
    named = STORAGE_OF_SUFFIX.get(output.suffix)
    if storage is None:
        return named or "sqlite3"
    if named is not None and named != storage:
        raise CommandError(f"{output}: a {output.suffix} name holds a {named} bag, not {storage}")
    if storage == "ros1" and named is None:
        raise CommandError(f"{output}: a ROS 1 bag is a file whose name ends in .bag")
    return storage


def cloud_points(
    cloud: Cloud, path: Path, ring_elevations: Sequence[float], layout: str = "xyzir"
) -> np.ndarray:
    """Structured points of a loaded file in ``layout``; ring derived from elevation when absent
    (the module docstring says what each layout takes from the file)."""
    import numpy as np

    from ..pointcloud_io.bags import layout_points, ring_from_elevation

    fields = cloud.fields
    intensity = fields.get("intensity")
    if intensity is None:
        raise CommandError(f"{path}: no intensity field; Autoware clouds need one")
    ring = fields.get("ring", fields.get("channel"))
    if ring is None:
        ring = ring_from_elevation(cloud.xyz, ring_elevations)
    if layout in ("xyzir", "xyzir32"):  # float intensity, kept as it is
        return layout_points(layout, cloud.xyz, intensity, ring)
    if intensity.dtype.kind == "f":
        finite = intensity[np.isfinite(intensity)]
        if finite.size and finite.min() >= 0 and finite.max() <= 1 and (finite % 1).any():
            raise CommandError(
                f"{path}: intensities lie in [0, 1] (normalised reflectance); a uint8 intensity "
                f"({layout}) would round them to 0 and 1: use --layout xyzir"
            )
    extras = {}
    if layout == "xyzircaedt":
        stamps = fields.get("time_stamp")
        if stamps is None:
            raise CommandError(
                f"{path}: no time_stamp field; --layout xyzircaedt needs each point's time "
                "(ns after the cloud's stamp): use --layout xyzirc"
            )
        if stamps.dtype.kind not in "iu" or (stamps.size and stamps.min() < 0):
            raise CommandError(
                f"{path}: time_stamp is {stamps.dtype}; xyzircaedt needs whole ns >= 0 (uint32)"
            )
        extras = {name: fields.get(name) for name in ("azimuth", "elevation", "distance")}
        extras["time_stamp"] = stamps
    try:
        return layout_points(
            layout, cloud.xyz, intensity, ring, return_type=fields.get("return_type"), **extras
        )
    except ValueError as error:
        raise CommandError(f"{path}: {error}") from None


def file_points(
    paths: Sequence[Path], fmt: str | None, ring_sensor: str, layout: str = "xyzir"
) -> list[np.ndarray]:
    """The points of each file in ``layout`` (every file read before the first frame is written:
    a file refused stops the command before the bag is created)."""
    from ..core.memory import host_memory_budget
    from ..pointcloud_io import load_points
    from ..tools.simulation import get_sensor

    elevations = get_sensor(ring_sensor).elevations_deg
    return [
        cloud_points(
            load_points(path, fmt, max_bytes=host_memory_budget()), path, elevations, layout
        )
        for path in paths
    ]


def repeated_frames(
    points: Sequence[np.ndarray], start_ns: int, period_ns: int, repeat: int = 1
) -> Iterator[tuple[int, np.ndarray]]:
    """The files' ``points`` as frames ``period_ns`` apart, all of them ``repeat`` times over."""
    for index in range(repeat * len(points)):
        yield start_ns + index * period_ns, points[index % len(points)]


def simulated_frames(
    sensor: str, frames: int, seed: int, rate_hz: float, start_ns: int, layout: str = "xyzir"
) -> Iterator[tuple[int, np.ndarray]]:
    from ..tools.simulation import LidarSimulator, get_sensor, street_scene

    simulator = LidarSimulator(get_sensor(sensor), seed=seed)
    for scan in simulator.sequence(street_scene(seed=seed), frames, rate_hz, start_ns):
        yield scan.stamp_ns, scan.points(layout)


def run(args: argparse.Namespace) -> int:
    from ..pointcloud_io.bags import write_pointcloud_bag
    from ..tools.simulation import get_sensor

    if args.simulate == bool(args.inputs):
        raise CommandError("give either input files or --simulate (not both, not neither)")
    if args.simulate and args.repeat != 1:
        raise CommandError("--repeat repeats input files; --simulate takes --frames instead")
    if args.output.exists() or args.output.is_symlink():
        inputs = [path for path in args.inputs if path.exists() and path.samefile(args.output)]
        role = "is an input" if inputs else "exists already"
        raise CommandError(f"{args.output} {role}; not overwriting: give a new output name")
    storage = storage_for(args.output, args.storage)
    start_s = time.time() if args.start_time is None else args.start_time
    start_ns = round(start_s * NS_PER_S)
    period_ns = round(NS_PER_S / args.rate_hz)
    count = args.frames if args.simulate else args.repeat * len(args.inputs)
    last_s = (start_ns + (count - 1) * period_ns) / NS_PER_S
    if last_s >= MAX_STAMP_S + 1:
        raise CommandError(
            f"the last of {count} frames at {args.rate_hz:g} Hz would be stamped {last_s:.0f} s "
            f"after the epoch, past the last ROS 2 stamp ({MAX_STAMP_S} s, in 2038); "
            "give an earlier --start-time, a higher --rate-hz or fewer frames"
        )
    if args.simulate:
        sweep_bytes = sweep_bytes_at_most(get_sensor(args.sensor), args.layout)
        estimate = count * (sweep_bytes + MESSAGE_OVERHEAD_BYTES)
        what = f"{count} simulated {args.sensor} sweeps"
        frames = simulated_frames(
            args.sensor, args.frames, args.seed, args.rate_hz, start_ns, args.layout
        )
    else:
        points = file_points(args.inputs, args.format, args.ring_sensor, args.layout)
        cycle_bytes = sum(p.nbytes + MESSAGE_OVERHEAD_BYTES for p in points)
        estimate = args.repeat * cycle_bytes
        what = f"{count} frames ({len(points)} files x {args.repeat})"
        frames = repeated_frames(points, start_ns, period_ns, args.repeat)
    check_output_size(args.output, estimate + BAG_OVERHEAD_BYTES, args.max_output_gb, what)
    watch = DiskWatch(args.output)
    try:
        written = write_pointcloud_bag(
            args.output,
            watch.frames(frames, MESSAGE_OVERHEAD_BYTES),
            storage=storage,
            topic=args.topic,
            frame_id=args.frame_id,
        )
    except (OSError, sqlite3.Error) as error:
        if is_disk_full(error):
            raise CommandError(
                f"the disk filled up writing {args.output} ({one_line(error)}); the incomplete "
                "bag was removed"
            ) from None
        if isinstance(error, OSError):
            raise
        raise CommandError(f"cannot write {args.output}: {one_line(error)}") from None
    if watch.stopped:
        raise CommandError(
            f"stopped after {written} of {count} frames: the disk is nearly full "
            f"({watch.describe()}); {args.output} holds the {written} frames, complete"
        )
    print(f"wrote {written} frames to {args.output} ({storage}, topic {args.topic}, {args.layout})")
    return 0
