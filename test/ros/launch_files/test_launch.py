"""The launch file: always checked statically; loaded where launch_ros is installed (fixture
``ros_tools``). ``test_ros2_tools.py`` runs it for real with ``ros2 launch`` as its own process
(launch 3.7.1 refuses to run a ``LaunchService`` outside the main thread, so not in-process)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

LAUNCH_FILE = Path(__file__).resolve().parents[3] / "launch" / "gpu_euclidean_cluster.launch.py"
REQUIRED_ARGUMENTS = {
    "params_file",
    "input_topic",
    "namespace",
    "use_sim_time",
    "log_level",
    "fastdds_large_clouds",
    "packets_topic",
    "sensor_model",
    "calibration_file",
}


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


def _load_launch_module(launch_file: Path = LAUNCH_FILE):
    from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

    try:
        get_package_share_directory("gpu_euclidean_cluster")
    except PackageNotFoundError:
        pytest.skip("gpu_euclidean_cluster is not installed in an ament index")
    spec = importlib.util.spec_from_file_location("gpu_euclidean_cluster_launch", launch_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generate_launch_description(ros_tools, monkeypatch):
    # the venv is the ament prefix of `pip install -e .` (as for `ros2 launch`, README)
    monkeypatch.setenv("AMENT_PREFIX_PATH", sys.prefix)
    module = _load_launch_module()
    from launch.actions import DeclareLaunchArgument
    from launch_ros.actions import Node

    description = module.generate_launch_description()
    declared = {e.name: e for e in description.entities if isinstance(e, DeclareLaunchArgument)}
    assert set(declared) == REQUIRED_ARGUMENTS
    (default_params,) = declared["params_file"].default_value
    installed = Path(sys.prefix, "share", "gpu_euclidean_cluster", "config")
    assert Path(default_params.text) == installed / "gpu_euclidean_cluster.param.yaml"
    assert Path(default_params.text).is_file()
    from launch.actions import OpaqueFunction

    opaque = [e for e in description.entities if isinstance(e, OpaqueFunction)]
    functions = [e._OpaqueFunction__function for e in opaque]
    assert module._node in functions

    from launch.actions import RegisterEventHandler

    params = {"params_file": default_params.text}
    empty = SimpleNamespace(
        launch_configurations={**params, "sensor_model": "", "calibration_file": ""}
    )
    node, on_exit = module._node(empty)  # _node reads only launch_configurations of the context
    assert isinstance(node, Node)
    assert isinstance(on_exit, RegisterEventHandler)  # a failing node fails the launch
    assert "sensor_model" not in _overrides(node), "empty arguments leave the params file alone"
    given = {**params, "sensor_model": "VLS128", "calibration_file": "/c.yaml"}
    node, _ = module._node(SimpleNamespace(launch_configurations=given))
    overrides = {k: yaml.safe_load(v) for k, v in _overrides(node).items()}
    assert overrides["sensor_model"] == "VLS128" and overrides["calibration_file"] == "/c.yaml"
    remapped = ["".join(part.text for part in name) for name, _ in node._Node__remappings]
    assert remapped == ["input/points", "input/packets"]


def _overrides(node) -> dict[str, str]:
    """The literal parameter overrides of a launch_ros Node (keys and values are substitutions)."""

    def text(parts) -> str:
        return "".join(getattr(part, "text", "?") for part in parts)

    overrides = {}
    for entry in node._Node__parameters:
        if isinstance(entry, dict):
            overrides.update({text(k): text(v) for k, v in entry.items() if isinstance(v, tuple)})
    return overrides


# --- params files by name (gpu_euclidean_cluster.ros.launch_files.rules.find_params_file) ------

CONFIG = LAUNCH_FILE.parents[1] / "config"


@pytest.mark.parametrize("name", ["hdl64e", "hdl64e.param.yaml", "vlp16", "hdl32e.param.yaml"])
def test_a_preset_is_found_by_name(tmp_path, monkeypatch, name):
    from gpu_euclidean_cluster.ros.launch_files.rules import find_params_file

    monkeypatch.chdir(tmp_path)  # no file of that name here
    share = tmp_path / "share"
    (share / "config").mkdir(parents=True)
    found = find_params_file("params_file", name, str(share))  # not in share: the checkout's
    assert found == str(CONFIG / (name.removesuffix(".param.yaml") + ".param.yaml"))
    installed = share / "config" / "hdl64e.param.yaml"
    installed.write_text("/**:\n  ros__parameters: {}\n")
    assert find_params_file("params_file", "hdl64e", str(share)) == str(installed)  # share first


def test_a_path_or_a_file_here_is_taken_as_given(tmp_path, monkeypatch):
    from gpu_euclidean_cluster.ros.launch_files.rules import LaunchError, find_params_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "hdl64e").write_text("/**:\n  ros__parameters: {}\n")
    assert find_params_file("params_file", "hdl64e", str(tmp_path)) == "hdl64e"  # the file here
    given = str(tmp_path / "mine.param.yaml")
    with pytest.raises(LaunchError, match=f"params_file:={given} cannot be used: {given}: no such"):
        find_params_file("params_file", given, str(tmp_path))  # a path is never a preset


def test_an_unknown_name_lists_the_shipped_params_files(tmp_path, monkeypatch):
    from gpu_euclidean_cluster.ros.launch_files.rules import LaunchError, find_params_file

    monkeypatch.chdir(tmp_path)
    with pytest.raises(LaunchError) as refused:
        find_params_file("params_file", "hdl128", str(tmp_path))
    shipped = sorted(p.name.removesuffix(".param.yaml") for p in CONFIG.glob("*.param.yaml"))
    assert {"vlp16", "hdl32e", "hdl64e"} <= set(shipped)
    assert str(refused.value) == (
        "params_file:=hdl128 cannot be used: no such file, nor a params file of the package "
        f"(by name, .param.yaml optional: {', '.join(shipped)})"
    )


@pytest.mark.parametrize(
    ("launch_file", "argument"),
    [
        ("gpu_euclidean_cluster.launch.py", "params_file"),
        ("multi_lidar.launch.py", "params_file"),
        ("vehicle.launch.py", "params_file"),
        ("voxel_grid_based_euclidean_cluster.launch.py", "voxel_grid_based_euclidean_param_path"),
    ],
)
def test_the_launch_files_take_a_preset_by_name(
    ros_tools, monkeypatch, tmp_path, launch_file, argument
):
    monkeypatch.setenv("AMENT_PREFIX_PATH", sys.prefix)
    monkeypatch.chdir(tmp_path)
    module = _load_launch_module(LAUNCH_FILE.parent / launch_file)
    from launch_ros.actions import Node

    function = getattr(module, "_node", None) or module._nodes
    defaults = {name: default or "" for name, (default, _) in module.ARGUMENTS.items()}
    context = SimpleNamespace(launch_configurations={**defaults, argument: "hdl64e"})
    nodes = [a for a in function(context) if isinstance(a, Node)]
    installed = Path(sys.prefix, "share", "gpu_euclidean_cluster", "config", "hdl64e.param.yaml")
    files = ["".join(part.text for part in node._Node__parameters[0].param_file) for node in nodes]
    assert files and set(files) == {str(installed)}


def test_the_vehicle_launch_file_wires_the_kit_to_autowares_topics(ros_tools, monkeypatch):
    monkeypatch.setenv("AMENT_PREFIX_PATH", sys.prefix)
    module = _load_launch_module(LAUNCH_FILE.parent / "vehicle.launch.py")
    defaults = {name: default or "" for name, (default, _) in module.ARGUMENTS.items()}
    context = SimpleNamespace(launch_configurations={**defaults, "params_file": "hdl64e"})
    node, _ = module._node(context)
    assert yaml.safe_load(_overrides(node)["sensor_kit"]) == "sample_sensor_kit"
    remaps = {
        "".join(part.text for part in name): "".join(part.text for part in target)
        for name, target in node._Node__remappings
    }
    clustering = "/perception/object_recognition/detection/clustering"
    assert remaps == {
        "output/objects_with_feature": f"{clustering}/clusters",
        "output/concatenated/pointcloud": "/sensing/lidar/concatenated/pointcloud",
    }
