"""The perception message packages (``velodyne_msgs``, ``vision_msgs``, Autoware's), built once
into the test venv by ``../shared/msgs/build.sh`` (colcon and PyPI's rosidl generators, about
2 minutes the first time, at once afterwards), and the environment their ``setup.bash`` gives a
process that uses them. A file lock beside the install (:data:`BUILD_LOCK`) serialises the runs of
build.sh of concurrent test sessions (and ``pytest -n`` workers) into the same venv: the second
waits, then finds the packages built and returns at once."""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "shared" / "msgs" / "build.sh"
INSTALL = Path(sys.prefix) / "opt" / "msgs"
BUILD_TIMEOUT_S = 900
#: held (``fcntl.flock``) while build.sh runs
BUILD_LOCK = INSTALL.parent / ".msgs-build.lock"


@functools.cache
def perception_msgs_env() -> tuple[dict[str, str] | None, str]:
    """``(environment, "")`` with the packages importable, or ``(None, reason)``."""
    if not BUILD_SCRIPT.is_file():
        return None, f"{BUILD_SCRIPT} is absent: the perception message packages cannot be built"
    env = {**os.environ, "PYTHON": sys.executable}
    BUILD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = subprocess.run(
            ["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True,
            timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        return None, f"{BUILD_SCRIPT} failed: {done.stderr.strip().splitlines()[-1:]}"
    sourced = subprocess.run(
        ["bash", "-c", f"source {INSTALL / 'setup.bash'} >/dev/null && env -0"],
        env=os.environ.copy(), capture_output=True, timeout=60, check=True,
    )  # fmt: skip
    pairs = (item.split("=", 1) for item in sourced.stdout.decode().split("\0") if "=" in item)
    return dict(pairs), ""
