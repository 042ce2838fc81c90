"""Packets to clusters, stage by stage, as the node's ``input/packets`` runs them (ROS-free).

For nebula's VLS-128 (and the other) packet bags, every recorded ``VelodyneScan`` message is
serialized as the node receives it and run through the node's path, per message, timed stage by
stage over ``--repeats`` passes of the whole bag:

- ``parse``: the CDR bytes to packets (``scan_from_cdr``);
- ``decode``: packets to the completed sweeps (``PacketSweeps.feed_scan``: decoding on the backend's
  device, sweep cutting on the host);
- ``frame``: each sweep through ``FramePipeline.process`` (to the GPU, cluster, labelled payload
  and cluster table back).

Medians and p99 (ms) per message that completes a sweep, for the CPU and CUDA backends side by
side in one run (the CUDA rows are skipped with a message without CuPy).

    python -m benchmarks.packet_pipeline --output packet_pipeline.json   # from the repo root
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gpu_euclidean_cluster.clusterer import cuda_available, make_backend
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.frame import FramePipeline, FrameWindow
from gpu_euclidean_cluster.frame.packets import PacketSweeps
from gpu_euclidean_cluster.pointcloud_io.velodyne import read_velodyne_scans
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_from_cdr, scan_to_cdr

from .stats import median, p99
from .velodyne_decode import BAGS, nebula_dir


@dataclass
class StageRow:
    """One bag on one backend: per sweep-completing message, each stage's median and p99 (ms)."""

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


def measure(bag: str, backend_name: str, data: Path, repeats: int) -> StageRow:
    folder, settings, calibration = BAGS[bag]
    messages = [scan_to_cdr(s) for s in read_velodyne_scans(data / bag / folder)]
    backend = make_backend(backend_name)
    pipeline = FramePipeline(backend, copy_output=False)
    config, window = ClusterConfig(d_th=0.5), FrameWindow()
    stages: dict[str, list[float]] = {"parse": [], "decode": [], "frame": [], "total": []}
    sizes = []
    for rep in range(repeats + 1):  # the first pass warms up (kernels, memory pool)
        sweeps = PacketSweeps(data / "calibration" / calibration, settings, backend)
        for cdr in messages:
            start = time.perf_counter()
            scan = scan_from_cdr(cdr)
            parsed = time.perf_counter()
            done = sweeps.feed_scan(scan)
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
    return StageRow(
        bag=bag,
        backend=backend.name,
        device=backend.device,
        sweeps=len(stages["total"]) // max(repeats, 1),
        points_per_sweep=int(np.median(sizes)) if sizes else 0,
        **{
            f"{n}_{k}_ms": f(stages[n])
            for n in stages
            for k, f in (("median", median), ("p99", p99))
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.packet_pipeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--output", type=Path, help="write the rows as JSON to this file")
    parser.add_argument("--data", type=Path, help="data folder holding nebula/")
    parser.add_argument("--repeats", type=int, default=20, help="timed passes of each bag")
    parser.add_argument("--bags", default="vls128,vlp32,vlp16", help="comma-separated bag folders")
    args = parser.parse_args(argv)
    data = nebula_dir(args.data)
    backends = ["cpu"] + (["cuda"] if cuda_available() else [])
    if len(backends) == 1:
        print("CUDA rows skipped: CuPy finds no CUDA device", file=sys.stderr)
    rows = [measure(bag, b, data, args.repeats) for bag in args.bags.split(",") for b in backends]
    print("bag      backend  points   parse           decode            frame             total")
    for r in rows:
        cells = [
            f"{getattr(r, f'{stage}_median_ms'):7.3f}/{getattr(r, f'{stage}_p99_ms'):7.3f}"
            for stage in ("parse", "decode", "frame", "total")
        ]
        print(f"{r.bag:8} {r.backend:7} {r.points_per_sweep:7d} " + " ".join(cells))
    print("(median/p99 ms per sweep-completing message)")
    if args.output:
        args.output.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
