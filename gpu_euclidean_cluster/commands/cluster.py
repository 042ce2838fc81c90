"""``gpu-euclidean-cluster cluster FILE``: cluster one point cloud file and report the result.

Prints a human summary (points, clusters, largest sizes, backend, per-stage timings) or, with
``--json``, exactly one JSON object on stdout; ``--labels-out`` writes the int32 labels, one per
point of the file in file order, as raw little-endian ``np.int32`` (read back with
``np.fromfile(path, np.int32)``).

Option values are checked here rather than by argparse so that every bad value gives the
one-line error of ``cli.main`` (argparse would add its usage text).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
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
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Load, cluster, report; expected failures raise CommandError/ValueError/OSError."""
    from ..clusterer import EuclideanClusterer
    from ..core.memory import StructureTooLargeError, host_memory_budget
    from ..core.work import WorkTooLargeError
    from ..pointcloud_io import detect_format, load_points

    config = config_from_args(args)
    fmt = args.format or detect_format(args.file)
    if fmt not in FORMATS:
        raise CommandError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if args.labels_out:
        check_writable(args.labels_out)
    cloud = load_points(args.file, fmt, max_bytes=host_memory_budget())
    if len(cloud.xyz) == 0:
        log.warning("%s holds no points: nothing to cluster", args.file)
    rings = file_rings(cloud, args.file) if config.search == "scan" else None
    clusterer = EuclideanClusterer(config, backend=args.backend)
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
        write_labels(args.labels_out, result.labels)
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


def check_writable(path: str) -> None:
    """Fail before clustering when ``path`` cannot be created (missing folder, a directory)."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise CommandError(f"{path}: cannot write the labels: no folder {folder}")
    if os.path.isdir(path):
        raise CommandError(f"{path}: cannot write the labels: is a directory")


def write_labels(path: str, labels: Any) -> None:
    """Write ``labels`` as raw little-endian int32."""
    import numpy as np

    try:
        np.asarray(labels).astype("<i4", copy=False).tofile(path)
    except OSError as error:
        raise OSError(f"{path}: cannot write the labels: {error.strerror or error}") from None


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
    return "\n".join(lines)
