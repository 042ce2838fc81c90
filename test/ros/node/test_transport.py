"""Fast DDS transport default: set only when the user configured nothing."""

from __future__ import annotations

import pytest

from gpu_euclidean_cluster.ros.transport import ENV, LARGE_CLOUD_TRANSPORTS, configure_transport

FASTDDS = "rmw_fastrtps_cpp"


def test_sets_the_default_when_nothing_is_configured(tmp_path):
    environ: dict[str, str] = {}
    line = configure_transport(environ, FASTDDS, tmp_path)
    assert environ == {ENV: LARGE_CLOUD_TRANSPORTS}
    assert LARGE_CLOUD_TRANSPORTS in line


@pytest.mark.parametrize(
    "name",
    [
        ENV,
        "FASTDDS_DEFAULT_PROFILES_FILE",
        "FASTRTPS_DEFAULT_PROFILES_FILE",
        "FASTDDS_ENVIRONMENT_FILE",
    ],
)
def test_user_configuration_is_kept(tmp_path, name):
    environ = {name: "users-value"}
    line = configure_transport(environ, FASTDDS, tmp_path)
    assert environ == {name: "users-value"}
    assert f"{name}=users-value (as set)" in line


def test_default_profile_file_in_working_directory_is_kept(tmp_path):
    (tmp_path / "DEFAULT_FASTDDS_PROFILES.xml").write_text("<dds/>")
    environ: dict[str, str] = {}
    assert "DEFAULT_FASTDDS_PROFILES.xml" in configure_transport(environ, FASTDDS, tmp_path)
    assert environ == {}
    environ = {"SKIP_DEFAULT_XML": "1"}
    configure_transport(environ, FASTDDS, tmp_path)
    assert environ[ENV] == LARGE_CLOUD_TRANSPORTS


def test_other_rmw_untouched(tmp_path):
    environ: dict[str, str] = {}
    assert "rmw_cyclonedds_cpp" in configure_transport(environ, "rmw_cyclonedds_cpp", tmp_path)
    assert environ == {}


@pytest.mark.parametrize(
    "setting",
    [
        {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"},
        {"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"},
        {"ROS_LOCALHOST_ONLY": "1"},
    ],
)
def test_localhost_discovery_is_reported_not_changed(tmp_path, setting):
    environ = dict(setting)
    assert "may be lost" in configure_transport(environ, FASTDDS, tmp_path)
    assert ENV not in environ


def test_inherited_default_is_reported_as_such(tmp_path):
    environ = {ENV: LARGE_CLOUD_TRANSPORTS}
    assert "(inherited)" in configure_transport(environ, FASTDDS, tmp_path)


def test_rmw_is_asked_from_rclpy_when_not_given(tmp_path, monkeypatch):
    pytest.importorskip("rclpy")
    monkeypatch.delenv(ENV, raising=False)
    environ: dict[str, str] = {}
    configure_transport(environ, cwd=tmp_path)
    assert environ == {ENV: LARGE_CLOUD_TRANSPORTS}  # rmw_fastrtps_cpp is the wheels' default
