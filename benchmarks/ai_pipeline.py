"""``python -m benchmarks ai-pipeline``: Autoware.ai's pipeline through the frame layer, stage by
stage and end to end, on the CUDA and the CPU backend in one run.

One frame (default kitti_000001 from ``$LIDAR_DATA_DIR``) as a PointCloud2 cloud of x, y, z,
intensity, through each case:

- ``plain``: ``d_th`` 0.75 m, clusters of 20..100 000 points, ``use_height`` false;
- ``autoware``: Autoware.ai's defaults: the plain case plus the height window -1.3..0.5 m, the
  RANSAC ground plane (0.2 m, 5.73 degrees, 100 hypotheses), merging at 1.5 m and oriented boxes;
- ``autoware+bands``: plus the range bands [15, 30, 45, 60] m with tolerances [0.5, 1.1, 1.6,
  2.1, 2.6] m;
- ``autoware+don``: the ``autoware`` case plus Difference-of-Normals filtering after the ground
  (radii 0.5 and 2.0 m, threshold 0.5: Autoware.ai's ``use_diffnormals``).

Per backend and case, two measurements of the same work:

- **end to end**: ``FramePipeline.process`` as the node calls it (``copy_output`` false), median
  and p99 milliseconds: the figure the targets are about;
- **stages**: the same steps called one by one through the public interfaces (the backend's frame
  codec, the ground and DoN stages, ``Backend.label`` per band, ``Backend.merge_components``,
  ``Backend.number_clusters``, ``Backend.oriented_boxes``, the codec's encode), with a device
  synchronisation after each, median and p99 of each: decode, ground, diffnormals, clustering
  (labelling), merging, numbering (canonical numbering and size filter), boxes, encode. The
  synchronisations cost a little, so the stages add up to a little more than the end-to-end
  time. The stage run's labels, table and boxes are checked equal to the end-to-end run's
  (``same``).

On a GPU backend, one more end-to-end call runs under CUPTI (:mod:`.gpu_activity`): its kernel
and graph launches, the kernels and copies that ran and the host's synchronisations, per frame.

Prints one table and writes ``ai_pipeline.json`` into ``--output``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from gpu_euclidean_cluster.clusterer import as_points, make_backend
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.diffnormals import DiffNormalsSettings
from gpu_euclidean_cluster.core.frame import FrameWindow, flatten_heights
from gpu_euclidean_cluster.core.ground import GroundSettings
from gpu_euclidean_cluster.core.numbering import array_module
from gpu_euclidean_cluster.core.range_bands import band_indices, offset_components
from gpu_euclidean_cluster.core.timing import StageClock
from gpu_euclidean_cluster.frame import DiffNormalsFilter, FramePipeline, FrameStage, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import RawCloud, from_structured

from .cases import data_dir
from .errors import BenchError
from .gpu_activity import ACTIVITY_HEADER, ActivityUnavailable, count_activity
from .stats import median, p99

#: The stage split's stages, in pipeline order.
STAGES = (
    "decode",
    "ground",
    "diffnormals",
    "clustering",
    "merging",
    "numbering",
    "boxes",
    "encode",
)

_BASE = ClusterConfig(d_th=0.75, min_cluster_size=20, max_cluster_size=100000)
_WINDOW = FrameWindow(min_z=-1.3, max_z=0.5, use_height=False)
#: Autoware.ai's ground removal: 0.2 m, a slope of at most 0.1 rad, 100 hypotheses.
GROUND = GroundSettings(distance_threshold=0.2, max_slope_deg=5.729577951308232, iterations=100)


@dataclass(frozen=True)
class Case:
    """One configuration of the pipeline."""

    name: str
    config: ClusterConfig
    window: FrameWindow
    ground: bool
    boxes: bool
    diffnormals: bool = False

    def stages(self) -> list[FrameStage]:
        """The frame stages of this case, in the pipeline's order."""
        stages: list[FrameStage] = [GroundRemoval(GROUND)] if self.ground else []
        return stages + ([DiffNormalsFilter(DiffNormalsSettings())] if self.diffnormals else [])


CASES = (
    Case("plain", _BASE, FrameWindow(use_height=False), ground=False, boxes=False),
    Case(
        "autoware",
        _BASE.with_changes(cluster_merge_threshold=1.5),
        _WINDOW,
        ground=True,
        boxes=True,
    ),
    Case(
        "autoware+bands",
        _BASE.with_changes(
            cluster_merge_threshold=1.5,
            clustering_ranges=(15.0, 30.0, 45.0, 60.0),
            clustering_distances=(0.5, 1.1, 1.6, 2.1, 2.6),
        ),
        _WINDOW,
        ground=True,
        boxes=True,
    ),
    Case(
        "autoware+don",
        _BASE.with_changes(cluster_merge_threshold=1.5),
        _WINDOW,
        ground=True,
        boxes=True,
        diffnormals=True,
    ),
)


def load_cloud(path: Path) -> RawCloud:
    """A KITTI-style ``.bin`` frame (x, y, z, intensity float32) as a PointCloud2 cloud."""
    if not path.is_file():
        raise BenchError(f"frame {path} not found (set LIDAR_DATA_DIR or pass --frame)")
    values = 5 if "nuscenes" in path.name else 4
    raw = np.fromfile(path, dtype=np.float32).reshape(-1, values)
    records = np.zeros(len(raw), dtype=[(n, "<f4") for n in ("x", "y", "z", "intensity")])
    for i, name in enumerate(records.dtype.names or ()):
        records[name] = raw[:, i]
    return from_structured(records)


class StageRun:
    """The pipeline's steps one by one on one backend, timed with a synchronisation after each
    (mirrors ``FramePipeline._process`` through public interfaces only)."""

    def __init__(self, backend_name: str, case: Case) -> None:
        self.backend = make_backend(backend_name)
        self.codec = self.backend.frame_codec()
        self.case = case
        self.ground = GroundRemoval(GROUND) if case.ground else None
        self.diffnormals = DiffNormalsFilter(DiffNormalsSettings()) if case.diffnormals else None
        config = case.config
        self.bands: tuple[tuple[int, ClusterConfig], ...] = tuple(
            (
                number,
                config.with_changes(
                    d_th=d_th,
                    clustering_ranges=(),
                    clustering_distances=(),
                    cluster_merge_threshold=0,
                ),
            )
            for number, d_th in enumerate(config.clustering_distances)
        )
        self.plain = config.with_changes(
            clustering_ranges=(), clustering_distances=(), cluster_merge_threshold=0
        )

    def run(self, cloud: RawCloud) -> tuple[dict[str, float], tuple[Any, ...]]:
        """One frame: milliseconds per stage, and (labels, table, boxes) to compare."""
        backend, case, config = self.backend, self.case, self.case.config
        times: dict[str, float] = {}
        clock = StageClock(backend.synchronize)

        def timed(stage: str, call: Callable[[], Any]) -> Any:
            backend.synchronize()
            start = time.perf_counter()
            value = call()
            backend.synchronize()
            times[stage] = (time.perf_counter() - start) * 1e3
            return value

        # as the pipeline decodes: true heights for the stages and the boxes, flattened after
        staged = self.ground is not None or self.diffnormals is not None
        flatten = (staged or case.boxes) and not case.window.use_height
        decode_window = replace(case.window, use_height=True) if flatten else case.window
        frame = timed("decode", lambda: self.codec.decode(cloud, decode_window))
        decoded = frame.points
        if self.ground is not None:
            frame = timed("ground", lambda: self.ground.apply(frame))  # type: ignore[union-attr]
        else:
            times["ground"] = 0.0
        if self.diffnormals is not None:
            frame = timed("diffnormals", lambda: self.diffnormals.apply(frame))  # type: ignore[union-attr]
        else:
            times["diffnormals"] = 0.0

        def label() -> tuple[Any, Any, Any]:
            points = as_points(flatten_heights(frame.points) if flatten else frame.points)
            xp = array_module(points)
            valid = xp.isfinite(points).all(axis=1) & frame.mask
            index = xp.flatnonzero(valid)
            compact = points[index]
            if not self.bands:
                return index, compact, backend.label(compact, self.plain, clock).components
            members_of = band_indices(compact, config.clustering_ranges, len(self.bands))
            parts = []
            for number, band_config in self.bands:
                members = members_of[number]
                if members.shape[0]:
                    labelled = backend.label(compact[members], band_config, clock)
                    parts.append((members, labelled.components))
            return index, compact, offset_components(parts, int(compact.shape[0]))

        index, compact, components = timed("clustering", label)
        if config.cluster_merge_threshold > 0:
            components = timed(
                "merging",
                lambda: backend.merge_components(
                    compact, components, config.cluster_merge_threshold
                ),
            )
        else:
            times["merging"] = 0.0

        def number() -> tuple[Any, np.ndarray]:
            kept, sizes, _ = backend.number_clusters(
                components, config.min_cluster_size, config.max_cluster_size
            )
            xp = array_module(kept)
            labels = xp.full(int(decoded.shape[0]), -1, dtype=xp.int32)
            labels[index] = kept
            return labels, sizes

        labels, sizes = timed("numbering", number)
        boxes = None
        if case.boxes:
            boxes = timed("boxes", lambda: backend.oriented_boxes(decoded, labels, sizes))
        else:
            times["boxes"] = 0.0
        encoded = timed("encode", lambda: self.codec.encode(labels, sizes, copy=False))
        host_labels = labels.get() if hasattr(labels, "get") else labels
        return times, (host_labels, encoded.table, boxes)


def run_case(
    backend_name: str, case: Case, cloud: RawCloud, repeats: int, warmup: int
) -> dict[str, Any]:
    """End to end and stage by stage on one backend: the row of the table."""
    pipeline = FramePipeline(backend_name, stages=case.stages(), copy_output=False)
    process = lambda: pipeline.process(  # noqa: E731
        cloud, case.config, case.window, oriented_boxes=case.boxes
    )
    split = StageRun(backend_name, case)
    for _ in range(warmup):
        process()
        split.run(cloud)
    end_to_end, per_stage = [], {stage: [] for stage in STAGES}
    for _ in range(repeats):
        start = time.perf_counter()
        output = process()
        end_to_end.append((time.perf_counter() - start) * 1e3)
        times, (labels, table, boxes) = split.run(cloud)
        for stage in STAGES:
            per_stage[stage].append(times[stage])
    activity = (
        ActivityUnavailable("the CPU backend")
        if backend_name == "cpu"
        else count_activity(process, calls=1)
    )
    expected = output.result.labels
    expected = expected.get() if hasattr(expected, "get") else expected
    same = (
        np.array_equal(labels, expected)
        and table.tobytes() == output.table.tobytes()
        and (boxes is None) == (output.boxes is None)
        and (boxes is None or boxes.tobytes() == output.boxes.tobytes())
    )
    return {
        "backend": backend_name,
        "device": pipeline.backend.device,
        "case": case.name,
        "repeats": repeats,
        "clusters": int(output.result.num_clusters),
        "ground_points": 0 if output.ground is None else int(output.ground.sum()),
        "end_to_end_ms": {"median": median(end_to_end), "p99": p99(end_to_end)},
        "stages_ms": {
            stage: {"median": median(values), "p99": p99(values)}
            for stage, values in per_stage.items()
        },
        "same": bool(same),
        "activity": activity.as_dict(),
        "activity_cells": activity.cells(),
    }


def format_row(row: dict[str, Any]) -> str:
    cells = [f"{row['backend']:4s}", f"{row['case']:15s}"]
    e2e = row["end_to_end_ms"]
    cells.append(f"{e2e['median']:8.2f} {e2e['p99']:8.2f}")
    for stage in STAGES:
        t = row["stages_ms"][stage]
        cells.append(f"{t['median']:6.2f}/{t['p99']:6.2f}")
    cells += [f"{row['clusters']:5d}", "yes" if row["same"] else "NO", row["activity_cells"]]
    return " | ".join(cells)


def run(args: argparse.Namespace) -> int:
    """Measure every case on each backend and print the table."""
    frame = args.frame or (args.data_dir or data_dir()) / "kitti_000001.bin"
    cloud = load_cloud(frame)
    backends = args.backends.split(",")
    cases = [c for c in CASES if args.cases == "all" or c.name in args.cases.split(",")]
    header = " | ".join(
        ["back", f"{'case':15s}", "end-to-end med/p99"]
        + [f"{s:>13s}" for s in STAGES]
        + ["clust", "same", ACTIVITY_HEADER]
    )
    print(f"{frame.name}: {cloud.num_points} points; milliseconds, median and p99", flush=True)
    print(header, flush=True)
    rows = []
    for backend_name in backends:
        repeats = args.repeats if backend_name != "cpu" else args.cpu_repeats
        for case in cases:
            row = run_case(backend_name, case, cloud, repeats, args.warmup)
            rows.append(row)
            print(format_row(row), flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / "ai_pipeline.json"
    path.write_text(json.dumps({"frame": frame.name, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0 if all(row["same"] for row in rows) else 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``ai-pipeline`` on the sub-command list ``sub``."""
    parser = sub.add_parser(
        "ai-pipeline",
        help="Autoware.ai's pipeline in the frame layer: stage split and end to end, CUDA and CPU",
    )
    parser.add_argument("--output", type=Path, required=True, metavar="DIR")
    parser.add_argument(
        "--backends", default="cuda,cpu", help="comma-separated backends (default cuda,cpu)"
    )
    parser.add_argument(
        "--cases",
        default="all",
        help=f"comma-separated subset of {','.join(c.name for c in CASES)} (default all)",
    )
    parser.add_argument("--frame", type=Path, default=None, help="a .bin frame file")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder of kitti_000001.bin")
    parser.add_argument("--repeats", type=int, default=100, help="timed frames per case (GPU)")
    parser.add_argument("--cpu-repeats", type=int, default=10, help="timed frames on the CPU")
    parser.add_argument("--warmup", type=int, default=3, help="untimed frames first")
    parser.set_defaults(run=run)
