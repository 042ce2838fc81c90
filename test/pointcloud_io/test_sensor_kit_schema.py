"""``config/sensor_kit.schema.json``: the shipped sample kit is valid, broken kits are not, and the
schema names what the loader reads.

The schema is checked with ``jsonschema`` (Draft 7) where it is installed, and always with
:class:`SmallValidator` below, which implements the keywords the schema uses and refuses any
other (so a keyword it does not know cannot pass unchecked).
"""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml

from gpu_euclidean_cluster.pointcloud_io.sensor_kit import (
    SENSOR_DESCRIPTIONS,
    SensorKitError,
    autoware,
    crop_boxes,
    loading,
    parse_sensor_kit,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import AZIMUTH_TIMINGS, RETURN_MODES

from ..conftest import REPO_ROOT
from .test_sensor_kit import SAMPLE

SCHEMA = json.loads((REPO_ROOT / "config" / "sensor_kit.schema.json").read_text())
ANNOTATIONS = {"$schema", "$id", "title", "description", "default", "definitions"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v == int(v)
    ),
}


class SmallValidator:
    """The Draft 7 keywords ``config/sensor_kit.schema.json`` uses, nothing more."""

    def __init__(self, root: dict) -> None:
        self.root = root

    def errors(self, value: object, schema: dict | None = None, at: str = "$") -> list[str]:
        schema = self.root if schema is None else schema
        found: list[str] = []
        for keyword, rule in schema.items():
            method = re.sub(r"([A-Z])", r"_\1", keyword.lstrip("$")).lower()
            check = getattr(self, f"k_{method}", None)
            if check is None and keyword not in ANNOTATIONS:
                raise AssertionError(f"SmallValidator does not know {keyword!r}")
            if check is not None:
                found += check(value, rule, at, schema)
        return found

    def k_ref(self, value, rule, at, _):
        target = self.root
        for part in rule.removeprefix("#/").split("/"):
            target = target[part]
        return self.errors(value, target, at)

    def k_type(self, value, rule, at, _):
        names = rule if isinstance(rule, list) else [rule]
        return [] if any(TYPES[n](value) for n in names) else [f"{at}: not {rule}"]

    def k_const(self, value, rule, at, _):
        return [] if value == rule and type(value) is type(rule) else [f"{at}: not {rule!r}"]

    def k_enum(self, value, rule, at, _):
        return [] if value in rule else [f"{at}: {value!r} not in {rule}"]

    def k_required(self, value, rule, at, _):
        return [f"{at}: {k} missing" for k in rule if isinstance(value, dict) and k not in value]

    def k_properties(self, value, rule, at, _):
        if not isinstance(value, dict):
            return []
        return [
            e for k, s in rule.items() if k in value for e in self.errors(value[k], s, f"{at}.{k}")
        ]

    def k_additional_properties(self, value, rule, at, schema):
        if not isinstance(value, dict):
            return []
        extra = [k for k in value if k not in schema.get("properties", {})]
        if rule is False:
            return [f"{at}: unexpected {k}" for k in extra]
        return [e for k in extra for e in self.errors(value[k], rule, f"{at}.{k}")]

    def k_property_names(self, value, rule, at, _):
        keys = value if isinstance(value, dict) else {}
        return [e for k in keys for e in self.errors(k, rule, f"{at}[{k!r}]")]

    def k_min_properties(self, value, rule, at, _):
        return [f"{at}: under {rule} keys"] if isinstance(value, dict) and len(value) < rule else []

    def k_max_properties(self, value, rule, at, _):
        return [f"{at}: over {rule} keys"] if isinstance(value, dict) and len(value) > rule else []

    def k_items(self, value, rule, at, _):
        items = value if isinstance(value, list) else []
        return [e for i, item in enumerate(items) for e in self.errors(item, rule, f"{at}[{i}]")]

    def k_min_items(self, value, rule, at, _):
        return (
            [f"{at}: under {rule} items"] if isinstance(value, list) and len(value) < rule else []
        )

    def k_max_items(self, value, rule, at, _):
        return [f"{at}: over {rule} items"] if isinstance(value, list) and len(value) > rule else []

    def k_min_length(self, value, rule, at, _):
        return (
            [f"{at}: shorter than {rule}"] if isinstance(value, str) and len(value) < rule else []
        )

    def k_pattern(self, value, rule, at, _):
        bad = isinstance(value, str) and not re.search(rule, value)
        return [f"{at}: {value!r} does not match {rule}"] if bad else []

    def k_minimum(self, value, rule, at, _):
        bad = TYPES["number"](value) and value < rule
        return [f"{at}: below {rule}"] if bad else []

    def k_maximum(self, value, rule, at, _):
        bad = TYPES["number"](value) and value > rule
        return [f"{at}: above {rule}"] if bad else []

    def k_dependencies(self, value, rule, at, _):
        keys = value if isinstance(value, dict) else {}
        return [f"{at}: {k} needs {n}" for k in keys if k in rule for n in rule[k] if n not in keys]

    def k_any_of(self, value, rule, at, _):
        matches = sum(not self.errors(value, s, at) for s in rule)
        return [] if matches else [f"{at}: matches none of anyOf"]

    def k_one_of(self, value, rule, at, _):
        matches = sum(not self.errors(value, s, at) for s in rule)
        return [] if matches == 1 else [f"{at}: matches {matches} of oneOf, not 1"]


def jsonschema_errors(document: object) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")
    validator = jsonschema.Draft7Validator(SCHEMA)
    return [error.message for error in validator.iter_errors(document)]


VALIDATORS = {"small": lambda d: SmallValidator(SCHEMA).errors(d), "jsonschema": jsonschema_errors}


def sample() -> dict:
    return yaml.safe_load(SAMPLE.read_text())


def kit_pose(document: dict) -> dict:
    return document["poses"]["inline"]["base_link"]["sensor_kit_base_link"]


#: Kits the schema and the loader both refuse.
BROKEN = {
    "version": lambda d: d.update(version=2),
    "unknown key": lambda d: d.update(colour="red"),
    "no input": lambda d: d["sensors"][0].pop("input"),
    "two inputs": lambda d: d["sensors"][0]["input"].update(points={"topic": "/points"}),
    "min without max": lambda d: d["crop_boxes"]["self"].update(min=[0, 0, 0]),
    "two bounds": lambda d: d["crop_boxes"]["self"].update(mirror_file="m.yaml"),
    "rpy and quaternion": lambda d: kit_pose(d).update(qw=1),
    "part of a quaternion": lambda d: d["poses"]["inline"]["base_link"].update(a={"qw": 1.0}),
    "description": lambda d: d["sensors"][0].update(description="VLP-64"),
    "return mode": lambda d: d["sensors"][0]["input"]["packets"].update(return_mode="Strongest"),
    "fractional angle": lambda d: d["sensors"][1]["input"]["packets"].update(cloud_min_angle=300.5),
    "sensor name": lambda d: d["sensors"][1].update(name="left-side"),
    "frame": lambda d: d["sensors"][1].update(frame="/velodyne_left"),
    "two pose sources": lambda d: d["poses"].update(tf_static={"bag": "b"}),
    "negative missing": lambda d: d["crop_boxes"]["mirror"].pop("negative"),
}


@pytest.mark.parametrize("validator", VALIDATORS)
def test_sample_kit_is_valid(validator):
    assert VALIDATORS[validator](sample()) == []


@pytest.mark.parametrize("validator", VALIDATORS)
@pytest.mark.parametrize("case", BROKEN)
def test_broken_kits_are_invalid_for_the_schema_and_the_loader(validator, case):
    document = sample()
    BROKEN[case](document)
    assert VALIDATORS[validator](document) != []
    with pytest.raises(SensorKitError):
        parse_sensor_kit(document, REPO_ROOT / "config")


def test_the_schema_names_what_the_loader_reads():
    definitions = SCHEMA["definitions"]
    assert set(SCHEMA["properties"]) == set(loading.TOP_KEYS)
    assert set(definitions["sensor"]["properties"]) == set(loading.SENSOR_KEYS)
    assert definitions["sensor"]["properties"]["description"]["enum"] == list(SENSOR_DESCRIPTIONS)
    packets = definitions["packets"]["properties"]
    assert set(packets) == {"topic", "calibration", *loading.DECODER_KEYS}
    assert packets["return_mode"]["enum"] == list(RETURN_MODES)
    assert packets["azimuth_timing"]["enum"] == list(AZIMUTH_TIMINGS)
    assert set(definitions["crop_box"]["properties"]) == set(crop_boxes.BOX_KEYS)
    info = definitions["vehicle_info"]
    assert info["required"] == list(autoware.VEHICLE_INFO_KEYS)
    assert set(info["properties"]) == {
        *autoware.VEHICLE_INFO_KEYS,
        *autoware.VEHICLE_INFO_OTHER_KEYS,
    }
    assert definitions["mirror"]["required"] == list(autoware.MIRROR_KEYS)
    assert SCHEMA["properties"]["sensors"]["maxItems"] == loading.MAX_SENSORS
    assert definitions["sensor"]["properties"]["crop_boxes"]["maxItems"] == loading.MAX_CROP_BOXES
    assert SCHEMA["properties"]["version"]["const"] == loading.FORMAT_VERSION


def test_the_small_validator_refuses_keywords_it_does_not_know():
    with pytest.raises(AssertionError, match="does not know 'multipleOf'"):
        SmallValidator({"multipleOf": 2}).errors(4)
