"""The benchmark tool: CPU peers, timing rules, output files of ``bench synthetic|frames|node``.

The sub-commands run in ``--quick`` mode (small clouds, CPU backend) so that CI exercises the
whole tool in well under a minute; no test asserts a speed.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.bench import peers
from gpu_euclidean_cluster.bench.cases import QUICK_TABLE2
from gpu_euclidean_cluster.bench.results import CSV_COLUMNS
from gpu_euclidean_cluster.bench.runner import GPU_VARIANTS, _failure_fields
from gpu_euclidean_cluster.bench.stats import p99, time_calls
from gpu_euclidean_cluster.bench.targets import check_targets
from gpu_euclidean_cluster.clusterer import as_points
from gpu_euclidean_cluster.commands.cli import main
from gpu_euclidean_cluster.cuda.matrix_memory import MatrixMemoryError

from .conftest import same_partition

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


def test_matrix_out_of_memory_is_recorded_with_need_and_free() -> None:
    fields = _failure_fields(MatrixMemoryError(100000, 3 << 30, 1 << 30))
    assert fields == {"status": "oom", "reason": "out of memory (need 3.0 GiB, free 1.0 GiB)"}
    assert _failure_fields(RuntimeError("boom"))["status"] == "error"


def _row(impl: str, median_ms: float, **extra: object) -> dict[str, object]:
    row: dict[str, object] = {
        "case": "frames:kitti_000001.bin,d_th=0.5",
        "frame": "kitti_000001.bin",
        "d_th": 0.5,
        "impl": impl,
        "kind": "cpu-peer" if impl == "pcl-kdtree" else "gpu-method",
        "backend": "cuda",
        "status": "ok",
        "median_ms": median_ms,
        "matches_oracle": True,
    }
    row.update(dict.fromkeys(STAGE_COLUMNS, 0.0))
    row.update(extra)
    return row


def test_targets_report_met_and_missed_by_how_much_with_the_dominant_stage() -> None:
    rows = [
        _row("pcl-kdtree", 1000.0),
        _row("RS-matrix", 8.0, speedup_vs_pcl_kdtree=125.0, build_ms=6.0, label_ms=2.0),
        _row("RS-edge", 40.0, speedup_vs_pcl_kdtree=25.0, build_ms=10.0, label_ms=30.0),
        _row("ES-edge", 90.0, matches_oracle=False, build_ms=90.0),
    ]
    node = {"steps": [{"frame": "kitti_000001.bin", "rate_hz": 10.0, "latency_p99_ms": 12.0,
                       "dropped": 0, "sent": 50, "backend": "cuda"}]}  # fmt: skip
    oracle, speedup, latency, node_check = check_targets(rows, node)
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
    assert main(["bench", "synthetic", "--quick", "--output", str(out)]) == 0
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
    argv = ["bench", "synthetic", "--quick", "--resume", "--no-plots", "--output", str(out)]
    assert main(argv) == 0
    assert json.loads((out / "synthetic.json").read_text())["rows"] == json.loads(before)["rows"]
    assert not list(out.glob("*.png"))


def test_frames_quick_matches_pcl_counts(
    tmp_path: Path, lidar_data_dir: Path, pcl_reference
) -> None:
    if not (lidar_data_dir / "kitti_000008.bin").is_file():
        pytest.skip(f"LiDAR frames not found in {lidar_data_dir} (set LIDAR_DATA_DIR)")
    argv = ["bench", "frames", "--quick", "--data-dir", str(lidar_data_dir), "--output",
            str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    document, csv_rows = _read_outputs(tmp_path, "frames")
    _check_document(document, csv_rows, "cpu")
    rows = document["rows"]
    assert {r["d_th"] for r in rows} == {0.3, 0.5, 1.0}
    for row in rows:
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
    argv = ["bench", "frames", "--quick", "--peers", "none", "--methods", "RS-edge+pj",
            "--no-plots", "--data-dir", str(lidar_data_dir), "--output", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads((tmp_path / "frames.json").read_text())["rows"]
    assert [r["impl"] for r in rows] == ["RS-edge+pj"] * 3
    assert all(r["matches_oracle"] is True and r["pointer_jumping"] is True for r in rows)
    assert {r["oracle"] for r in rows} == {"cpu-backend (untimed)"}


def test_bench_errors_are_one_line(tmp_path: Path, capsys) -> None:
    argv = ["bench", "synthetic", "--quick", "--experiments", "size,colour", "--output",
            str(tmp_path)]  # fmt: skip
    assert main(argv) == 2
    assert "unknown experiment(s) colour" in capsys.readouterr().err
    argv = ["bench", "frames", "--data-dir", str(tmp_path), "--output", str(tmp_path)]
    assert main(argv) == 2
    assert "no LiDAR frames" in capsys.readouterr().err
    argv = ["bench", "synthetic", "--quick", "--methods", "RS-magic", "--output", str(tmp_path)]
    assert main(argv) == 2
    assert "unknown method(s) RS-magic" in capsys.readouterr().err


@pytest.mark.ros
def test_node_quick_measures_latency_and_drops(
    tmp_path: Path, lidar_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("rclpy")
    monkeypatch.setenv("LIDAR_DATA_DIR", str(lidar_data_dir))  # a simulated sweep when absent
    assert main(["bench", "node", "--quick", "--output", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "node.json").read_text())
    expected = "kitti_000008.bin" if (lidar_data_dir / "kitti_000008.bin").is_file() else None
    assert result["options"]["frame"] == (expected or "simulated-vlp16")
    first = result["steps"][0]
    assert first["rate_hz"] == 2.0 and first["sent"] == 4 and first["warmup_frames"] == 3
    assert first["processed"] + first["dropped"] == first["sent"]
    assert first["processed"] >= 1 and first["latency_p99_ms"] >= first["latency_p50_ms"] > 0
    assert first["e2e_p50_ms"] > 0 and first["backend"] == "cpu"
