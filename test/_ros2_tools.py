"""Helpers for tests that run the ROS 2 tools (``ros2 launch/run/param/node/topic/pkg``, colcon, the
package's own console scripts) as their own processes, against the package as installed in this
venv by ``pip install -e '.[ros,test]'``.

- :func:`ensure_installed`: pip-installs missing tools once (a file lock keeps parallel sessions
  from installing at the same time) and says why when it cannot.
- :func:`isolate_discovery` (called by ``conftest.py`` before any test): this test process's own
  discovery scope, inherited by every rclpy context it creates and every process it starts: a
  ROS domain id no other test process of this suite holds (:func:`own_domain_id`, a file lock
  held until the process ends) and ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (no participant on
  another host is discovered, whatever its domain). :func:`own_namespace` gives each node a test
  starts a namespace of its own, so that a same-named node on the same domain that the test did
  not start (a robot's live node) is never addressed: a test's parameter calls, publications and
  subscriptions all resolve inside its namespace.
- :func:`ros2_env` / :func:`user_env`: the environment of the CLI and of a process started as a
  user would start it. :func:`user_env` is the one exception to the LOCALHOST range: it is a
  user's default environment, whose Fast DDS transport choice is what its tests check (the node
  leaves Fast DDS to rmw under LOCALHOST); its processes still get the test process's domain.
- :func:`run` / :func:`retry` / :class:`Background`: bounded subprocesses, each in its own process
  group, which is always killed, with SIGINT and SIGQUIT as a terminal's foreground job has them
  (:func:`_terminal_signals`).

Imports nothing of ROS: the fixtures in ``conftest.py`` use it before anything is installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib
import importlib.util
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from pathlib import Path
from typing import IO

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "gpu_euclidean_cluster"
#: the ROS 2 tool wheels (not on PyPI); their dependencies come from PyPI
WHEELS_DIR = REPO_ROOT.parent / "shared" / "wheels"
ROS_TOOL_PACKAGES = (
    "ros2launch",
    "ros2run",
    "ros2param",
    "ros2topic",
    "ros2node",
    "ros2service",
    "ros2pkg",
    "ros2interface",
    "sensor_msgs_py",
)
ROS_TOOL_MODULES = ("launch_ros", "ros2cli", "sensor_msgs_py")
COLCON_PACKAGES = ("colcon-common-extensions", "ros-ament-package")
COLCON_MODULES = ("colcon_core", "colcon_ros", "colcon_python_setup_py", "ament_package")

#: the venv (``sys.prefix``): its bin/ holds ros2, colcon and the package's console scripts, and
#: ``pip install -e .`` put the package's ament index marker, share/ and lib/ under it
PREFIX = Path(sys.prefix)
BIN = Path(sys.executable).parent
#: what the user sets to configure Fast DDS or discovery (``gpu_euclidean_cluster.ros.transport``
#: leaves Fast DDS alone when any of the first four is set); never passed to the processes here:
#: an in-process replay test of this session may have set FASTDDS_BUILTIN_TRANSPORTS in os.environ
RMW_SETTINGS = (
    "FASTDDS_BUILTIN_TRANSPORTS",
    "FASTDDS_DEFAULT_PROFILES_FILE",
    "FASTRTPS_DEFAULT_PROFILES_FILE",
    "FASTDDS_ENVIRONMENT_FILE",
    "ROS_LOCALHOST_ONLY",
    "ROS_AUTOMATIC_DISCOVERY_RANGE",
    "ROS_STATIC_PEERS",
    "ROS_DISCOVERY_SERVER",
    "ROS_DOMAIN_ID",
    "RMW_IMPLEMENTATION",
    "AMENT_PREFIX_PATH",
)
#: pip runs at most this long
INSTALL_TIMEOUT_S = 600.0
#: a ros2 CLI call (Python start-up with the bootstrapper's re-exec, discovery) takes 1-12 s here
CLI_TIMEOUT_S = 45.0
#: how long a node may take to appear in the graph (2 cores, other tests running)
UP_TIMEOUT_S = 90.0
#: ``--no-daemon``: no background daemon outlives the tests (nor meets another session's); the
#: CLI's own short-lived node then discovers the graph for ``--spin-time`` seconds (twice: a call
#: takes about 0.6 s + 2 x spin time). Discovery here takes well under a second but is racy under
#: load, so every query is retried until a deadline (:func:`retry`) rather than spun longer.
SPIN = ("--no-daemon", "--spin-time", "1")


def _lock_path(name: str) -> Path:
    key = hashlib.sha1(str(PREFIX).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"{PACKAGE}-test-{name}-{key}.lock"


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The top-level modules of ``modules`` that this interpreter cannot import."""
    importlib.invalidate_caches()
    return [name for name in modules if importlib.util.find_spec(name) is None]


def ensure_installed(
    what: str, modules: Sequence[str], pip_args: Sequence[str], lock_timeout_s: float = 900.0
) -> str | None:
    """Install ``pip_args`` into this venv unless ``modules`` are all importable.

    A file lock per venv serialises installs of concurrent test sessions; the check is repeated
    under the lock, so only the first one installs. Returns None when the modules are importable
    (now), else the reason (for ``pytest.skip``).
    """
    if not missing_modules(modules):
        return None
    command = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    command += list(pip_args)
    with open(_lock_path("pip"), "w") as lock:
        deadline = time.monotonic() + lock_timeout_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return f"{what}: another pip install held {lock.name} for {lock_timeout_s} s"
                time.sleep(1.0)
        try:
            if not missing_modules(modules):
                return None
            try:
                done = subprocess.run(
                    command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
                )
            except subprocess.TimeoutExpired:
                return f"{what}: `{' '.join(command)}` ran over {INSTALL_TIMEOUT_S:g} s"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    still = missing_modules(modules)
    if done.returncode != 0 or still:
        errors = [line for line in done.stderr.splitlines() if "Location" not in line]
        detail = " | ".join(errors[-5:]) or f"{', '.join(still)} still not importable"
        return f"{what}: `{' '.join(command)}` failed (exit {done.returncode}): {detail}"
    return None


@functools.cache
def ensure_ros_tools() -> str | None:
    """Install the ROS 2 CLI/launch wheels and sensor_msgs_py from ../shared/wheels if missing
    (tried once per session)."""
    if not missing_modules(ROS_TOOL_MODULES):
        return None
    if not WHEELS_DIR.is_dir():
        return (
            f"the ROS 2 tools ({', '.join(missing_modules(ROS_TOOL_MODULES))}) are not installed "
            f"and {WHEELS_DIR} (their wheels) does not exist"
        )
    return ensure_installed(
        "the ROS 2 tools",
        ROS_TOOL_MODULES,
        ["--find-links", str(WHEELS_DIR), *ROS_TOOL_PACKAGES],
    )


@functools.cache
def ensure_colcon() -> str | None:
    """Install colcon and ament_package from PyPI if missing (tried once per session)."""
    return ensure_installed("colcon", COLCON_MODULES, COLCON_PACKAGES)


#: the ROS domain ids of the test suite (the benchmarks take 201..232, within Fast DDS's ports)
TEST_DOMAINS = range(101, 201)
#: discovery variables that would widen a test process's scope beyond this host and its domain
WIDENING_SETTINGS = ("ROS_STATIC_PEERS", "ROS_DISCOVERY_SERVER", "ROS_LOCALHOST_ONLY")
#: the lock files of the domains this process holds, open until it ends
_HELD_DOMAIN_LOCKS: list[IO[str]] = []


@functools.cache
def own_domain_id() -> int:
    """This test process's ROS domain id: one of :data:`TEST_DOMAINS` that no other test process
    of this suite holds, claimed with a file lock kept until the process ends."""
    candidates = list(TEST_DOMAINS)
    random.shuffle(candidates)
    for domain in candidates:
        lock = open(Path(tempfile.gettempdir()) / f"{PACKAGE}-ros-domain-{domain}.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        _HELD_DOMAIN_LOCKS.append(lock)
        return domain
    raise RuntimeError(f"every ROS domain id in {TEST_DOMAINS} is held by another test process")


def isolate_discovery(environ: MutableMapping[str, str] = os.environ) -> int:
    """Give this process (and what it starts) its own discovery scope: ``ROS_DOMAIN_ID`` =
    :func:`own_domain_id`, ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``, no static peers or
    discovery server. Returns the domain id."""
    domain = own_domain_id()
    for name in WIDENING_SETTINGS:
        environ.pop(name, None)
    environ["ROS_DOMAIN_ID"] = str(domain)
    environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return domain


@contextlib.contextmanager
def private_domain() -> Iterator[int]:
    """This test process's ROS domain id (:func:`own_domain_id`), for the test's duration."""
    yield own_domain_id()


def own_namespace(stem: str = "test") -> str:
    """A namespace no other node has: ``/<stem>_<pid>_<random>`` (see the module docstring)."""
    return f"/{stem}_{os.getpid()}_{random_suffix()}"


def _base_env(domain: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in RMW_SETTINGS}
    env["ROS_DOMAIN_ID"] = str(domain)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"  # logs of the child processes appear as they happen
    return env


def user_env(domain: int) -> dict[str, str]:
    """A user's default environment: no RMW, Fast DDS or discovery configuration; only the domain
    is ours (the exception to the LOCALHOST range: see the module docstring)."""
    return _base_env(domain)


def ros2_env(domain: int, ament_prefix: Path | None = PREFIX) -> dict[str, str]:
    """The environment of the ros2 CLI (as the README says to set it up for a pip install):
    AMENT_PREFIX_PATH at the venv, Fast DDS chosen explicitly, no transport setting (the CLI is
    a default-configured participant), the test process's domain and the LOCALHOST range."""
    env = _base_env(domain)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["RMW_IMPLEMENTATION"] = "rmw_fastrtps_cpp"
    if ament_prefix is not None:
        env["AMENT_PREFIX_PATH"] = str(ament_prefix)
    return env


def _kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """True while any process of the process group ``pgid`` exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _terminal_signals() -> None:
    """In a child before it runs: SIGINT and SIGQUIT back to their default actions, as a
    terminal's foreground job has them. A test run started as a background job of a script
    (``.ci/run &``) inherits both ignored, and passes them down: ``ros2 launch`` then never sees
    the Ctrl-C its tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def run(
    command: Sequence[str],
    env: dict[str, str],
    timeout_s: float = CLI_TIMEOUT_S,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess:
    """Run ``command`` in its own process group to completion (the group is killed on timeout
    and afterwards, so nothing it started outlives it). A timeout gives returncode -9."""
    process = subprocess.Popen(
        list(command),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_terminal_signals,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process.pid)
        stdout, stderr = process.communicate()
        stderr += f"\n[test: killed after {timeout_s:g} s]"
    finally:
        _kill_group(process.pid)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def ros2(env: dict[str, str], *args: str, timeout_s: float = CLI_TIMEOUT_S):
    """``ros2 ARGS`` from this venv."""
    return run([str(BIN / "ros2"), *args], env, timeout_s)


def describe(done: subprocess.CompletedProcess) -> str:
    """A command's result for an assertion message."""
    command = " ".join(str(a) for a in done.args)
    return f"`{command}` exit {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"


def retry(
    attempt: Callable[[], subprocess.CompletedProcess],
    ok: Callable[[subprocess.CompletedProcess], bool],
    timeout_s: float = UP_TIMEOUT_S,
    pause_s: float = 1.0,
) -> subprocess.CompletedProcess:
    """Repeat ``attempt`` until ``ok`` (discovery with ``--no-daemon`` is racy) or the deadline;
    the last result, which fails the test with its output when not ok."""
    deadline = time.monotonic() + timeout_s
    tries = 0
    while True:
        tries += 1
        done = attempt()
        if ok(done):
            return done
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not as expected after {tries} tries in {timeout_s:g} s: " + describe(done)
            )
        time.sleep(pause_s)


class Background:
    """A long-running process in its own process group (session), output to ``log``.

    :meth:`close` kills whatever of the group is left; use it in a ``finally``/fixture teardown.
    """

    def __init__(
        self,
        command: Sequence[str],
        env: dict[str, str],
        log: Path,
        cwd: Path | None = None,
    ) -> None:
        self.log = log
        # a file, not a pipe: a chatty process never blocks on it
        with open(log, "w") as output:
            self.process = subprocess.Popen(
                list(command),
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_terminal_signals,
            )
        self.pgid = self.process.pid

    def output(self) -> str:
        """Everything the process group printed so far."""
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def interrupt(self, group: bool = False, timeout_s: float = 60.0) -> int | None:
        """SIGINT to the process (``group``: to its whole group, as Ctrl-C in a terminal);
        the exit status, or None when it did not exit within ``timeout_s``."""
        if group:
            _kill_group(self.pgid, signal.SIGINT)
        else:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def wait_group_gone(self, timeout_s: float = 30.0) -> bool:
        """True once no process of the group is left (within ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while group_alive(self.pgid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self) -> None:
        """Ctrl-C to the whole group (a 30 s grace to exit cleanly), then :meth:`close`: how
        a test ends a node it started."""
        self.interrupt(group=True, timeout_s=30)
        self.close()

    def close(self) -> None:
        """Kill what is left of the group; reap the process."""
        _kill_group(self.pgid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)


def random_suffix() -> str:
    """A short random name part (node names, namespaces) to tell runs apart in logs."""
    return f"{random.randrange(16**6):06x}"
