"""What a benchmark run was measured on: machine, GPU, software versions, command, git commit."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy


def run_metadata(argv: Sequence[str], backend: str) -> dict[str, Any]:
    """A JSON-ready description of this run: date, command, git commit, CPU, GPU, versions.

    Args:
        argv: the command line as typed (``sys.argv``).
        backend: the backend the GPU methods run on (``cuda`` or ``cpu``).
    """
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(argv),
        "git_commit": git_commit(),
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "backend": backend,
    }
    meta.update(gpu_metadata() if backend == "cuda" else _no_gpu())
    return meta


def git_commit() -> str | None:
    """The commit of the checkout this package runs from (``-dirty`` if modified), else None."""
    root = Path(__file__).resolve().parents[2]
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


def gpu_metadata(device_id: int = 0) -> dict[str, Any]:
    """GPU name, memory, driver, CUDA runtime and CuPy versions, read through CuPy."""
    import cupy

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(device_id)
    name = props["name"]
    return {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "gpu_memory_bytes": int(props["totalGlobalMem"]),
        "driver_version": _cuda_version_string(runtime.driverGetVersion()),
        "cuda_runtime_version": _cuda_version_string(runtime.runtimeGetVersion()),
        "cupy": cupy.__version__,
    }


def _no_gpu() -> dict[str, Any]:
    return {
        "device": "cpu",
        "gpu_memory_bytes": None,
        "driver_version": None,
        "cuda_runtime_version": None,
        "cupy": _cupy_version(),
    }


def _cupy_version() -> str | None:
    try:
        import cupy
    except Exception:  # CuPy absent or broken: no version to report
        return None
    return str(cupy.__version__)


def _cuda_version_string(version: int) -> str:
    """CUDA's integer version (e.g. 12040) as ``12.4``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def python_command() -> list[str]:
    """``sys.argv`` as the user typed it (the console script's name first)."""
    return [Path(sys.argv[0]).name, *sys.argv[1:]]
