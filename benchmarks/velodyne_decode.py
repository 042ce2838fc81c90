"""Velodyne packet decoding per sweep: the CPU twin against the GPU decoder, side by side.

For each of nebula's three real packet bags (``$LIDAR_DATA_DIR/nebula``, default
``../shared/data/nebula``), one full sweep (the packets after the first completing packet, up to
and including the next one) is decoded, in one run on one machine:

- ``cpu``: ``decode_packets`` (NumPy);
- ``gpu_host``: ``CudaPacketDecoder.decode`` from packet bytes in host memory (the copy into the
  pinned staging buffer and to the device included), synchronised;
- ``gpu_device``: the same with packets and stamps already on the device, synchronised.

Each is timed after warm-up over ``--repeats`` calls (median and p99, ms); the GPU ÷ CPU ratios
and a byte-for-byte check of the GPU points against the CPU twin's come with them. The target:
the VLS-128 sweep (~209 k points) decoded from host memory in at most 0.5 ms. Without CuPy the
GPU columns are skipped with a message (the CPU column still runs).

    python -m benchmarks.velodyne_decode --output velodyne_decode.json   # from the repo root
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    DecoderSettings,
    decode_packets,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps import completing_packets

from .environment import cpu_model, git_commit
from .stats import median, p99, time_calls

#: bag folder -> (packets bag, settings of nebula's decoder tests, calibration file)
BAGS = {
    "vlp16": (
        "1673400471837873222",
        DecoderSettings("VLP16", "Dual", "velodyne", 0.3, 300.0, 0.0, 0, 359, view_width=300.0),
        "VLP16.yaml",
    ),
    "vlp32": (
        "1713492677464078412",
        DecoderSettings(
            "VLP32", "SingleStrongest", "velodyne_front", 0.4, 50.0, 180.0, 270, 90,
            view_width=180.0,
        ),
        "VLP32.yaml",
    ),
    "vls128": (
        "1614315746471294674",
        DecoderSettings("VLS128", "Dual", "velodyne", 0.3, 300.0, 0.0, 0, 359, view_width=300.0),
        "VLS128.yaml",
    ),
}  # fmt: skip

#: The target: the VLS-128 sweep from packet bytes in host memory, median.
TARGET_BAG, TARGET_MS = "vls128", 0.5


@dataclass
class Row:
    """One bag's sweep: sizes, timings (ms), ratios, and whether the GPU bytes equal the CPU's."""

    bag: str
    packets: int
    points: int
    repeats: int
    cpu_median_ms: float
    cpu_p99_ms: float
    gpu_host_median_ms: float | None = None
    gpu_host_p99_ms: float | None = None
    gpu_device_median_ms: float | None = None
    gpu_device_p99_ms: float | None = None
    gpu_host_over_cpu: float | None = None
    gpu_device_over_cpu: float | None = None
    identical: bool | None = None
    target_ms: float | None = None
    target_met: bool | None = None


def nebula_dir(data: Path | None) -> Path:
    """The folder of nebula's bags: ``data/nebula``, ``data`` defaulting to
    ``$LIDAR_DATA_DIR`` or ``../shared/data``."""
    root = data if data is not None else Path(os.environ.get("LIDAR_DATA_DIR", "../shared/data"))
    return root / "nebula"


def full_sweep(packets: np.ndarray, seconds: np.ndarray, settings: DecoderSettings):
    """The packets (and stamps) of the first full sweep: after the first completing packet, up to
    and including the next one."""
    done = np.flatnonzero(completing_packets(packets, settings.phase_centidegrees))
    if done.size < 2:
        raise ValueError("the bag holds no full sweep")
    start, stop = int(done[0]) + 1, int(done[1]) + 1
    return packets[start:stop], seconds[start:stop]


def gpu_available() -> str | None:
    """None when CuPy and a device are usable, else why not."""
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
        cupy.zeros(1).sum()
    except Exception as error:  # ImportError, CUDA errors: all mean no GPU rows
        return f"{type(error).__name__}: {error}"
    return None


def measure_bag(
    folder: str, nebula: Path, repeats: int, warmup: int, budget_s: float, gpu: bool
) -> Row:
    bag, settings, calibration_name = BAGS[folder]
    calibration = load_calibration(nebula / "calibration" / calibration_name)
    scans = list(read_velodyne_scans(nebula / folder / bag))
    packets = np.concatenate([s.packets for s in scans])
    seconds = np.concatenate([s.packet_seconds for s in scans])
    packets, seconds = full_sweep(packets, seconds, settings)
    packets = np.ascontiguousarray(packets)
    scan = float(seconds[0])

    def cpu() -> Any:
        return decode_packets(packets, seconds, scan, calibration, settings)

    cpu_timed = time_calls(cpu, warmup, repeats, budget_s)
    want_points, want_index = cpu_timed.value
    row = Row(
        bag=folder,
        packets=int(packets.shape[0]),
        points=int(want_points.shape[0]),
        repeats=len(cpu_timed.samples_ms),
        cpu_median_ms=median(cpu_timed.samples_ms),
        cpu_p99_ms=p99(cpu_timed.samples_ms),
    )
    if not gpu:
        return row
    import cupy

    from gpu_euclidean_cluster.cuda.codecs.velodyne import CudaPacketDecoder, points_to_host

    decoder = CudaPacketDecoder(calibration, settings, device_id=0)
    stream = cupy.cuda.get_current_stream()
    device_packets = cupy.asarray(packets)
    device_seconds = cupy.asarray(seconds)

    def gpu_host() -> Any:
        result = decoder.decode(packets, seconds, scan)
        stream.synchronize()
        return result

    def gpu_device() -> Any:
        result = decoder.decode(device_packets, device_seconds, scan)
        stream.synchronize()
        return result

    host_timed = time_calls(gpu_host, warmup, repeats, budget_s)
    device_timed = time_calls(gpu_device, warmup, repeats, budget_s)
    identical = True
    for points, index in (host_timed.value, device_timed.value):
        identical &= points_to_host(points).tobytes() == want_points.tobytes()
        identical &= bool(np.array_equal(index.get(), want_index))
    row.repeats = min(row.repeats, len(host_timed.samples_ms), len(device_timed.samples_ms))
    row.gpu_host_median_ms = median(host_timed.samples_ms)
    row.gpu_host_p99_ms = p99(host_timed.samples_ms)
    row.gpu_device_median_ms = median(device_timed.samples_ms)
    row.gpu_device_p99_ms = p99(device_timed.samples_ms)
    row.gpu_host_over_cpu = row.gpu_host_median_ms / row.cpu_median_ms
    row.gpu_device_over_cpu = row.gpu_device_median_ms / row.cpu_median_ms
    row.identical = identical
    if folder == TARGET_BAG:
        row.target_ms = TARGET_MS
        row.target_met = row.gpu_host_median_ms <= TARGET_MS
    return row


def _ms(value: float | None) -> str:
    return f"{'-':>8}" if value is None else f"{value:8.3f}"


def print_table(rows: list[Row]) -> None:
    print(
        f"{'bag':7} {'packets':>7} {'points':>7} {'cpu med':>8} {'cpu p99':>8} "
        f"{'gpuH med':>8} {'gpuH p99':>8} {'gpuD med':>8} {'gpuD p99':>8} "
        f"{'H/cpu':>7} {'D/cpu':>7} identical"
    )
    for r in rows:
        ratio_h = "-" if r.gpu_host_over_cpu is None else f"{r.gpu_host_over_cpu:7.4f}"
        ratio_d = "-" if r.gpu_device_over_cpu is None else f"{r.gpu_device_over_cpu:7.4f}"
        print(
            f"{r.bag:7} {r.packets:7d} {r.points:7d} {_ms(r.cpu_median_ms)} {_ms(r.cpu_p99_ms)} "
            f"{_ms(r.gpu_host_median_ms)} {_ms(r.gpu_host_p99_ms)} {_ms(r.gpu_device_median_ms)} "
            f"{_ms(r.gpu_device_p99_ms)} {ratio_h:>7} {ratio_d:>7} {r.identical}"
        )
        if r.target_ms is not None:
            verdict = "met" if r.target_met else "NOT met"
            print(
                f"target: {r.bag} sweep from host memory <= {r.target_ms} ms: {verdict} "
                f"(median {r.gpu_host_median_ms:.3f} ms)"
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.velodyne_decode",
        description="Velodyne sweep decoding: CPU twin, GPU from host memory, GPU from device.",
    )
    parser.add_argument("--output", type=Path, help="write the rows as JSON to this file")
    parser.add_argument("--data", type=Path, help="data folder holding nebula/ "
                        "(default: $LIDAR_DATA_DIR, else ../shared/data)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=50, help="timed calls (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    parser.add_argument("--budget-s", type=float, default=20.0, help="time per column (s)")
    parser.add_argument("--bags", default=",".join(BAGS), help="comma-separated bag folders")
    parser.add_argument("--cpu-only", action="store_true", help="skip the GPU columns")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    if options.repeats < 20:
        print("python -m benchmarks.velodyne_decode: note: fewer than 20 repeats", file=sys.stderr)
    nebula = nebula_dir(options.data)
    if not nebula.is_dir():
        print(
            f"python -m benchmarks.velodyne_decode: error: nebula's bags not found at {nebula} "
            "(set LIDAR_DATA_DIR or --data)",
            file=sys.stderr,
        )
        return 2
    folders = [f for f in options.bags.split(",") if f]
    unknown = sorted(set(folders) - set(BAGS))
    if unknown:
        print(
            f"python -m benchmarks.velodyne_decode: error: unknown bag(s) {unknown}",
            file=sys.stderr,
        )
        return 2
    why_not = "--cpu-only" if options.cpu_only else gpu_available()
    if why_not is not None:
        print(f"GPU columns skipped: {why_not}")
    rows = [
        measure_bag(f, nebula, options.repeats, options.warmup, options.budget_s, why_not is None)
        for f in folders
    ]
    print_table(rows)
    if options.output is not None:
        report = {
            "benchmark": "velodyne_decode",
            "machine": {"cpu": cpu_model(), "python": platform.python_version()},
            "git_commit": git_commit(),
            "gpu": None if why_not is not None else _device_name(),
            "gpu_skipped": why_not,
            "rows": [asdict(r) for r in rows],
        }
        options.output.parent.mkdir(parents=True, exist_ok=True)
        options.output.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {options.output}")
    failed = [r.bag for r in rows if r.identical is False]
    if failed:
        print(f"GPU points differ from the CPU twin's on {failed}", file=sys.stderr)
        return 1
    return 0


def _device_name() -> str:
    import cupy

    properties = cupy.cuda.runtime.getDeviceProperties(0)
    name = properties["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


if __name__ == "__main__":
    sys.exit(main())
