"""The node as its own process against messages built to cost it: a PointCloud2 declaring
200 000 fields is refused at once (``max_point_fields``) and counted as malformed; a frame whose
graph would exhaust the process's address space (``RLIMIT_AS``) runs with ``union_find`` and is
counted as a fallback, not as a processing error."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (  # noqa: E402
    FLOAT32,
    UINT8,
    Field,
    RawCloud,
)
from gpu_euclidean_cluster.ros.messages.serialized import point_cloud_cdr  # noqa: E402

from ..._node_helpers import (  # noqa: E402
    cloud_message,
    connected_peer,
    decode,
    diagnostic_values,
    started_node,
    xyzi_array,
)
from ..._ros2_tools import own_domain_id  # noqa: E402

pytestmark = [
    pytest.mark.ros,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS via ulimit -v"),
]
NAMESPACE = "/limits"
NODE = f"{NAMESPACE}/euclidean_cluster_node"
#: The node's address space: about 0.9 GiB once started, so about 1.6 GiB left to allocate.
ADDRESS_SPACE_KIB = 5 << 19  # 2.5 GiB
#: Fields of the hostile message (4.8 MB of field descriptions, a handful of points).
HOSTILE_FIELDS = 200_000
#: Seconds between the hostile message and the next: the first is on its way and taken before
#: the second arrives (else the node's one-slot buffer drops it, unread).
HOSTILE_HEAD_START_S = 0.3


def _command(*ros_args: str) -> list[str]:
    """The node's command line, run by a shell that first limits the address space."""
    script = Path(sys.executable).parent / "euclidean_cluster_node"
    module = "gpu_euclidean_cluster.ros.node.node"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", module]
    limited = f'ulimit -v {ADDRESS_SPACE_KIB} && exec "$@"'
    return ["sh", "-c", limited, "sh", *launcher, "--ros-args", *ros_args]


@pytest.fixture(scope="module")
def domain_id() -> int:
    return own_domain_id()


@pytest.fixture(scope="module")
def node_process(domain_id):
    """The node on the CPU with a paper's method and no work limit, under RLIMIT_AS."""
    args = ["-p", "backend:=cpu", "-p", "method:=vertex", "-p", "max_work_s:=0.0"]
    args += ["-p", "qos_reliability:=reliable", "-r", f"__ns:={NAMESPACE}"]
    with started_node(_command(*args), domain_id) as process:
        yield process


@pytest.fixture(scope="module")
def peer(node_process, domain_id):
    with connected_peer(node_process, domain_id, namespace=NAMESPACE) as peer:
        yield peer


def _hostile_cdr(stamp_s: int) -> bytes:
    """A serialized PointCloud2 of 4 points with x, y, z and 200 000 one-byte fields."""
    names = [Field(name, 4 * i, FLOAT32) for i, name in enumerate("xyz")]
    extra = [Field(f"f{i}", 12 + i, UINT8) for i in range(HOSTILE_FIELDS)]
    step = 12 + HOSTILE_FIELDS
    cloud = RawCloud((*names, *extra), 1, 4, step, 4 * step, np.zeros(4 * step, np.uint8))
    header = SimpleNamespace(stamp=SimpleNamespace(sec=stamp_s, nanosec=0), frame_id="lidar")
    return point_cloud_cdr(cloud, header)


def test_a_message_of_200000_fields_is_refused_at_once_and_the_next_is_clustered(peer):
    hostile = _hostile_cdr(10)
    good = cloud_message(xyzi_array(np.zeros((5, 3))), 11)
    started = time.monotonic()
    peer.publish(hostile)
    time.sleep(HOSTILE_HEAD_START_S)  # taken by the idle worker before the next arrives
    peer.publish(good)
    labeled = peer.wait_stamp("output/labeled_points", 11)
    elapsed = time.monotonic() - started
    assert decode(labeled)["cluster_id"].tolist() == [0] * 5
    # Generous for a 2-core machine: parsing the fields alone took about 0.6 s, and checking
    # each name against the list (before) took minutes.
    assert elapsed < 2.0, f"{elapsed:.2f} s from the hostile message to the next frame's output"
    report = peer.wait_for(
        "/diagnostics", lambda m: diagnostic_values(m).get("frames_rejected_malformed") == "1"
    )
    reason = diagnostic_values(report)["last_rejection"]
    assert reason == (
        f"bad PointCloud2: {HOSTILE_FIELDS + 3} fields, over the limit of 1024 (max_point_fields)"
    )
    assert not any(m.header.stamp.sec == 10 for m in peer.received["output/labeled_points"])


def _malformed(report) -> int:
    return int(diagnostic_values(report).get("frames_rejected_malformed", "0"))


def _malformed_so_far(peer) -> int:
    """The most frames rejected as malformed in any report received yet (the counts only grow;
    the first report came before the earlier tests' rejections)."""
    peer.wait_for("/diagnostics", lambda m: True)
    return max(_malformed(m) for m in list(peer.received["/diagnostics"]))


def test_the_field_limit_is_a_live_parameter(peer):
    (result,) = peer.set_parameters(NODE, max_point_fields=2)
    assert not result.successful
    (result,) = peer.set_parameters(NODE, max_point_fields=3)
    assert result.successful, result.reason
    try:
        before = _malformed_so_far(peer)
        peer.publish(cloud_message(xyzi_array(np.zeros((2, 3))), 12))  # x, y, z, intensity
        report = peer.wait_for("/diagnostics", lambda m: _malformed(m) > before)
        assert "4 fields, over the limit of 3" in diagnostic_values(report)["last_rejection"]
    finally:
        (result,) = peer.set_parameters(NODE, max_point_fields=1024)
        assert result.successful, result.reason


def test_a_graph_over_the_address_space_runs_with_union_find_not_as_an_error(peer):
    """20 000 identical points with ``vertex``: 2e8 neighbour pairs, 14 GB as an adjacency list,
    far over the process's RLIMIT_AS. Before, the budget ignored the limit and the frame ended
    in a MemoryError, counted as a processing error; now it is refused before any allocation
    and run with union_find, counted as a fallback."""
    peer.publish(cloud_message(xyzi_array(np.full((20_000, 3), 1.5)), 20))
    clusters = peer.wait_stamp("output/clusters", 20)
    assert clusters.width == 1 and decode(clusters)["num_points"].tolist() == [20_000]
    report = peer.wait_for("/diagnostics", lambda m: diagnostic_values(m).get("fallbacks") == "1")
    values = diagnostic_values(report)
    assert values["cpu_fallbacks"] == "0", "union_find ran on the node's own backend"
    assert "method vertex needs" in values["last_fallback"]
    assert "frame run with union_find" in values["last_fallback"]
    assert "frames_rejected_processing_error" not in values
