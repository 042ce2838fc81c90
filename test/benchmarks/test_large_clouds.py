"""``python -m benchmarks large-clouds``: its clouds, summaries, table and option checks without a
GPU; on one (``pytest -m gpu``), a short measurement of a cloud large enough to be staged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.cli import build_parser, main
from benchmarks.large_clouds import (
    CLOCK_STAGES,
    PATH_PARTS,
    PATHS,
    SHARED_PARTS,
    TARGET_MS,
    format_rows,
    measure_cloud,
    ratios,
    summary,
    target_check,
    tiled_cloud,
)
from benchmarks.stress import TILES, TILES_8M
from gpu_euclidean_cluster.clusterer import cuda_available
from gpu_euclidean_cluster.cuda.staging import STAGING_MIN_BYTES

from ..conftest import cuda_only

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_tiled_cloud_is_the_frame_shifted_200_m_per_tile(tmp_path: Path):
    frame = np.arange(40, dtype=np.float32).reshape(10, 4)
    frame.tofile(tmp_path / "kitti_000001.bin")
    points, name = tiled_cloud(3, tmp_path, np.float64)
    assert points.shape == (30, 3) and points.dtype == np.float64
    assert name == "kitti_000001.bin x3"
    np.testing.assert_array_equal(points[:10], frame[:, :3])
    np.testing.assert_array_equal(points[20:, 0] - points[:10, 0], 400.0)
    np.testing.assert_array_equal(points[20:, 1:], frame[:, 1:3])


def test_summaries_ratios_and_targets():
    assert summary([1.0, 2.0, 3.0]) == {"median": 2.0, "p99": pytest.approx(2.98)}
    parts = {
        "plain": {part: {"median": 6.0, "p99": 7.0} for part in PATH_PARTS},
        "staged": {part: {"median": 3.0, "p99": 4.0} for part in PATH_PARTS},
    }
    parts["staged"]["h2d"]["median"] = 1.5
    assert ratios(parts) == {"end_to_end": 2.0, "h2d": 4.0}
    assert TARGET_MS == {TILES: 3.5, TILES_8M: 15.0}
    assert target_check(TILES, 3.4) == (3.5, True)
    assert target_check(TILES_8M, 15.1) == (15.0, False)
    assert target_check(5, 1.0) == (None, None)


def table_row(identical: bool) -> dict:
    part = {"median": 3.0, "p99": 4.0}
    return {
        "dtype": "float32",
        "parts_ms": {name: dict.fromkeys(PATH_PARTS, part) for name in PATHS},
        "shared_ms": {"work": {"median": 2.3, "p99": 2.45}, "d2h": {"median": 0.96, "p99": 1.15}},
        "ratios": dict.fromkeys(PATH_PARTS, 1.0),
        "clock_ms": {
            "plain": {"transfer_in": 3.36, "transfer_out": 1.3, "label": 1.7},
            "staged": {"transfer_in": 4.04},
        },
        "registered_h2d_ms": {"median": 2.18, "p99": 2.6},
        "workers": 8,
        "pinned_bytes": 32 << 20,
        "identical": identical,
    }


def test_table_names_each_path_the_shared_parts_and_the_verdicts():
    lines = format_rows("tiled (2044556)", TILES, table_row(identical=False))
    assert len(lines) == 7
    assert [line.split("|")[2].strip() for line in lines[:2]] == list(PATHS)
    assert all(line.count("|") == 2 + len(PATH_PARTS) for line in lines[:2])
    assert SHARED_PARTS == ("work", "d2h")  # one figure each: both paths run the same code
    assert sum(line.count("d2h") for line in lines) == 2  # the shared figure and its note
    assert (
        lines[2]
        == "    both paths: work 2.30/2.45, d2h 0.96/1.15 (d2h: CuPy's .get() into a new array)"
    )
    assert lines[3] == "    plain / staged: end_to_end 1.00x, h2d 1.00x"
    assert CLOCK_STAGES == ("transfer_in", "transfer_out")
    assert lines[4] == (
        "    library clock (median ms): plain transfer_in 3.36, transfer_out 1.30; "
        "staged transfer_in 4.04, transfer_out nan"
    )
    assert (
        lines[5] == "    registered in place: h2d 2.18 ms; staging: 8 workers, 32 MiB page-locked"
    )
    assert "target 3.5 ms met" in lines[6] and "ARRAYS DIFFER" in lines[6]
    assert "plain and staged identical" in format_rows("x", 5, table_row(identical=True))[6]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--tiles", "17,x"], "--tiles must be comma-separated integers"),
        (["--dtypes", "float16"], "unknown dtype 'float16'"),
        (["--workers", "0"], "--workers must be >= 1"),
    ],
)
def test_bad_options_fail_with_one_line(tmp_path: Path, capsys, options, message):
    assert main(["large-clouds", "--output", str(tmp_path), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m benchmarks: error: {message}")
    assert err.count("\n") == 1


def test_registered_as_a_sub_command_with_its_help():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.dest == "bench_command"]
    text = sub.choices["large-clouds"].format_help()
    assert text.startswith("usage: python -m benchmarks large-clouds")
    assert "- large-clouds:" in text


@pytest.mark.skipif(cuda_available(), reason="checks the message given without a CUDA device")
def test_without_a_gpu_it_says_so_and_exits_2(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "large-clouds", "--output", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "python -m benchmarks: error: large-clouds needs a CUDA device through CuPy\n"
    )
    assert not (tmp_path / "large_clouds.json").exists()


@cuda_only
def test_a_short_measurement_fills_every_figure():
    """Two rounds on a cloud just over the whole call's staging threshold: every figure is
    there, the staging was used, both paths agree, and the table prints."""
    rows = STAGING_MIN_BYTES // 4 + 1000
    rng = np.random.default_rng(3)
    centres = rng.uniform(-100, 100, (500, 3))
    points = (centres[rng.integers(500, size=rows)] + rng.normal(0, 0.4, (rows, 3))).astype(
        np.float32
    )
    row = measure_cloud(points, 0.5, repeats=2, warmup=1, device_id=0, workers=2)
    assert row["identical"] and row["points"] == rows and row["workers"] == 2
    assert row["pinned_bytes"] > 0
    for name in PATHS:
        assert all(row["parts_ms"][name][part]["median"] > 0 for part in PATH_PARTS)
        assert set(CLOCK_STAGES) <= set(row["clock_ms"][name])
    assert all(row["shared_ms"][part]["median"] > 0 for part in SHARED_PARTS)
    assert row["registered_h2d_ms"]["median"] > 0
    assert len(format_rows("blobs", 1, row)) == 7
