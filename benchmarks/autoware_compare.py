"""``python -m benchmarks autoware``: exact clustering against Autoware's voxel-grid variant.

Per real frame (``$LIDAR_DATA_DIR``) and per simulated street scene (``tools/simulation``, whose
points carry their ground-truth object), whole and with its ground points removed (Autoware
clusters the output of its obstacle segmentation, which removes the ground; against the ground
truth that is the fair case), on one backend, two configurations of the library:

- ``exact``: Autoware's ``euclidean_cluster`` defaults without its maximum: tolerance 0.7 m,
  ``use_height`` false (the points' z set to 0 before the call, outside the timing), at least 10
  points per cluster;
- ``voxel_grid``: Autoware's ``voxel_grid_based_euclidean_cluster`` defaults (tolerance 0.7,
  leaf 0.3, 1 point per voxel, 10 points per cluster, 800 voxels per cluster, thinning above 65
  voxels to 10 points per voxel) on the true x, y, z.

Reported per configuration: median and p99 milliseconds per frame (NumPy points in, NumPy labels
out), the stages of the last call, clusters, unlabelled points, the adjusted Rand index (ARI)
between the two and of each against the ground truth. ARIs are given twice: ``all`` over every point
with -1 as a class of its own, and ``both`` over the points both labellings put in a cluster. With
``--peer PATH`` (the Autoware peer's ``autoware_ec``), the peer's own CPU time on the same frame and
the ARI of our ``voxel_grid`` labels against its labels (its thinning keeps other points than ours,
so ``all`` is below 1 where the thinned points differ; ``test/backends/test_autoware_voxel.py``
checks the pre-thinning partition exactly).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpu_euclidean_cluster import EuclideanClusterer
from gpu_euclidean_cluster.core.config import BACKENDS, DEFAULT_BACKEND, ClusterConfig
from gpu_euclidean_cluster.pointcloud_io import load_points
from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene

from .cases import data_dir
from .stats import median, p99, time_calls

#: Real frames and their float32 values per point (the peer needs the stride).
FRAMES = {"kitti_000001.bin": 4, "kitti_000008.bin": 4, "nuscenes_lidar_top.pcd.bin": 5}
#: Simulated scenes: (sensor, seed); each is run whole and with its ground points removed.
SCENES = (("hdl64e", 0), ("vlp16", 1))
#: The simulator's object id of the ground.
GROUND_ID = 0

EXACT = ClusterConfig(d_th=0.7, min_cluster_size=10)
VOXEL = ClusterConfig(d_th=0.7, algorithm="voxel_grid", min_cluster_size=10)


def adjusted_rand_index(a: np.ndarray, b: np.ndarray) -> float:
    """ARI of two labellings of the same points (any ints; each value is one class)."""
    a = np.unique(np.asarray(a), return_inverse=True)[1].reshape(-1)
    b = np.unique(np.asarray(b), return_inverse=True)[1].reshape(-1)
    n = a.shape[0]
    if n < 2:
        return 1.0
    table = np.bincount(a * (int(b.max()) + 1) + b).astype(np.float64)
    pairs = lambda x: float((x * (x - 1) / 2).sum())  # noqa: E731
    index = pairs(table)
    rows = pairs(np.bincount(a).astype(np.float64))
    cols = pairs(np.bincount(b).astype(np.float64))
    expected = rows * cols / (n * (n - 1) / 2)
    maximum = (rows + cols) / 2
    if maximum == expected:
        return 1.0
    return (index - expected) / (maximum - expected)


def aris(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """``all``: -1 a class of its own; ``both``: over points labelled by both."""
    both = (a >= 0) & (b >= 0)
    return {
        "all": round(adjusted_rand_index(a, b), 4),
        "both": round(adjusted_rand_index(a[both], b[both]), 4) if both.any() else float("nan"),
    }


def _measure(
    clusterer: EuclideanClusterer, points: np.ndarray, repeats: int
) -> tuple[np.ndarray, dict]:
    timed = time_calls(lambda: clusterer.cluster(points), 3, repeats, budget_s=20.0)
    labels = np.asarray(timed.value.labels)
    return labels, {
        "median_ms": round(median(timed.samples_ms), 3),
        "p99_ms": round(p99(timed.samples_ms), 3),
        "repeats": len(timed.samples_ms),
        "clusters": int(timed.value.num_clusters),
        "unlabelled": int((labels < 0).sum()),
        "method": timed.value.method,
        # The last call's stages (the clusterer's StageClock, which synchronises at each end).
        "stages_ms": {k: round(v, 3) for k, v in timed.value.timings_ms.items()},
    }


def _run_peer(peer: str, path: Path, fields: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "labels.i32"
        start = time.perf_counter()
        done = subprocess.run(
            [peer, str(path), str(fields), "voxel", "defaults", "5", str(out)],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.perf_counter() - start
        words = done.stdout.strip().splitlines()[-1].split()
        stats = dict(zip(words[::2], words[1::2], strict=False))
        return {
            "median_ms": float(stats["median_ms"]),
            "min_ms": float(stats["min_ms"]),
            "clusters": int(stats["clusters"]),
            "labelled": int(stats["labelled"]),
            "process_wall_s": round(wall, 2),
            "labels": np.fromfile(out, dtype=np.int32),
        }


def _cases(folder: Path) -> list[tuple[str, np.ndarray, np.ndarray | None, Path | None, int]]:
    cases = []
    for name, fields in FRAMES.items():
        path = folder / name
        if path.is_file():
            cases.append((name, load_points(path).xyz, None, path, fields))
    for sensor, seed in SCENES:
        scan = LidarSimulator(get_sensor(sensor), seed=seed).scan(street_scene(seed=seed))
        cases.append((f"sim_{sensor}_seed{seed}", scan.xyz, scan.object_id, None, 4))
        # Autoware clusters its obstacle segmentation's output: the ground removed first.
        objects = scan.object_id != GROUND_ID
        name = f"sim_{sensor}_seed{seed}_no_ground"
        cases.append((name, scan.xyz[objects], scan.object_id[objects], None, 4))
    return cases


def run(args: argparse.Namespace) -> int:
    exact = EuclideanClusterer(EXACT, args.backend)
    voxel = EuclideanClusterer(VOXEL, args.backend)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, points, truth, path, fields in _cases(args.data_dir or data_dir()):
            flat = points.copy()
            flat[:, 2] = 0.0
            exact_labels, exact_row = _measure(exact, flat, args.repeats)
            voxel_labels, voxel_row = _measure(voxel, points, args.repeats)
            row: dict[str, Any] = {
                "case": name,
                "points": int(points.shape[0]),
                "backend": exact.backend.name,
                "device": exact.backend.device,
                "exact": exact_row,
                "voxel_grid": voxel_row,
                "ari_exact_vs_voxel": aris(exact_labels, voxel_labels),
            }
            if truth is not None:
                row["ari_vs_truth"] = {
                    "exact": aris(exact_labels, truth),
                    "voxel_grid": aris(voxel_labels, truth),
                }
            if args.peer:
                if path is None:
                    path = Path(tmp) / f"{name}.bin"
                    np.concatenate([points, np.zeros((len(points), 1), np.float32)], 1).tofile(path)
                peer = _run_peer(args.peer, path, fields)
                labels = peer.pop("labels")
                peer["ari_voxel_vs_peer"] = aris(voxel_labels, labels)
                peer["clusters_equal"] = peer["clusters"] == voxel_row["clusters"]
                peer["labelled_equal"] = peer["labelled"] == int((voxel_labels >= 0).sum())
                row["peer"] = peer
            rows.append(row)
            _print_row(row)
    args.output.mkdir(parents=True, exist_ok=True)
    out = args.output / "autoware_compare.json"
    out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def _print_row(row: dict[str, Any]) -> None:
    e, v = row["exact"], row["voxel_grid"]
    line = (
        f"{row['case']:<28} {row['points']:>7} pts  exact {e['median_ms']:8.2f}/{e['p99_ms']:8.2f}"
        f" ms {e['clusters']:>4} cl {e['unlabelled']:>6} unl | voxel {v['median_ms']:8.2f}/"
        f"{v['p99_ms']:8.2f} ms {v['clusters']:>4} cl {v['unlabelled']:>6} unl | "
        f"ARI e~v {row['ari_exact_vs_voxel']['all']:.3f}/{row['ari_exact_vs_voxel']['both']:.3f}"
    )
    if "ari_vs_truth" in row:
        t = row["ari_vs_truth"]
        line += f" truth e {t['exact']['all']:.3f}/{t['exact']['both']:.3f}"
        line += f" v {t['voxel_grid']['all']:.3f}/{t['voxel_grid']['both']:.3f}"
    if "peer" in row:
        p = row["peer"]
        line += (
            f" | peer {p['median_ms']:.1f} ms {p['clusters']} cl, ARI v~peer "
            f"{p['ari_voxel_vs_peer']['all']:.3f}/{p['ari_voxel_vs_peer']['both']:.3f}"
        )
    print(line, flush=True)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``autoware`` on the sub-command list ``sub``."""
    parser = sub.add_parser(
        "autoware", help="exact clustering vs Autoware's voxel-grid variant (and its peer)"
    )
    parser.add_argument("--output", type=Path, required=True, metavar="DIR")
    parser.add_argument("--backend", choices=BACKENDS, default=DEFAULT_BACKEND)
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per case")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder of the frames")
    parser.add_argument("--peer", default=None, help="the Autoware peer's autoware_ec binary")
    parser.set_defaults(run=run)
