"""The README's bird's-eye figure of Autoware.ai's pipeline (`benchmarks/autoware_ai_figure.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.autoware_ai_figure import FRAME, pipelines, write_figure
from benchmarks.cases import data_dir
from gpu_euclidean_cluster.pointcloud_io import load_points


def test_figure_of_kitti_000001(tmp_path):
    path = data_dir() / FRAME
    if not path.is_file():
        pytest.skip(f"{path} not found (set LIDAR_DATA_DIR)")
    xyz = load_points(path).xyz
    plain, full = pipelines(xyz)
    assert plain.ground is None and plain.boxes is None
    assert full.ground is not None and full.ground.any()
    labels = np.asarray(full.result.labels)
    assert (labels[full.ground] == -1).all(), "ground points are in no cluster"
    assert full.boxes is not None and len(full.boxes) == full.result.num_clusters > 0
    written = write_figure(xyz, plain, full, tmp_path / "figure.png")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
