"""The node's start-up and shutdown, and the launch files, fail loudly and cleanly.

- Every start-up input the node cannot use (a QoS name, a params file that is missing, a
  directory or not YAML, a remap rule, a log level) is one line of output and exit status 2.
- A doubled SIGINT (``ros2 launch`` sends its own after the terminal's) while a frame is being
  clustered ends the node with exit status 0 and no traceback.
- Every launch file refuses a missing params file before starting its node, and ends with a
  non-zero status, saying why, when its node exits with an error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from ..._node_helpers import TIMEOUT_S, Peer, cloud_message, xyzi_array  # noqa: E402
from ..._ros2_tools import (  # noqa: E402
    BIN,
    PACKAGE,
    PREFIX,
    REPO_ROOT,
    Background,
    describe,
    own_domain_id,
    own_namespace,
    ros2_env,
    run,
)

pytestmark = pytest.mark.ros

NAMESPACE = own_namespace("start_up")
GARBAGE_YAML = "/**:\n  ros__parameters:\n    d_th: [\n      0.5: {\n"


def _node_command(*ros_args: str) -> list[str]:
    script = BIN / "euclidean_cluster_node"
    launcher = (
        [str(script)] if script.exists() else [sys.executable, "-m", f"{PACKAGE}.ros.node.node"]
    )
    return [*launcher, "--ros-args", "-r", f"__ns:={NAMESPACE}", *ros_args]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            ["-p", "qos_reliability:=bogus"],
            "error: qos_reliability: unknown QoS reliability 'bogus'; choose best_effort or "
            "reliable",
        ),
        (["--params-file", "{missing}"], "euclidean_cluster_node: error: params file {missing}: "),
        (
            ["--params-file", "{garbage}"],
            "euclidean_cluster_node: error: params file {garbage}: not valid YAML: ",
        ),
        (["--params-file", "{folder}"], "params file {folder}: is a directory"),
        (["-r", "input/points:=bad!!"], "error: RCLError: failed to initialize rcl: Couldn't "),
        (["--log-level", "bogus"], "Couldn't parse log level: '--log-level bogus'"),
    ],
)
def test_a_bad_start_up_input_is_one_line_and_exit_2(tmp_path, arguments, message):
    paths = {
        "missing": tmp_path / "missing.param.yaml",
        "garbage": tmp_path / "garbage.param.yaml",
        "folder": tmp_path,
    }
    paths["garbage"].write_text(GARBAGE_YAML)
    arguments = [a.format(**paths) for a in arguments]
    done = subprocess.run(
        _node_command("-p", "backend:=cpu", *arguments),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    output = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, describe(done)
    assert len(output) == 1 and "Traceback" not in output[0], describe(done)
    assert message.format(**paths) in output[0], output[0]


def test_a_doubled_sigint_while_a_frame_is_clustered_exits_0_without_a_traceback(tmp_path):
    """The frame takes seconds (the paper's vertex method with exhaustive search, no work limit):
    the first SIGINT stops the executor, the node waits for the frame in flight, and the second
    SIGINT arrives during that wait (where it raised KeyboardInterrupt in ``destroy_node``)."""
    node = Background(
        _node_command(
            "-p", "backend:=cpu", "-p", "qos_reliability:=reliable", "-p", "method:=vertex",
            "-p", "search:=exhaustive", "-p", "max_work_s:=0.0",
        ),
        dict(os.environ),
        tmp_path / "node.log",
    )  # fmt: skip
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=own_domain_id())
    peer = Peer(context, namespace=NAMESPACE)
    try:
        peer.wait_connected()  # a one-point probe in, its labelled cloud out
        points = np.random.default_rng(0).uniform(0, 30, (20_000, 3))
        peer.publish(cloud_message(xyzi_array(points), 7))
        time.sleep(1.0)  # the worker has taken the frame: 20 000 points, seconds of work
        node.process.send_signal(signal.SIGINT)
        time.sleep(0.3)
        node.process.send_signal(signal.SIGINT)
        status = node.process.wait(timeout=TIMEOUT_S)
    finally:
        peer.close()
        rclpy.shutdown(context=context)
        node.close()
    assert status == 0 and "Traceback" not in node.output(), node.output()


# --- the launch files -------------------------------------------------------------------------

LAUNCH_FILES = {
    "gpu_euclidean_cluster.launch.py": "params_file",
    "multi_lidar.launch.py": "params_file",
    "voxel_grid_based_euclidean_cluster.launch.py": "voxel_grid_based_euclidean_param_path",
    "voxel_grid_based_euclidean_cluster.launch.xml": "voxel_grid_based_euclidean_param_path",
}
#: per launch file, arguments that put its node(s) in this module's namespace
NAMESPACE_ARGUMENTS = {
    "gpu_euclidean_cluster.launch.py": [f"namespace:={NAMESPACE}"],
    "multi_lidar.launch.py": [
        f"input_topics:={NAMESPACE}/lidar/points",
        f"namespaces:={NAMESPACE.strip('/')}",
        "gpus:=1",
    ],
}


@pytest.fixture(scope="module")
def installed(ros_tools: None) -> None:
    """The launch files ``ros2 launch`` finds are the checkout's."""
    for name in LAUNCH_FILES:
        copy = PREFIX / "share" / PACKAGE / "launch" / name
        if not copy.is_file() or copy.read_bytes() != (REPO_ROOT / "launch" / name).read_bytes():
            pytest.fail(f"{copy} differs from the checkout: re-run pip install -e '.[ros,test]'")


def _launch(name: str, *arguments: str) -> subprocess.CompletedProcess:
    command = [str(BIN / "ros2"), "launch", PACKAGE, name, *NAMESPACE_ARGUMENTS.get(name, [])]
    return run([*command, *arguments], ros2_env(own_domain_id()), timeout_s=2 * TIMEOUT_S)


@pytest.mark.parametrize("name", sorted(LAUNCH_FILES))
def test_a_missing_params_file_stops_the_launch_before_the_node(installed, tmp_path, name):
    missing = tmp_path / "missing.param.yaml"
    done = _launch(name, f"{LAUNCH_FILES[name]}:={missing}")
    output = done.stdout + done.stderr
    assert done.returncode == 1, describe(done)
    assert f"{LAUNCH_FILES[name]}:={missing} cannot be used: {missing}: no such file" in output, (
        output
    )
    assert "process started" not in output and "Traceback" not in output, output


@pytest.mark.parametrize("name", sorted(LAUNCH_FILES))
def test_a_node_that_exits_with_an_error_fails_the_launch(installed, tmp_path, name):
    garbage = tmp_path / "garbage.param.yaml"
    garbage.write_text(GARBAGE_YAML)
    done = _launch(name, f"{LAUNCH_FILES[name]}:={garbage}")
    output = done.stdout + done.stderr
    assert done.returncode == 1, describe(done)
    assert f"params file {garbage}: not valid YAML" in output, output  # the node's reason
    assert "exited with status 2; stopping the launch" in output, output
    assert "Traceback" not in output, output
