"""The node as its own process (the installed ``euclidean_cluster_node`` script with --ros-args)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from diagnostic_msgs.msg import DiagnosticStatus  # noqa: E402

from gpu_euclidean_cluster import EuclideanClusterer  # noqa: E402
from gpu_euclidean_cluster.clusterer import cuda_available  # noqa: E402
from gpu_euclidean_cluster.core.config import ClusterConfig  # noqa: E402

from ..._node_helpers import (  # noqa: E402
    TIMEOUT_S,
    Peer,
    cloud_message,
    connected_peer,
    decode,
    diagnostic_values,
    started_node,
    xyzi_array,
)
from ..._ros2_tools import own_domain_id, own_namespace  # noqa: E402

pytestmark = pytest.mark.ros
REPO = Path(__file__).resolve().parents[3]
PRESET = REPO / "config" / "hdl64e.param.yaml"
#: every node this module starts lives here (see _ros2_tools: isolation)
NAMESPACE = own_namespace("perception")
INPUT_TOPIC = f"{NAMESPACE}/points_raw"
_MODULE = "gpu_euclidean_cluster.ros.node.node"


def _command(*ros_args: str) -> list[str]:
    """The node's command line with ``ros_args``, in this module's namespace."""
    script = Path(sys.executable).parent / "euclidean_cluster_node"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", _MODULE]
    return [*launcher, "--ros-args", "-r", f"__ns:={NAMESPACE}", *ros_args]


@pytest.fixture(scope="module")
def domain_id() -> int:
    return own_domain_id()


@pytest.fixture(scope="module")
def node_process(domain_id):
    """The node with the HDL-64E preset, CPU backend, in a namespace, input remapped."""
    args = ["--params-file", str(PRESET), "-p", "backend:=cpu"]
    args += ["-r", f"input/points:={INPUT_TOPIC}"]
    with started_node(_command(*args), domain_id) as process:
        yield process


@pytest.fixture(scope="module")
def peer(node_process, domain_id):
    with connected_peer(
        node_process, domain_id, namespace=NAMESPACE, input_topic=INPUT_TOPIC
    ) as peer:
        yield peer


def _expected_count(xyz: np.ndarray, d_th: float) -> int:
    """The library's count with the HDL-64E preset (min size 10, range <= 120 m)."""
    config = ClusterConfig(d_th=d_th, min_cluster_size=10)
    mask = np.hypot(xyz[:, 0], xyz[:, 1]) <= 120.0
    return EuclideanClusterer(config, "cpu").cluster(xyz, mask).num_clusters


def test_process_clusters_with_preset_and_tunes_live(peer, load_frame):
    xyz = load_frame("kitti_000008.bin")
    counts = []
    for stamp, d_th in ((1, 0.5), (2, 1.0)):
        if d_th != 0.5:
            (result,) = peer.set_parameters(f"{NAMESPACE}/euclidean_cluster_node", d_th=d_th)
            assert result.successful, result.reason
        msg = cloud_message(xyzi_array(xyz), stamp)
        peer.publish(msg)
        clusters = peer.wait_stamp("output/clusters", stamp)
        labeled = peer.wait_stamp("output/labeled_points", stamp)
        assert labeled.header == msg.header
        assert decode(labeled)["cluster_id"].max() + 1 == clusters.width
        counts.append(clusters.width)
    assert counts == [_expected_count(xyz, 0.5), _expected_count(xyz, 1.0)]
    assert counts[0] > counts[1] > 0


def test_process_rejects_bad_frame_and_reports_it(peer):
    msg = cloud_message(xyzi_array(np.ones((5, 3))), 3)
    msg.data = msg.data[:10]
    peer.publish(msg)
    report = peer.wait_for(
        "/diagnostics", lambda m: diagnostic_values(m).get("frames_rejected_malformed") == "1"
    )
    assert "fewer than row_step" in diagnostic_values(report)["last_rejection"]
    good = cloud_message(xyzi_array(np.ones((5, 3))), 4)
    peer.publish(good)
    assert decode(peer.wait_stamp("output/labeled_points", 4))["cluster_id"].tolist() == [-1] * 5


def test_process_without_publisher_says_so_with_the_remap(domain_id):
    """Nothing publishes on its input (as with the Autoware params file while a bag plays
    /points_raw): after the grace period the node warns in its log and in /diagnostics, naming
    the topic it listens on and the remap to use."""
    status_name = "unconnected_node: clustering"
    command = _command("-p", "backend:=cpu", "-r", "__node:=unconnected_node")
    with started_node(command, domain_id) as process:
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=domain_id)
        peer = Peer(context, namespace=NAMESPACE, input_topic=f"{NAMESPACE}/not_its_input")
        try:
            report = peer.wait_for(
                "/diagnostics",
                lambda m: (
                    m.status[0].name == status_name and m.status[0].level == DiagnosticStatus.WARN
                ),
            )
        finally:
            peer.close()
            rclpy.shutdown(context=context)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=TIMEOUT_S)
    said = (
        rf"no publisher on {re.escape(NAMESPACE)}/input/points for \d+ s: remap the input \(e\.g\. "
    )
    said += r"--ros-args -r input/points:=/points_raw, or the launch argument input_topic:=\.\.\.\)"
    assert re.fullmatch(said, report.status[0].message), report.status[0].message
    assert re.search(r"\[WARN\].*unconnected_node\]: " + said, output), output


def test_process_exits_cleanly_on_sigint(peer, node_process):
    node_process.send_signal(signal.SIGINT)
    output, _ = node_process.communicate(timeout=TIMEOUT_S)
    assert node_process.returncode == 0, output
    assert "clustering on cpu" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "method:=bogus"], "unknown method 'bogus'"),
        (["-p", "min_z:=3.0", "-p", "max_z:=1.0"], "min_z (3.0) must be below max_z (1.0)"),
        pytest.param(
            ["-p", "backend:=cuda"],
            "CuPy finds no CUDA device",
            marks=pytest.mark.skipif(cuda_available(), reason="a CUDA device is present"),
        ),
    ],
)
def test_invalid_start_up_parameters_exit_2(args, message, domain_id):
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain_id)}
    done = subprocess.run(
        _command(*args), env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_help_lists_the_parameters_and_exits():
    script = Path(sys.executable).parent / "euclidean_cluster_node"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", _MODULE]
    done = subprocess.run([*launcher, "--help"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: euclidean_cluster_node")
    assert "  d_th (double, default 0.5; in (0.0, .inf))" in done.stdout
    assert "  max_work_s (double, default 1.0" in done.stdout
    assert "Traceback" not in done.stderr


def test_autoware_names_apply_unknown_ones_are_named_and_library_notices_reach_the_log(
    domain_id, tmp_path
):
    params = tmp_path / "autoware_style.param.yaml"
    params.write_text(
        "/**:\n  ros__parameters:\n    tolerance: 0.7\n    min_clustr_size: 5\n"
        "    input_frame: base_link\n"
    )
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain_id)}
    process = subprocess.Popen(
        _command("--params-file", str(params), "-p", "backend:=auto"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        for line in process.stdout:  # until the start-up line
            lines.append(line)
            if "clustering on" in line:
                break
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=TIMEOUT_S)
    output = "".join(lines) + rest
    assert "with the defaults but d_th 0.7" in output, output  # Autoware's name of d_th
    assert "[WARN]" in output and "Autoware parameter 'input_frame' ignored: no transform" in output
    assert "unknown parameter 'min_clustr_size' ignored; did you mean min_cluster_size?" in output
    if not cuda_available():  # the library's notice, through the ROS logger
        assert any(
            "[WARN]" in line and "no CUDA device found through CuPy" in line
            for line in output.splitlines()
        ), output


@pytest.mark.parametrize("name", ["gpu_euclidean_cluster.param.yaml", "autoware_ai.param.yaml"])
def test_shipped_params_files_start_the_node(name, domain_id):
    """Every shipped params file starts the node (an empty list, [], reaches rclpy as no value)."""
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain_id)}
    params = Path(__file__).resolve().parents[3] / "config" / name
    process = subprocess.Popen(
        _command("--params-file", str(params), "-p", "backend:=cpu"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:  # until the start-up line, or the end
            lines.append(line)
            if "clustering on" in line:
                break
    finally:
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=TIMEOUT_S)
    output = "".join(lines) + rest
    assert "clustering on cpu" in output and "[ERROR]" not in output, output
    assert "None" not in output, output  # no parameter left without a value


def test_bad_ros_arguments_exit_2_in_one_line():
    done = subprocess.run(
        _command("-p=d_th:=0.7"), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "euclidean_cluster_node: error: UnknownROSArgsError: ['-p=d_th:=0.7']"
    )
