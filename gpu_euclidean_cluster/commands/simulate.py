"""``gpu-euclidean-cluster simulate``: ray-cast a LiDAR through a street scene, one .npy per sweep.

Each ``scan_NNNN.npy`` is a structured array of the ``--layout``'s fields followed by object_id
(int32, ground truth: 0 = ground); ``load_points`` and ``make-bag`` read it. Layouts (see
``gpu_euclidean_cluster.pointcloud_io.bags``):

- ``xyzir`` (default): Autoware.ai's ``PointXYZIR`` fields, packed: x y z intensity (float32),
  ring (uint16).
- ``xyzir32``: the same fields as Autoware.ai's PCL ``PointXYZIR`` lays them out (its ROS 1
  bags): x y z at 0, 4, 8, intensity at 16, ring at 20, 32 bytes a point.
- ``xyzirc``: Autoware Universe's ``PointXYZIRC``: x y z (float32), intensity (uint8: the float
  intensity clipped to [0, 255] and rounded), return_type (uint8: 3, nebula's STRONGEST, for the
  single simulated return), channel (uint16: the ring).
- ``xyzircaedt``: nebula's ``PointXYZIRCAEDT``: ``xyzirc`` then azimuth, elevation (radians),
  distance (m) computed from x y z as nebula defines them, and time_stamp (uint32 ns after the
  sweep's stamp): the nominal firing time of the point's azimuth column (column k of K at k x
  period / K; the scene is frozen at the sweep's stamp).

``--sensor-kit KIT --bag OUT`` simulates a vehicle's LiDARs instead, as a ROS 2 bag of raw
packets with the ground truth beside it (:mod:`.simulate_vehicle`).

The output is bounded (:mod:`.output_bounds`): before the first sweep, the sweeps' size, each
estimated as its sensor's every ray returning, must be within ``--max-output-gb`` and the free
disk; while writing, a sweep that would fill the disk stops the command after the sweeps written
(each file complete; a file a full disk cut short is removed). Either is one line, exit status 2.
"""

from __future__ import annotations

import argparse
import io
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..ros.parameters.option_values import argument, frequency, positive_integer, seed
from . import simulate_vehicle
from .errors import CommandError
from .output_bounds import (
    DiskWatch,
    add_max_output_argument,
    check_output_size,
    is_disk_full,
    size_text,
)

if TYPE_CHECKING:
    from ..tools.simulation import BeamModel

#: Bytes a sweep's file takes beyond its points, at most: the .npy header and the file system's
#: last partial block.
NPY_FILE_OVERHEAD_BYTES = 8192


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate LiDAR sweeps of a street scene with ground-truth object ids",
        description="Ray-cast a rotating LiDAR (real beam tables) through a street scene of "
        "ground, walls, cars, people and poles, some moving; write one .npy per sweep. With "
        "--sensor-kit: a vehicle's LiDARs in that street, as a ROS 2 bag of raw packets.",
    )
    add_simulation_arguments(parser)
    add_layout_argument(parser)
    parser.add_argument(
        "-o", "--out", type=Path, default=Path("simulated"), help="output directory"
    )
    add_max_output_argument(parser)
    simulate_vehicle.add_arguments(parser)
    # one sensor's options say when they were given: --sensor-kit refuses them (run fills them in)
    parser.set_defaults(run=run, sensor=None, layout=None, out=None)


def add_simulation_arguments(parser: argparse.ArgumentParser, frames: int = 10) -> None:
    """Options shared with ``make-bag --simulate`` and ``demo``: sensor, frames, seed, rate."""
    from ..tools.simulation.beams import SENSORS

    parser.add_argument(
        "--sensor", choices=tuple(SENSORS), default="hdl64e", help="beam model (default hdl64e)"
    )
    parser.add_argument(
        "--frames",
        type=argument(positive_integer),
        default=frames,
        help=f"number of sweeps (default {frames})",
    )
    parser.add_argument(
        "--seed",
        type=argument(seed),
        default=0,
        help="scene layout and noise seed, a whole number >= 0 (default 0)",
    )
    parser.add_argument(
        "--rate-hz",
        type=argument(frequency),
        default=10.0,
        help="sweep (message) rate, 1e-6 to 1e6 Hz (default 10 Hz)",
    )


#: the point layouts of ``--layout`` (same as gpu_euclidean_cluster.pointcloud_io.bags.LAYOUTS,
#: kept here so that building the parser does not import rosbags; test_layouts checks them)
LAYOUTS = ("xyzir", "xyzir32", "xyzirc", "xyzircaedt")


def add_layout_argument(parser: argparse.ArgumentParser) -> None:
    """``--layout``, shared with ``make-bag``."""
    parser.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="xyzir",
        help="point layout: xyzir (default; Autoware.ai PointXYZIR fields: x y z intensity "
        "float32, ring uint16, packed), xyzir32 (the same as Autoware.ai's PCL PointXYZIR lays "
        "them out: intensity at 16, ring at 20, 32 bytes), xyzirc (Autoware Universe "
        "PointXYZIRC: x y z float32, intensity uint8, return_type uint8, channel uint16), "
        "xyzircaedt (nebula PointXYZIRCAEDT: xyzirc + azimuth, elevation, distance float32, "
        "time_stamp uint32 ns)",
    )


def sweep_bytes_at_most(sensor: BeamModel, layout: str, ground_truth: bool = False) -> int:
    """The bytes of one sweep's points in ``layout`` when every ray of ``sensor`` returns (the
    most a sweep holds), with simulate's ``object_id`` column when ``ground_truth``."""
    import numpy as np

    from ..tools.simulation import Scan

    empty = Scan(
        np.empty((0, 3), np.float32),
        np.empty(0, np.float32),
        np.empty(0, np.uint16),
        np.empty(0, np.int32),
        stamp_ns=0,
        firing_ns=np.empty(0, np.uint32),
    )
    points = empty.structured(layout) if ground_truth else empty.points(layout)
    return sensor.num_beams * sensor.azimuths_per_sweep * points.dtype.itemsize


#: ``simulate``'s one-sensor defaults, filled in by :func:`run` when ``--sensor-kit`` is absent.
ONE_SENSOR_DEFAULTS = {"sensor": "hdl64e", "layout": "xyzir", "out": Path("simulated")}
#: The options of ``--sensor-kit`` alone, and the value each has when not given.
VEHICLE_OPTIONS = {"bag": None, "storage": None, "tf_static": False, "start_time": None}


def run(args: argparse.Namespace) -> int:
    if args.sensor_kit is not None:
        return simulate_vehicle.run(args)
    given = [
        "--" + name.replace("_", "-")
        for name, unset in VEHICLE_OPTIONS.items()
        if getattr(args, name) != unset
    ]
    if given:
        raise CommandError(f"{', '.join(given)}: only with --sensor-kit FILE")
    for name, default in ONE_SENSOR_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return run_one_sensor(args)


def run_one_sensor(args: argparse.Namespace) -> int:
    """One sensor's sweeps as .npy files (the module docstring)."""
    import numpy as np

    from ..tools.simulation import LidarSimulator, get_sensor, street_scene

    if args.out.exists() and any(args.out.glob("scan_*.npy")):
        raise CommandError(f"{args.out} already holds scan_*.npy files; choose another --out")
    sensor = get_sensor(args.sensor)
    sweep_bytes = sweep_bytes_at_most(sensor, args.layout, ground_truth=True)
    check_output_size(
        args.out,
        args.frames * (sweep_bytes + NPY_FILE_OVERHEAD_BYTES),
        args.max_output_gb,
        f"{args.frames} {args.sensor} sweeps (up to {size_text(sweep_bytes)} each)",
    )
    args.out.mkdir(parents=True, exist_ok=True)
    watch = DiskWatch(args.out)
    simulator = LidarSimulator(sensor, seed=args.seed)
    scene = street_scene(seed=args.seed)
    started = time.perf_counter()
    for index, scan in enumerate(simulator.sequence(scene, args.frames, args.rate_hz)):
        path = args.out / f"scan_{index:04d}.npy"
        points = scan.structured(args.layout)
        kept = _kept(args.out, index)
        if not watch.room_for(points.nbytes + NPY_FILE_OVERHEAD_BYTES):
            raise CommandError(
                f"stopped before sweep {index + 1} of {args.frames}: the disk is nearly full "
                f"({watch.describe()}); {kept}"
            )
        npy = io.BytesIO()  # written by Python's file: a full disk is ENOSPC, not a short count
        np.save(npy, points)
        try:
            path.write_bytes(npy.getbuffer())
        except OSError as error:
            path.unlink(missing_ok=True)  # cut short: not a valid file
            if is_disk_full(error):
                raise CommandError(
                    f"the disk filled up writing {path} ({error.strerror}); the file was "
                    f"removed and {kept}"
                ) from None
            raise
        visible = np.unique(scan.object_id[scan.object_id > 0]).size
        print(f"{path}: {len(scan)} points, {visible} objects visible")
    elapsed = time.perf_counter() - started
    print(
        f"{args.frames} {args.sensor} sweeps of a scene with {len(scene.objects)} objects "
        f"in {elapsed:.2f} s"
    )
    return 0


def _kept(out: Path, count: int) -> str:
    """What ``out`` keeps of a run stopped after ``count`` sweeps, in words."""
    if count == 0:
        return f"no sweep was written to {out}"
    files = "scan_0000.npy" if count == 1 else f"scan_0000.npy to scan_{count - 1:04d}.npy"
    return f"{out} keeps the {count} sweeps written before ({files})"
