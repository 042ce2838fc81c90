"""``python -m benchmarks searches``: the neighbour-search structures side by side.

Three structures answer the same exact fixed-radius query (the float32 rule at ``d_th``): the
voxel grid of the paper's range search (Algorithm 7), the kd-tree of Wehr & Radkowski
(``core/kdtree.py``) and the scan bins after the Velodyne scan paper (``core/scan_search.py``).
For each cloud and threshold, each structure is built (``build``) and then asked for every
point's neighbour count (``query``: the ``count_neighbours`` kernel of ``NeighbourSearch`` on the
GPU, the pair chunks of the twins on the CPU); the pair counts must agree, or the run fails.
Beside them, ``cluster()`` end to end with ``union_find`` over each search (``range`` is the
default, the clique-cell union-find, whose build and query are one fused launch).

Experiments: ``size`` (simulated HDL-64E sweeps of one street scene at 1/4 to 8 times the
azimuth resolution, their rings; ``d_th`` 0.5 m), ``d_th`` (kitti_000001, rings from elevation
as ``make-bag`` assigns them, 0.1 to 2 m) and ``nn``: the scan paper's nearest-neighbour
comparison, 120 k queries (kitti_000001 moved as by a car between two sweeps: 1 degree of yaw,
0.5 m forward) against the sweep, our GPU kd-tree (build, query, exact: float32 distances,
ties to the smallest index) against SciPy's ``cKDTree`` (build, ``query(k=1)`` on one core and on
all).

Writes ``<output>/searches.json`` (every row and the run's environment), ``<output>/searches.md``
(the tables) and, where matplotlib imports, ``searches_size.png``, ``searches_d_th.png`` (build
and query time per structure) and ``searches_nn.png`` beside them; ``--replot`` redraws those from
the JSON.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpu_euclidean_cluster.clusterer import Backend, EuclideanClusterer, make_backend
from gpu_euclidean_cluster.core.config import ClusterConfig

from .errors import BenchError
from .stats import median, p99, time_calls

log = logging.getLogger(__name__)

STRUCTURES = ("range", "kdtree", "scan")
STRUCTURE_NAMES = {"range": "voxel grid", "kdtree": "kd-tree", "scan": "scan bins"}
#: Azimuth resolution factors of the size sweep (1: the HDL-64E's own, ~126 k points).
SIZE_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
QUICK_SIZE_FACTORS = (0.05, 0.1)
SIZE_D_TH = 0.5
D_TH_VALUES = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0)
QUICK_D_TH_VALUES = (0.3, 1.0)
D_TH_FRAME = "kitti_000001.bin"
#: The motion between the map sweep and the query sweep of the nearest-neighbour comparison.
NN_YAW_DEG = 1.0
NN_SHIFT_M = (0.5, 0.0, 0.0)
#: ``--quick``: clouds small enough for a CPU-only CI run (queries and map points).
QUICK_NN_POINTS = 3000


@dataclass
class SearchRow:
    """One structure (or ``cluster()`` end to end) on one cloud, times in ms."""

    experiment: str
    case: str
    points: int
    d_th: float
    structure: str
    build_ms: float = math.nan
    build_p99_ms: float = math.nan
    query_ms: float = math.nan
    query_p99_ms: float = math.nan
    cluster_ms: float = math.nan
    cluster_p99_ms: float = math.nan
    pairs: int = -1
    clusters: int = -1
    repeats: int = 0


@dataclass
class NnRow:
    """The nearest-neighbour comparison: one implementation, times in ms."""

    implementation: str
    map_points: int
    queries: int
    transfer_ms: float
    build_ms: float
    query_ms: float
    total_ms: float
    same_index: float  # fraction of queries given cKDTree's index
    same_distance: float  # fraction at cKDTree's distance (to 1e-6 relative)


class Timer:
    """Median and p99 of a call after warm-up, the device synchronised around each call."""

    def __init__(self, backend: Backend, warmup: int, repeats: int, budget_s: float) -> None:
        self.backend = backend
        self.warmup, self.repeats, self.budget_s = warmup, repeats, budget_s

    def __call__(self, call: Callable[[], Any]) -> tuple[float, float, int, Any]:
        def synced() -> Any:
            value = call()
            self.backend.synchronize()
            return value

        self.backend.synchronize()
        timed = time_calls(synced, self.warmup, self.repeats, self.budget_s)
        samples = timed.samples_ms
        return median(samples), p99(samples), len(samples), timed.value


def structure_calls(
    backend: Backend, points: Any, d_th: float, rings: Any
) -> dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]]:
    """``structure -> (build, query)``; ``query(built)`` returns what :func:`directed_pairs`
    counts: every point's neighbour count (GPU) or the directed pairs (CPU)."""
    if backend.name == "cuda":
        import cupy

        from gpu_euclidean_cluster.cuda.labelling.graph import NeighbourSearch

        def gpu(search: str) -> tuple[Callable[[], Any], Callable[[Any], Any]]:
            def query(built: NeighbourSearch) -> Any:
                counts = cupy.empty(built.n, dtype=cupy.int32)
                built.launch("count_neighbours", counts, np.int32(0))
                return counts  # summed after the timing

            return (lambda: NeighbourSearch(0, points, d_th, search, rings)), query

        return {search: gpu(search) for search in STRUCTURES}

    from gpu_euclidean_cluster.core.neighbour_rule import threshold_sq
    from gpu_euclidean_cluster.cpu.labelling.graph import range_edges
    from gpu_euclidean_cluster.cpu.labelling.voxel_grid import build_voxel_grid
    from gpu_euclidean_cluster.cpu.search import kdtree, scan_search

    def pairs(chunks: Any) -> int:
        return 2 * sum(len(i) for i, _ in chunks)

    return {
        "range": (
            lambda: build_voxel_grid(points, d_th),
            lambda grid: 2 * len(range_edges(points, d_th, grid)),
        ),
        "kdtree": (
            lambda: kdtree.build_kdtree(points),
            lambda tree: pairs(kdtree.query_pairs(tree, threshold_sq(d_th))),
        ),
        "scan": (
            lambda: scan_search.bin_points(points, rings),
            lambda bins: pairs(scan_search.query_pairs(points, bins, d_th)),
        ),
    }


def directed_pairs(found: Any) -> int:
    """Neighbour pairs counted from both ends: the sum of per-point counts (an array), or the
    count itself."""
    return int(found.sum()) if hasattr(found, "sum") else int(found)


def measure_cloud(
    backend: Backend,
    timer: Timer,
    experiment: str,
    case: str,
    points: np.ndarray,
    rings: np.ndarray,
    d_th: float,
) -> list[SearchRow]:
    """Build and query time of every structure, and ``cluster()`` with ``union_find`` over each
    search, on one cloud; fails when the structures disagree on the pairs."""
    device_points = backend.to_device(points)
    device_rings = backend.to_device(rings)
    rows = []
    for search, (build, query) in structure_calls(
        backend, device_points, d_th, device_rings
    ).items():
        row = SearchRow(experiment, case, len(points), d_th, STRUCTURE_NAMES[search])
        row.build_ms, row.build_p99_ms, row.repeats, built = timer(build)
        row.query_ms, row.query_p99_ms, _, found = timer(lambda q=query, b=built: q(b))
        row.pairs = directed_pairs(found) // 2
        config = ClusterConfig(d_th=d_th, method="union_find", search=search, max_work_s=None)
        clusterer = EuclideanClusterer(config, backend)
        row.cluster_ms, row.cluster_p99_ms, _, result = timer(
            lambda c=clusterer: c.cluster(points, rings=rings)
        )
        row.clusters = result.num_clusters
        rows.append(row)
        log.info(
            "%s %s %s: build %.3f ms, query %.3f ms, cluster %.3f ms, %d pairs",
            experiment, case, row.structure, row.build_ms, row.query_ms, row.cluster_ms, row.pairs,
        )  # fmt: skip
    if len({row.pairs for row in rows}) != 1 or len({row.clusters for row in rows}) != 1:
        raise BenchError(
            f"{case}: the searches disagree: "
            + ", ".join(f"{r.structure} {r.pairs} pairs / {r.clusters} clusters" for r in rows)
        )
    return rows


def size_clouds(quick: bool) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Simulated HDL-64E sweeps of one street scene at several azimuth resolutions."""
    from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene

    sensor = get_sensor("hdl64e")
    scene = street_scene(seed=0)
    clouds = []
    for factor in QUICK_SIZE_FACTORS if quick else SIZE_FACTORS:
        model = replace(sensor, azimuth_step_deg=sensor.azimuth_step_deg / factor)
        scan = LidarSimulator(model, seed=0).scan(scene)
        clouds.append((f"hdl64e x{factor:g} azimuth", scan.xyz, scan.ring.astype(np.int32)))
    return clouds


def frame_with_rings(data_dir: Path, quick: bool) -> tuple[np.ndarray, np.ndarray]:
    """kitti_000001 and its rings from elevation (``--quick``: every 40th point)."""
    from .cases import read_frame_with_rings

    path = data_dir / D_TH_FRAME
    if not path.is_file():
        raise BenchError(f"{path} not found (set LIDAR_DATA_DIR to the folder of the frames)")
    points, rings = read_frame_with_rings(path)
    if quick:
        points, rings = np.ascontiguousarray(points[::40]), rings[::40]
    return points, rings


def moved(points: np.ndarray) -> np.ndarray:
    """``points`` as seen after the car moved: yawed by NN_YAW_DEG, shifted by NN_SHIFT_M."""
    yaw = math.radians(NN_YAW_DEG)
    rotation = np.array(
        [[math.cos(yaw), -math.sin(yaw), 0.0], [math.sin(yaw), math.cos(yaw), 0.0], [0, 0, 1]]
    )
    return (points.astype(np.float64) @ rotation.T + NN_SHIFT_M).astype(np.float32)


def nearest_neighbour_rows(backend: Backend, timer: Timer, points: np.ndarray) -> list[NnRow]:
    """Our kd-tree against SciPy's cKDTree on the nearest neighbour of every moved point."""
    from scipy.spatial import cKDTree

    queries = moved(points)
    rows = []
    reference: dict[str, np.ndarray] = {}
    for workers in (1, -1):
        build_ms, _, _, tree = timer(lambda: cKDTree(points))
        query_ms, _, _, (distance, index) = timer(
            lambda t=tree, w=workers: t.query(queries, k=1, workers=w)
        )
        reference = {"index": index, "distance": distance}
        name = "scipy-ckdtree" + (" (1 core)" if workers == 1 else " (all cores)")
        rows.append(
            NnRow(
                name, len(points), len(queries), 0.0, build_ms, query_ms, build_ms + query_ms, 1, 1
            )
        )
    if backend.name == "cuda":
        import cupy

        from gpu_euclidean_cluster.cuda.search.kdtree import build_kdtree

        transfer_ms, _, _, (device_points, device_queries) = timer(
            lambda: (cupy.asarray(points), cupy.asarray(queries))
        )
        build_ms, _, _, tree = timer(lambda: build_kdtree(0, device_points, 1.0))
        query_ms, _, _, nearest = timer(lambda: tree.nearest(device_queries))
        index = nearest.get()
        name = f"ours: GPU kd-tree ({backend.device})"
    else:
        from gpu_euclidean_cluster.cpu.search.kdtree import nearest_neighbours

        transfer_ms, build_ms = 0.0, 0.0
        query_ms, _, _, index = timer(lambda: nearest_neighbours(points, queries))
        name = "ours: CPU twin (all pairs)"
    ours = np.linalg.norm(points[index].astype(np.float64) - queries, axis=1)
    same_index = float(np.mean(index == reference["index"]))
    same_distance = float(np.mean(np.isclose(ours, reference["distance"], rtol=1e-6, atol=0)))
    total = transfer_ms + build_ms + query_ms
    rows.append(
        NnRow(
            name,
            len(points),
            len(queries),
            transfer_ms,
            build_ms,
            query_ms,
            total,
            same_index,
            same_distance,
        )
    )
    for row in rows:
        log.info(
            "nn %s: build %.2f ms, query %.2f ms", row.implementation, row.build_ms, row.query_ms
        )
    return rows


def run(
    output: Path,
    data_dir: Path,
    backend_name: str,
    quick: bool,
    warmup: int,
    repeats: int,
    budget_s: float,
    experiments: list[str],
) -> Path:
    """Measure ``experiments`` (``size``, ``d_th``, ``nn``); write the JSON, tables, figures."""
    from .environment import python_command, run_metadata

    backend = make_backend("cpu" if quick else backend_name)
    timer = Timer(backend, warmup, repeats, budget_s)
    meta = run_metadata(python_command(), backend)
    output.mkdir(parents=True, exist_ok=True)
    rows: list[SearchRow] = []
    nn: list[NnRow] = []
    started = time.perf_counter()
    if "size" in experiments:
        for case, points, rings in size_clouds(quick):
            rows += measure_cloud(backend, timer, "size", case, points, rings, SIZE_D_TH)
    if "d_th" in experiments or "nn" in experiments:
        points, rings = frame_with_rings(data_dir, quick)
        if "d_th" in experiments:
            for d_th in QUICK_D_TH_VALUES if quick else D_TH_VALUES:
                rows += measure_cloud(backend, timer, "d_th", D_TH_FRAME, points, rings, d_th)
        if "nn" in experiments:
            nn_points = points[:QUICK_NN_POINTS] if quick else points
            nn = nearest_neighbour_rows(backend, timer, np.ascontiguousarray(nn_points))
    document = {
        "meta": meta.as_dict(),
        "settings": {"warmup": warmup, "repeats": repeats, "budget_s": budget_s, "quick": quick},
        "seconds": time.perf_counter() - started,
        "rows": [asdict(row) for row in rows],
        "nn": [asdict(row) for row in nn],
    }
    path = output / "searches.json"
    path.write_text(json.dumps(document, indent=1, default=str))
    (output / "searches.md").write_text(markdown(document))
    plot(document, output)
    return path


def markdown(document: dict[str, Any]) -> str:
    """The tables: per cloud, each structure's build, query and ``cluster()`` medians (p99) and
    its ratio to the voxel grid; then the nearest-neighbour comparison."""
    lines = []
    rows = document["rows"]
    for experiment in dict.fromkeys(r["experiment"] for r in rows):
        lines += [
            f"### {experiment}",
            "",
            "| cloud | points | d_th | structure | build ms (p99) | query ms (p99) | "
            "build+query vs voxel grid | cluster() union_find ms (p99) | vs range | pairs |",
            "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in (r for r in rows if r["experiment"] == experiment):
            base = next(
                b
                for b in rows
                if b["experiment"] == experiment
                and b["case"] == r["case"]
                and b["d_th"] == r["d_th"]
                and b["structure"] == STRUCTURE_NAMES["range"]
            )
            total = r["build_ms"] + r["query_ms"]
            ratio = total / (base["build_ms"] + base["query_ms"])
            lines.append(
                f"| {r['case']} | {r['points']} | {r['d_th']:g} | {r['structure']} | "
                f"{r['build_ms']:.3f} ({r['build_p99_ms']:.3f}) | "
                f"{r['query_ms']:.3f} ({r['query_p99_ms']:.3f}) | {ratio:.2f}x | "
                f"{r['cluster_ms']:.3f} ({r['cluster_p99_ms']:.3f}) | "
                f"{r['cluster_ms'] / base['cluster_ms']:.2f}x | {r['pairs']} |"
            )
        lines.append("")
    if document["nn"]:
        lines += [
            "### nn",
            "",
            "| implementation | map points | queries | transfer ms | build ms | query ms | "
            "total ms | same index as cKDTree | same distance |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in document["nn"]:
            lines.append(
                f"| {r['implementation']} | {r['map_points']} | {r['queries']} | "
                f"{r['transfer_ms']:.2f} | {r['build_ms']:.2f} | {r['query_ms']:.2f} | "
                f"{r['total_ms']:.2f} | {r['same_index']:.5f} | {r['same_distance']:.5f} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(document: dict[str, Any], output: Path) -> list[Path]:
    """``searches_size.png``, ``searches_d_th.png``, ``searches_nn.png`` (none without
    matplotlib: logged)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no figures (redraw later with --replot)")
        return []
    written = []
    rows = document["rows"]
    for experiment, x_key, x_label in (
        ("size", "points", "points"),
        ("d_th", "d_th", "d_th (m)"),
    ):
        mine = [r for r in rows if r["experiment"] == experiment]
        if not mine:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
        for structure in STRUCTURE_NAMES.values():
            sel = sorted((r for r in mine if r["structure"] == structure), key=lambda r: r[x_key])
            x = [r[x_key] for r in sel]
            for ax, key in zip(axes, ("build_ms", "query_ms", "cluster_ms"), strict=True):
                ax.plot(x, [r[key] for r in sel], "o-", label=structure)
        titles = (
            "build",
            "query (every point's neighbours)",
            "cluster(), union_find (voxel grid: clique cells)",
        )
        for ax, title in zip(axes, titles, strict=True):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel(x_label)
            ax.set_ylabel("median ms")
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
        axes[0].legend()
        fig.suptitle(f"neighbour-search structures vs {x_label} ({document['meta'].get('device')})")
        path = output / f"searches_{experiment}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    if document["nn"]:
        fig, ax = plt.subplots(figsize=(8, 3.6))
        names = [r["implementation"] for r in document["nn"]]
        left = np.zeros(len(names))
        for key, label in (
            ("transfer_ms", "transfer"),
            ("build_ms", "build"),
            ("query_ms", "query"),
        ):
            values = np.array([r[key] for r in document["nn"]])
            ax.barh(names, values, left=left, label=label)
            left += values
        ax.set_xlabel("ms (median)")
        ax.set_title(f"nearest neighbour of {document['nn'][0]['queries']} queries in a sweep")
        ax.legend()
        path = output / "searches_nn.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def replot(output: Path) -> list[Path]:
    """Redraw the figures (and the tables) from ``output/searches.json``."""
    path = output / "searches.json"
    if not path.is_file():
        raise BenchError(f"no searches.json in {output}")
    document = json.loads(path.read_text())
    (output / "searches.md").write_text(markdown(document))
    return plot(document, output)
