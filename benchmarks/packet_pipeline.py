"""Packets to clusters, stage by stage, as the node's ``input/packets`` runs them (ROS-free).

For nebula's VLS-128 (and the other) packet bags, every recorded ``VelodyneScan`` message is
serialized as the node receives it and run through the node's path, per message, timed stage by
stage over ``--repeats`` passes of the whole bag:

- ``parse``: the CDR bytes to packets (``scan_from_cdr``);
- ``decode``: packets to the completed sweeps (``PacketSweeps.feed_scan``: decoding and sweep
  cutting on the backend's device, the sweep kept there on the GPU);
- ``frame``: each sweep through ``FramePipeline.process`` (cluster, labelled payload and cluster
  table back).

Medians and p99 (ms) per message that completes a sweep, side by side in one run for three
paths: ``cpu`` (the CPU backend), ``cuda`` (the node's path on the CUDA backend) and
``cuda-host-cut``, the CUDA path before sweeps stayed on the device (GPU decoding, the sweep
brought back and cut on the host, its payload copied up again by the frame codec), kept here as
the baseline the GPU cutting is measured against. The CUDA rows are skipped with a message
without CuPy. Each CUDA row also counts, in one more pass of the bag under CUPTI
(:mod:`.gpu_activity`), the host's kernel and graph launches, the kernels and copies that ran
and the host's synchronisations, per sweep.

    python -m benchmarks.packet_pipeline --output packet_pipeline.json   # from the repo root
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu_euclidean_cluster.clusterer import Backend, cuda_available, make_backend
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.frame import FramePipeline, FrameWindow
from gpu_euclidean_cluster.frame.packets import PacketSweeps, SweepCloud, sweep_cloud
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    DecoderSettings,
    SweepDecoder,
    VelodyneScanMessage,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_from_cdr, scan_to_cdr

from .gpu_activity import ACTIVITY_HEADER, ActivityUnavailable, GpuActivity, count_activity
from .stats import median, p99
from .velodyne_decode import BAGS, nebula_dir


@dataclass
class StageRow:
    """One bag on one path (``backend``: a :data:`PATHS` name): per sweep-completing message,
    each stage's median and p99 (ms); ``activity``: the path's GPU activity per sweep
    (:meth:`.gpu_activity.GpuActivity.as_dict`, or why it was not counted)."""

    bag: str
    backend: str
    device: str
    sweeps: int
    points_per_sweep: int
    parse_median_ms: float
    parse_p99_ms: float
    decode_median_ms: float
    decode_p99_ms: float
    frame_median_ms: float
    frame_p99_ms: float
    total_median_ms: float
    total_p99_ms: float
    activity: dict[str, Any]


#: The stages timed, in order.
STAGES = ("parse", "decode", "frame", "total")

#: The paths measured: the backend each runs on.
PATHS = {"cpu": "cpu", "cuda-host-cut": "cuda", "cuda": "cuda"}


def host_cut_sweeps(calibration: Path, settings: DecoderSettings, backend: Backend) -> Callable:
    """``feed_scan`` of the baseline path: the GPU decodes (``CudaPacketDecoder.decode_with``,
    the sweep brought back), the host cuts, the cloud's payload is host memory."""
    from gpu_euclidean_cluster.cuda.codecs.velodyne import CudaPacketDecoder

    loaded = load_calibration(calibration)
    gpu = CudaPacketDecoder(loaded, settings, backend.device_id)
    decoder = SweepDecoder(loaded, settings, decode=gpu.decode_with)

    def feed_scan(scan: VelodyneScanMessage) -> list[SweepCloud]:
        frame_id = scan.frame_id or settings.frame_id
        return [
            SweepCloud(sweep_cloud(sweep.points), sweep.stamp_ns, frame_id)
            for sweep in decoder.feed(scan.packets, scan.packet_seconds)
        ]

    return feed_scan


def measure(bag: str, path: str, data: Path, repeats: int) -> StageRow:
    folder, settings, calibration = BAGS[bag]
    messages = [scan_to_cdr(s) for s in read_velodyne_scans(data / bag / folder)]
    backend = make_backend(PATHS[path])
    pipeline = FramePipeline(backend, copy_output=False)
    config, window = ClusterConfig(d_th=0.5), FrameWindow()
    calibration_file = data / "calibration" / calibration

    def sweeps_of_bag() -> Callable[[VelodyneScanMessage], list[SweepCloud]]:
        if path == "cuda-host-cut":
            return host_cut_sweeps(calibration_file, settings, backend)
        return PacketSweeps(calibration_file, settings, backend).feed_scan

    def one_pass() -> int:
        """The bag once, untimed: the sweeps it completes."""
        feed_scan, completed = sweeps_of_bag(), 0
        for cdr in messages:
            for sweep in feed_scan(scan_from_cdr(cdr)):
                pipeline.process(sweep.cloud, config, window)
                completed += 1
        backend.synchronize()
        return completed

    stages: dict[str, list[float]] = {"parse": [], "decode": [], "frame": [], "total": []}
    sizes = []
    for rep in range(repeats + 1):  # the first pass warms up (kernels, memory pool)
        feed_scan = sweeps_of_bag()
        for cdr in messages:
            start = time.perf_counter()
            scan = scan_from_cdr(cdr)
            parsed = time.perf_counter()
            done = feed_scan(scan)
            decoded = time.perf_counter()
            for sweep in done:
                pipeline.process(sweep.cloud, config, window)
                sizes.append(sweep.cloud.num_points)
            finished = time.perf_counter()
            if rep and done:
                for name, value in (
                    ("parse", parsed - start),
                    ("decode", decoded - parsed),
                    ("frame", finished - decoded),
                    ("total", finished - start),
                ):
                    stages[name].append(value * 1e3)  # fmt: skip
    sweeps = len(stages["total"]) // max(repeats, 1)
    activity: GpuActivity | ActivityUnavailable = ActivityUnavailable("the CPU backend")
    if PATHS[path] == "cuda":
        activity = count_activity(one_pass, calls=sweeps)
    return StageRow(
        bag=bag,
        backend=path,
        device=backend.device,
        sweeps=sweeps,
        points_per_sweep=int(np.median(sizes)) if sizes else 0,
        **{
            f"{n}_{k}_ms": f(stages[n])
            for n in stages
            for k, f in (("median", median), ("p99", p99))
        },
        activity=activity.as_dict(),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.packet_pipeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--output", type=Path, help="write the rows as JSON to this file")
    parser.add_argument("--data", type=Path, help="data folder holding nebula/")
    parser.add_argument("--repeats", type=int, default=20, help="timed passes of each bag")
    parser.add_argument("--bags", default="vls128,vlp32,vlp16", help="comma-separated bag folders")
    parser.add_argument(
        "--paths", default=",".join(PATHS), help=f"comma-separated paths of {', '.join(PATHS)}"
    )
    args = parser.parse_args(argv)
    data = nebula_dir(args.data)
    paths = [p for p in args.paths.split(",") if p]
    if unknown := [p for p in paths if p not in PATHS]:
        parser.error(f"unknown path {unknown[0]!r}: choose from {', '.join(PATHS)}")
    if not cuda_available() and any(PATHS[p] == "cuda" for p in paths):
        paths = [p for p in paths if PATHS[p] != "cuda"]
        print("CUDA rows skipped: CuPy finds no CUDA device", file=sys.stderr)
    rows = [measure(bag, p, data, args.repeats) for bag in args.bags.split(",") for p in paths]
    stage_header = " ".join(f"{s:15}" for s in STAGES)
    print(f"{'bag':8} {'path':14} {'points':7} {stage_header} {ACTIVITY_HEADER}")
    for r in rows:
        cells = [
            f"{getattr(r, f'{stage}_median_ms'):7.3f}/{getattr(r, f'{stage}_p99_ms'):7.3f}"
            for stage in STAGES
        ]
        counts = r.activity
        activity = "-" if "unavailable" in counts else GpuActivity(**counts).cells()
        print(f"{r.bag:8} {r.backend:14} {r.points_per_sweep:7d} " + " ".join(cells), activity)
    print("(median/p99 ms per sweep-completing message; GPU activity per sweep, CUPTI)")
    for r in rows:
        if "unavailable" in r.activity and PATHS[r.backend] == "cuda":
            print(f"{r.bag} {r.backend}: activity not counted: {r.activity['unavailable']}")
    if args.output:
        args.output.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
