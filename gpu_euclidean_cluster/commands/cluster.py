"""``gpu-euclidean-cluster cluster FILE``: cluster one point cloud file and report the result.

Prints a human summary (points, clusters, largest sizes, backend, per-stage timings) or, with
``--json``, exactly one JSON object on stdout; ``--labels-out`` writes the int32 labels, one per
point of the file in file order, as raw little-endian ``np.int32`` (read back with
``np.fromfile(path, np.int32)``); ``--png`` draws a bird's-eye picture of the clusters and their
oriented boxes (``tools/birdseye.py``).

A run that lasts more than a second shows its stages (reading, clustering, writing, drawing) on
a progress line on stderr when stderr is a terminal (``--progress``: also when piped;
``--no-progress``: never). The library reports no progress within the clustering call, so the
line names the stage running and its elapsed time, never a percentage.

Option values are checked here rather than by argparse so that every bad value gives the
one-line error of ``cli.main`` (argparse would add its usage text).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from ..core.config import (
    BACKENDS,
    DEFAULT_BACKEND,
    DEFAULT_CONFIG,
    METHODS,
    SEARCHES,
    UNLIMITED_CLUSTER_SIZE,
    ClusterConfig,
)
from ..pointcloud_io import FORMATS
from ..ros.parameters.specs import SPECS, section_fields
from .errors import CommandError

if TYPE_CHECKING:
    import numpy as np

    from ..core.result import ClusterResult
    from ..pointcloud_io import Cloud

log = logging.getLogger(__name__)

LARGEST_SHOWN = 10


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``cluster`` and its options."""
    parser = subparsers.add_parser(
        "cluster",
        help="cluster one point cloud file (KITTI .bin, nuScenes .pcd.bin, PCD, .npy)",
        description="Euclidean cluster extraction of one point cloud file.",
    )
    parser.add_argument("file", metavar="FILE", help="point cloud file")
    parser.add_argument(
        "--format",
        metavar="{" + ",".join(FORMATS) + "}",
        help="file format (default: from the name: .pcd.bin nuscenes, .bin kitti, .pcd, .npy)",
    )
    parser.add_argument(
        "--d-th",
        default=str(DEFAULT_CONFIG.d_th),
        metavar="M",
        help=f"distance threshold in m ({DEFAULT_CONFIG.d_th})",
    )
    parser.add_argument(
        "--method",
        default=DEFAULT_CONFIG.method,
        metavar="{" + ",".join(METHODS) + "}",
        help=f"labelling method ({DEFAULT_CONFIG.method})",
    )
    parser.add_argument(
        "--search",
        default=DEFAULT_CONFIG.search,
        metavar="{" + ",".join(SEARCHES) + "}",
        help="neighbour search: exhaustive, voxel-grid range search, kdtree, or scan (bins of the "
        f"file's ring or channel field, else elevation bands) ({DEFAULT_CONFIG.search})",
    )
    parser.add_argument(
        "--pointer-jumping",
        action=argparse.BooleanOptionalAction,
        default=DEFAULT_CONFIG.pointer_jumping,
        help="vertex/edge: hook roots and compress paths after each pass (same labels, fewer "
        "passes); --no-pointer-jumping runs the paper's algorithm as written (default: on)",
    )
    parser.add_argument(
        "--backend",
        default=DEFAULT_BACKEND,
        metavar="{" + ",".join(BACKENDS) + "}",
        help=f"cuda, cpu, or auto: CUDA when CuPy sees a device ({DEFAULT_BACKEND})",
    )
    parser.add_argument(
        "--min-cluster-size", default="1", metavar="N", help="smaller clusters get label -1 (1)"
    )
    parser.add_argument(
        "--max-cluster-size",
        default=None,
        metavar="N",
        help="larger clusters get label -1 (unlimited)",
    )
    parser.add_argument(
        "--max-work-s",
        default=str(DEFAULT_CONFIG.max_work_s),
        metavar="S",
        help="refuse a paper's method or exhaustive search estimated to take longer than S "
        f"seconds; 0: no limit ({DEFAULT_CONFIG.max_work_s:g})",
    )
    parser.add_argument(
        "--labels-out", metavar="PATH", help="write the labels as raw int32, one per point"
    )
    parser.add_argument(
        "--png",
        metavar="OUT.png",
        help="draw a bird's-eye PNG: clusters coloured, noise grey, each cluster's oriented box, "
        "a scale bar",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="name the stage running on stderr: from the start, also when piped (default: when "
        "stderr is a terminal and the run lasts over a second); --no-progress: never",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load, cluster, report; expected failures raise CommandError/ValueError/OSError."""
    from ..clusterer import EuclideanClusterer
    from ..core.memory import StructureTooLargeError, host_memory_budget
    from ..core.work import WorkTooLargeError
    from ..pointcloud_io import detect_format, load_points
    from ..tools.progress import StageProgress

    config = config_from_args(args)
    fmt = args.format or detect_format(args.file)
    if fmt not in FORMATS:
        raise CommandError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    outputs = {"--labels-out": args.labels_out, "--png": args.png}
    for option, path in outputs.items():
        if path:
            check_writable(path, option, args.file)
    if args.labels_out and args.png and _same_file(args.labels_out, args.png):
        raise CommandError(f"{args.png}: --png and --labels-out name the same file")
    forced = args.progress is not None
    stages = 2 + sum(bool(path) for path in outputs.values())
    enabled = args.progress if forced else sys.stderr.isatty()
    with StageProgress(stages, enabled=enabled, delay_s=0.0 if forced else 1.0) as progress:
        progress.stage(f"reading {args.file}")
        cloud = load_points(args.file, fmt, max_bytes=host_memory_budget())
        if len(cloud.xyz) == 0:
            log.warning("%s holds no points: nothing to cluster", args.file)
        rings = file_rings(cloud, args.file) if config.search == "scan" else None
        clusterer = EuclideanClusterer(config, backend=args.backend)
        progress.stage(
            f"clustering {len(cloud.xyz)} points on the {clusterer.backend.name} backend "
            f"(method {config.method}, search {config.search}, d_th {config.d_th:g} m)"
        )
        try:
            result = clusterer.cluster(cloud.xyz, rings=rings)
        except (StructureTooLargeError, WorkTooLargeError) as error:
            raise CommandError(str(error)) from None
        except MemoryError as error:
            raise CommandError(
                f"out of memory clustering {len(cloud.xyz)} points at d_th {config.d_th} m with "
                f"method {config.method} ({type(error).__name__}: {error})"
            ) from None
        if args.labels_out:
            progress.stage(f"writing the labels to {args.labels_out}")
            write_labels(args.labels_out, result.labels)
        if args.png:
            progress.stage(f"drawing {args.png}")
            write_png(args.png, args.file, cloud, config, result)
    report = build_report(args, fmt, config, cloud, result)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def file_rings(cloud: Cloud, path: str) -> np.ndarray | None:
    """The file's ring (the first of ``RING_FIELDS`` it has) for the scan search, checked; None
    when it has none (the search then bins by elevation, as exact).

    Raises:
        CommandError: the field is not one ring id per point in ``[0, MAX_RINGS)``.
    """
    from ..core.scan_search import check_rings
    from ..pointcloud_io.pointcloud2 import RING_FIELDS

    name = next((n for n in RING_FIELDS if n in cloud.fields), None)
    if name is None:
        log.info("%s has no ring or channel field: the scan search bins by elevation", path)
        return None
    try:
        return check_rings(cloud.fields[name], len(cloud.xyz))
    except ValueError as error:
        raise CommandError(f"{path}: field {name}: {error}") from None


#: The node's parameters this command takes as ``--name-with-dashes`` options, in the order their
#: text is checked; each sets its ClusterConfig field as the node's does
#: (:attr:`~gpu_euclidean_cluster.ros.parameters.specs.ParameterSpec.sets`).
OPTION_PARAMETERS = (
    "d_th",
    "max_work_s",
    "min_cluster_size",
    "max_cluster_size",
    "method",
    "search",
    "pointer_jumping",
)
#: The unit a number option's error names.
_UNITS = {"d_th": "metres", "max_work_s": "seconds"}


def config_from_args(args: argparse.Namespace) -> ClusterConfig:
    """The validated ClusterConfig the options describe (ConfigError names a bad value); an
    option left out (``--max-cluster-size``) keeps the library's default."""
    values = {
        name: _parameter_value(name, getattr(args, name))
        for name in OPTION_PARAMETERS
        if getattr(args, name) is not None
    }
    return ClusterConfig(**section_fields("cluster", values))


def _parameter_value(name: str, given: object) -> object:
    """An option's text as the value of the node's parameter ``name`` (its spec's type)."""
    parse = {"double": float, "int": int}.get(SPECS[name].type_name)
    if parse is None:
        return given
    try:
        return parse(str(given))
    except ValueError:
        what = f"a number of {_UNITS[name]}" if parse is float else "an integer"
        option = "--" + name.replace("_", "-")
        raise CommandError(f"{option} must be {what}, got {given!r}") from None


#: What each output option writes, for its errors.
_OUTPUT_NAMES = {"--labels-out": "the labels", "--png": "the PNG"}


def check_writable(path: str, option: str, source: str) -> None:
    """Fail before clustering when the output ``path`` of ``option`` cannot be created (missing
    folder, a directory) or is the input file ``source``."""
    what = _OUTPUT_NAMES[option]
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise CommandError(f"{path}: cannot write {what}: no folder {folder}")
    if os.path.isdir(path):
        raise CommandError(f"{path}: cannot write {what}: is a directory")
    if _same_file(path, source):
        raise CommandError(f"{path}: {option} names the input file; not overwriting it")


def _same_file(first: str, second: str) -> bool:
    """Whether two paths name one file (hard and symbolic links included)."""
    if os.path.exists(first) and os.path.exists(second):
        return os.path.samefile(first, second)
    return os.path.realpath(first) == os.path.realpath(second)


def write_labels(path: str, labels: Any) -> None:
    """Write ``labels`` as raw little-endian int32."""
    import numpy as np

    try:
        np.asarray(labels).astype("<i4", copy=False).tofile(path)
    except OSError as error:
        raise OSError(f"{path}: cannot write the labels: {error.strerror or error}") from None


def write_png(
    path: str, source: str, cloud: Cloud, config: ClusterConfig, result: ClusterResult
) -> None:
    """The bird's-eye PNG of ``result``, titled with the file, method, search, d_th and count."""
    from ..tools.birdseye import write_birdseye_png

    title = (
        f"{os.path.basename(source)}: {result.num_clusters} clusters at d_th {config.d_th:g} m "
        f"({result.method}, search {result.search}, {result.backend})"
    )
    try:
        write_birdseye_png(path, cloud.xyz, result.labels, title=title)
    except OSError as error:
        raise OSError(f"{path}: cannot write the PNG: {error.strerror or error}") from None


def build_report(
    args: argparse.Namespace,
    fmt: str,
    config: ClusterConfig,
    cloud: Cloud,
    result: ClusterResult,
) -> dict[str, Any]:
    """ClusterResult.summary() plus what was read and asked for."""
    report = result.summary()
    report.update(
        file=args.file,
        format=fmt,
        finite_points=int(cloud.finite_mask().sum()),
        d_th=config.d_th,
        pointer_jumping=config.pointer_jumping,
        min_cluster_size=config.min_cluster_size,
        max_cluster_size=(
            None if config.max_cluster_size == UNLIMITED_CLUSTER_SIZE else config.max_cluster_size
        ),
        labels_out=args.labels_out,
        png=args.png,
    )
    return report


def format_report(report: dict[str, Any]) -> str:
    """The human summary of a report made by :func:`build_report`."""
    sizes = report["cluster_sizes"]
    largest = " ".join(str(s) for s in sizes[:LARGEST_SHOWN])
    if len(sizes) > LARGEST_SHOWN:
        largest += " ..."
    max_size = report["max_cluster_size"] or "unlimited"
    timings = ", ".join(f"{stage} {ms:.2f}" for stage, ms in report["timings_ms"].items())
    lines = [
        f"file      {report['file']} ({report['format']})",
        f"points    {report['points']} ({report['finite_points']} finite)",
        f"clusters  {report['clusters']} at d_th {report['d_th']:g} m, "
        f"sizes {report['min_cluster_size']}..{max_size}",
        f"largest   {largest or '-'}",
        f"backend   {report['backend']} ({report['device']}), method {report['method']}, "
        f"search {report['search']}",
        f"timings   ms: {timings}",
    ]
    if report["labels_out"]:
        lines.append(f"labels    {report['labels_out']} (int32, {report['points']} values)")
    if report["png"]:
        lines.append(f"picture   {report['png']}")
    return "\n".join(lines)
