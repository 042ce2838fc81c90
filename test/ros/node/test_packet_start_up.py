"""The node's packet input refuses, at start-up, what could only crash or hang it later or
decode garbage: one line of output and exit status 2, the node as a user starts it.

A calibration with ``num_lasers: 0`` (the first packet used to end the node with an IndexError), a
value beyond float32 (a traceback), a FIFO as the file (start-up blocked for good), another
model's calibration, and decoder settings under which no return could be kept (every sweep
published empty). The unit tests of each rule: ``test/pointcloud_io/test_velodyne_hostile.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from ..._node_helpers import TIMEOUT_S  # noqa: E402
from ..._ros2_tools import BIN, PACKAGE, REPO_ROOT, describe, own_namespace  # noqa: E402

pytestmark = pytest.mark.ros

NAMESPACE = own_namespace("packet_start_up")
SHIPPED = REPO_ROOT / "config" / "velodyne"


def _node_command(*ros_args: str) -> list[str]:
    script = BIN / "euclidean_cluster_node"
    launcher = (
        [str(script)] if script.exists() else [sys.executable, "-m", f"{PACKAGE}.ros.node.node"]
    )
    return [*launcher, "--ros-args", "-r", f"__ns:={NAMESPACE}", *ros_args]


def _calibration(folder: Path, name: str) -> Path:
    """A VLP-16 calibration file broken as ``name`` says (a FIFO for ``fifo``)."""
    path = folder / f"{name}.yaml"
    text = (SHIPPED / "VLP16.yaml").read_text()
    if name == "fifo":
        os.mkfifo(path)
    elif name == "no_lasers":
        path.write_text(text.replace("num_lasers: 16", "num_lasers: 0"))
    elif name == "beyond_float32":
        path.write_text(text.replace("dist_correction: 0.0", "dist_correction: 1e400", 1))
    return path


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["calibration_file:={no_lasers}"], "num_lasers 0 is outside [1, 128]"),
        (["calibration_file:={beyond_float32}"], "dist_correction: '1e400' has an exponent"),
        (["calibration_file:={fifo}"], "not a regular file (a FIFO, a device or a socket)"),
        (
            [f"calibration_file:={SHIPPED / 'VLS128.yaml'}"],
            "num_lasers 128, but a VLP16 has 16 lasers",
        ),
        (
            ["sensor_min_range:=5.0", "sensor_max_range:=1.0"],
            "sensor_min_range 5.0 is not below sensor_max_range 1.0: no return would be kept",
        ),
        (
            ["cloud_min_angle:=90", "cloud_max_angle:=90"],
            "cloud_min_angle 90 equals cloud_max_angle 90: no azimuth would be kept",
        ),
    ],
    ids=["num_lasers 0", "1e400", "fifo", "VLS-128 file", "min_range >= max_range", "no angle"],
)
def test_a_packet_input_that_cannot_work_is_one_line_and_exit_2(tmp_path, arguments, message):
    paths = {name: _calibration(tmp_path, name) for name in ("fifo", "no_lasers", "beyond_float32")}
    parameters = ["sensor_model:=VLP16", *(a.format(**paths) for a in arguments)]
    done = subprocess.run(
        _node_command("-p", "backend:=cpu", *(x for p in parameters for x in ("-p", p))),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    output = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, describe(done)
    assert len(output) == 1 and "Traceback" not in output[0], describe(done)
    assert "packet input: " in output[0] and message in output[0], output[0]
