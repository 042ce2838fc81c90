"""``python -m benchmarks``: reproduce the paper's experiments beside CPU and GPU peers.

Run from a checkout (the repository root on ``PYTHONPATH``, or as the working directory); the
benchmarks are no part of the installed package. Sub-commands (each writes into ``--output DIR``):

- ``synthetic``: the four experiments of Table 2 for every method x search combination.
- ``searches``: voxel grid vs kd-tree vs scan bins (build, query, ``cluster()``) vs cloud size
  and d_th, and the scan paper's nearest-neighbour comparison with SciPy's cKDTree.
- ``frames``: the real frames of ``$LIDAR_DATA_DIR`` at d_th 0.3 / 0.5 / 1.0 m, with ArborX's
  FDBSCAN and FDBSCAN-DenseBox as GPU peers when ``$ARBORX_EC`` names its program.
- ``stress``: dense, huge and high-degree clouds (identical points, a 2 m cube, kitti_000001 at
  5 / 20 / 100 m, 2 M points, mean degree 1 000 and 10 000): time, peak GPU memory, correctness.
- ``node``: end-to-end latency and the highest sustained rate of the ROS node.
- ``autoware``: exact clustering against Autoware's voxel-grid variant, on frames and simulated
  scenes, with Autoware's own library as a peer when ``--peer`` names it.
- ``ai-pipeline``: Autoware.ai's pipeline (ground, bands, merging, boxes) in the frame layer on one
  frame, stage by stage and end to end, CUDA and CPU in one run.
- ``large-clouds``: 2 M and 8 M points NumPy in, labels out, through plain and through page-locked
  staged transfers in one run: host to device, work and device to host, median and p99.
- ``plot`` / ``targets``: redraw the figures / re-check the targets from the files in DIR.

Expected failures (a bad option, a missing runtime, a driver that failed) print one line,
``python -m benchmarks: error: <reason>``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpu_euclidean_cluster.core.config import BACKENDS, DEFAULT_BACKEND, METHODS, SEARCHES
from gpu_euclidean_cluster.ros.qos import RELIABILITIES

from .errors import BenchError

if TYPE_CHECKING:
    from .node_bench import NodeBenchOptions
    from .rows import NodeReport, ResultRow
    from .runner import Settings

log = logging.getLogger(__name__)

PROG = "python -m benchmarks"
ALL = "all"
#: Every sub-command's help ends with this list (argparse shows it under each one's --help).
SUBCOMMANDS_EPILOG = (
    __doc__.split("Sub-commands (each writes into ``--output DIR``):")[1]
    .split("\n\nExpected failures")[0]
    .replace("``", "")
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Benchmark the GPU methods against CPU and GPU peers (the paper's Section 5) "
        "and check the project's targets. Sub-commands (each writes into --output DIR):"
        + SUBCOMMANDS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="bench_command", required=True, metavar="SUBCOMMAND")
    add_subcommands(sub)
    for subparser in sub.choices.values():
        subparser.epilog = f"sub-commands of {PROG}:{SUBCOMMANDS_EPILOG}"
        subparser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the sub-command; its exit status (2: an expected failure)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    return run_reporting_failures(PROG, args.run, args)


def run_reporting_failures(
    prog: str, run: Callable[[argparse.Namespace], int | None], args: argparse.Namespace
) -> int:
    """``run(args)``'s exit status; an expected failure prints one line, ``<prog>: error:
    <reason>``, and gives 2 (Ctrl-C: 130)."""
    try:
        return int(run(args) or 0)
    except (BenchError, ValueError, OSError) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register every sub-command on ``sub``."""
    synthetic = sub.add_parser(
        "synthetic", help="Table 2 sweeps (size, clusters, degree, distance)"
    )
    _add_measure_options(synthetic)
    synthetic.add_argument(
        "--experiments",
        default=ALL,
        help="comma-separated subset of size,cluster_number,point_degree,point_distance "
        "(default: all)",
    )
    synthetic.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    synthetic.set_defaults(run=run_synthetic)

    searches = sub.add_parser(
        "searches",
        help="voxel grid vs kd-tree vs scan bins: build and query time vs size and d_th, and "
        "the scan paper's nearest-neighbour comparison against SciPy's cKDTree",
    )
    _add_output_option(searches)
    _add_data_dir_option(searches, "folder of kitti_000001.bin")
    searches.add_argument(
        "--experiments",
        default=ALL,
        help="comma-separated subset of size,d_th,nn (default: all)",
    )
    searches.add_argument(
        "--backend",
        choices=BACKENDS,
        default=DEFAULT_BACKEND,
        help=f"where to measure (default {DEFAULT_BACKEND}: CUDA if CuPy sees a GPU)",
    )
    searches.add_argument("--warmup", type=int, default=2, help="untimed calls (default 2)")
    searches.add_argument("--repeats", type=int, default=10, help="timed calls (default 10)")
    searches.add_argument(
        "--budget-s", type=float, default=2.0, help="stop repeating a call after (default 2 s)"
    )
    searches.add_argument(
        "--quick", action="store_true", help="tiny clouds on the CPU backend (CI)"
    )
    searches.add_argument(
        "--replot", action="store_true", help="only redraw tables and figures from searches.json"
    )
    searches.set_defaults(run=run_searches)

    frames = sub.add_parser("frames", help="real LiDAR frames at d_th 0.3 / 0.5 / 1.0 m")
    _add_measure_options(frames)
    _add_data_dir_option(frames, "folder of the frames")
    _add_gpu_options(frames, gpu_es_max_points=0)
    _add_arborx_options(frames, reps=10)
    frames.set_defaults(run=run_frames)

    stress = sub.add_parser(
        "stress", help="dense, huge and high-degree clouds: time, peak GPU memory, correctness"
    )
    _add_measure_options(stress, methods=STRESS_METHODS, peers="none")
    stress.add_argument(
        "--cases",
        default=ALL,
        help="comma-separated subset of room-vlp16,cabin-hdl64e,identical,cube,tiled,tiled-8m,"
        "kitti (default: all, in that order)",
    )
    _add_data_dir_option(stress, "folder of kitti_000001.bin (absent: a simulated HDL-64E sweep)")
    _add_gpu_options(stress, gpu_es_max_points=STRESS_GPU_ES_MAX_POINTS)
    _add_arborx_options(stress, reps=3)
    stress.set_defaults(run=run_stress)

    node = sub.add_parser("node", help="node end to end: receive -> publish latency, max rate")
    _add_node_options(node)
    node.set_defaults(run=run_node)

    plot = sub.add_parser("plot", help="redraw the PNGs from the JSON files in --output")
    _add_output_option(plot)
    plot.set_defaults(run=run_plot)

    targets = sub.add_parser("targets", help="check the targets against the files in --output")
    _add_output_option(targets)
    targets.set_defaults(run=run_targets)

    from .ai_pipeline import add_parser as add_ai_pipeline
    from .autoware_compare import add_parser as add_autoware
    from .large_clouds import add_parser as add_large_clouds

    add_autoware(sub)
    add_ai_pipeline(sub)
    add_large_clouds(sub)


def _add_output_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output", type=Path, required=True, metavar="DIR", help="folder of the results"
    )


def _add_data_dir_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help=f"{what} (default: $LIDAR_DATA_DIR, else ../shared/data)",
    )


#: ``stress`` measures these by default: the fused union-find (also device-resident), its ES
#: variant, and the paper's methods as the library runs them (they refuse the dense clouds).
STRESS_METHODS = (
    "RS-union_find,RS-union_find+dev,RS-union_find+staged,RS-union_find+staged+dev,ES-union_find,"
    "RS-edge+pj,RS-vertex+pj,RS-matrix"
)
#: ``stress``: exhaustive search only on clouds up to this size (O(N^2): 2 M points ~3 s).
STRESS_GPU_ES_MAX_POINTS = 300_000
#: ``stress --quick``: the paper's methods get this memory budget, so that the tiny dense
#: clouds are refused on the CPU as the full-size ones are on the GPU.
QUICK_STRESS_MEMORY_BUDGET = 4 << 20


def _add_gpu_options(parser: argparse.ArgumentParser, gpu_es_max_points: int) -> None:
    parser.add_argument(
        "--gpu-es-max-points",
        type=int,
        default=gpu_es_max_points,
        help="skip exhaustive search on the GPU on larger clouds, 0: never "
        f"(default {gpu_es_max_points})",
    )
    parser.add_argument(
        "--memory-budget",
        type=int,
        default=None,
        metavar="BYTES",
        help="bytes the paper's methods may spend on their graph structure before they refuse "
        "the case (default: the free GPU memory, or half the host's on the CPU; --quick stress: "
        f"{QUICK_STRESS_MEMORY_BUDGET >> 20} MiB)",
    )


def _add_arborx_options(parser: argparse.ArgumentParser, reps: int) -> None:
    parser.add_argument(
        "--no-arborx",
        action="store_true",
        help="leave out the rows of ArborX's FDBSCAN / FDBSCAN-DenseBox (run when $ARBORX_EC "
        "names its program, else 'not run: $ARBORX_EC not set')",
    )
    parser.add_argument(
        "--arborx-reps",
        type=int,
        default=reps,
        help=f"timed runs of the ArborX program per eps, after its 2 warm-ups (default {reps})",
    )
    parser.add_argument(
        "--arborx-timeout-s",
        type=float,
        default=120.0,
        help="kill one run of the ArborX program (one cloud: 3 eps x 2 implementations) after "
        "this long, keeping the rows it printed (default 120 s)",
    )


def _add_measure_options(
    parser: argparse.ArgumentParser, methods: str = "all", peers: str = "all"
) -> None:
    from .peers import peer_names
    from .runner import Settings

    d = Settings()
    _add_output_option(parser)
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=DEFAULT_BACKEND,
        help=f"where the GPU methods run (default {DEFAULT_BACKEND}: CUDA if CuPy sees a GPU)",
    )
    parser.add_argument("--device-id", type=int, default=0, help="CUDA device (default 0)")
    parser.add_argument(
        "--methods",
        default=methods,
        help="comma-separated subset of ES-union_find,RS-union_find (the fused method, what "
        "'auto' runs), ES-vertex,ES-edge,ES-matrix,RS-vertex,RS-edge,RS-matrix (the paper's "
        "algorithms as written), ES-vertex+pj,ES-edge+pj,RS-vertex+pj,RS-edge+pj (with pointer "
        "jumping), RS-union_find+dev (points already on the GPU, labels left there), "
        "RS-union_find+staged and RS-union_find+staged+dev (stage by stage, not as one CUDA "
        "graph), KD-union_find,KD-vertex,KD-edge,KD-matrix (the kd-tree search), SC-union_find,"
        "SC-vertex,SC-edge,SC-matrix (the scan search), 'all' or "
        f"'none' (default: {'all of them' if methods == ALL else methods})",
    )
    parser.add_argument(
        "--peers",
        default=peers,
        help=f"comma-separated CPU peers out of {','.join(peer_names())}, 'all' or "
        f"'none' (default: {'all whose modules import' if peers == ALL else peers})",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=d.repeats,
        help=f"timed runs per case at most (default {d.repeats})",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=d.warmup,
        help=f"untimed runs of a GPU method first (default {d.warmup})",
    )
    parser.add_argument(
        "--peer-warmup",
        type=int,
        default=d.peer_warmup,
        help=f"untimed runs of a CPU peer first (default {d.peer_warmup})",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=d.budget_s,
        help="stop repeating once the timed runs of one implementation on one "
        f"case took this long (default {d.budget_s} s)",
    )
    parser.add_argument(
        "--cpu-max-points",
        type=int,
        default=d.cpu_max_points,
        help="skip CPU runs (peers; methods on backend cpu) on larger clouds "
        f"(default {d.cpu_max_points})",
    )
    parser.add_argument(
        "--cpu-max-pairs",
        type=int,
        default=d.cpu_max_pairs,
        help="skip CPU runs on synthetic clouds with more neighbour pairs "
        f"(default {d.cpu_max_pairs})",
    )
    parser.add_argument(
        "--cpu-es-max-points",
        type=int,
        default=d.cpu_es_max_points,
        help="skip exhaustive search on backend cpu (N^2/2 comparisons) on larger clouds "
        f"(default {d.cpu_es_max_points})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI mode: small clouds, CPU backend, 1 warm-up, 2 repeats",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the cases already in DIR's results and measure the rest",
    )
    parser.add_argument("--no-plots", action="store_true", help="write JSON/CSV only")


def _add_node_options(parser: argparse.ArgumentParser) -> None:
    from .node_bench import NodeBenchOptions

    d = NodeBenchOptions()
    _add_output_option(parser)
    parser.add_argument(
        "--frame",
        type=Path,
        default=None,
        help="point cloud file to send (default: kitti_000001.bin from $LIDAR_DATA_DIR, "
        "kitti_000008.bin with --quick; a simulated HDL-64E / VLP-16 sweep when absent)",
    )
    parser.add_argument(
        "--rates",
        default=",".join(f"{r:g}" for r in d.rates_hz),
        help=f"publish rates in Hz, ascending (default {','.join(map(str, d.rates_hz))})",
    )
    parser.add_argument(
        "--duration-s",
        type=float,
        default=d.duration_s,
        help=f"seconds of publishing per rate (default {d.duration_s})",
    )
    parser.add_argument(
        "--method", choices=METHODS, default=d.method, help=f"node method (default {d.method})"
    )
    parser.add_argument(
        "--search", choices=SEARCHES, default=d.search, help=f"node search (default {d.search})"
    )
    parser.add_argument("--d-th", type=float, default=d.d_th, help=f"node d_th (default {d.d_th})")
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=d.backend,
        help=f"node backend (default {d.backend})",
    )
    parser.add_argument(
        "--reliability",
        choices=RELIABILITIES,
        default=d.reliability,
        help=f"input QoS reliability of the node and the driver (default {d.reliability}, the "
        "node's default; large clouds may need reliable where the middleware drops fragments)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI mode: CPU backend, small frame, short run"
    )
    parser.add_argument(
        "--params-file",
        type=Path,
        default=None,
        help="YAML parameters file the node starts with (e.g. config/autoware_ai.param.yaml: "
        "Autoware.ai's whole pipeline); its values replace --method, --search and --d-th",
    )
    parser.add_argument(
        "--objects",
        action="store_true",
        help="subscribe to output/objects_with_feature (Autoware's DetectedObjectsWithFeature, "
        "needs tier4_perception_msgs) instead of the labelled cloud: the node builds and "
        "publishes the objects, and the end-to-end time ends at their arrival",
    )


def run_synthetic(args: argparse.Namespace) -> int:
    from .cases import EXPERIMENTS, synthetic_cases

    experiments = list(EXPERIMENTS) if args.experiments == ALL else _split(args.experiments)
    cases = synthetic_cases(experiments, args.quick, args.seed)
    return _measure(args, "synthetic", cases)


def run_frames(args: argparse.Namespace) -> int:
    from .cases import data_dir, frame_cases

    try:
        cases = frame_cases(args.data_dir or data_dir(), args.quick)
    except FileNotFoundError as error:
        raise BenchError(str(error)) from error
    return _measure(args, "frames", cases)


def run_searches(args: argparse.Namespace) -> int:
    from .cases import data_dir
    from .searches import replot, run

    if args.replot:
        for path in replot(args.output):
            print(f"wrote {path}")
        return 0
    experiments = ["size", "d_th", "nn"] if args.experiments == ALL else _split(args.experiments)
    unknown = sorted(set(experiments) - {"size", "d_th", "nn"})
    if unknown:
        raise BenchError(f"unknown experiment(s) {', '.join(unknown)}; expected size, d_th, nn")
    if args.repeats < 1 or args.warmup < 0 or not args.budget_s > 0:
        raise BenchError("--repeats must be >= 1, --warmup >= 0 and --budget-s > 0")
    path = run(
        args.output,
        args.data_dir or data_dir(),
        args.backend,
        args.quick,
        args.warmup,
        args.repeats,
        args.budget_s,
        experiments,
    )
    print(f"wrote {path}, {path.with_suffix('.md')}")
    return 0


def run_stress(args: argparse.Namespace) -> int:
    from .cases import data_dir
    from .stress import STRESS_NAMES, stress_cases

    names = list(STRESS_NAMES) if args.cases == ALL else _split(args.cases)
    try:
        cases = stress_cases(names, args.quick, args.data_dir or data_dir())
    except ValueError as error:
        raise BenchError(str(error)) from error
    return _measure(args, "stress", cases)


def run_node(args: argparse.Namespace) -> int:
    from .node_bench import run_node_bench

    report = run_node_bench(node_options(args))
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "node.json").write_text(json.dumps(report.as_dict(), indent=1) + "\n")
    print(f"wrote {args.output / 'node.json'}")
    _report_targets(args.output)
    return 0


def node_options(args: argparse.Namespace) -> NodeBenchOptions:
    """The typed options of ``node`` (``--quick``: the CI set, other options ignored)."""
    from .node_bench import QUICK_OPTIONS, NodeBenchOptions

    if args.quick:
        return QUICK_OPTIONS
    try:
        rates = tuple(sorted(float(r) for r in args.rates.split(",") if r.strip()))
    except ValueError as error:
        raise BenchError(f"--rates must be comma-separated numbers: {error}") from error
    return NodeBenchOptions(
        rates_hz=rates,
        duration_s=args.duration_s,
        method=args.method,
        search=args.search,
        d_th=args.d_th,
        backend=args.backend,
        reliability=args.reliability,
        frame=args.frame,
        objects=args.objects,
        params_file=args.params_file,
    )


def run_plot(args: argparse.Namespace) -> int:
    from .plots import plot_results

    rows = _all_rows(args.output)
    if not rows:
        raise BenchError(f"no {', '.join(f'{n}.json' for n in RESULT_FILES)} in {args.output}")
    for path in plot_results(rows, args.output):
        print(f"wrote {path}")
    return 0


def run_targets(args: argparse.Namespace) -> int:
    _report_targets(args.output)
    return 0


def _measure(args: argparse.Namespace, name: str, cases: list[Any]) -> int:
    from gpu_euclidean_cluster.clusterer import make_backend

    from .environment import python_command, run_metadata
    from .plots import plot_results
    from .results import ResultStore
    from .runner import CaseRunner
    from .suite import run_cases

    settings = _settings(args, name)
    backend_name = "cpu" if args.quick else args.backend
    if args.quick and args.backend == "cuda":
        log.warning("--quick runs on the CPU backend; ignoring --backend cuda")
    backend = make_backend(backend_name, args.device_id)
    arborx = _arborx(args) if hasattr(args, "no_arborx") else None
    runner = CaseRunner(backend, _methods(args.methods), _peers(args.peers), settings, arborx)
    meta = run_metadata(python_command(), backend)
    recorded = {**settings.as_dict(), **(arborx.settings() if arborx else {})}
    store = ResultStore(args.output, name, meta, recorded)
    log.info(
        "%s: %d case(s) x %s on %s",
        name,
        len(cases),
        ", ".join(runner.implementations()),
        meta.device,
    )
    run_cases(cases, runner, store, args.resume)
    print(f"wrote {store.json_path} and {store.csv_path} ({len(store.rows)} rows)")
    if not args.no_plots:
        for path in plot_results(store.rows, args.output):
            print(f"wrote {path}")
    _report_targets(args.output)
    return 0


#: ``--quick``: one warm-up, two repeats, and exhaustive search on the CPU only on tiny clouds.
QUICK_SETTINGS = {"warmup": 1, "repeats": 2, "budget_s": 0.5, "peer_warmup": 0,
                  "cpu_es_max_points": 4096, "quick": True}  # fmt: skip


def _settings(args: argparse.Namespace, name: str = "") -> Settings:
    from .runner import Settings
    from .stress import STRESS_ORACLE_MAX_POINTS

    for option in ("repeats", "cpu_max_points", "cpu_max_pairs", "cpu_es_max_points"):
        if getattr(args, option) < 1:
            raise BenchError(f"--{option.replace('_', '-')} must be >= 1")
    for option in ("warmup", "peer_warmup", "gpu_es_max_points"):
        if getattr(args, option, 0) < 0:
            raise BenchError(f"--{option.replace('_', '-')} must be >= 0")
    if not args.budget_s > 0:
        raise BenchError("--budget-s must be > 0")
    if getattr(args, "memory_budget", None) is not None and args.memory_budget < 1:
        raise BenchError("--memory-budget must be >= 1 byte")
    if hasattr(args, "arborx_reps") and args.arborx_reps < 1:
        raise BenchError("--arborx-reps must be >= 1")
    if hasattr(args, "arborx_timeout_s") and not args.arborx_timeout_s > 0:
        raise BenchError("--arborx-timeout-s must be > 0")
    defaults = Settings()
    values = {
        field: getattr(args, field, getattr(defaults, field))
        for field in Settings.__dataclass_fields__
    }
    if name == "stress":  # too dense for the edge list of the default oracle: its union_find twin
        values.update(oracle_method="union_find", oracle_max_points=STRESS_ORACLE_MAX_POINTS)
    if args.quick:
        values.update(QUICK_SETTINGS)
        if name == "stress" and values["memory_budget"] is None:
            values["memory_budget"] = QUICK_STRESS_MEMORY_BUDGET
    return Settings(**values)


def _arborx(args: argparse.Namespace) -> Any:
    """The ArborX peer (its rows say "not run: $ARBORX_EC not set" without the program); None
    with ``--no-arborx``: no ArborX rows at all."""
    from .arborx import ArborxPeer

    if args.no_arborx:
        return None
    peer = ArborxPeer.from_environment(args.arborx_reps, args.arborx_timeout_s)
    if peer.binary is None:
        log.info("ArborX rows not run: %s", peer.reason)
    return peer


def _methods(value: str) -> list[Any]:
    from .runner import GPU_VARIANTS

    by_name = {variant.name: variant for variant in GPU_VARIANTS}
    if value == ALL:
        return list(GPU_VARIANTS)
    if value == "none":
        return []
    names = _split(value)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise BenchError(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
    return [by_name[n] for n in names]


def _peers(value: str) -> list[Any]:
    from .peers import peer_names, select_peers, unavailable_reason

    if value == "none":
        return []
    if value == ALL:
        names = [n for n in peer_names() if unavailable_reason(n) is None]
        for name in peer_names():
            if unavailable_reason(name):
                log.info("CPU peer %s not measured: %s", name, unavailable_reason(name))
        return select_peers(names)
    names = _split(value)
    try:
        peers = select_peers(names)
    except ValueError as error:
        raise BenchError(str(error)) from error
    for name in names:
        reason = unavailable_reason(name)
        if reason:
            raise BenchError(f"CPU peer {name} asked for, but {reason}")
    return peers


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


#: The results files ``plot`` and ``targets`` read.
RESULT_FILES = ("synthetic", "frames", "stress")


def _all_rows(directory: Path) -> list[ResultRow]:
    from .results import load_results

    rows: list[ResultRow] = []
    for name in RESULT_FILES:
        path = directory / f"{name}.json"
        if path.is_file():
            rows += load_results(path).rows
    return rows


def _node_report(directory: Path) -> NodeReport | None:
    from .rows import NodeReport

    path = directory / "node.json"
    return NodeReport.from_dict(json.loads(path.read_text())) if path.is_file() else None


def _report_targets(directory: Path) -> None:
    """Print the targets section and write it to DIR/targets.json."""
    from .targets import check_targets, format_targets

    checks = check_targets(_all_rows(directory), _node_report(directory))
    print(format_targets(checks))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "targets.json").write_text(
        json.dumps([c.as_dict() for c in checks], indent=1) + "\n"
    )
