"""What a benchmark run was measured on: machine, device, software versions, command, git commit;
and the private ROS domains its node processes run in.

The device is described by the backend itself (``Backend.describe``).
"""

from __future__ import annotations

import datetime
import os
import platform
import random
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import scipy

from .rows import RunMeta

if TYPE_CHECKING:
    from gpu_euclidean_cluster.clusterer import Backend

#: Private ROS domains, above the ids the test suite picks (101..200) and within Fast DDS's ports.
DOMAIN_IDS = (201, 232)


def run_metadata(argv: Sequence[str], backend: Backend) -> RunMeta:
    """A description of this run: date, command, git commit, CPU, device, versions.

    Args:
        argv: the command line as typed (``sys.argv``).
        backend: the backend the GPU methods (or the node) run on; it describes its device.
    """
    return RunMeta.describing(
        backend.describe(),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        command=shlex.join(argv),
        git_commit=git_commit(),
        hostname=platform.node(),
        cpu_model=cpu_model(),
        python=platform.python_version(),
        numpy=np.__version__,
        scipy=scipy.__version__,
        backend=backend.name,
    )


def git_commit() -> str | None:
    """The commit of the checkout the benchmarks run from (``-dirty`` if modified), else None."""
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def cpu_model() -> str:
    """The CPU's model name and logical core count, e.g. ``AMD EPYC 9454 (16 cores)``."""
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"{name} ({os.cpu_count()} cores)"


def python_command() -> list[str]:
    """The command line as the user typed it: ``python -m benchmarks ...`` when run as the
    package, else the script's name first."""
    if Path(sys.argv[0]).name == "__main__.py":
        return ["python", "-m", Path(sys.argv[0]).parent.name, *sys.argv[1:]]
    return [Path(sys.argv[0]).name, *sys.argv[1:]]


def private_domain_id() -> int:
    """A random ROS domain id for one benchmark run."""
    return random.randint(*DOMAIN_IDS)
