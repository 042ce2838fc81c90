"""``python -m benchmarks searches --quick``: every structure measured, pairs agreed, NN exact."""

from __future__ import annotations

import json

import pytest

from benchmarks.cli import main
from benchmarks.searches import STRUCTURE_NAMES, moved


def test_searches_quick_writes_rows_tables_and_agrees(tmp_path, lidar_data_dir, capsys):
    if not (lidar_data_dir / "kitti_000001.bin").is_file():
        pytest.skip("kitti_000001.bin not found (set LIDAR_DATA_DIR)")
    out = tmp_path / "searches"
    argv = ["searches", "--quick", "--output", str(out), "--data-dir", str(lidar_data_dir)]
    assert main([*argv, "--repeats", "1", "--warmup", "0"]) == 0
    document = json.loads((out / "searches.json").read_text())
    rows = document["rows"]
    assert {r["experiment"] for r in rows} == {"size", "d_th"}
    for case in {(r["case"], r["d_th"]) for r in rows}:
        same = [r for r in rows if (r["case"], r["d_th"]) == case]
        assert sorted(r["structure"] for r in same) == sorted(STRUCTURE_NAMES.values())
        assert len({r["pairs"] for r in same}) == 1 and same[0]["pairs"] > 0
        assert all(r["build_ms"] >= 0 and r["query_ms"] > 0 for r in same)
    ours = document["nn"][-1]
    assert ours["implementation"].startswith("ours") and ours["same_distance"] == 1.0
    table = (out / "searches.md").read_text()
    assert "| kd-tree |" in table and "### nn" in table
    assert main(["searches", "--output", str(out), "--replot"]) == 0


def test_searches_refuses_an_unknown_experiment(tmp_path, capsys):
    assert main(["searches", "--output", str(tmp_path), "--experiments", "size,speed"]) == 2
    assert "unknown experiment(s) speed" in capsys.readouterr().err


def test_moved_sweep_is_yawed_and_shifted():
    import numpy as np

    points = np.array([[10.0, 0.0, 1.0]], np.float32)
    out = moved(points)[0]
    assert out[2] == pytest.approx(1.0)
    assert np.hypot(out[0] - 0.5, out[1]) == pytest.approx(10.0, rel=1e-6)
    assert np.degrees(np.arctan2(out[1], out[0] - 0.5)) == pytest.approx(1.0, rel=1e-5)
