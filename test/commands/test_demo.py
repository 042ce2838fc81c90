"""The README's demo command runs end to end (CPU backend without a GPU) and writes its PNG."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster import cuda_available
from gpu_euclidean_cluster.commands.demo import LAUNCH_FILE, node_command, recovered_objects
from gpu_euclidean_cluster.ros.ament_prefix import (
    MARKER,
    PACKAGE,
    VARIABLE,
    ament_environment,
    package_share,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: the venv's bin/ (ros2 and the console scripts), as ``activate`` puts it on PATH
BIN = Path(sys.executable).parent


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
    # a venv activated after the README's install line: ros2 on PATH, no AMENT_PREFIX_PATH
    env.pop(VARIABLE, None)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
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
    if importlib.util.find_spec("launch_ros") is not None and (BIN / "ros2").is_file():
        assert "via launch file (ros2 launch)" in done.stdout
    frame_lines = [line for line in lines if line.startswith("frame ")]
    assert frame_lines, done.stdout
    assert all("clusters" in line and "latency" in line for line in frame_lines)
    summary = next(line for line in lines if line.startswith("summary: "))
    assert f"{len(frame_lines)}/3 frames clustered" in summary
    png = out / "birdseye.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert (out / "demo_bag" / "metadata.yaml").is_file()


def test_ament_environment_adds_the_prefix_only_when_the_user_set_none(tmp_path):
    bare = tmp_path / "bare"
    prefix = tmp_path / "venv"
    (prefix / MARKER).parent.mkdir(parents=True)
    (prefix / MARKER).touch()
    assert ament_environment({"PATH": "/bin"}, prefix) == {"PATH": "/bin", VARIABLE: str(prefix)}
    assert ament_environment({VARIABLE: ""}, prefix) == {VARIABLE: str(prefix)}
    assert ament_environment({VARIABLE: "/opt/ros"}, prefix) == {VARIABLE: "/opt/ros"}
    assert ament_environment({"PATH": "/bin"}, bare) == {"PATH": "/bin"}  # not installed there
    share = prefix / "share" / PACKAGE
    assert package_share({VARIABLE: f"{bare}{os.pathsep}{prefix}"}) == share  # first holding it
    assert package_share({VARIABLE: str(bare)}) is None
    assert package_share({}) is None


@pytest.mark.ros
def test_demo_launches_without_ament_prefix_path(monkeypatch, tmp_path):
    """After the README's install line and ``activate`` (no AMENT_PREFIX_PATH), the demo finds its
    launch file and hands its processes an environment in which ``ros2`` finds the package."""
    pytest.importorskip("ros2pkg")
    if importlib.util.find_spec("launch_ros") is None or not (BIN / "ros2").is_file():
        pytest.skip("needs the ros2 CLI and launch_ros in this venv")
    monkeypatch.delenv(VARIABLE, raising=False)
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    environ = ament_environment()
    assert environ[VARIABLE] == sys.prefix
    params = tmp_path / "demo.param.yaml"
    command, how = node_command(params, environ)
    assert command[:4] == [str(BIN / "ros2"), "launch", PACKAGE, LAUNCH_FILE], how
    prefix = subprocess.run(
        [str(BIN / "ros2"), "pkg", "prefix", PACKAGE],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert prefix.returncode == 0, prefix.stderr
    assert prefix.stdout.strip() == sys.prefix
    launch_args = subprocess.run(
        [str(BIN / "ros2"), "launch", "--show-args", PACKAGE, LAUNCH_FILE],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert launch_args.returncode == 0, launch_args.stderr
    assert "params_file" in launch_args.stdout
