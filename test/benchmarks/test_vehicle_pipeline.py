"""The vehicle benchmark on the CPU: every round of the three bags joins one vehicle sweep,
timed, the joined cloud the size of the sensors' kept points."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.vehicle_pipeline import measure


def test_every_round_is_one_timed_vehicle_sweep(lidar_data_dir: Path) -> None:
    nebula = lidar_data_dir / "nebula"
    if not (nebula / "vls128").is_dir() or not (nebula / "vlp16").is_dir():
        pytest.skip(f"{nebula} lacks the nebula packet bags")
    row = measure("cpu", nebula, repeats=1)
    assert row.sweeps == 4  # four messages in each bag: four rounds, each one joined sweep
    assert 150_000 < row.points_per_sweep < 260_000  # a VLS-128 sweep and two cropped VLP-16s
    assert 0 < row.join_median_ms < row.total_median_ms
    assert row.activity == {"unavailable": "the CPU backend"}
