"""The test suite never touches a node it did not start.

A test process takes its own discovery scope before any test runs (``conftest.py`` and
``_ros2_tools.isolate_discovery``): a ROS domain id that no other test process holds and
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``. Within that domain, each node a test starts lives in
a namespace of its own, and so do the peers that talk to it. The proof: a "foreign" node (a user's
``euclidean_cluster_node``, default name, root namespace) runs on the *same* domain while the node
helpers do what the node tests do (start a node, set its parameters); the foreign node's
parameters stay what they were.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

rclpy = pytest.importorskip("rclpy")

from .._node_helpers import TIMEOUT_S, Peer, running_node  # noqa: E402
from .._ros2_tools import (  # noqa: E402
    BIN,
    PACKAGE,
    Background,
    own_domain_id,
    own_namespace,
    ros2_env,
)

pytestmark = pytest.mark.ros

FOREIGN = "/euclidean_cluster_node"
#: what the node tests set (test_node.py), with values other than the defaults
CHANGES = {"d_th": 0.9, "max_cluster_size": 7, "use_height": False, "max_range": 20.0}


def test_this_process_has_its_own_domain_and_the_localhost_range():
    domain = own_domain_id()
    assert os.environ["ROS_DOMAIN_ID"] == str(domain)
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert ros2_env(domain)["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert own_namespace() != own_namespace()
    # another process cannot claim the domain while this one runs
    lock = Path(tempfile.gettempdir()) / f"{PACKAGE}-ros-domain-{domain}.lock"
    claim = (
        "import fcntl, sys\n"
        f"lock = open({str(lock)!r}, 'w')\n"
        "try:\n    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", claim], timeout=TIMEOUT_S)
    assert done.returncode == 3


@pytest.fixture
def foreign_node(tmp_path: Path) -> Iterator[Background]:
    """A user's node on this process's domain: default name, root namespace, CPU backend."""
    script = BIN / "euclidean_cluster_node"
    launcher = (
        [str(script)] if script.exists() else [sys.executable, "-m", f"{PACKAGE}.ros.node.node"]
    )
    node = Background(
        [*launcher, "--ros-args", "-p", "backend:=cpu"], dict(os.environ), tmp_path / "foreign.log"
    )
    try:
        yield node
    finally:
        node.interrupt(timeout_s=30)
        node.close()


def _values(peer: Peer, node: str) -> dict[str, object]:
    values = peer.get_parameters(node, *CHANGES)
    return {
        name: (v.double_value, v.integer_value, v.bool_value)
        for name, v in zip(CHANGES, values, strict=True)
    }


def test_a_foreign_node_on_the_same_domain_keeps_its_parameters(foreign_node):
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=own_domain_id())
    watcher = Peer(context)  # in the root namespace, beside the foreign node
    try:
        before = _values(watcher, FOREIGN)  # the foreign node is up and answers
        with running_node("cpu") as (node, peer):  # what every node test does
            results = peer.set_parameters("euclidean_cluster_node", **CHANGES)
            assert all(r.successful for r in results), results
            assert {name: node.get_parameter(name).value for name in CHANGES} == CHANGES
            assert node.get_namespace() != "/"
        assert foreign_node.alive(), foreign_node.output()
        assert _values(watcher, FOREIGN) == before
        assert "from the next frame" not in foreign_node.output()  # no change ever applied
    finally:
        watcher.close()
        rclpy.shutdown(context=context)
