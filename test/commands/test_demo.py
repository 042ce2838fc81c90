"""The README's demo command runs end to end (CPU backend without a GPU) and writes its PNG."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from gpu_euclidean_cluster import cuda_available
from gpu_euclidean_cluster.commands.demo import recovered_objects

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_recovered_objects_needs_a_one_to_one_overlap():
    truth = np.array([0, 0] + [1] * 10 + [2] * 11 + [3] * 3)
    labels = np.array([-1, -1] + [0] * 10 + [1] * 5 + [2] * 6 + [-1] * 3)
    assert recovered_objects(truth, labels) == (1, 2)  # object 2 is split; object 3 too small
    merged = np.array([-1, -1] + [0] * 21 + [-1] * 3)
    assert recovered_objects(truth, merged) == (0, 2)  # one cluster holding two objects
    assert recovered_objects(truth, truth - 1) == (2, 2)


@pytest.mark.ros
@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path):
    pytest.importorskip("rclpy")
    out = tmp_path / "demo"
    env = dict(os.environ)  # the test process's own domain and discovery range
    command = [
        sys.executable,
        "-m",
        "gpu_euclidean_cluster.commands.cli",
        "demo",
        "--frames",
        "3",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    if not cuda_available():
        assert (
            lines[0] == "no CUDA device (or CuPy not installed): the node runs on the CPU backend"
        )
    frame_lines = [line for line in lines if line.startswith("frame ")]
    assert frame_lines, done.stdout
    assert all("clusters" in line and "latency" in line for line in frame_lines)
    summary = next(line for line in lines if line.startswith("summary: "))
    assert f"{len(frame_lines)}/3 frames clustered" in summary
    png = out / "birdseye.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert (out / "demo_bag" / "metadata.yaml").is_file()
