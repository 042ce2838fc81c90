"""``launch/multi_lidar.launch.py``: checked statically, its plan (namespaces, device spread) as
pure functions, loaded where launch_ros is installed, and run for real with ``ros2 launch`` (two
topics, two nodes in their namespaces with their ``device_id`` and input remap)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_euclidean_cluster.ros.launch_files import multi_lidar
from gpu_euclidean_cluster.ros.launch_files.multi_lidar import (
    LidarNode,
    MultiLidarError,
    derive_namespace,
    plan_nodes,
    spread_devices,
)

LAUNCH_FILE = Path(__file__).resolve().parents[3] / "launch" / "multi_lidar.launch.py"
REQUIRED_ARGUMENTS = {
    "input_topics",
    "namespaces",
    "params_file",
    "gpus",
    "use_sim_time",
    "log_level",
}
NODE = "euclidean_cluster_node"
#: params_file:= of the real launch, installed by pip install -e (its min_cluster_size is 10; the
#: node's default is 1)
PRESET = "hdl64e.param.yaml"


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
    assert arguments["namespaces"][0] == "" and arguments["gpus"][0] == "auto"
    assert arguments["use_sim_time"][0] == "false" and arguments["log_level"][0] == "info"
    assert plan_nodes(arguments["input_topics"][0], "", "1")  # the default is a valid plan
    assert '"gpu_euclidean_cluster.param.yaml"' in source
    assert "plan_nodes" in source


# -- the plan, ROS-free --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "namespace"),
    [
        ("/sensing/lidar/top/pointcloud", "top"),
        ("/sensing/lidar/left/pointcloud", "left"),
        ("sensing/lidar/rear/pointcloud_raw_ex", "rear"),
        ("/points_raw", "points_raw"),
        ("/top/points/", "top"),
    ],
)
def test_namespace_is_the_parent_segment_of_the_topic(topic, namespace):
    assert derive_namespace(topic) == namespace


def test_derived_namespaces_must_be_unique_and_valid():
    with pytest.raises(MultiLidarError, match="'top' derived for both /a/top/points and /b/top/"):
        plan_nodes("/a/top/points,/b/top/points", gpus="1")
    with pytest.raises(MultiLidarError, match="'3d' derived from ~/3d/points is not a valid"):
        derive_namespace("~/3d/points")
    with pytest.raises(MultiLidarError, match="'/lidar/3d/points' is not a valid topic name"):
        plan_nodes("/lidar/3d/points", gpus="1")  # ROS names: no token starts with a digit
    # given namespaces settle a clash
    nodes = plan_nodes("/a/top/points,/b/top/points", "front_top, rear_top", gpus="1")
    assert [n.namespace for n in nodes] == ["front_top", "rear_top"]


def test_devices_spread_round_robin():
    assert spread_devices(5, 2) == [0, 1, 0, 1, 0]
    assert spread_devices(3, 4) == [0, 1, 2]
    assert spread_devices(2, 1) == [0, 0]
    with pytest.raises(MultiLidarError):
        spread_devices(2, 0)
    topics = "/s/l/top/p,/s/l/left/p,/s/l/right/p"
    assert plan_nodes(topics, gpus="2") == [
        LidarNode("/s/l/top/p", "top", 0),
        LidarNode("/s/l/left/p", "left", 1),
        LidarNode("/s/l/right/p", "right", 0),
    ]


def test_gpus_auto_asks_cupy_else_one(monkeypatch):
    monkeypatch.setattr(multi_lidar, "detect_gpus", lambda: 3)
    assert [n.device_id for n in plan_nodes("/a/x/p,/b/y/p,/c/z/p,/d/w/p")] == [0, 1, 2, 0]
    assert [n.device_id for n in plan_nodes("/a/x/p,/b/y/p", gpus="")] == [0, 1]
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    assert multi_lidar.detect_gpus() == 1


@pytest.mark.parametrize(
    ("topics", "namespaces", "gpus", "message"),
    [
        ("", "", "1", "input_topics: give at least one PointCloud2 topic"),
        (" ", "", "1", "input_topics: give at least one PointCloud2 topic"),
        ("/a/x/p,,/b/y/p", "", "1", "input_topics: empty entry"),
        ("/a/x/p,/a/x/p", "", "1", "input_topics: /a/x/p given more than once"),
        ("/a/x/p,/b/y/p", "x", "1", "namespaces: 1 given for 2 input_topics"),
        ("/a/x/p", "x,y", "1", "namespaces: 2 given for 1 input_topics"),
        ("/a/x/p", "9lives", "1", "namespaces: '9lives' is not a valid ROS namespace"),
        ("/a/x/p", "a b", "1", "namespaces: 'a b' is not a valid ROS namespace"),
        ("/a/x/p", "a//b", "1", "namespaces: 'a//b' is not a valid ROS namespace"),
        ("/a/x/p,/b/y/p", "same,/same", "1", "namespaces: 'same' given for both"),
        ("/a/x p", "", "1", "input_topics: '/a/x p' is not a valid topic name"),
        ("/a/x/p", "", "0", "gpus: '0' is not auto or a whole number >= 1"),
        ("/a/x/p", "", "two", "gpus: 'two' is not auto or a whole number >= 1"),
    ],
)
def test_bad_arguments_are_refused_with_one_line(topics, namespaces, gpus, message):
    with pytest.raises(MultiLidarError) as caught:
        plan_nodes(topics, namespaces, gpus)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_nested_and_absolute_namespaces_are_accepted():
    nodes = plan_nodes("/a/x/p,/b/y/p", "/perception/top,perception/left", "1")
    assert [n.namespace for n in nodes] == ["/perception/top", "perception/left"]


# -- the launch file, loaded ---------------------------------------------------------------------


def _load_launch_module():
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        get_package_share_directory("gpu_euclidean_cluster")
    except PackageNotFoundError:
        pytest.skip("gpu_euclidean_cluster is not installed in an ament index")
    spec = importlib.util.spec_from_file_location("multi_lidar_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generate_launch_description(ros_tools, monkeypatch):
    monkeypatch.setenv("AMENT_PREFIX_PATH", sys.prefix)
    module = _load_launch_module()
    from launch.actions import DeclareLaunchArgument, LogInfo, RegisterEventHandler
    from launch_ros.actions import Node

    description = module.generate_launch_description()
    declared = {e.name: e for e in description.entities if isinstance(e, DeclareLaunchArgument)}
    assert set(declared) == REQUIRED_ARGUMENTS
    (default_params,) = declared["params_file"].default_value
    assert Path(default_params.text).is_file()

    configurations = {
        "input_topics": "/sensing/lidar/top/pointcloud,/sensing/lidar/left/pointcloud",
        "namespaces": "",
        "gpus": "2",
        "params_file": default_params.text,
        "use_sim_time": "false",
        "log_level": "warn",
    }
    actions = module._nodes(SimpleNamespace(launch_configurations=configurations))
    nodes = [a for a in actions if isinstance(a, Node)]
    assert len([a for a in actions if isinstance(a, LogInfo)]) == 2
    assert len([a for a in actions if isinstance(a, RegisterEventHandler)]) == 2  # one per node
    assert [n._Node__node_namespace for n in nodes] == ["top", "left"]
    topics = configurations["input_topics"].split(",")
    for node, device, topic in zip(nodes, (0, 1), topics, strict=True):
        params_file, overrides = node._Node__parameters
        assert _text(params_file.param_file) == default_params.text
        assert {_text(k): v for k, v in overrides.items()}["device_id"] == device
        (remap,) = node._Node__remappings
        assert (_text(remap[0]), _text(remap[1])) == ("input/points", topic)


def _text(parts) -> str:
    """The text of a list of launch TextSubstitutions."""
    return "".join(part.text for part in parts)


# -- ros2 launch, for real -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def ros2(ros_tools):
    pytest.importorskip("rclpy")
    from ... import _ros2_tools

    return _ros2_tools


@pytest.fixture(scope="module")
def domain(ros2) -> Iterator[int]:
    with ros2.private_domain() as domain_id:
        yield domain_id


@pytest.mark.ros
def test_installed_copy_matches_the_checkout(ros2):
    installed = ros2.PREFIX / "share" / ros2.PACKAGE / "launch" / LAUNCH_FILE.name
    assert installed.is_file() and installed.read_bytes() == LAUNCH_FILE.read_bytes(), (
        f"{installed} differs from the checkout: re-run pip install -e '.[ros,test]'"
    )


@pytest.mark.ros
def test_ros2_launch_starts_one_node_per_topic(ros2, domain, tmp_path):
    env = ros2.ros2_env(domain)
    suffix = ros2.random_suffix()
    topics = [f"/ml_{suffix}/sensing/top/pointcloud", f"/ml_{suffix}/sensing/left/pointcloud"]
    command = [
        str(ros2.BIN / "ros2"),
        "launch",
        ros2.PACKAGE,
        LAUNCH_FILE.name,
        f"input_topics:={','.join(topics)}",
        f"namespaces:=top_{suffix},left_{suffix}",
        "gpus:=2",
        "log_level:=warn",
        f"params_file:={ros2.PREFIX / 'share' / ros2.PACKAGE / 'config' / PRESET}",
    ]
    launch = ros2.Background(command, env, tmp_path / "launch.log")
    try:
        for index, (side, topic) in enumerate(zip(("top", "left"), topics, strict=True)):
            node = f"/{side}_{suffix}/{NODE}"
            done = ros2.retry(
                lambda node=node: ros2.ros2(env, "param", "get", *ros2.SPIN, node, "device_id"),
                lambda done: "Integer value is" in done.stdout or not launch.alive(),
            )
            assert launch.alive(), launch.output()
            assert f"Integer value is: {index}" in done.stdout, ros2.describe(done)
            ros2.retry(  # the same params_file for every node
                lambda node=node: ros2.ros2(
                    env, "param", "get", *ros2.SPIN, node, "min_cluster_size"
                ),
                lambda done: "Integer value is: 10" in done.stdout,
            )
            info = ros2.retry(
                lambda node=node: ros2.ros2(env, "node", "info", *ros2.SPIN, node),
                lambda done, topic=topic: topic in done.stdout,
            )
            subscribers = info.stdout.split("Subscribers:")[1].split("Publishers:")[0]
            assert f"{topic}: sensor_msgs/msg/PointCloud2" in subscribers, info.stdout
            publishers = info.stdout.split("Publishers:")[1]
            assert f"/{side}_{suffix}/output/labeled_points" in publishers, info.stdout
        output = launch.output()
        assert f"{topics[0]} -> /top_{suffix}/{NODE} (device_id 0)" in output, output
        assert f"{topics[1]} -> /left_{suffix}/{NODE} (device_id 1)" in output, output
        assert launch.interrupt() == 0, launch.output()
        assert launch.wait_group_gone()
    finally:
        launch.close()


@pytest.mark.ros
def test_ros2_launch_refuses_bad_arguments_with_one_line(ros2, domain, tmp_path):
    env = ros2.ros2_env(domain)
    command = [
        str(ros2.BIN / "ros2"),
        "launch",
        ros2.PACKAGE,
        LAUNCH_FILE.name,
        "input_topics:=/a/top/points,/b/top/points",
    ]
    done = ros2.run(command, env, timeout_s=60)
    assert done.returncode != 0, ros2.describe(done)
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "[ERROR]" in line]
    assert len(errors) == 1, ros2.describe(done)
    assert "namespaces: 'top' derived for both /a/top/points and /b/top/points" in errors[0]
