"""A whole vehicle's packets to clusters, per vehicle sweep, as the node's ``sensor_kit`` input
runs them (ROS-free).

Autoware's sample sensor kit (``config/sample_sensor_kit.yaml``: a VLS-128 on top, VLP-16s left
and right, their poses and self and mirror crop boxes) is fed nebula's real packet bags: the
VLS-128 bag as ``top``, the VLP-16 bag as ``left`` and ``right`` (each sensor with the decoder
settings of the bag it is fed), one message of each sensor a round, naive matching (the bags
come from different recordings: their stamps would never match Autoware's offsets). Per round,
timed from the first message to the frame's outputs:

- ``join``: the three messages decoded, cut, moved into ``base_link`` through the crop boxes
  and joined (``frame/vehicle.py``'s ``VehicleSweeps``, on the backend's device);
- ``frame``: the joined cloud through ``FramePipeline.process`` with RANSAC ground removal
  (Autoware's obstacle segmentation before its clustering) and clustering at 0.5 m, the
  labelled cloud and the cluster table (what the object messages are built from);
- ``total``: both.

Medians and p99 (ms) per vehicle sweep, each path (``cpu``, ``cuda``) in the same run, and on
CUDA the launches, copies and synchronisations of one more pass (:mod:`.gpu_activity`). The
object messages themselves are ROS's to build: ``python -m benchmarks node`` measures that.

    python -m benchmarks.vehicle_pipeline --repeats 20 --output vehicle.json  # from the repo root
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gpu_euclidean_cluster.clusterer import cuda_available, make_backend
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.frame import FramePipeline, FrameWindow, GroundRemoval
from gpu_euclidean_cluster.frame.vehicle import VehicleSweeps
from gpu_euclidean_cluster.pointcloud_io.sensor_kit import SensorKit, load_sensor_kit
from gpu_euclidean_cluster.pointcloud_io.velodyne import read_velodyne_scans
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr

from .gpu_activity import ACTIVITY_HEADER, ActivityUnavailable, GpuActivity, count_activity
from .stats import median, p99
from .velodyne_decode import BAGS, nebula_dir

REPO = Path(__file__).resolve().parents[1]
SAMPLE_KIT = REPO / "config" / "sample_sensor_kit.yaml"
#: The nebula bag each sensor of the sample kit is fed.
BAG_OF = {"top": "vls128", "left": "vlp16", "right": "vlp16"}
STAGES = ("join", "frame", "total")
MS = 1_000_000


@dataclass
class VehicleRow:
    """One path: per vehicle sweep, each stage's median and p99 (ms), the joined points and
    the GPU activity (or why it was not counted)."""

    backend: str
    device: str
    sweeps: int
    points_per_sweep: int
    join_median_ms: float
    join_p99_ms: float
    frame_median_ms: float
    frame_p99_ms: float
    total_median_ms: float
    total_p99_ms: float
    activity: dict[str, Any]


def bag_kit(data: Path) -> tuple[SensorKit, dict[str, Path]]:
    """The sample kit with each sensor's decoder settings and calibration those of its bag
    (naive matching), and each calibration file."""
    kit = load_sensor_kit(SAMPLE_KIT)
    sensors, calibrations = [], {}
    for sensor in kit.sensors:
        _, settings, calibration = BAGS[BAG_OF[sensor.name]]
        decoder = replace(settings, frame_id=sensor.frame)
        sensors.append(replace(sensor, input=replace(sensor.input, decoder=decoder)))
        calibrations[sensor.name] = data / "calibration" / calibration
    naive = (("matching_strategy", {"type": "naive"}),)
    return replace(kit, sensors=tuple(sensors), concatenation=naive), calibrations


def measure(path: str, data: Path, repeats: int) -> VehicleRow:
    kit, calibrations = bag_kit(data)
    messages = {
        name: [scan_to_cdr(s) for s in read_velodyne_scans(data / bag / BAGS[bag][0])]
        for name, bag in BAG_OF.items()
    }
    rounds = min(len(m) for m in messages.values())
    backend = make_backend(path)
    pipeline = FramePipeline(backend, stages=[GroundRemoval()], copy_output=False)
    config, window = ClusterConfig(d_th=0.5), FrameWindow()
    times: dict[str, list[float]] = {stage: [] for stage in STAGES}
    sizes: list[int] = []

    def one_pass(timed: bool) -> int:
        vehicle = VehicleSweeps(
            kit, backend, calibration_file=lambda sensor: calibrations[sensor.name]
        )
        done, now = 0, 0
        for index in range(rounds):
            start = time.perf_counter()
            joined = []
            for name in BAG_OF:
                now += MS
                joined += vehicle.feed_packets(name, messages[name][index], now).clouds
            backend.synchronize()
            built = time.perf_counter()
            for cloud in joined:
                pipeline.process(cloud.cloud, config, window)
                sizes.append(cloud.cloud.num_points)
            finished = time.perf_counter()
            if timed and joined:
                times["join"].append((built - start) * 1e3)
                times["frame"].append((finished - built) * 1e3)
                times["total"].append((finished - start) * 1e3)
            done += len(joined)
        return done

    one_pass(timed=False)  # warm-up: kernels, memory pool
    for _ in range(repeats):
        one_pass(timed=True)
    sweeps = len(times["total"]) // max(repeats, 1)
    activity: GpuActivity | ActivityUnavailable = ActivityUnavailable("the CPU backend")
    if path == "cuda":
        activity = count_activity(lambda: one_pass(timed=False), calls=sweeps)
    return VehicleRow(
        backend=path,
        device=backend.device,
        sweeps=sweeps,
        points_per_sweep=int(median(sizes)) if sizes else 0,
        **{
            f"{stage}_{k}_ms": f(values)
            for stage, values in times.items()
            for k, f in (("median", median), ("p99", p99))
        },
        activity=activity.as_dict(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.vehicle_pipeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--output", type=Path, help="write the rows as JSON to this file")
    parser.add_argument("--data", type=Path, help="data folder holding nebula/")
    parser.add_argument("--repeats", type=int, default=20, help="timed passes of the bags")
    parser.add_argument("--paths", default="cuda,cpu", help="comma-separated backends")
    args = parser.parse_args(argv)
    data = nebula_dir(args.data)
    paths = [p for p in args.paths.split(",") if p]
    if "cuda" in paths and not cuda_available():
        paths.remove("cuda")
        print("CUDA row skipped: CuPy finds no CUDA device", file=sys.stderr)
    rows = [measure(path, data, args.repeats) for path in paths]
    stage_header = " ".join(f"{s:15}" for s in STAGES)
    print(f"{'path':6} {'points':7} {stage_header} {ACTIVITY_HEADER}")
    for r in rows:
        cells = [
            f"{getattr(r, f'{stage}_median_ms'):7.3f}/{getattr(r, f'{stage}_p99_ms'):7.3f}"
            for stage in STAGES
        ]
        counts = r.activity
        activity = "-" if "unavailable" in counts else GpuActivity(**counts).cells()
        print(f"{r.backend:6} {r.points_per_sweep:7d} " + " ".join(cells), activity)
    print("(median/p99 ms per vehicle sweep: 3 packet messages -> joined -> ground -> clusters)")
    if args.output:
        args.output.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
