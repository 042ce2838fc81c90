"""The README's demo command runs end to end (CPU backend without a GPU) and writes its PNG, whose
two panels colour a cluster as the ground-truth object it mostly covers."""

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
from gpu_euclidean_cluster.tools.birdseye import key_colours, label_colours, object_colour_keys

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


def test_a_cluster_has_the_colour_of_the_object_it_mostly_covers():
    """Cluster ids and object ids are numbered independently: colouring each panel by its own
    ids (the old rule) gives one object two colours; the shared keys give it one."""
    # ground (0), then objects 5 (6 points), 2 (4 points), 9 (4 points), 7 (3 points), 8 (3)
    truth = np.array([0] * 4 + [5] * 6 + [2] * 4 + [9] * 4 + [7] * 3 + [8] * 3)
    labels = np.array(
        [2, 2, 2, -1]  # three ground points in cluster 2
        + [1] * 6  # object 5 -> cluster 1
        + [0] * 4  # object 2 -> cluster 0, with one point of object 9
        + [0, 2, -1, -1]  # object 9: one point in cluster 0, one in the ground's cluster 2
        + [3] * 3  # objects 7 and 8 merged into cluster 3: neither holds half of it
        + [3] * 3
    )
    cluster_keys, truth_keys = object_colour_keys(labels, truth, background=0)
    cluster_colours, truth_colours = key_colours(cluster_keys), key_colours(truth_keys)
    for cluster, obj in ((0, 2), (1, 5)):
        members = labels == cluster
        majority = members & (truth == obj)
        assert (cluster_colours[members] == truth_colours[majority][0]).all(), (cluster, obj)
        old_cluster, old_truth = label_colours(labels), label_colours(truth, background=0)
        assert not (old_cluster[majority] == old_truth[majority]).all()  # the old rule differs
    object_keys = set(truth_keys[truth_keys >= 0].tolist())
    own = {int(cluster_keys[labels == cluster][0]) for cluster in (2, 3)}
    assert len(own) == 2 and not own & object_keys  # mostly ground; a merge: colours no object has
    assert (cluster_keys[labels < 0] == -1).all() and (truth_keys[truth == 0] == -1).all()


def test_a_split_object_colours_both_its_clusters():
    truth = np.array([4] * 6 + [0] * 2)
    labels = np.array([0, 0, 0, 1, 1, 1, -1, -1])
    cluster_keys, truth_keys = object_colour_keys(labels, truth)
    assert cluster_keys.tolist() == [4] * 6 + [-1, -1]
    assert truth_keys.tolist() == [4] * 6 + [-1, -1]
    assert object_colour_keys(np.full(3, -1), np.array([0, 1, 1]))[0].tolist() == [-1] * 3


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
