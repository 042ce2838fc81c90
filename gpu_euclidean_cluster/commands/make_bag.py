"""``gpu-euclidean-cluster make-bag``: write point-cloud files or simulated sweeps to a bag.

Autoware style: topic ``/points_raw``, frame ``velodyne``, fields x y z intensity (float32) and
ring (uint16), 10 Hz stamps. Sources without a ring field get one from each point's elevation and
the beam table of ``--ring-sensor``; sources without intensity are refused (no invented values).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.units import NS_PER_S
from .errors import CommandError
from .simulate import add_simulation_arguments

if TYPE_CHECKING:
    import numpy as np

    from ..pointcloud_io import Cloud

# Same values as gpu_euclidean_cluster.pointcloud_io.bags (kept here so that building the parser
# does not import rosbags; test_bags checks that they agree).
STORAGES = ("ros1", "sqlite3", "mcap")
STORAGE_OF_SUFFIX = {".bag": "ros1", ".mcap": "mcap", ".db3": "sqlite3"}
DEFAULT_TOPIC = "/points_raw"
DEFAULT_FRAME_ID = "velodyne"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..pointcloud_io import FORMATS

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
        type=int,
        default=1,
        metavar="N",
        help="write the input files N times over, one frame per --rate-hz period (e.g. one file "
        "as a 30-frame bag)",
    )
    add_simulation_arguments(parser, frames=20)
    parser.add_argument(
        "--ring-sensor",
        default="hdl64e",
        help="beam table for rings of inputs that have none (default hdl64e, KITTI's sensor)",
    )
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help=f"default {DEFAULT_TOPIC}")
    parser.add_argument("--frame-id", default=DEFAULT_FRAME_ID, help=f"default {DEFAULT_FRAME_ID}")
    parser.add_argument(
        "--start-time",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stamp of the first frame, seconds since the epoch (default: now)",
    )
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


def cloud_points(cloud: Cloud, path: Path, ring_elevations: Sequence[float]) -> np.ndarray:
    """Autoware structured points of a loaded file; ring derived from elevation when absent."""
    from ..pointcloud_io.bags import autoware_points, ring_from_elevation

    intensity = cloud.fields.get("intensity")
    if intensity is None:
        raise CommandError(f"{path}: no intensity field; Autoware clouds need one")
    ring = cloud.fields.get("ring")
    if ring is None:
        ring = ring_from_elevation(cloud.xyz, ring_elevations)
    return autoware_points(cloud.xyz, intensity, ring)


def file_frames(
    paths: Sequence[Path],
    fmt: str | None,
    ring_sensor: str,
    start_ns: int,
    period_ns: int,
    repeat: int = 1,
) -> Iterator[tuple[int, np.ndarray]]:
    """The files' points as frames ``period_ns`` apart, all files ``repeat`` times over (each
    file is read once)."""
    from ..pointcloud_io import load_points
    from ..tools.simulation import get_sensor

    elevations = get_sensor(ring_sensor).elevations_deg
    points = [cloud_points(load_points(path, fmt), path, elevations) for path in paths]
    for index in range(repeat * len(points)):
        yield start_ns + index * period_ns, points[index % len(points)]


def simulated_frames(
    sensor: str, frames: int, seed: int, rate_hz: float, start_ns: int
) -> Iterator[tuple[int, np.ndarray]]:
    from ..tools.simulation import LidarSimulator, get_sensor, street_scene

    simulator = LidarSimulator(get_sensor(sensor), seed=seed)
    for scan in simulator.sequence(street_scene(seed=seed), frames, rate_hz, start_ns):
        yield scan.stamp_ns, scan.autoware_points()


def run(args: argparse.Namespace) -> int:
    from ..pointcloud_io.bags import write_pointcloud_bag

    if args.simulate == bool(args.inputs):
        raise CommandError("give either input files or --simulate (not both, not neither)")
    if not args.rate_hz > 0:
        raise CommandError(f"--rate-hz must be > 0, got {args.rate_hz}")
    if args.frames < 1:
        raise CommandError(f"--frames must be >= 1, got {args.frames}")
    if args.repeat < 1:
        raise CommandError(f"--repeat must be >= 1, got {args.repeat}")
    if args.simulate and args.repeat != 1:
        raise CommandError("--repeat repeats input files; --simulate takes --frames instead")
    storage = storage_for(args.output, args.storage)
    start_s = time.time() if args.start_time is None else args.start_time
    start_ns = round(start_s * NS_PER_S)
    period_ns = round(NS_PER_S / args.rate_hz)
    if args.simulate:
        frames = simulated_frames(args.sensor, args.frames, args.seed, args.rate_hz, start_ns)
    else:
        frames = file_frames(
            args.inputs, args.format, args.ring_sensor, start_ns, period_ns, args.repeat
        )
    count = write_pointcloud_bag(
        args.output, frames, storage=storage, topic=args.topic, frame_id=args.frame_id
    )
    print(f"wrote {count} frames to {args.output} ({storage}, topic {args.topic})")
    return 0
