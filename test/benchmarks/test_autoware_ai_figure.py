"""The bird's-eye figures of docs/autoware.md (`benchmarks/autoware_ai_figure.py`)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.autoware_ai_figure import (
    FRAME,
    STAGES,
    pipelines,
    stage_outputs,
    write_figure,
    write_stages_figure,
)
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


def test_stages_figure_of_kitti_000001(tmp_path):
    path = data_dir() / FRAME
    if not path.is_file():
        pytest.skip(f"{path} not found (set LIDAR_DATA_DIR)")
    xyz = load_points(path).xyz
    outputs = stage_outputs(xyz)
    assert len(outputs) == len(STAGES)
    clustered = [int((np.asarray(o.result.labels) >= 0).sum()) for o in outputs]
    assert clustered[1] < clustered[0], "the height window leaves points out"
    assert clustered[4] < clustered[3], "the Difference of Normals leaves flat points out"
    assert all(o.boxes is None for o in outputs[:-1]) and outputs[-1].boxes is not None
    written = write_stages_figure(xyz, outputs, tmp_path / "stages.png")
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
