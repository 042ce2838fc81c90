"""``python -m benchmarks large-clouds``: large clouds NumPy in, labels out, with the points
uploaded plainly and through the page-locked staging, in the same run on the same clouds.

Clouds: kitti_000001 tiled 17x and 68x at 200 m spacing along x (2 044 556 and 8 178 224 points,
the ``tiled`` and ``tiled-8m`` clouds of the stress set, a simulated HDL-64E sweep where the frame
is absent), clustered with ``union_find`` (one CUDA graph a call) at ``--d-th`` (0.5 m).

Two backends on the same device, one per path:

- ``plain``: ``CudaBackend(stage_transfers=False)``, the upload as it was (the graph call's
  pageable ``cudaMemcpyAsync`` of the points; ``cupy.asarray``);
- ``staged``: the default backend, whose large uploads go through its ring of page-locked slots
  (``gpu_euclidean_cluster/cuda/staging.py``).

For each cloud and path, median and p99 milliseconds of:

- ``end_to_end``: ``EuclideanClusterer.cluster(points)``, NumPy in, labels out, as a user calls
  it: each call's labels are dropped before the next call, as in a loop over frames;
- ``h2d``: the points to the device (``Backend.to_device``, up to a synchronisation).

And once for both paths, which run the same code there (measured on the default backend):

- ``work``: the same call on device-resident points (the graph and its device copies; no host
  transfer);
- ``d2h``: the labels back into a new NumPy array (``Backend.to_host``: CuPy's ``.get()``), as
  the user gets them in such a loop (glibc hands the new array the pages the last call's labels
  freed, for arrays up to 32 MiB).

Beside them, each round: ``cudaHostRegister`` of the caller's array in place (register, one
DMA, unregister) for the points in (float64 input: of its float32 copy, as registration cannot
cast), the alternative the staging does not take. Also: the stages the library's own clock
reports (``ClusterResult.timings_ms``, medians; the plain whole call's ``transfer_in`` is the
graph's own pageable copy, not ``cupy.asarray``), the ratio plain / staged of each path's parts,
the targets (2 M points <= 3.5 ms, 8 M <= 15 ms, end to end, median) and whether both paths gave
byte-identical device arrays and labels.

Prints one table and writes ``large_clouds.json`` into ``--output``; exits 1 where the paths'
arrays differ. Needs a CUDA device (``python -m benchmarks: error:`` and status 2 without one).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .cases import data_dir
from .errors import BenchError
from .stats import median, p99
from .stress import TILE_SPACING_M, TILES, TILES_8M, stress_frame

#: The paths compared, the old one first.
PATHS = ("plain", "staged")
#: The parts timed on each path.
PATH_PARTS = ("end_to_end", "h2d")
#: The parts both paths run the same way, timed once a round on :data:`SHARED_ON`'s backend.
SHARED_PARTS = ("work", "d2h")
#: The path whose backend times :data:`SHARED_PARTS`: the default one.
SHARED_ON = "staged"
#: The library's clock stages printed for each path.
CLOCK_STAGES = ("transfer_in", "transfer_out")
#: End-to-end targets (median ms) by tile count: 2 M points, 8 M points.
TARGET_MS = {TILES: 3.5, TILES_8M: 15.0}
#: ``cudaMemcpyKind`` of a host-to-device copy.
_HOST_TO_DEVICE = 1


def tiled_cloud(tiles: int, directory: Path, dtype: Any) -> tuple[np.ndarray, str]:
    """kitti_000001 (or the simulated sweep) tiled ``tiles`` times at 200 m along x, in
    ``dtype``, and its name."""
    points, name = stress_frame(False, directory)
    offsets = np.zeros((tiles, 1, 3))
    offsets[:, 0, 0] = TILE_SPACING_M * np.arange(tiles)
    tiled = (points.astype(np.float64)[None] + offsets).reshape(-1, 3).astype(np.float32)
    return tiled.astype(dtype), f"{name} x{tiles}"


def summary(samples: list[float]) -> dict[str, float]:
    """Median and p99 of ``samples`` (ms)."""
    return {"median": median(samples), "p99": p99(samples)}


def ratios(parts: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """Plain over staged median of each path's part (above 1: the staging is faster)."""
    plain, staged = parts["plain"], parts["staged"]
    return {
        part: plain[part]["median"] / staged[part]["median"]
        for part in PATH_PARTS
        if staged[part]["median"] > 0
    }


def target_check(tiles: int, end_to_end_ms: float) -> tuple[float | None, bool | None]:
    """The cloud's end-to-end target and whether the median meets it (None: no target)."""
    target = TARGET_MS.get(tiles)
    return target, None if target is None else end_to_end_ms <= target


class Timer:
    """Milliseconds of calls on ``backend``, from an idle device to a synchronisation."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def __call__(self, call: Callable[[], Any]) -> tuple[Any, float]:
        self.backend.synchronize()
        start = time.perf_counter()
        value = call()
        self.backend.synchronize()
        return value, (time.perf_counter() - start) * 1e3


def registered_upload(points: np.ndarray, backend: Any) -> float:
    """Milliseconds of the points' DMA straight from the caller's array registered in place
    (register, copy, synchronise, unregister)."""
    import cupy

    runtime = cupy.cuda.runtime
    stream = cupy.cuda.get_current_stream()
    points = np.ascontiguousarray(points, dtype=np.float32)
    device = cupy.empty(points.shape, dtype=cupy.float32)

    def copy() -> None:
        runtime.hostRegister(points.ctypes.data, points.nbytes, 0)
        try:
            runtime.memcpyAsync(
                device.data.ptr, points.ctypes.data, points.nbytes, _HOST_TO_DEVICE, stream.ptr
            )
            stream.synchronize()
        finally:
            runtime.hostUnregister(points.ctypes.data)

    return Timer(backend)(copy)[1]


def measure_cloud(
    points: np.ndarray,
    d_th: float,
    repeats: int,
    warmup: int,
    device_id: int,
    workers: int | None = None,
) -> dict[str, Any]:
    """Every part on both paths, interleaved call by call; the row of the table (``workers``:
    the staging's host threads, None: its default)."""
    from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
    from gpu_euclidean_cluster.cuda.backend import CudaBackend
    from gpu_euclidean_cluster.cuda.staging import PinnedStaging

    backends = {
        "plain": CudaBackend(device_id, stage_transfers=False),
        "staged": CudaBackend(device_id),
    }
    backends["staged"].staging = PinnedStaging(device_id, workers=workers)
    config = ClusterConfig(d_th=d_th)
    clusterers = {name: EuclideanClusterer(config, b) for name, b in backends.items()}
    samples: dict[str, dict[str, list[float]]] = {
        p: {part: [] for part in PATH_PARTS} for p in PATHS
    }
    shared: dict[str, list[float]] = {part: [] for part in SHARED_PARTS}
    clock: dict[str, dict[str, list[float]]] = {p: {} for p in PATHS}
    registered: list[float] = []
    identical = _identical(backends, clusterers, points)

    for round_number in range(warmup + repeats):
        timed = round_number >= warmup
        for name in PATHS:
            times, stages = _path_round(backends[name], clusterers[name], points)
            if timed:
                for part, value in times.items():
                    samples[name][part].append(value)
                for stage, value in stages.items():
                    clock[name].setdefault(stage, []).append(value)
        times = _shared_round(backends[SHARED_ON], clusterers[SHARED_ON], points)
        if timed:
            for part, value in times.items():
                shared[part].append(value)
            registered.append(registered_upload(points, backends["plain"]))
    staged_backend = backends["staged"]
    pinned = staged_backend.staging.pinned_bytes
    workers = staged_backend.staging.workers
    for backend in backends.values():
        backend.release_memory()
    staged_backend.staging.close()
    parts = {name: {part: summary(samples[name][part]) for part in PATH_PARTS} for name in PATHS}
    return {
        "points": int(points.shape[0]),
        "dtype": str(points.dtype),
        "d_th": d_th,
        "repeats": repeats,
        "workers": workers,
        "pinned_bytes": pinned,
        "parts_ms": parts,
        "shared_ms": {part: summary(values) for part, values in shared.items()},
        "ratios": ratios(parts),
        "clock_ms": {name: {s: median(v) for s, v in clock[name].items()} for name in PATHS},
        "registered_h2d_ms": summary(registered),
        "identical": identical,
    }


def _path_round(
    backend: Any, clusterer: Any, points: np.ndarray
) -> tuple[dict[str, float], dict[str, float]]:
    """One timing of each of :data:`PATH_PARTS` on one path, and the stages its end-to-end
    call's clock reported."""
    timer = Timer(backend)
    result, end_to_end = timer(lambda: clusterer.cluster(points))
    stages = result.timings_ms
    del result  # as a user's loop drops the last frame's labels
    _, h2d = timer(lambda: backend.to_device(points, np.float32))
    return {"end_to_end": end_to_end, "h2d": h2d}, stages


def _shared_round(backend: Any, clusterer: Any, points: np.ndarray) -> dict[str, float]:
    """One timing of each of :data:`SHARED_PARTS`: the call on device-resident points, and its
    labels into a new NumPy array (dropped at once, as a user's loop drops the last frame's)."""
    timer = Timer(backend)
    device_points = backend.to_device(points, np.float32)
    result, work = timer(lambda: clusterer.cluster(device_points))
    device_labels = result.labels
    _, d2h = timer(lambda: backend.to_host(device_labels))
    return {"work": work, "d2h": d2h}


def _identical(backends: dict[str, Any], clusterers: dict[str, Any], points: np.ndarray) -> bool:
    """Both paths give the same device points and the same labels, byte for byte."""
    read = backends["plain"].to_host  # CuPy's copy back
    device = [read(backends[name].to_device(points, np.float32)).tobytes() for name in PATHS]
    labels = [clusterers[name].cluster(points).labels.tobytes() for name in PATHS]
    return device[0] == device[1] and labels[0] == labels[1]


def format_rows(cloud: str, tiles: int, row: dict[str, Any]) -> list[str]:
    """The table's lines for one cloud: one per path, then the parts both share, the ratios, the
    library's clock, registration and the target."""
    lines = []
    for name in PATHS:
        cells = [f"{cloud:32s}", f"{row['dtype']:7s}", f"{name:6s}"]
        for part in PATH_PARTS:
            cells.append(_cell(row["parts_ms"][name][part]))
        lines.append(" | ".join(cells))
    shared = ", ".join(
        f"{part} {row['shared_ms'][part]['median']:.2f}/{row['shared_ms'][part]['p99']:.2f}"
        for part in SHARED_PARTS
    )
    lines.append(f"    both paths: {shared} (d2h: CuPy's .get() into a new array)")
    ratio = ", ".join(f"{part} {value:.2f}x" for part, value in row["ratios"].items())
    lines.append(f"    plain / staged: {ratio}")
    clock = "; ".join(
        f"{name} "
        + ", ".join(
            f"{stage} {row['clock_ms'][name].get(stage, float('nan')):.2f}"
            for stage in CLOCK_STAGES
        )
        for name in PATHS
    )
    lines.append(f"    library clock (median ms): {clock}")
    lines.append(
        f"    registered in place: h2d {row['registered_h2d_ms']['median']:.2f} ms; staging: "
        f"{row['workers']} workers, {row['pinned_bytes'] >> 20} MiB page-locked"
    )
    target, met = target_check(tiles, row["parts_ms"]["staged"]["end_to_end"]["median"])
    verdict = (
        "no target" if target is None else f"target {target:g} ms {'met' if met else 'MISSED'}"
    )
    same = "identical" if row["identical"] else "ARRAYS DIFFER"
    lines.append(f"    staged end to end: {verdict}; plain and staged {same}")
    return lines


def _cell(times: dict[str, float]) -> str:
    """``median/p99`` of a part, in a fixed width."""
    return f"{times['median']:7.2f}/{times['p99']:7.2f}"


def run(args: argparse.Namespace) -> int:
    """Measure every cloud on both paths and print the table."""
    from gpu_euclidean_cluster.clusterer import cuda_available

    if args.repeats < 1 or args.warmup < 0 or not args.d_th > 0:
        raise BenchError("--repeats must be >= 1, --warmup >= 0 and --d-th > 0")
    if args.workers is not None and args.workers < 1:
        raise BenchError("--workers must be >= 1")
    tiles = _ints(args.tiles, "--tiles")
    dtypes = [_dtype(name) for name in args.dtypes.split(",") if name.strip()]
    if not cuda_available():
        raise BenchError("large-clouds needs a CUDA device through CuPy")
    directory = args.data_dir or data_dir()
    header = " | ".join(
        [f"{'cloud':32s}", f"{'dtype':7s}", f"{'path':6s}"] + [f"{p:>15s}" for p in PATH_PARTS]
    )
    print(f"milliseconds, median/p99, d_th {args.d_th:g} m", flush=True)
    print(header, flush=True)
    rows = []
    for count in tiles:
        for dtype in dtypes:
            points, cloud = tiled_cloud(count, directory, dtype)
            row = measure_cloud(
                points, args.d_th, args.repeats, args.warmup, args.device_id, args.workers
            )
            target, met = target_check(count, row["parts_ms"]["staged"]["end_to_end"]["median"])
            rows.append(
                {"cloud": cloud, "tiles": count, **row, "target_ms": target, "target_met": met}
            )
            for line in format_rows(f"{cloud} ({row['points']})", count, row):
                print(line, flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "large_clouds.json"
    path.write_text(
        json.dumps({"path_parts": PATH_PARTS, "shared_parts": SHARED_PARTS, "rows": rows}, indent=1)
        + "\n"
    )
    print(f"wrote {path}")
    return 0 if all(row["identical"] for row in rows) else 1


def _ints(value: str, option: str) -> list[int]:
    try:
        numbers = [int(part) for part in value.split(",") if part.strip()]
    except ValueError as error:
        raise BenchError(f"{option} must be comma-separated integers: {error}") from error
    if not numbers or min(numbers) < 1:
        raise BenchError(f"{option} must list integers >= 1")
    return numbers


def _dtype(name: str) -> np.dtype:
    if name.strip() not in ("float32", "float64"):
        raise BenchError(f"unknown dtype {name.strip()!r}; expected float32 or float64")
    return np.dtype(name.strip())


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``large-clouds`` on the sub-command list ``sub``."""
    parser = sub.add_parser(
        "large-clouds",
        help="2 M and 8 M points NumPy in, labels out: plain vs page-locked staged uploads, "
        "split into host to device, work, device to host",
    )
    parser.add_argument(
        "--output", type=Path, required=True, metavar="DIR", help="folder of the results"
    )
    parser.add_argument(
        "--tiles",
        default=f"{TILES},{TILES_8M}",
        help=f"comma-separated tile counts of kitti_000001 (default {TILES},{TILES_8M}: "
        "2 044 556 and 8 178 224 points)",
    )
    parser.add_argument(
        "--dtypes",
        default="float32",
        help="comma-separated input dtypes, float32 and/or float64 (default float32; float64 "
        "shows the cast done on the way)",
    )
    parser.add_argument("--d-th", type=float, default=0.5, help="d_th in m (default 0.5)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="folder of kitti_000001.bin (default: $LIDAR_DATA_DIR, else ../shared/data)",
    )
    parser.add_argument("--device-id", type=int, default=0, help="CUDA device (default 0)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="host threads of the staging (default: half the cores, at most 8)",
    )
    parser.add_argument("--repeats", type=int, default=50, help="timed rounds (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds first (default 5)")
    parser.set_defaults(run=run)
