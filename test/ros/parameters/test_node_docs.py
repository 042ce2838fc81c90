"""The parameter table of docs/parameters.md and the YAML parameter files agree with the node's
parameters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_euclidean_cluster.ros.parameters.settings import settings_from_values
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS, parameters_markdown

yaml = pytest.importorskip("yaml", reason="PyYAML (a dependency of rclpy) is not installed")

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "config"
DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}
TYPES = {"bool": bool, "int": int, "double": float, "string": str}


def _parameters_section() -> str:
    text = (REPO / "docs" / "parameters.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- section:parameters -->(.*?)<!-- /section:parameters -->", text, re.S)
    assert match, "docs/parameters.md has no parameters section"
    return match.group(1)


def _parameters(path: Path) -> dict[str, object]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert list(document) == ["/**"], f"{path.name}: expected the '/**' wildcard node key"
    return document["/**"]["ros__parameters"]


def test_docs_table_is_generated_from_the_specs():
    section = _parameters_section()
    assert parameters_markdown() in section, (
        "docs/parameters.md's table is stale: paste gpu_euclidean_cluster.ros.parameters.specs."
        "parameters_markdown() into its parameters section"
    )
    table = section[section.index(parameters_markdown()) :].split("\n\n")[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.M))
    assert documented == set(DEFAULTS)


def test_main_yaml_lists_every_parameter_with_its_default_and_a_comment():
    path = CONFIG / "gpu_euclidean_cluster.param.yaml"
    values = _parameters(path)
    assert list(values) == [spec.name for spec in PARAMETERS]
    for name, value in values.items():
        default = DEFAULTS[name]
        assert type(value) is type(default) and value == default, name
    lines = path.read_text(encoding="utf-8").splitlines()
    for index, line in enumerate(lines):
        key = re.match(r"\s+(\w+):", line)
        if key and key.group(1) in values:
            above = lines[index - 1].strip()
            assert above.startswith("#") or re.match(r"\w+:", above), f"{key.group(1)} uncommented"


@pytest.mark.parametrize("preset", ["vlp16", "hdl32e", "hdl64e"])
def test_presets_are_valid_subsets(preset):
    values = _parameters(CONFIG / f"{preset}.param.yaml")
    assert set(values) <= set(DEFAULTS)
    for name, value in values.items():
        assert isinstance(value, TYPES[next(s.type_name for s in PARAMETERS if s.name == name)])
    settings = settings_from_values({**DEFAULTS, **values})
    assert settings.cluster.d_th == values["d_th"]
