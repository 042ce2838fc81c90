"""The launch file: always checked statically; loaded and run where launch_ros is installed."""

from __future__ import annotations

import ast
import importlib.util
import threading
from pathlib import Path

import pytest

LAUNCH_FILE = Path(__file__).resolve().parent.parent / "launch" / "gpu_euclidean_cluster.launch.py"
REQUIRED_ARGUMENTS = {"params_file", "input_topic", "namespace", "use_sim_time", "log_level"}


def _arguments_table() -> dict[str, tuple[object, str]]:
    tree = ast.parse(LAUNCH_FILE.read_text(encoding="utf-8"), filename=str(LAUNCH_FILE))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign) and "ARGUMENTS" in ast.unparse(node):
            return ast.literal_eval(node.value)
    raise AssertionError("launch file has no ARGUMENTS table")


def test_launch_file_compiles_and_declares_the_arguments():
    source = LAUNCH_FILE.read_text(encoding="utf-8")
    compile(source, str(LAUNCH_FILE), "exec")
    arguments = _arguments_table()
    assert set(arguments) == REQUIRED_ARGUMENTS
    assert arguments["input_topic"][0] == "/points_raw"
    assert "get_package_share_directory(PACKAGE)" in source
    assert '"gpu_euclidean_cluster.param.yaml"' in source
    assert (LAUNCH_FILE.parent.parent / "config" / "gpu_euclidean_cluster.param.yaml").is_file()


def _load_launch_module():
    pytest.importorskip("launch_ros", reason="launch_ros is not installed (no ROS distribution)")
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        get_package_share_directory("gpu_euclidean_cluster")
    except PackageNotFoundError:
        pytest.skip("gpu_euclidean_cluster is not installed in an ament index (colcon build)")
    spec = importlib.util.spec_from_file_location("gpu_euclidean_cluster_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generate_launch_description():
    module = _load_launch_module()
    from launch.actions import DeclareLaunchArgument
    from launch_ros.actions import Node

    description = module.generate_launch_description()
    declared = {e.name for e in description.entities if isinstance(e, DeclareLaunchArgument)}
    assert declared == REQUIRED_ARGUMENTS
    assert any(isinstance(e, Node) for e in description.entities)


@pytest.mark.ros
def test_launch_starts_the_node(monkeypatch):
    module = _load_launch_module()
    rclpy = pytest.importorskip("rclpy")
    from launch import LaunchService

    from ._node_helpers import TIMEOUT_S, Peer, random_domain_id

    domain_id = random_domain_id()
    monkeypatch.setenv("ROS_DOMAIN_ID", str(domain_id))
    service = LaunchService(argv=["input_topic:=/launch_test/points", "namespace:=launch_test"])
    service.include_launch_description(module.generate_launch_description())
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    peer = Peer(context, namespace="/launch_test", input_topic="/launch_test/points")
    try:
        peer.wait_connected()
    finally:
        peer.close()
        rclpy.shutdown(context=context)
        service.shutdown()
        thread.join(TIMEOUT_S)
