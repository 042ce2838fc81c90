"""``ros2 pkg/launch/run/param`` for real, as their own processes, against the package as the
README installs it (``pip install -e '.[ros,test]'`` into the venv); ``ros2 launch`` of a
non-editable ``pip install .`` and of a ``colcon build``; and ``ros2 pkg`` / ``ros2 launch`` in a
fresh venv right after the install (plain and ``-e``), with no ``AMENT_PREFIX_PATH`` set
(the ``.pth`` file of ``setup.py`` and ``_gpu_euclidean_cluster_ament.py``).

The ROS 2 tools come from ``../shared/wheels`` (fixture ``ros_tools``: installed when missing,
skipped with the reason without that folder); colcon from PyPI (fixture ``colcon``). Every CLI
query runs with ``--no-daemon`` (no background daemon outlives the tests) and is retried until a
deadline (discovery is racy); every process runs in its own process group, which is killed at the
end.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("rclpy")

import _gpu_euclidean_cluster_ament as ament_hook
from gpu_euclidean_cluster.ros import ament_prefix

from ..._ros2_tools import (
    BIN,
    PACKAGE,
    PREFIX,
    REPO_ROOT,
    SPIN,
    WHEELS_DIR,
    Background,
    describe,
    private_domain,
    random_suffix,
    retry,
    ros2,
    ros2_env,
    run,
    user_env,
)

pytestmark = pytest.mark.ros

NODE = "euclidean_cluster_node"
LAUNCH_FILE = "gpu_euclidean_cluster.launch.py"
#: where the launched node lives (launch arguments namespace:= and input_topic:=)
NAMESPACE = f"gec_launch_{random_suffix()}"
LAUNCHED = f"/{NAMESPACE}/{NODE}"
INPUT_TOPIC = f"/{NAMESPACE}_input/points"
#: the preset passed as params_file:= (its values differ from the node's defaults)
PRESET = "hdl64e.param.yaml"
CONFIGS = sorted((REPO_ROOT / "config").glob("*.yaml"))
#: colcon build of the package (a copy of the repository) in a fresh workspace, then launch
COLCON_BUILD_TIMEOUT_S = 240.0
#: pip install . (builds a wheel, in an isolated build environment from PyPI)
PIP_INSTALL_TIMEOUT_S = 300.0
#: a fresh venv: python -m venv, then pip install of the package, rclpy and the tools it needs
FRESH_VENV_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def domain() -> Iterator[int]:
    with private_domain() as domain_id:
        yield domain_id


@pytest.fixture(scope="module")
def env(ros_tools: None, domain: int) -> dict[str, str]:
    """The ros2 CLI's environment: AMENT_PREFIX_PATH at the venv, the private domain."""
    return ros2_env(domain)


def _param(env: dict[str, str], verb: str, node: str, *args: str):
    """``ros2 param VERB NODE ARGS``, repeated until the node answered (found and replied)."""

    def answered(done) -> bool:
        if verb == "set":
            return "Set parameter successful" in done.stdout or "Setting parameter" in done.stderr
        return done.returncode == 0 and bool(done.stdout.strip())

    return retry(lambda: ros2(env, "param", verb, *SPIN, node, *args), answered)


def _wait_param(process: Background, env: dict[str, str], node: str, name: str, text: str):
    """Wait until ``ros2 param get NODE NAME`` prints ``text`` (the node is up); fail with the
    process's output when it exits first."""
    done = retry(
        lambda: ros2(env, "param", "get", *SPIN, node, name),
        lambda done: text in done.stdout or not process.alive(),
    )
    assert process.alive(), f"exited with {process.process.returncode}:\n{process.output()}"
    return done


def test_pkg_executables_lists_both_console_scripts(env):
    done = ros2(env, "pkg", "executables", PACKAGE)
    assert done.returncode == 0, describe(done)
    assert set(done.stdout.split("\n")) - {""} == {
        f"{PACKAGE} euclidean_cluster_node",
        f"{PACKAGE} replay",
    }
    prefix = ros2(env, "pkg", "prefix", PACKAGE)
    assert prefix.returncode == 0, describe(prefix)
    assert Path(prefix.stdout.strip()).resolve() == PREFIX.resolve()
    for name in ("euclidean_cluster_node", "replay"):
        assert os.access(PREFIX / "lib" / PACKAGE / name, os.X_OK), name


def test_installed_data_files_match_the_checkout():
    """The ros2 tests use the copies that ``pip install -e`` put under the venv (data files of an
    editable install are copies): they must be the checkout's."""
    expected = {
        f"share/{PACKAGE}/package.xml": "package.xml",
        f"share/{PACKAGE}/launch/{LAUNCH_FILE}": f"launch/{LAUNCH_FILE}",
        f"share/{PACKAGE}/launch/multi_lidar.launch.py": "launch/multi_lidar.launch.py",
        f"share/ament_index/resource_index/packages/{PACKAGE}": f"resource/{PACKAGE}",
        **{f"share/{PACKAGE}/config/{p.name}": f"config/{p.name}" for p in CONFIGS},
        **{
            f"lib/{PACKAGE}/{name}": f"libexec/{name}"
            for name in ("euclidean_cluster_node", "replay")
        },
    }
    stale = [
        installed
        for installed, source in expected.items()
        if not (PREFIX / installed).is_file()
        or (PREFIX / installed).read_bytes() != (REPO_ROOT / source).read_bytes()
    ]
    assert not stale, f"{stale} differ from the checkout: re-run pip install -e '.[ros,test]'"


@pytest.fixture(scope="module")
def launched(env, tmp_path_factory):
    """``ros2 launch gpu_euclidean_cluster gpu_euclidean_cluster.launch.py`` with every argument
    but use_sim_time, running until the last test of this group stops it."""
    params_file = PREFIX / "share" / PACKAGE / "config" / PRESET
    assert params_file.is_file(), f"{params_file}: not installed by pip install -e"
    command = [
        str(BIN / "ros2"),
        "launch",
        PACKAGE,
        LAUNCH_FILE,
        f"namespace:={NAMESPACE}",
        f"input_topic:={INPUT_TOPIC}",
        "log_level:=debug",
        f"params_file:={params_file}",
    ]
    launch = Background(command, env, tmp_path_factory.mktemp("launch") / "launch.log")
    try:
        # up once its parameter service answers with the preset's value (the default is 1)
        _wait_param(launch, env, LAUNCHED, "min_cluster_size", "Integer value is: 10")
        yield launch
    finally:
        launch.close()


def test_launch_starts_the_node_with_its_arguments(launched, env):
    nodes = retry(
        lambda: ros2(env, "node", "list", *SPIN), lambda done: LAUNCHED in done.stdout.split()
    )
    assert f"/{NODE}" not in nodes.stdout.split()  # namespace:= applied
    topics = retry(
        lambda: ros2(env, "topic", "list", *SPIN),
        lambda done: (
            {INPUT_TOPIC, f"/{NAMESPACE}/output/labeled_points"} <= set(done.stdout.split())
        ),
    )
    assert "/points_raw" not in topics.stdout.split()  # input_topic:= applied
    # params_file:= applied (the preset's values), the others keep the defaults
    assert "Double value is: 120.0" in _param(env, "get", LAUNCHED, "max_range").stdout
    assert "Double value is: 0.5" in _param(env, "get", LAUNCHED, "d_th").stdout
    output = launched.output()
    assert "[DEBUG]" in output, output  # log_level:=debug
    assert "clustering on" in output and "transport: Fast DDS" in output, output


def test_param_set_get_describe_against_the_launched_node(launched, env):
    done = _param(env, "set", LAUNCHED, "d_th", "0.7")
    assert "Set parameter successful" in done.stdout, describe(done)
    assert "Double value is: 0.7" in _param(env, "get", LAUNCHED, "d_th").stdout
    refusals = {
        ("method", "bogus"): "unknown method 'bogus'",
        ("d_th", "-1.0"): "Parameter d_th out of range",
        ("backend", "cpu"): "Trying to set a read-only parameter: backend",
    }
    for (name, value), reason in refusals.items():
        done = _param(env, "set", LAUNCHED, name, value)
        assert f"Setting parameter failed: {reason}" in done.stderr, describe(done)
    assert "String value is: auto" in _param(env, "get", LAUNCHED, "method").stdout
    assert "Double value is: 0.7" in _param(env, "get", LAUNCHED, "d_th").stdout
    described = _param(env, "describe", LAUNCHED, "d_th", "backend").stdout
    assert "Parameter name: d_th\n  Type: double\n  Description: Distance threshold" in described
    assert "Min value: 0.0" in described
    assert "Parameter name: backend\n  Type: string" in described
    assert "Read only: true" in described
    assert "Additional constraints: one of: auto, cuda, cpu" in described
    assert "from the next frame: d_th 0.5 -> 0.7" in launched.output()  # only what changed


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_launched_node_clusters_what_arrives_on_input_topic(launched, domain):
    """A cloud published on input_topic:= gets its labelled cloud in namespace:= (in-process
    peer, as the in-thread LaunchService test did)."""
    import rclpy

    from ..._node_helpers import Peer

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    peer = Peer(context, namespace=f"/{NAMESPACE}", input_topic=INPUT_TOPIC)
    try:
        peer.wait_connected()  # a probe cloud in, its labelled cloud out
    finally:
        peer.close()
        rclpy.shutdown(context=context)


def test_launch_stops_cleanly_on_sigint(launched):
    assert launched.interrupt() == 0, launched.output()
    output = launched.output()
    assert re.search(rf"\[{NODE}-1\]: process has finished cleanly", output), output
    assert launched.wait_group_gone(), "processes of the launch outlived it"


def test_ros2_run_starts_the_node(env, tmp_path):
    command = [str(BIN / "ros2"), "run", PACKAGE, NODE, "--ros-args", "-p", "backend:=cpu"]
    node = Background(command, env, tmp_path / "run.log")
    try:
        _wait_param(node, env, f"/{NODE}", "backend", "String value is: cpu")
        # Ctrl-C in a terminal: SIGINT to the whole process group (ros2 run and the node)
        assert node.interrupt(group=True) == 0, node.output()
        assert "clustering on cpu" in node.output()
        assert node.wait_group_gone()
    finally:
        node.close()


def test_ros2_run_replay(env, tmp_path):
    done = ros2(env, "run", PACKAGE, "replay", "--help")
    assert done.returncode == 0, describe(done)
    assert done.stdout.startswith("usage: replay")
    assert "--remap OLD:=NEW" in done.stdout and "--qos-reliability" in done.stdout
    bag = tmp_path / "one.bag"
    made = run(
        [
            str(BIN / "gpu-euclidean-cluster"),
            "make-bag",
            str(bag),
            "--simulate",
            "--frames",
            "1",
            "--sensor",
            "vlp16",
        ],
        env,
        timeout_s=120,
    )
    assert made.returncode == 0, describe(made)
    done = ros2(
        env,
        "run",
        PACKAGE,
        "replay",
        str(bag),
        "-q",
        "--remap",
        f"/points_raw:=/replay_{random_suffix()}",
        timeout_s=120,
    )
    assert done.returncode == 0, describe(done)
    assert "replay done: 1 frames" in done.stderr, describe(done)
    assert "deprecated" not in done.stderr, describe(done)


def _copy_repository(destination: Path) -> None:
    """The package sources as a clone has them (no venv, build outputs or caches)."""
    shutil.copytree(
        REPO_ROOT,
        destination,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            ".device",
            "build",
            "install",
            "log",
            "__pycache__",
            "*.egg-info",
            ".pytest_cache",
            ".ruff_cache",
            "demo_output",
            "shared",
        ),
    )


def _launch_installed_copy(
    prefix: Path, setup: str, env: dict[str, str], domain: int, tmp_path: Path, cwd: Path
) -> None:
    """In a shell set up by ``setup`` (may be empty), check that the copy of the package installed
    under ``prefix`` is what ``ros2 pkg`` / Python / ``ros2 launch`` find, that the launched node
    runs ``prefix``'s console script (through the wrapper in ``prefix/lib/<package>/``), and that
    SIGINT stops it all cleanly."""
    namespace = f"installed_{random_suffix()}"
    script = (
        f"{setup}echo AMENT_PREFIX_PATH=$AMENT_PREFIX_PATH"
        f" && ros2 pkg executables {PACKAGE}"
        f" && python -c 'import {PACKAGE}; print(\"module:\", {PACKAGE}.__file__)'"
        f" && exec ros2 launch {PACKAGE} {LAUNCH_FILE} namespace:={namespace}"
    )
    launch = Background(["bash", "-c", script], env, tmp_path / "launch.log", cwd=cwd)
    try:
        _wait_param(launch, ros2_env(domain), f"/{namespace}/{NODE}", "d_th", "Double value is")
        output = launch.output()
        # the prefix alone; colcon's setup.bash may leave a trailing ':' (its helper script, run
        # by this venv's Python, sees the variable that the package's .pth file set in there)
        shown = re.search(r"^AMENT_PREFIX_PATH=(.*)$", output, re.MULTILINE)
        assert shown and shown[1].split(os.pathsep) in ([str(prefix)], [str(prefix), ""]), output
        assert f"{PACKAGE} euclidean_cluster_node\n{PACKAGE} replay\n" in output, output
        assert f"module: {prefix}/lib/" in output, output  # this copy, not the venv's
        pid = int(re.search(rf"\[{NODE}-1\]: process started with pid \[(\d+)\]", output)[1])
        node_command = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        resolved = [os.path.realpath(arg) for arg in node_command if arg.startswith("/")]
        assert str((prefix / "bin" / NODE).resolve()) in resolved, node_command
        assert launch.interrupt() == 0, launch.output()
        assert re.search(rf"\[{NODE}-1\]: process has finished cleanly", launch.output())
        assert launch.wait_group_gone()
    finally:
        launch.close()


@pytest.mark.slow
def test_pip_install_non_editable_then_ros2_launch(env, domain, tmp_path):
    """``pip install .`` (not editable) into a prefix laid out like a venv; the venv provides the
    dependencies and the ros2 tools."""
    source, prefix = tmp_path / "src", tmp_path / "prefix"
    _copy_repository(source)  # pip writes build/ and *.egg-info into the source tree
    # --ignore-installed: without it pip uninstalls the venv's (editable) install of the package
    # before it installs into the prefix
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed"]
    command += ["--prefix", str(prefix)]
    installed = run([*command, str(source)], env, timeout_s=PIP_INSTALL_TIMEOUT_S)
    assert installed.returncode == 0, describe(installed)
    assert (PREFIX / "lib" / PACKAGE / "replay").is_file(), "the venv's install was removed"
    for name in ("euclidean_cluster_node", "replay"):
        assert os.access(prefix / "lib" / PACKAGE / name, os.X_OK), name
    site = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    shell_env = {**ros2_env(domain, ament_prefix=prefix), "PYTHONPATH": str(site)}
    _launch_installed_copy(prefix, "", shell_env, domain, tmp_path, tmp_path)


@pytest.mark.slow
def test_colcon_build_then_ros2_launch(colcon, domain, tmp_path):
    workspace = tmp_path / "ws"
    _copy_repository(workspace / "src" / PACKAGE)
    # a shell of the venv, not yet pointed at any ament prefix: setup.bash does that
    build_env = ros2_env(domain, ament_prefix=None)
    built = run(
        [str(colcon), "build", "--packages-select", PACKAGE],
        build_env,
        timeout_s=COLCON_BUILD_TIMEOUT_S,
        cwd=workspace,
    )
    log = workspace / "log" / "latest_build" / PACKAGE / "stdout_stderr.log"
    assert built.returncode == 0, describe(built) + (log.read_text() if log.is_file() else "")
    install = workspace / "install" / PACKAGE
    for name in ("euclidean_cluster_node", "replay"):
        assert os.access(install / "lib" / PACKAGE / name, os.X_OK), name
    setup = "source install/setup.bash && "
    _launch_installed_copy(install, setup, build_env, domain, tmp_path, workspace)


def test_ament_hook_appends_a_prefix_that_holds_the_package(tmp_path, monkeypatch):
    """What the ``.pth`` file runs at interpreter start: the prefix goes last on the variable
    (set when unset), only when it holds the package's marker and is not listed yet."""
    venv, bare = tmp_path / "venv", tmp_path / "bare"
    (venv / ament_prefix.MARKER).parent.mkdir(parents=True)
    (venv / ament_prefix.MARKER).touch()
    assert str(ament_prefix.MARKER) == ament_hook.MARKER
    assert ament_hook.with_prefix("", str(venv)) == str(venv)
    assert ament_hook.with_prefix("/opt/ros/kilted", str(venv)) == f"/opt/ros/kilted:{venv}"
    for listed in (f"/opt/ros/kilted:{venv}", f"{venv}/", f"{venv}:/opt/ros/kilted"):
        assert ament_hook.with_prefix(listed, str(venv)) == listed
    assert ament_hook.with_prefix("/opt/ros/kilted", str(bare)) == "/opt/ros/kilted"
    assert ament_hook.with_prefix("", str(bare)) == ""

    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.delenv(ament_hook.VARIABLE, raising=False)
    ament_hook.add_this_prefix()
    assert os.environ[ament_hook.VARIABLE] == str(venv)
    assert ament_prefix.package_share() == venv / "share" / PACKAGE
    monkeypatch.setenv(ament_hook.VARIABLE, "/opt/ros/kilted")
    monkeypatch.setattr(sys, "prefix", str(bare))
    ament_hook.add_this_prefix()
    assert os.environ[ament_hook.VARIABLE] == "/opt/ros/kilted"
    monkeypatch.setattr(sys, "prefix", None)  # whatever goes wrong, the interpreter starts
    ament_hook.add_this_prefix()
    assert os.environ[ament_hook.VARIABLE] == "/opt/ros/kilted"


def test_package_share_finds_any_registered_package(tmp_path):
    other = tmp_path / "other"
    (other / ament_prefix.PACKAGE_INDEX).mkdir(parents=True)
    (other / ament_prefix.PACKAGE_INDEX / "nebula_decoders").touch()
    environ = {ament_prefix.VARIABLE: f"{tmp_path / 'bare'}{os.pathsep}{other}"}
    share = ament_prefix.package_share(environ, "nebula_decoders")
    assert share == other / "share" / "nebula_decoders"
    assert ament_prefix.package_share(environ) is None  # this package is not there


@pytest.fixture(scope="module", params=["editable", "plain"])
def fresh_venv(request, tmp_path_factory, domain) -> Path:
    """A new venv with the package installed as the README says (``-e`` or plain, from a copy of
    the repository) and ``ros2 pkg`` / ``ros2 launch`` from ``../shared/wheels``."""
    if not WHEELS_DIR.is_dir():
        pytest.skip(f"{WHEELS_DIR} (the ROS 2 tool wheels) does not exist")
    root = tmp_path_factory.mktemp(f"fresh_{request.param}")
    source, venv = root / "src", root / ".venv"
    _copy_repository(source)
    env = user_env(domain)
    made = run([sys.executable, "-m", "venv", str(venv)], env, timeout_s=FRESH_VENV_TIMEOUT_S)
    assert made.returncode == 0, describe(made)
    package = ["-e", f"{source}[ros]"] if request.param == "editable" else [f"{source}[ros]"]
    command = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    command += ["--find-links", str(WHEELS_DIR), *package, "ros2pkg", "ros2launch"]
    installed = run(command, env, timeout_s=FRESH_VENV_TIMEOUT_S)
    assert installed.returncode == 0, describe(installed)
    return venv


def _fresh_env(venv: Path, domain: int, ament_prefix_path: str | None) -> dict[str, str]:
    """A user's shell with ``venv`` activated (its bin/ first on PATH), AMENT_PREFIX_PATH as
    given (None: unset). Without the ROS wheels' bootstrap mark of this test process, so that
    the venv's own bootstrap runs."""
    env = user_env(domain)
    env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env["PATH"]])
    if ament_prefix_path is not None:
        env[ament_prefix.VARIABLE] = ament_prefix_path
    return env


@pytest.mark.slow
def test_ros2_finds_the_package_right_after_the_install(fresh_venv, domain):
    """No AMENT_PREFIX_PATH to export: ``ros2 pkg prefix`` and ``ros2 launch`` of the fresh venv
    find the package under its prefix; a set variable keeps its prefixes first."""
    ros2_bin = str(fresh_venv / "bin" / "ros2")
    site = next(fresh_venv.glob("lib/python*/site-packages"))
    assert (site / f"{PACKAGE}_ament.pth").is_file(), sorted(p.name for p in site.iterdir())

    prefix = run([ros2_bin, "pkg", "prefix", PACKAGE], _fresh_env(fresh_venv, domain, None))
    assert prefix.returncode == 0, describe(prefix)
    assert Path(prefix.stdout.strip()).resolve() == fresh_venv.resolve()

    other = "/some/other"
    env = _fresh_env(fresh_venv, domain, other)
    python = str(fresh_venv / "bin" / "python")
    seen = run([python, "-c", f"import os; print(os.environ['{ament_prefix.VARIABLE}'])"], env)
    assert seen.returncode == 0, describe(seen)
    assert seen.stdout.strip().split(os.pathsep) == [other, str(fresh_venv)], describe(seen)
    prefix = run([ros2_bin, "pkg", "prefix", PACKAGE], env)
    assert Path(prefix.stdout.strip()).resolve() == fresh_venv.resolve(), describe(prefix)

    arguments = run(
        [ros2_bin, "launch", "--show-args", PACKAGE, LAUNCH_FILE],
        _fresh_env(fresh_venv, domain, None),
    )
    assert arguments.returncode == 0, describe(arguments)
    assert f"{fresh_venv}/share/{PACKAGE}/config/" in arguments.stdout, describe(arguments)
