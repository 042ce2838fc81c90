"""The README's node quick start, run as written: its ``bash`` block is read from README.md and
its lines run in a fresh copy of the repository with ``../shared`` beside it and a new venv, as a
user pastes them into a shell with a default environment (only the ROS domain is this test's).

- "Once": the install lines, each to completion (pip, the ROS 2 tool wheels, the message packages);
- "Terminal 1" (the node) and "Terminal 2" (``replay`` of a real VLS-128 packet bag, looping) run in
  the background, each one shell;
- "Terminal 3" runs to completion, and its output must show what each line promises: the labelled
  cloud's header and layout without its bytes, the live parameter set, three PNGs drawn.

It installs and builds for minutes (cached wheels help), so it is ``slow``; it skips, saying why,
where ``../shared`` lacks the wheels, the message sources or the packet bag.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .._ros2_tools import WHEELS_DIR, Background, describe, private_domain, run, user_env
from ..conftest import LIDAR_DATA_DIR, REPO_ROOT

SHARED = REPO_ROOT.parent / "shared"
BUILD_SCRIPT = SHARED / "msgs" / "build.sh"
PACKET_BAG = LIDAR_DATA_DIR / "nebula" / "vls128" / "1614315746471294674"
#: Seconds for one install line (pip from its cache, the message packages' colcon build).
INSTALL_TIMEOUT_S = 1200.0
#: Seconds for terminal 3's lines: the node starts, decodes and clusters on the CPU.
LOOK_TIMEOUT_S = 600.0
SECTIONS = ("Once", "Terminal 1", "Terminal 2", "Terminal 3")


def quick_start(readme: str) -> dict[str, list[str]]:
    """The quick start's command lines by section (``# Once: ...``, ``# Terminal 1: ...``)."""
    heading = readme.index("## Node quick start")
    block = re.search(r"```bash\n(.*?)```", readme[heading:], re.S)
    assert block, "README.md's node quick start has no bash block"
    sections: dict[str, list[str]] = {}
    current = None
    for line in block.group(1).splitlines():
        if line.startswith("# "):
            current = next((name for name in SECTIONS if line[2:].startswith(name)), current)
            sections.setdefault(current, [])
        elif line.strip():
            assert current, f"a command before the first section: {line}"
            sections[current].append(line)
    assert set(sections) == set(SECTIONS), sorted(sections)
    return sections


def test_the_quick_start_block_has_every_section():
    sections = quick_start((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    for name in ("Terminal 1", "Terminal 2", "Terminal 3"):  # each shell sets itself up
        assert sections[name][0].startswith("source .venv/bin/activate"), sections[name]


def _shell_env(domain: int) -> dict[str, str]:
    """A new shell's environment: the user's, no venv, no ROS setup, this test's domain."""
    env = user_env(domain)
    for name in ("VIRTUAL_ENV", "AMENT_PREFIX_PATH", "PYTHONPATH", "LD_LIBRARY_PATH"):
        env.pop(name, None)
    env.pop("_ROS_WHEELS_BOOTSTRAP_COMPLETE", None)
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(REPO_ROOT))
    )
    return env


def _clone(destination: Path) -> None:
    """The files a clone has (tracked, and new ones not ignored), with ``shared`` beside it."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (destination.parent / "shared").symlink_to(SHARED.resolve(), target_is_directory=True)


@pytest.mark.slow
def test_the_readme_quick_start_runs_as_written(tmp_path):
    for needed, what in (
        (WHEELS_DIR, "the ROS 2 tool wheels"),
        (BUILD_SCRIPT, "the message packages' build script"),
        (PACKET_BAG, "nebula's VLS-128 packet bag"),
    ):
        if not needed.exists():
            pytest.skip(f"{needed} ({what}) does not exist")
    if not (shutil.which("cmake") and shutil.which("g++")):
        pytest.skip("the message packages' build needs cmake and g++")
    if (SHARED / "data").resolve() != LIDAR_DATA_DIR.resolve():
        pytest.skip(f"the README names ../shared/data; LIDAR_DATA_DIR is {LIDAR_DATA_DIR}")
    sections = quick_start((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    clone = tmp_path / "clone"
    _clone(clone)
    with private_domain() as domain:
        env = _shell_env(domain)
        for line in sections["Once"]:
            done = run(["bash", "-c", line], env, timeout_s=INSTALL_TIMEOUT_S, cwd=clone)
            assert done.returncode == 0, describe(done)
        shells = [
            Background(
                ["bash", "-c", "\n".join(sections[name])], env, tmp_path / f"t{n}.log", clone
            )
            for n, name in ((1, "Terminal 1"), (2, "Terminal 2"))
        ]
        try:
            script = "set -e\n" + "\n".join(sections["Terminal 3"])  # stop at a failing line
            looked = run(["bash", "-c", script], env, timeout_s=LOOK_TIMEOUT_S, cwd=clone)
        finally:
            for shell in shells:
                shell.close()
            stop = "source .venv/bin/activate && ros2 daemon stop"
            run(["bash", "-c", stop], env, cwd=clone)
    logs = "\n".join((tmp_path / f"t{n}.log").read_text() for n in (1, 2))
    assert looked.returncode == 0, describe(looked) + "\n" + logs
    out = looked.stdout
    assert "frame_id:" in out and "point_step:" in out, out  # the header and the layout
    assert "<sequence type: uint8, length:" in out, out  # the payload's size, not its bytes
    assert "Set parameter successful" in out, out
    pictures = sorted((clone / "pngs").glob("*.png"))
    assert len(pictures) == 3, (pictures, out)
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pictures)
