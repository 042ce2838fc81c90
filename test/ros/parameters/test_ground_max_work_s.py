"""``ground_max_work_s``: the RANSAC ground fit's work bound, as a user meets it.

The node as its own process (CPU backend) with ``ground_iterations`` at its largest allowed value
on kitti_000008 (minutes of plane fitting per frame on a 2-core CPU before the bound; the frame
fits Fast DDS's default shared-memory segment, so the test's publisher needs no transport
setting): the frame is published within the tests' usual deadline, with one warning naming the
cap and a fallback in ``/diagnostics``; and the parameter's 0 means no bound, as ``max_work_s``'s
does. kitti_000001 itself (120 268 points) is fitted through the stage in
test/backends/test_ground.py.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from gpu_euclidean_cluster.core.ground import MAX_ITERATIONS, GroundSettings, bounded_settings
from gpu_euclidean_cluster.cpu.stages.ground import estimate_work, fit_ground
from gpu_euclidean_cluster.ros.parameters.settings import settings_from_values
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS, SPECS

rclpy = pytest.importorskip("rclpy")

from ..._node_helpers import (  # noqa: E402
    TIMEOUT_S,
    cloud_message,
    connected_peer,
    decode,
    diagnostic_values,
    started_node,
    xyzi_array,
)
from ..._ros2_tools import own_domain_id, own_namespace  # noqa: E402

DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}
_MODULE = "gpu_euclidean_cluster.ros.node.node"


def test_the_parameter_sets_the_ground_fits_bound_and_0_lifts_it():
    spec = SPECS["ground_max_work_s"]
    assert (spec.default, spec.constraints, spec.read_only) == (1.0, "[0.0, .inf)", False)
    bounded = settings_from_values({**DEFAULTS, "remove_ground": True})
    assert bounded.ground is not None and bounded.ground.max_work_s == 1.0
    values = {**DEFAULTS, "remove_ground": True, "ground_max_work_s": 0.0}
    assert settings_from_values(values).ground.max_work_s is None


@pytest.mark.ros
def test_the_largest_iterations_publish_every_frame_with_one_warning(load_frame):
    xyz = load_frame("kitti_000008.bin")
    namespace = own_namespace("ground_bound")
    script = Path(sys.executable).parent / "euclidean_cluster_node"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", _MODULE]
    command = [*launcher, "--ros-args", "-r", f"__ns:={namespace}", "-p", "backend:=cpu"]
    command += ["-p", "remove_ground:=true", "-p", f"ground_iterations:={MAX_ITERATIONS}"]
    domain_id = own_domain_id()
    with started_node(command, domain_id) as process:
        with connected_peer(process, domain_id, namespace=namespace) as peer:
            peer.publish(cloud_message(xyzi_array(xyz), 1))
            labeled = peer.wait_stamp("output/labeled_points", 1, timeout_s=TIMEOUT_S)
            ground = peer.wait_stamp("output/ground_points", 1)
            report = peer.wait_for(
                "/diagnostics", lambda m: diagnostic_values(m).get("fallbacks") == "1"
            )
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=TIMEOUT_S)
    settings = GroundSettings(iterations=MAX_ITERATIONS, max_work_s=1.0)  # the node's default
    fitted, capped = bounded_settings(settings, estimate_work(xyz, None, MAX_ITERATIONS))
    assert capped is not None and f"against {len(xyz)} points on the cpu backend" in capped
    expected = fit_ground(xyz, None, fitted)  # the plane of the hypotheses that fit
    assert fitted.iterations < MAX_ITERATIONS and ground.width == expected.inliers > 0
    assert (decode(labeled)["cluster_id"][expected.mask] == -1).all()
    assert diagnostic_values(report)["last_fallback"] == capped
    warnings = [line for line in output.splitlines() if "[WARN]" in line]
    assert [line for line in warnings if line.endswith(capped)] == warnings[:1], output
    assert "Traceback" not in output
