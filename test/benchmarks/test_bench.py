"""The benchmarks (``python -m benchmarks``, run from the checkout): CPU peers, timing rules,
output files of ``synthetic|frames|stress|node``, the ArborX peer's output parser and driver, the
targets, the typed rows, and that the installed package carries none of it.

The sub-commands run in ``--quick`` mode (small clouds, CPU backend) so that CI exercises the
whole tool in well under a minute; no test asserts a speed. The ArborX peer is a GPU program; here
a stand-in with the same arguments, output rows and label files (:data:`FAKE_ARBORX`) drives it.
"""

from __future__ import annotations

import csv
import json
import math
import stat
import subprocess
import sys
import tarfile
from dataclasses import asdict
from pathlib import Path, PurePosixPath

import numpy as np
import pytest

from benchmarks import peers
from benchmarks.arborx import (
    ArborxPeer,
    ArborxRow,
    Scaling,
    arborx_scaling,
    component_ids,
    parse_output,
    run_program,
    scaled_points,
)
from benchmarks.cases import QUICK_TABLE2
from benchmarks.cli import STRESS_METHODS, build_parser, main
from benchmarks.results import CSV_COLUMNS, load_results
from benchmarks.rows import NodeReport, Outcome, ResultRow
from benchmarks.runner import GPU_VARIANTS, _failure
from benchmarks.stats import p99, time_calls
from benchmarks.stress import STRESS_SPECS, mean_degree
from benchmarks.targets import TargetCheck, check_targets
from gpu_euclidean_cluster.clusterer import as_points
from gpu_euclidean_cluster.commands.cli import build_parser as installed_parser
from gpu_euclidean_cluster.core.memory import StructureTooLargeError
from gpu_euclidean_cluster.cuda.labelling.matrix_memory import MatrixMemoryError

from ..conftest import REPO_ROOT, same_partition

METHOD_NAMES = {variant.name for variant in GPU_VARIANTS}
STAGE_COLUMNS = ("transfer_in_ms", "build_ms", "label_ms", "filter_ms", "transfer_out_ms")


def test_pcl_kdtree_peer_matches_brute_force_oracle(oracle_cloud, oracle) -> None:
    _, points, d_th = oracle_cloud
    points = as_points(points)
    labels = peers.pcl_kdtree_labels(points, d_th)
    assert same_partition(labels, oracle(points, d_th))


def test_sklearn_peer_matches_brute_force_oracle(oracle) -> None:
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(5)
    points = rng.uniform(0, 10, (2000, 3)).astype(np.float32)
    points[::97] = np.nan
    assert same_partition(peers.sklearn_dbscan_labels(points, 0.6), oracle(points, 0.6))


def test_unknown_peer_is_rejected_with_the_known_names() -> None:
    with pytest.raises(ValueError, match="pcl-kdtree"):
        peers.select_peers(["pcl", "cpu-backend"])


def test_time_calls_stops_at_repeats_and_keeps_warmup_out() -> None:
    calls = []
    timed = time_calls(lambda: calls.append(1) or len(calls), warmup=3, repeats=4, budget_s=60)
    assert len(calls) == 7
    assert timed.warmup_runs == 3
    assert len(timed.samples_ms) == 4
    assert timed.value == 7


def test_time_calls_budget_bounds_slow_calls_but_measures_once() -> None:
    import time

    timed = time_calls(lambda: time.sleep(0.02), warmup=5, repeats=50, budget_s=0.01)
    assert timed.warmup_runs == 1  # the first warm-up already exceeded the budget
    assert len(timed.samples_ms) == 1
    assert timed.samples_ms[0] >= 20


def test_p99_interpolates_and_is_nan_without_samples() -> None:
    assert p99(list(range(101))) == pytest.approx(99.0)
    assert math.isnan(p99([]))


def test_structures_too_large_are_refused_naming_need_limit_and_union_find() -> None:
    outcome = _failure(MatrixMemoryError(100000, 3 << 30, 1 << 30))
    assert outcome.status == "refused"
    assert outcome.reason.startswith("refused: method matrix needs 3.0 GiB")
    assert "1.0 GiB of free GPU memory" in outcome.reason and "union_find" in outcome.reason
    edge = StructureTooLargeError("edge", "7230390119 edges", 7230390119 * 8, "the int32 range")
    assert _failure(edge) == Outcome("refused", f"refused: {edge}")
    assert _failure(MemoryError("cudaErrorMemoryAllocation")).status == "oom"
    assert _failure(RuntimeError("boom")).status == "error"


def _row(impl: str, median_ms: float, **fields: object) -> ResultRow:
    """A measured row of kitti_000001 at 0.5 m on the GPU (``fields``: columns to set, as in a
    results file: ``speedup_vs_<peer>`` included)."""
    values: dict[str, object] = {
        "case": "frames:kitti_000001.bin,d_th=0.5",
        "experiment": "frames",
        "variable": "d_th",
        "value": 0.5,
        "points": 120268,
        "frame": "kitti_000001.bin",
        "d_th": 0.5,
        "impl": impl,
        "kind": "cpu-peer" if impl == "pcl-kdtree" else "gpu-method",
        "backend": "cuda",
        "status": "ok",
        "median_ms": median_ms,
        "matches_oracle": True,
        **dict.fromkeys(STAGE_COLUMNS, 0.0),
        **fields,
    }
    return ResultRow.from_dict(values)


def test_targets_report_met_and_missed_by_how_much_with_the_dominant_stage() -> None:
    rows = [
        _row("pcl-kdtree", 1000.0),
        _row("RS-matrix", 8.0, speedup_vs_pcl_kdtree=125.0, build_ms=6.0, label_ms=2.0),
        _row("RS-edge", 40.0, speedup_vs_pcl_kdtree=25.0, build_ms=10.0, label_ms=30.0),
        _row("ES-edge", 90.0, matches_oracle=False, build_ms=90.0),
    ]
    node = NodeReport.from_dict(
        {"steps": [{"frame": "kitti_000001.bin", "rate_hz": 10.0, "latency_p99_ms": 12.0,
                    "dropped": 0, "sent": 50, "backend": "cuda"}]}
    )  # fmt: skip
    oracle, speedup, latency, node_check = check_targets(rows, node)[:4]
    assert oracle.status == "missed" and "ES-edge" in oracle.detail
    assert speedup.status == "missed"
    assert "RS-edge 25.0x (missed by 2.00x; label 75% of 40.00 ms)" in speedup.detail
    assert latency.status == "missed"
    assert (
        "RS-matrix 8.00 ms" in latency.detail and "missed by 3.00 ms; build 75%" in latency.detail
    )
    assert node_check.status == "met"


def test_targets_not_measured_without_rows() -> None:
    assert {c.status for c in check_targets([], None)} == {"not measured"}


def _read_outputs(directory: Path, name: str) -> tuple[dict, list[dict[str, str]]]:
    document = json.loads((directory / f"{name}.json").read_text())
    with (directory / f"{name}.csv").open() as stream:
        rows = list(csv.DictReader(stream))
    return document, rows


def _check_document(document: dict, csv_rows: list[dict[str, str]], backend: str) -> None:
    meta = document["meta"]
    for key in ("date", "command", "git_commit", "cpu_model", "device", "driver_version",
                "cuda_runtime_version", "cupy", "backend"):  # fmt: skip
        assert key in meta
    assert meta["backend"] == backend
    assert document["settings"]["repeats"] == 2
    assert len(csv_rows) == len(document["rows"])
    assert csv_rows[0]["run_date"] == meta["date"] and "run_git_commit" in csv_rows[0]
    header = list(csv_rows[0])
    leading = [c for c in CSV_COLUMNS if c in header]
    assert header[: len(leading)] == leading


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bench_synthetic")
    assert main(["synthetic", "--quick", "--output", str(out)]) == 0
    return out


def test_synthetic_quick_writes_json_csv_and_figures(synthetic_run: Path) -> None:
    document, csv_rows = _read_outputs(synthetic_run, "synthetic")
    _check_document(document, csv_rows, "cpu")
    rows = document["rows"]
    cases = {r["case"] for r in rows}
    assert len(cases) == sum(len(e.values) for e in QUICK_TABLE2.values())
    for case in cases:
        impls = {r["impl"] for r in rows if r["case"] == case}
        assert impls >= METHOD_NAMES and {"cpu-backend", "pcl-kdtree"} <= impls
    for row in rows:
        assert row["status"] == "ok", row
        assert row["matches_oracle"] is True, row
        assert row["repeats"] >= 1 and row["median_ms"] > 0
        assert row["speedup_vs_pcl_kdtree"] > 0
    methods = [r for r in rows if r["kind"] == "gpu-method"]
    assert all(r["warmup"] == 1 and r["iterations"] >= 0 for r in methods)
    assert all(all(c in r for c in STAGE_COLUMNS) for r in methods)
    for experiment in QUICK_TABLE2:
        for figure in ("time", "speedup", "stages"):
            assert (synthetic_run / f"synthetic_{experiment}_{figure}.png").stat().st_size > 1000
    assert json.loads((synthetic_run / "targets.json").read_text())[0]["status"] == "met"


def test_synthetic_clusters_equal_the_generator_truth(synthetic_run: Path) -> None:
    document, _ = _read_outputs(synthetic_run, "synthetic")
    for row in document["rows"]:
        if row["kind"] == "gpu-method" and row["experiment"] == "cluster_number":
            assert row["clusters"] == row["value"]


def test_resume_keeps_completed_cases(synthetic_run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "resume"
    out.mkdir()
    before = (synthetic_run / "synthetic.json").read_text()
    (out / "synthetic.json").write_text(before)
    argv = ["synthetic", "--quick", "--resume", "--no-plots", "--output", str(out)]
    assert main(argv) == 0
    assert json.loads((out / "synthetic.json").read_text())["rows"] == json.loads(before)["rows"]
    assert not list(out.glob("*.png"))


def test_frames_quick_matches_pcl_counts(
    tmp_path: Path, lidar_data_dir: Path, pcl_reference, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not (lidar_data_dir / "kitti_000008.bin").is_file():
        pytest.skip(f"LiDAR frames not found in {lidar_data_dir} (set LIDAR_DATA_DIR)")
    monkeypatch.delenv("ARBORX_EC", raising=False)
    argv = ["frames", "--quick", "--data-dir", str(lidar_data_dir), "--output",
            str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    document, csv_rows = _read_outputs(tmp_path, "frames")
    _check_document(document, csv_rows, "cpu")
    rows = document["rows"]
    assert {r["d_th"] for r in rows} == {0.3, 0.5, 1.0}
    for row in rows:
        if row["kind"] == "gpu-peer":  # ArborX: a GPU program named by $ARBORX_EC
            assert row["status"] == "not run"
            assert row["reason"] == "not run: $ARBORX_EC not set"
            continue
        if row["impl"].startswith("ES-"):  # exhaustive search on the CPU: beyond --quick's limit
            assert row["status"] == "skipped" and "cpu-es-max-points" in row["reason"]
            continue
        assert row["status"] == "ok", row
        assert row["matches_oracle"] is True
        assert row["clusters"] == pcl_reference["kitti_000008.bin"][row["d_th"]]
    for figure in ("time", "speedup", "stages"):
        assert (tmp_path / f"frames_{figure}.png").stat().st_size > 1000


def test_frames_oracle_without_the_cpu_backend_peer(tmp_path: Path, lidar_data_dir: Path) -> None:
    if not (lidar_data_dir / "kitti_000008.bin").is_file():
        pytest.skip(f"LiDAR frames not found in {lidar_data_dir} (set LIDAR_DATA_DIR)")
    argv = ["frames", "--quick", "--peers", "none", "--methods", "RS-edge+pj",
            "--no-arborx", "--no-plots", "--data-dir", str(lidar_data_dir), "--output",
            str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads((tmp_path / "frames.json").read_text())["rows"]
    assert [r["impl"] for r in rows] == ["RS-edge+pj"] * 3
    assert all(r["matches_oracle"] is True and r["pointer_jumping"] is True for r in rows)
    assert {r["oracle"] for r in rows} == {"cpu-backend (untimed)"}


def test_bench_errors_are_one_line(tmp_path: Path, capsys) -> None:
    argv = ["synthetic", "--quick", "--experiments", "size,colour", "--output",
            str(tmp_path)]  # fmt: skip
    assert main(argv) == 2
    assert "unknown experiment(s) colour" in capsys.readouterr().err
    argv = ["frames", "--data-dir", str(tmp_path), "--output", str(tmp_path)]
    assert main(argv) == 2
    assert "no LiDAR frames" in capsys.readouterr().err
    argv = ["synthetic", "--quick", "--methods", "RS-magic", "--output", str(tmp_path)]
    assert main(argv) == 2
    assert "unknown method(s) RS-magic" in capsys.readouterr().err
    argv = ["stress", "--quick", "--cases", "cube,donut", "--output", str(tmp_path)]
    assert main(argv) == 2
    assert "unknown stress case(s) donut" in capsys.readouterr().err
    argv = ["stress", "--quick", "--arborx-reps", "0", "--output", str(tmp_path)]
    assert main(argv) == 2
    assert "--arborx-reps must be >= 1" in capsys.readouterr().err


@pytest.mark.ros
def test_node_quick_measures_latency_and_drops(
    tmp_path: Path, lidar_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("rclpy")
    monkeypatch.setenv("LIDAR_DATA_DIR", str(lidar_data_dir))  # a simulated sweep when absent
    assert main(["node", "--quick", "--output", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "node.json").read_text())
    expected = "kitti_000008.bin" if (lidar_data_dir / "kitti_000008.bin").is_file() else None
    assert result["options"]["frame"] == (expected or "simulated-vlp16")
    first = result["steps"][0]
    assert first["rate_hz"] == 2.0 and first["sent"] == 4 and first["warmup_frames"] == 3
    assert first["processed"] + first["dropped"] == first["sent"]
    assert first["processed"] >= 1 and first["latency_p99_ms"] >= first["latency_p50_ms"] > 0
    assert first["e2e_p50_ms"] > 0 and first["backend"] == "cpu"
    assert set(first["stages_ms"]) == {"decode_build", "cluster", "publish", "markers"}
    assert first["stages_ms"]["cluster"][0] > 0
    # The same steps against the node as its own process, counters from its /diagnostics.
    cross = result["cross_process_steps"][0]
    assert cross["rate_hz"] == 2.0 and cross["sent"] == 4
    assert cross["processed"] + cross["dropped"] == cross["sent"] and cross["processed"] >= 1
    assert cross["e2e_p50_ms"] > 0 and cross["latency_p50_ms"] > 0
    assert "max_rate_no_drops_cross_process_hz" in result


# --- bench stress ------------------------------------------------------------------------------

#: The quick stress cases: every cloud at each of its thresholds.
STRESS_KEYS = {f"stress:{spec.name},d_th={d:g}" for spec in STRESS_SPECS for d in spec.thresholds}
#: Cases whose quick cloud the paper's methods must refuse under --quick's 4 MiB budget (as the
#: full-size clouds are refused on the GPU).
REFUSED_CASES = ("identical,d_th=0.5", "kitti,d_th=100", "cabin-hdl64e,d_th=0.5")


@pytest.fixture(scope="module")
def stress_run(tmp_path_factory: pytest.TempPathFactory, lidar_data_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("bench_stress")
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ARBORX_EC", raising=False)
        argv = ["stress", "--quick", "--data-dir", str(lidar_data_dir), "--output",
                str(out)]  # fmt: skip
        assert main(argv) == 0
    return out


def test_stress_quick_writes_rows_for_every_case_and_implementation(stress_run: Path) -> None:
    document, csv_rows = _read_outputs(stress_run, "stress")
    _check_document(document, csv_rows, "cpu")
    settings = document["settings"]
    assert settings["oracle_method"] == "union_find" and settings["memory_budget"] == 4 << 20
    assert settings["arborx"] == "not run: $ARBORX_EC not set"
    rows = document["rows"]
    assert {r["case"] for r in rows} == STRESS_KEYS
    expected = [*STRESS_METHODS.split(","), "arborx-FDBSCAN", "arborx-FDBSCAN-DenseBox"]
    for case in STRESS_KEYS:
        assert [r["impl"] for r in rows if r["case"] == case] == expected
    for row in rows:
        assert row["experiment"] == "stress" and row["points"] > 0
        assert row["mean_degree"] >= 0 and row["mean_degree_method"] == "exact"
        assert row["regime"] and row["cloud"] and row["oracle"]
        assert row["status"] in ("ok", "refused", "skipped", "not run"), row
        if row["status"] == "ok":
            assert row["matches_oracle"] is True, row
            assert row["median_ms"] > 0 and row["p99_ms"] >= row["median_ms"]
        else:
            assert row["reason"], row
    for figure in ("time", "stages"):
        assert (stress_run / f"stress_{figure}.png").stat().st_size > 1000


def test_stress_quick_union_find_finishes_every_case_and_paper_methods_are_refused(
    stress_run: Path,
) -> None:
    rows = json.loads((stress_run / "stress.json").read_text())["rows"]
    by = {(r["case"].removeprefix("stress:"), r["impl"]): r for r in rows}
    for case in STRESS_KEYS:
        row = by[(case.removeprefix("stress:"), "RS-union_find")]
        assert row["status"] == "ok" and row["matches_oracle"] is True
    identical = by[("identical,d_th=0.5", "RS-union_find")]
    assert identical["oracle"] == "known answer: one cluster" and identical["clusters"] == 1
    assert identical["mean_degree"] == identical["points"] - 1
    assert by[("cube,d_th=0.5", "RS-union_find")]["oracle"] == "cpu-backend union_find (untimed)"
    for case in REFUSED_CASES:
        for impl in ("RS-edge+pj", "RS-vertex+pj", "RS-matrix"):
            row = by[(case, impl)]
            assert row["status"] == "refused", row
            assert row["reason"].startswith(f"refused: method {impl[3:].split('+')[0]} needs ")
            assert "union_find" in row["reason"]
    tiled = by[("tiled,d_th=0.3", "RS-matrix")]
    assert tiled["status"] == "skipped" and "more than a minute" in tiled["reason"]
    for row in rows:
        if row["kind"] == "gpu-peer":
            assert row["status"] == "not run"
            assert row["reason"] == "not run: $ARBORX_EC not set"
    room = by[("room-vlp16,d_th=0.5", "RS-union_find")]
    cabin = by[("cabin-hdl64e,d_th=0.5", "RS-union_find")]
    assert cabin["mean_degree"] > room["mean_degree"] > 50


def test_stress_quick_judges_correctness_but_not_the_time_targets(stress_run: Path) -> None:
    checks = {c["name"]: c for c in json.loads((stress_run / "targets.json").read_text())}
    regimes = [name for name in checks if "RS-union_find <= " in name and " median" in name
               and ("mean degree" in name or "stress" in name or "2 M points" in name)]  # fmt: skip
    assert len(regimes) == 4
    for name in regimes:  # tiny CPU clouds say nothing about the GPU time targets
        assert checks[name]["status"] == "not judged", checks[name]
        assert checks[name]["detail"].startswith("--quick run")
    union_find = [c for name, c in checks.items() if name.startswith("union_find returns")]
    assert union_find[0]["status"] == "met"
    memory = [c for name, c in checks.items() if name.startswith("peak GPU memory")]
    assert memory[0]["status"] == "not measured"  # the CPU backend has no GPU memory


def test_mean_degree_exact_and_sampled() -> None:
    assert mean_degree(np.zeros((500, 3), np.float32), 0.5) == (499.0, "exact")
    rng = np.random.default_rng(3)
    points = rng.uniform(0, 4, (3000, 3)).astype(np.float32)
    diff = points[:, None, :].astype(np.float64) - points[None, :, :]
    brute = ((diff**2).sum(axis=-1) <= 0.5**2).sum(axis=1).mean() - 1
    degree, how = mean_degree(points, 0.5)
    assert how == "exact" and degree == pytest.approx(brute)


# --- ArborX peer -------------------------------------------------------------------------------

#: Output of ``arborx_ec - 10 kitti_000001.xyz`` in the program's printf format (rows from its
#: README's H100 medians), with a Kokkos start-up warning before the header.
ARBORX_SAMPLE = """\
Kokkos::OpenMP::initialize WARNING: OMP_PROC_BIND environment variable not set
frame                       N   eps impl                dev_med   dev_min   dev_max   e2e_med   h2d_med clusters    multi   single
kitti_000001.xyz       120268  0.30 FDBSCAN               2.512     2.430     2.908     2.812     0.161     4506     2105     2401
kitti_000001.xyz       120268  0.50 FDBSCAN               4.461     4.402     4.739     4.797     0.160     1724     1066      658
kitti_000001.xyz       120268  1.00 FDBSCAN               9.145     9.051     9.552     9.493     0.163      477      364      113
kitti_000001.xyz       120268  0.30 FDBSCAN-DenseBox      2.671     2.588     3.012     3.018     0.162     4506     2105     2401
kitti_000001.xyz       120268  0.50 FDBSCAN-DenseBox      2.655     2.601     2.877     2.994     0.161     1724     1066      658
kitti_000001.xyz       120268  1.00 FDBSCAN-DenseBox      2.462     2.395     2.650     2.801     0.160      477      364      113
"""  # noqa: E501


def test_arborx_parser_reads_every_row_and_skips_other_lines() -> None:
    rows = parse_output(ARBORX_SAMPLE)
    assert len(rows) == 6
    assert rows[4] == ArborxRow(
        "kitti_000001.xyz", 120268, 0.5, "FDBSCAN-DenseBox", 2.655, 2.601, 2.877, 2.994, 0.161,
        1724, 1066, 658,
    )  # fmt: skip
    assert [(r.impl, r.eps) for r in rows[:3]] == [("FDBSCAN", 0.3), ("FDBSCAN", 0.5),
                                                   ("FDBSCAN", 1.0)]  # fmt: skip
    assert all(r.clusters == r.multi + r.single for r in rows)
    assert parse_output("usage: arborx_ec <labels_prefix|-> <reps> files...\n") == []


def test_arborx_scaling_is_exact_where_a_power_of_two_reaches_an_eps() -> None:
    assert arborx_scaling(0.3) == Scaling(1.0, 0.3, True)
    assert arborx_scaling(1.0) == Scaling(1.0, 1.0, True)
    assert arborx_scaling(0.5) == Scaling(2.0, 1.0, True)  # the largest eps: the others cost less
    assert arborx_scaling(0.25) == Scaling(4.0, 1.0, True)
    assert arborx_scaling(5.0) == Scaling(0.2, 1.0, False)
    assert arborx_scaling(100.0) == Scaling(0.01, 1.0, False)
    points = np.float32([[0.1, 0.7, -3.3], [1e-3, 5e4, 7.0]])
    assert np.array_equal(scaled_points(points, 2.0) / np.float32(2.0), points)


def test_arborx_singletons_become_clusters_of_their_own() -> None:
    ids = component_ids(np.array([3, -1, 3, -1, 7], dtype=np.int32))
    assert len(set(ids.tolist())) == 4 and ids[0] == ids[2] and ids[1] != ids[3]


#: A stand-in for ``arborx_ec``: the same arguments, rows and label files; its clusters are the
#: connected components of "distance <= eps" (kd-tree), singletons labelled -1. Each run appends a
#: line to $FAKE_ARBORX_COUNT; $FAKE_ARBORX_SLEEP makes it stop after its first row.
FAKE_ARBORX = """\
import os, sys, time
import numpy as np
from scipy.sparse.csgraph import connected_components
from scipy.spatial import cKDTree

prefix, reps, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
with open(os.environ["FAKE_ARBORX_COUNT"], "a") as stream:
    stream.write("run\\n")
print("Kokkos::OpenMP::initialize WARNING: OMP_PROC_BIND environment variable not set")
print("frame N eps impl dev_med dev_min dev_max e2e_med h2d_med clusters multi single")
for impl in ("FDBSCAN", "FDBSCAN-DenseBox"):
    out = open(f"{prefix}_{impl}.i32", "wb")
    for name in files:
        points = np.fromfile(name, dtype=np.float32).reshape(-1, 3).astype(np.float64)
        tree = cKDTree(points)
        for eps in (0.3, 0.5, 1.0):
            graph = tree.sparse_distance_matrix(tree, eps, output_type="coo_matrix")
            _, ids = connected_components(graph, directed=False)
            labels = np.where(np.bincount(ids)[ids] > 1, ids, -1).astype(np.int32)
            out.write(labels.tobytes())
            single = int((labels < 0).sum())
            multi = len(np.unique(labels[labels >= 0]))
            print("%-20s %8d %5.2f %-17s %9.3f %9.3f %9.3f %9.3f %9.3f %8d %8d %8d" % (
                os.path.basename(name), len(points), eps, impl, 1.5, 1.4, 1.9, 2.5, 0.3,
                multi + single, multi, single), flush=True)
            if os.environ.get("FAKE_ARBORX_SLEEP"):
                time.sleep(float(os.environ["FAKE_ARBORX_SLEEP"]))
    out.close()
"""


@pytest.fixture
def fake_arborx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$ARBORX_EC set to :data:`FAKE_ARBORX`; returns the file counting its runs."""
    program = tmp_path / "arborx_ec"
    program.write_text(f"#!{sys.executable}\n{FAKE_ARBORX}")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    count = tmp_path / "runs.txt"
    count.write_text("")
    monkeypatch.setenv("ARBORX_EC", str(program))
    monkeypatch.setenv("FAKE_ARBORX_COUNT", str(count))
    return count


def test_arborx_rows_run_on_the_same_points_and_compare_partitions(
    tmp_path: Path, lidar_data_dir: Path, fake_arborx: Path
) -> None:
    argv = ["stress", "--quick", "--cases", "identical,tiled,room-vlp16", "--methods",
            "RS-union_find,RS-union_find+dev", "--no-plots", "--arborx-reps", "3", "--data-dir",
            str(lidar_data_dir), "--output", str(tmp_path / "out")]  # fmt: skip
    assert main(argv) == 0
    document = json.loads((tmp_path / "out" / "stress.json").read_text())
    assert document["settings"]["arborx"].endswith("arborx_ec")
    rows = document["rows"]
    peers_rows = [r for r in rows if r["kind"] == "gpu-peer"]
    assert len(peers_rows) == 8  # 4 cases x 2 implementations
    for row in peers_rows:
        assert row["status"] == "ok", row
        assert row["matches_oracle"] is True and row["clusters_match_oracle"] is True
        assert row["median_ms"] == 2.5 and row["device_median_ms"] == 1.5 and row["repeats"] == 3
    scales = {(r["stress_case"], r["d_th"]): (r["arborx_scale"], r["arborx_eps"])
              for r in peers_rows}  # fmt: skip
    assert scales[("identical", 0.5)] == (2.0, 1.0)  # 0.5 m is eps 1.0 on coordinates x2, exactly
    assert scales[("tiled", 0.3)] == (1.0, 0.3) and scales[("tiled", 0.5)] == (1.0, 0.5)
    assert len(fake_arborx.read_text().splitlines()) == 3  # the tiled cloud's run serves both
    for row in rows:
        if row["impl"] == "RS-union_find":
            assert row["ratio_to_arborx_densebox"] == pytest.approx(row["median_ms"] / 2.5, 1e-2)
        if row["impl"] == "RS-union_find+dev":
            assert row["ratio_to_arborx_densebox"] == pytest.approx(row["median_ms"] / 1.5, 1e-2)


def test_arborx_timeout_keeps_the_rows_printed(
    tmp_path: Path, fake_arborx: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setenv("FAKE_ARBORX_SLEEP", "30")
    points = np.random.default_rng(0).uniform(0, 3, (200, 3)).astype(np.float32)
    run = run_program(os.environ["ARBORX_EC"], points, 2.0, 1, timeout_s=3.0)
    assert run.problem == "timeout after 3 s"
    assert [(r.impl, r.eps) for r in run.rows] == [("FDBSCAN", 0.3)]
    assert run.wall_s < 20


def test_targets_of_the_default_method() -> None:
    frame = {"experiment": "frames", "frame": "kitti_000001.bin", "d_th": 0.5}
    rows = [
        _row("RS-union_find", 1.2, **frame, ratio_to_arborx_densebox=0.4, label_ms=1.0),
        _row("RS-union_find+dev", 1.1, **frame, device_resident=True, label_ms=1.0),
        _row("arborx-FDBSCAN-DenseBox", 3.0, **frame, kind="gpu-peer"),
    ]
    stress = {"experiment": "stress", "stress_case": "cube", "d_th": 0.5, "points": 200000}
    rows += [
        _row("RS-union_find", 25.0, **stress, case="stress:cube", regime="dense", build_ms=20.0,
             bytes_per_point=100.0, peak_gpu_bytes=20_000_000, mean_degree=9807.0),
        _row("RS-union_find", 0.8, **{**stress, "stress_case": "room-vlp16"},
             case="stress:room", regime="degree-1k", bytes_per_point=300.0,
             peak_gpu_bytes=4_000_000),
        _row("RS-edge+pj", 0.0, **stress, case="stress:cube", regime="dense", status="refused",
             reason="refused: method edge needs ..."),
    ]  # fmt: skip
    checks = check_targets(rows, None)

    def check(part: str) -> TargetCheck:
        (found,) = [c for c in checks if part in c.name]
        return found

    default = check("RS-union_find <= 1.5 ms median NumPy -> labels on kitti_000001.bin")
    assert default.status == "met" and "1.20 ms" in default.detail
    resident = check("RS-union_find+dev <= 1 ms median device-resident on kitti_000001.bin")
    assert resident.status == "missed" and "by 0.10 ms" in resident.detail
    assert check("on every real frame at").status == "met"
    arborx = check("ArborX FDBSCAN-DenseBox")
    assert arborx.status == "met" and "0.40x" in arborx.detail
    dense = check("dense stress cases")
    assert dense.status == "missed" and "by 5.00 ms (1.2x; build" in dense.detail
    assert check("mean degree ~1 000").status == "met"
    assert check("mean degree ~10 000").status == "not measured"
    memory = check("peak GPU memory O(N)")
    assert memory.status == "missed" and "room-vlp16 0.5 m (200000 pts) by 1.17x" in memory.detail
    union_find = check("union_find returns")
    assert union_find.status == "met"  # the refused RS-edge+pj row is no union_find row


def test_arborx_failure_is_an_error_row_not_a_crash(tmp_path: Path) -> None:
    program = tmp_path / "arborx_ec"
    program.write_text("#!/bin/sh\necho 'Kokkos::Cuda::initialize ERROR: no CUDA device'\nexit 3\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    points = np.zeros((10, 3), np.float32)
    base = ResultRow(case="c", experiment="frames", variable="d_th", value=0.5, points=10,
                     d_th=0.5)  # fmt: skip
    rows = ArborxPeer(str(program), reps=1).rows(points, 0.5, None, base)
    assert [r.impl for r in rows] == ["arborx-FDBSCAN", "arborx-FDBSCAN-DenseBox"]
    for row in rows:
        assert row.status == "error" and row.kind == "gpu-peer" and row.case == "c"
        assert "exit status 3: Kokkos::Cuda::initialize ERROR: no CUDA device" in str(row.reason)
    missing = ArborxPeer(str(tmp_path / "absent"), reps=1).rows(points, 0.5, None, base)
    assert all("could not start" in str(r.reason) for r in missing)


# --- the benchmarks as a checkout-only package -------------------------------------------------

SUBCOMMANDS = (
    "synthetic",
    "searches",
    "frames",
    "stress",
    "node",
    "autoware",
    "ai-pipeline",
    "large-clouds",
    "plot",
    "targets",
)


def test_python_m_benchmarks_runs_from_the_repository_root() -> None:
    """As run_gpu_report.sh runs it: the working directory is the checkout, nothing installed
    needed for the benchmarks themselves."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--help"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m benchmarks")
    assert all(name in done.stdout for name in SUBCOMMANDS)


def test_every_subcommand_help_lists_every_subcommand() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "bench_command"]
    assert set(sub.choices) == set(SUBCOMMANDS)
    for name, subparser in sub.choices.items():
        text = subparser.format_help()
        assert text.startswith(f"usage: python -m benchmarks {name}")
        for other in SUBCOMMANDS:
            assert f"- {other}" in text or f" {other}: " in text or f"/ {other}:" in text, other


def test_help_and_comments_name_no_tracker_issue() -> None:
    import re

    for path in sorted((REPO_ROOT / "benchmarks").glob("*.py")):
        found = re.findall(r"issue \d+|issue's", path.read_text(), flags=re.IGNORECASE)
        assert not found, f"{path.name}: {found}"


def test_bench_errors_say_the_program(tmp_path: Path, capsys) -> None:
    argv = ["synthetic", "--quick", "--methods", "RS-magic", "--output", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m benchmarks: error: unknown method(s) RS-magic")
    assert err.count("\n") == 1


def test_installed_command_has_no_bench() -> None:
    (sub,) = [a for a in installed_parser()._actions if a.dest == "command"]
    assert "bench" not in sub.choices
    assert {"cluster", "make-bag", "simulate", "demo", "replay"} <= set(sub.choices)


def test_the_package_carries_no_benchmark_code() -> None:
    """setup.py packages the library only, and the library never imports the benchmarks."""
    import os
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from distutils.core import run_setup

    cwd = os.getcwd()
    try:
        os.chdir(REPO_ROOT)
        packages = run_setup(str(REPO_ROOT / "setup.py"), stop_after="init").packages
    finally:
        os.chdir(cwd)
    assert "gpu_euclidean_cluster" in packages
    assert all(p.split(".")[0] == "gpu_euclidean_cluster" for p in packages), packages
    assert not any("bench" in p for p in packages), packages
    library = REPO_ROOT / "gpu_euclidean_cluster"
    assert not (library / "bench").exists() and not (library / "commands" / "bench.py").exists()
    for path in library.rglob("*.py"):
        assert "benchmarks" not in _imported_packages(path), path


def _imported_packages(path: Path) -> set[str]:
    """The first names of the absolute imports of ``path`` (in functions too)."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add((node.module or "").split(".")[0])
    return names


def test_the_benchmarks_import_nothing_of_the_tests() -> None:
    """The robustness suites under test/ import the benchmarks' records, never the reverse."""
    for path in sorted((REPO_ROOT / "benchmarks").rglob("*.py")):
        assert "test" not in _imported_packages(path), path
    # the checker sees an import inside a function
    assert "benchmarks" in _imported_packages(REPO_ROOT / "test" / "robustness" / "reliability.py")


def test_python_m_test_robustness_runs_from_the_repository_root(tmp_path: Path) -> None:
    """As run_gpu_report.sh's ``reliability`` phase runs it; an expected failure is one line."""
    command = [sys.executable, "-m", "test.robustness"]
    done = subprocess.run(
        [*command, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: python -m test.robustness")
    assert "--attack-only" in done.stdout and "--backend" in done.stdout
    missing = tmp_path / "absent.bin"
    argv = ["--attack-only", "--frame", str(missing), "--output", str(tmp_path / "out")]
    done = subprocess.run(
        [*command, *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr == f"python -m test.robustness: error: frame {missing} not found\n"
    assert not (tmp_path / "out").exists()


def test_rows_serialise_with_the_columns_of_their_fields() -> None:
    row = _row("RS-edge", 40.0, speedup_vs_pcl_kdtree=25.0, legacy_column="kept")
    columns = row.as_dict()
    assert columns["speedup_vs_pcl_kdtree"] == 25.0 and row.speedup_over("pcl-kdtree") == 25.0
    assert columns["legacy_column"] == "kept" and "speedups" not in columns
    assert set(asdict(row)) - {"speedups", "extra"} <= set(columns)
    assert ResultRow.from_dict(columns) == row


#: The results of earlier GPU reports: one archive per date (``benchmarks/results/<date>.tar.xz``).
RESULT_ARCHIVES = sorted((REPO_ROOT / "benchmarks" / "results").glob("*.tar.xz"))
RESULT_STEMS = ("synthetic", "frames", "stress", "node")


def _archived_results() -> list[tuple[Path, str]]:
    """(archive, member) of every synthetic / frames / stress / node JSON file of the archives."""
    found = []
    for archive in RESULT_ARCHIVES:
        with tarfile.open(archive) as tar:
            names = tar.getnames()
        found += [
            (archive, name)
            for name in names
            if name.endswith(".json") and PurePosixPath(name).stem in RESULT_STEMS
        ]
    return found


def test_the_results_archives_hold_the_runs_json() -> None:
    """One archive per date, each with results files (else the test below checks nothing)."""
    assert [a.name for a in RESULT_ARCHIVES] == [
        "2026-11-22.tar.xz",
        "2026-11-23.tar.xz",
        "2026-11-24.tar.xz",
    ]
    assert {archive for archive, _ in _archived_results()} == set(RESULT_ARCHIVES)


@pytest.mark.parametrize(
    ("archive", "member"),
    _archived_results(),
    ids=lambda value: value.name if isinstance(value, Path) else value,
)
def test_results_of_earlier_runs_still_load(archive: Path, member: str, tmp_path: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extract(member, tmp_path, filter="data")
    path = tmp_path / member
    document = json.loads(path.read_text())
    if path.name == "node.json":
        report = NodeReport.from_dict(document)
        assert report.steps and report.steps[0].rate_hz > 0
        return
    results = load_results(path)
    assert results.meta.device and len(results.rows) == len(document["rows"])
    for old, row in zip(document["rows"], results.rows, strict=True):
        columns = row.as_dict()
        assert {k: columns[k] for k in old} == old
    check_targets(results.rows, None)  # the targets read them
