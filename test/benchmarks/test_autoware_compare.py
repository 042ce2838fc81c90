"""``python -m benchmarks autoware``: the adjusted Rand index it reports, and a CPU run of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.autoware_compare import adjusted_rand_index, aris

REPO = Path(__file__).resolve().parents[2]


def test_adjusted_rand_index_of_known_cases():
    a = np.array([0, 0, 0, 1, 1, 1])
    assert adjusted_rand_index(a, a) == 1.0
    assert adjusted_rand_index(a, np.array([7, 7, 7, -1, -1, -1])) == 1.0  # any label values
    # the textbook example (Hubert & Arabie's ARI): 0.2424...
    assert adjusted_rand_index(a, np.array([0, 0, 1, 1, 2, 2])) == pytest.approx(8 / 33)
    # no agreement beyond chance: exactly 0
    assert adjusted_rand_index(np.array([0, 0, 1, 1]), np.array([0, 0, 0, 1])) == 0.0


def test_aris_over_all_points_and_over_points_both_label():
    exact = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    thinned = np.array([0, 0, -1, 1, 1, -1, 2, 2])  # same clusters, two points thinned away
    values = aris(exact, thinned)
    assert values["both"] == 1.0
    assert values["all"] < 1.0


@pytest.mark.slow
def test_cpu_run_writes_every_case(tmp_path):
    """Simulated scenes only (an empty data folder), the CPU backend, one timed call each."""
    empty = tmp_path / "frames"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "autoware", "--backend", "cpu", "--repeats", "1",
         "--data-dir", str(empty), "--output", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "out" / "autoware_compare.json").read_text())["rows"]
    assert [row["case"] for row in rows] == [
        "sim_hdl64e_seed0",
        "sim_hdl64e_seed0_no_ground",
        "sim_vlp16_seed1",
        "sim_vlp16_seed1_no_ground",
    ]
    for row in rows:
        assert row["exact"]["clusters"] > 0 and row["voxel_grid"]["clusters"] > 0
        assert -1.0 <= row["ari_exact_vs_voxel"]["all"] <= 1.0
        assert set(row["ari_vs_truth"]) == {"exact", "voxel_grid"}
