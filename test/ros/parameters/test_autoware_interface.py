"""Autoware's interface: its parameter names (old and new) as aliases of ours, its launch
arguments, and the launch file started for real with ``ros2 launch`` and an Autoware params file
of each generation."""

from __future__ import annotations

import ast
import math
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_euclidean_cluster.core.config import DEFAULT_CONFIG, ConfigError
from gpu_euclidean_cluster.ros.parameters.autoware_names import (
    ALIAS_OF,
    ALIASES,
    AUTOWARE_NOT_APPLIED,
    AUTOWARE_SAME_NAMES,
    autoware_parameters_markdown,
    names_of,
    resolve_aliases,
)
from gpu_euclidean_cluster.ros.parameters.settings import settings_from_values
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS, SPECS, unknown_parameter_warnings

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of rclpy) is not installed")

REPO = Path(__file__).resolve().parents[3]
LAUNCH_PY = REPO / "launch" / "voxel_grid_based_euclidean_cluster.launch.py"
LAUNCH_XML = REPO / "launch" / "voxel_grid_based_euclidean_cluster.launch.xml"
PARAMS = REPO / "config" / "voxel_grid_based_euclidean_cluster.param.yaml"
DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}
#: Autoware's launch arguments of voxel_grid_based_euclidean_cluster.launch.xml/.py
AUTOWARE_ARGUMENTS = {
    "input_pointcloud",
    "input_map",
    "output_clusters",
    "use_low_height_cropbox",
    "voxel_grid_based_euclidean_param_path",
    "use_pointcloud_container",
    "pointcloud_container_name",
    "container_package",
    "container_executable",
    "ld_preload_value",
}
#: autoware_launch's params file before the rename (values as published there), crop box included
OLD_GENERATION = {
    "tolerance": 0.7,
    "voxel_leaf_size": 0.3,
    "min_points_number_per_voxel": 1,
    "min_cluster_size": 10,
    "max_cluster_size": 3000,
    "max_voxel_cluster_for_output": 800,
    "min_voxel_cluster_size_for_filtering": 65,
    "max_points_per_voxel_in_large_cluster": 10,
    "use_height": False,
    "input_frame": "base_link",
    "max_x": 200.0,
    "min_x": -200.0,
    "max_y": 200.0,
    "min_y": -200.0,
    "max_z": 2.0,
    "min_z": -10.0,
    "negative": False,
}


def _settings(given: dict[str, object]):
    known = {k: v for k, v in given.items() if k in SPECS or k in ALIAS_OF}
    return settings_from_values({**DEFAULTS, **resolve_aliases(known)})


def test_aliases_name_our_parameters_and_never_shadow_one():
    for alias in ALIASES:
        assert alias.target in SPECS, alias
        assert alias.name not in SPECS, alias
        assert SPECS[alias.target].read_only is False, alias  # aliases are set live
    assert len(ALIAS_OF) == len(ALIASES)
    assert set(AUTOWARE_SAME_NAMES) <= set(SPECS)
    assert not set(AUTOWARE_NOT_APPLIED) & (set(SPECS) | set(ALIAS_OF))
    assert names_of("d_th") == ("d_th", "tolerance_m", "tolerance", "cluster_tolerance")


def test_resolve_aliases_translates_and_refuses_two_values_for_one_parameter():
    assert resolve_aliases({"tolerance_m": 0.7, "min_points_per_cluster": 10}) == {
        "d_th": 0.7,
        "min_cluster_size": 10,
    }
    assert resolve_aliases({"tolerance": 0.7, "d_th": 0.7}) == {"d_th": 0.7}  # same value: fine
    with pytest.raises(ConfigError, match=r"tolerance 0.7 and d_th 0.5 set the same parameter"):
        resolve_aliases({"tolerance": 0.7, "d_th": 0.5})


def test_both_generations_of_autoware_params_files_give_the_same_settings():
    new = yaml.safe_load(PARAMS.read_text(encoding="utf-8"))["/**"]["ros__parameters"]
    old = {k: v for k, v in OLD_GENERATION.items() if k != "max_cluster_size"}
    for given in (new, old):
        settings = _settings(given)
        cluster = settings.cluster
        assert cluster.d_th == 0.7 and cluster.min_cluster_size == 10
        assert cluster.voxel_leaf_size == 0.3 and cluster.min_points_per_voxel == 1
        assert cluster.max_voxels_per_cluster == 800
        assert cluster.large_cluster_voxel_count_threshold == 65
        assert cluster.large_cluster_max_points_per_voxel == 10
        assert settings.use_height is False
    # the shipped file holds Autoware's defaults, which are our voxel_grid defaults
    for name in ("voxel_leaf_size", "min_points_per_voxel", "max_voxels_per_cluster"):
        assert getattr(_settings(new).cluster, name) == getattr(DEFAULT_CONFIG, name)


def test_every_autoware_name_is_accepted_or_named_with_its_reason():
    warnings = unknown_parameter_warnings([*OLD_GENERATION, "max_cluster_diagonal_size"])
    assert sorted(w.split("'")[1] for w in warnings) == sorted(AUTOWARE_NOT_APPLIED)
    assert all(w.startswith("Autoware parameter") and " ignored: " in w for w in warnings)
    assert unknown_parameter_warnings(["tolerance_mm"]) == [
        "unknown parameter 'tolerance_mm' ignored; did you mean tolerance_m?"
    ]


def test_docs_map_every_autoware_name():
    text = (REPO / "docs" / "autoware.md").read_text(encoding="utf-8")
    assert autoware_parameters_markdown() in text, (
        "docs/autoware.md's Autoware table is stale: paste "
        "gpu_euclidean_cluster.ros.parameters.autoware_names.autoware_parameters_markdown() into it"
    )


def _python_arguments() -> dict[str, tuple[object, str]]:
    tree = ast.parse(LAUNCH_PY.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and "ARGUMENTS" in ast.unparse(node.targets[0]):
            return ast.literal_eval(node.value)
    raise AssertionError("no ARGUMENTS table")


def test_launch_files_declare_autoware_arguments_with_autoware_defaults():
    python = _python_arguments()
    assert set(python) == AUTOWARE_ARGUMENTS | {"algorithm"}
    assert python["input_pointcloud"][0] == "/perception/obstacle_segmentation/pointcloud"
    assert python["output_clusters"][0] == "clusters"
    assert python["use_low_height_cropbox"][0] == "false"
    assert python["algorithm"][0] == "voxel_grid"
    root = ET.parse(LAUNCH_XML).getroot()
    declared = {arg.get("name"): arg.get("default") for arg in root.findall("arg")}
    passed = {arg.get("name") for arg in root.find("include").findall("arg")}
    assert set(declared) == set(python) == passed
    for name, (default, _) in python.items():
        if default is not None:
            assert declared[name] == default, name
    assert PARAMS.name in declared["voxel_grid_based_euclidean_param_path"]


# ---- for real: ros2 launch of the XML file, ros2 param against the launched node ----------------


@pytest.fixture(scope="module")
def launched_autoware(tmp_path_factory) -> Iterator[tuple[object, dict[str, str], str]]:
    pytest.importorskip("rclpy")
    from ..._ros2_tools import (
        PACKAGE,
        PREFIX,
        Background,
        ensure_ros_tools,
        own_namespace,
        private_domain,
        ros2_env,
    )

    missing = ensure_ros_tools()
    if missing:
        pytest.skip(missing)
    installed = PREFIX / "share" / PACKAGE / "launch" / LAUNCH_XML.name
    if not installed.is_file() or installed.read_bytes() != LAUNCH_XML.read_bytes():
        pytest.fail(f"{installed} differs from the checkout: re-run pip install -e '.[ros,test]'")
    directory = tmp_path_factory.mktemp("autoware")
    params = directory / "old_generation.param.yaml"
    params.write_text(yaml.safe_dump({"/**": {"ros__parameters": OLD_GENERATION}}))
    # As Autoware includes it: inside a group with a namespace (here one of this test's own).
    namespace = own_namespace("autoware")
    wrapper = directory / "in_a_namespace.launch.xml"
    wrapper.write_text(
        f"""<launch><group><push_ros_namespace namespace="{namespace}"/>
  <include file="$(find-pkg-share {PACKAGE})/launch/{LAUNCH_XML.name}">
    <arg name="input_pointcloud" value="{namespace}/pointcloud"/>
    <arg name="output_clusters" value="{namespace}/clusters"/>
    <arg name="voxel_grid_based_euclidean_param_path" value="{params}"/>
    <arg name="use_pointcloud_container" value="true"/>
  </include>
</group></launch>
"""
    )
    with private_domain() as domain:
        env = ros2_env(domain)
        launch = Background(["ros2", "launch", str(wrapper)], env, directory / "launch.log")
        try:
            yield launch, env, f"{namespace}/euclidean_cluster"
        finally:
            launch.close()


def _get(env: dict[str, str], node: str, name: str, launch) -> str:
    from ..._ros2_tools import SPIN, retry, ros2

    done = retry(
        lambda: ros2(env, "param", "get", *SPIN, node, name),
        lambda done: "value is" in done.stdout or not launch.alive(),
    )
    assert launch.alive(), launch.output()
    return done.stdout.strip()


@pytest.mark.ros
def test_launched_with_an_old_autoware_params_file(launched_autoware):
    launch, env, node = launched_autoware
    assert _get(env, node, "d_th", launch) == "Double value is: 0.7"
    assert _get(env, node, "tolerance_m", launch) == "Double value is: 0.7"
    assert _get(env, node, "algorithm", launch) == "String value is: voxel_grid"
    assert _get(env, node, "min_cluster_size", launch) == "Integer value is: 10"
    assert _get(env, node, "min_points_per_cluster", launch) == "Integer value is: 10"
    # use_low_height_cropbox false: the crop box's z limits are not applied
    assert _get(env, node, "min_z", launch) == f"Double value is: {-math.inf}"
    output = launch.output()
    assert "use_pointcloud_container:=true is not applicable" in output, output
    assert "Autoware parameter 'input_frame' ignored" in output, output
    assert "max_cluster_size 3000 counts points here" in output, output


@pytest.mark.ros
def test_autoware_names_set_live_and_stay_one_value(launched_autoware):
    from ..._ros2_tools import SPIN, describe, retry, ros2

    launch, env, node = launched_autoware
    _get(env, node, "d_th", launch)  # up
    done = retry(
        lambda: ros2(env, "param", "set", *SPIN, node, "tolerance_m", "0.5"),
        lambda done: "Set parameter successful" in done.stdout or not launch.alive(),
    )
    assert "Set parameter successful" in done.stdout, describe(done)
    for name in ("d_th", "tolerance", "tolerance_m", "cluster_tolerance"):
        assert _get(env, node, name, launch) == "Double value is: 0.5", name
    assert re.search(r"from the next frame: d_th 0\.7 -> 0\.5", launch.output())
    refused = retry(  # the CLI may not discover the node at its first try
        lambda: ros2(env, "param", "set", *SPIN, node, "voxel_leaf_size_m", "-1.0"),
        lambda done: "Setting parameter failed" in done.stderr or not launch.alive(),
    )
    assert "Setting parameter failed" in refused.stderr, describe(refused)
    assert _get(env, node, "voxel_leaf_size", launch) == "Double value is: 0.3"


def test_autoware_ai_parameters_map_to_ours_and_its_params_file_is_valid():
    from gpu_euclidean_cluster.ros.parameters.autoware_names import (
        AUTOWARE_AI_PARAMETERS,
        autoware_ai_parameters_markdown,
    )

    assert {ours for _, ours, _ in AUTOWARE_AI_PARAMETERS if ours} <= set(SPECS)
    text = (REPO / "docs" / "autoware.md").read_text(encoding="utf-8")
    assert autoware_ai_parameters_markdown() in text, "docs/autoware.md's Autoware.ai table: stale"
    path = REPO / "config" / "autoware_ai.param.yaml"
    values = yaml.safe_load(path.read_text(encoding="utf-8"))["/**"]["ros__parameters"]
    assert set(values) <= set(SPECS)
    for name, value in values.items():
        default = SPECS[name].default
        assert isinstance(value, type(default)) or (isinstance(default, list)), name
    settings = settings_from_values({**DEFAULTS, **values})
    assert settings.ground is not None and settings.ground.iterations == 100
    assert settings.cluster.d_th == 0.75 and settings.cluster.min_cluster_size == 20
    assert settings.cluster.cluster_merge_threshold == 1.5 and settings.pose_estimation
    assert (settings.window.min_z, settings.window.max_z) == (-1.3, 0.5)
