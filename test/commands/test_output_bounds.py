"""``make-bag`` and ``simulate`` bound what they write, and check their options as replay does.

Before writing: an output over ``--max-output-gb`` or over the free disk is refused, one line and
exit status 2, nothing created. While writing: a disk that fills up stops the command, one line
and exit status 2, with what was written kept and complete (a bag that a full disk cut short is
removed). Neither writes over an existing path, and their options are checked when parsed.

The commands run as a user runs them: ``cli.main(argv)`` in this process, the free space made
small by replacing ``shutil.disk_usage`` where a real small disk is not needed; and, where this
machine lets a user mount a file system of their own (``unshare``), as their own process on a
4 MiB tmpfs that really fills up.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from gpu_euclidean_cluster.commands import cli, make_bag, output_bounds
from gpu_euclidean_cluster.pointcloud_io.bags import PointCloudBag

from .._ros2_tools import run

#: A simulated VLP-16 run: 20 sweeps of about 17 k points, 0.3 MB each as a bag's xyzir points.
VLP16_RUN = ["--sensor", "vlp16", "--frames", "20"]
#: Stamps far from 2038, so that many frames pass the stamp check and meet the size bound.
EARLY = ["--start-time", "1000"]
#: The real small disk: a tmpfs of this size (4 MiB: 13 of the 20 sweeps fit).
SMALL_DISK = "4m"
#: A guard against a hang of a command on the small disk; it takes seconds.
DEADLINE_S = 300.0


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``gpu-euclidean-cluster ARGV``: the exit status and stderr."""
    status = cli.main(argv)
    return status, capsys.readouterr().err.strip()


def entries(folder: Path) -> list[str]:
    """Every path below ``folder`` (hidden ones included), relative to it."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def bag_frames(path: Path) -> int:
    """The number of messages of a bag, read back (a bag that does not open fails the test)."""
    with PointCloudBag(path) as bag:
        return sum(1 for _ in bag.messages(bag.select_topics()))


class DiskUsage(NamedTuple):
    """What ``shutil.disk_usage`` tells."""

    total: int
    used: int
    free: int


def fake_disk(monkeypatch, free: Iterator[int], total: int = 10**9) -> None:
    """The file system of every output reports ``total`` bytes, ``next(free)`` of them free at
    each look (reserve: 1 % of ``total``, 10 MB)."""

    def disk_usage(path: object) -> DiskUsage:
        available = next(free)
        return DiskUsage(total, total - available, available)

    monkeypatch.setattr(output_bounds.shutil, "disk_usage", disk_usage)


def forever(value: int) -> Iterator[int]:
    while True:
        yield value


# --- before writing: the bound and the free disk -----------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["make-bag", "{out}/huge.bag", "--simulate", "--frames", "100000000", *EARLY],
        ["make-bag", "{out}/huge.mcap", "{source}", "--repeat", "1000000000", "--rate-hz", "1e6"],
        ["simulate", "--frames", "1000000000", "--out", "{out}/sweeps"],
    ],
)
def test_an_output_over_the_bound_is_refused_before_writing(tmp_path, capsys, argv):
    source = tmp_path / "source.npy"
    np.save(source, _points(1000))
    out = tmp_path / "out"
    out.mkdir()
    argv = [arg.format(out=out, source=source) for arg in argv]
    status, err = run_cli(argv, capsys)
    assert status == 2
    assert len(err.splitlines()) == 1, err
    assert "over the --max-output-gb bound of 4 GB: write fewer frames" in err, err
    assert entries(out) == []


def test_max_output_gb_sets_the_bound(tmp_path, capsys):
    """20 VLP-16 sweeps are at most 10.5 MB in a bag: refused under 0.01 GB, written under
    0.011 GB; and a bound that is no positive number is refused when parsed."""
    small = ["make-bag", str(tmp_path / "a.bag"), "--simulate", *VLP16_RUN, *EARLY]
    status, err = run_cli([*small, "--max-output-gb", "0.01"], capsys)
    assert status == 2 and "about 10.5 MB, over the --max-output-gb bound of 0.01 GB" in err, err
    assert cli.main([*small, "--max-output-gb", "0.011"]) == 0
    assert bag_frames(tmp_path / "a.bag") == 20
    for bad in ("0", "-1", "nan", "inf", "lots"):
        status, err = run_cli([*small, "--max-output-gb", bad], capsys)
        assert status == 2 and "argument --max-output-gb" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["make-bag", "{out}/run.mcap", "--simulate", *VLP16_RUN, *EARLY],
        ["simulate", "--out", "{out}/sweeps", *VLP16_RUN],
    ],
    ids=["make-bag", "simulate"],
)
def test_an_output_over_the_free_disk_is_refused_before_writing(
    tmp_path, capsys, monkeypatch, argv
):
    fake_disk(monkeypatch, forever(15 * 10**6))  # 15 MB free, 10 MB of it kept free
    status, err = run_cli([arg.format(out=tmp_path) for arg in argv], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    assert f"but {tmp_path} has 15 MB free, of which 10 MB is left free" in err, err
    assert entries(tmp_path) == []


# --- while writing: a disk that fills up -------------------------------------------------------


@pytest.mark.parametrize("name", ["run.bag", "run.mcap", "run.db3", "run_dir"])
def test_make_bag_stops_before_the_disk_is_full_with_a_complete_bag(
    tmp_path, capsys, monkeypatch, name
):
    """Another process fills the disk (1 MB less free at each look): the bag ends where the next
    frame would eat into the reserve, is complete and in place, and the line says how many."""
    fake_disk(monkeypatch, iter(range(30 * 10**6, 0, -(10**6))))
    out = tmp_path / name
    status, err = run_cli(["make-bag", str(out), "--simulate", *VLP16_RUN, *EARLY], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    written = bag_frames(out)
    assert 0 < written < 20
    assert f"stopped after {written} of 20 frames: the disk is nearly full" in err, err
    assert f"{out} holds the {written} frames, complete" in err, err
    assert [p for p in entries(tmp_path) if p.startswith(".")] == []  # no temporary left


def test_simulate_stops_before_the_disk_is_full_keeping_whole_files(tmp_path, capsys, monkeypatch):
    fake_disk(monkeypatch, iter(range(30 * 10**6, 0, -(10**6))))
    out = tmp_path / "sweeps"
    status, err = run_cli(["simulate", "--out", str(out), *VLP16_RUN], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    files = entries(out)
    assert 0 < len(files) < 20
    assert files == [f"scan_{i:04d}.npy" for i in range(len(files))]
    assert f"stopped before sweep {len(files) + 1} of 20: the disk is nearly full" in err, err
    assert all(len(np.load(out / name)) > 10_000 for name in files)


def test_simulate_removes_the_file_a_full_disk_cut_short(tmp_path, capsys, monkeypatch):
    """The third file's write fails half way for a full disk (ENOSPC): it is removed, the two
    before it are kept whole."""
    write_bytes = Path.write_bytes
    writes = []

    def fill_up(path: Path, data: bytes) -> int:
        writes.append(path)
        if len(writes) == 3:
            write_bytes(path, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return write_bytes(path, data)

    monkeypatch.setattr(Path, "write_bytes", fill_up)
    out = tmp_path / "sweeps"
    status, err = run_cli(["simulate", "--out", str(out), *VLP16_RUN], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    assert f"the disk filled up writing {out / 'scan_0002.npy'} (No space left on device)" in err
    assert "scan_0000.npy to scan_0001.npy" in err, err
    assert entries(out) == ["scan_0000.npy", "scan_0001.npy"]
    assert all(len(np.load(out / name)) > 10_000 for name in entries(out))


@pytest.mark.parametrize("name", ["run.bag", "run.mcap", "run.db3"])
def test_make_bag_removes_a_bag_a_full_disk_cut_short(tmp_path, capsys, monkeypatch, name):
    """A write that fails for a full disk inside the writer (the frames raise ENOSPC where the
    writer takes them): one line, and neither the bag nor its temporary is left."""
    real_frames = make_bag.simulated_frames

    def filling(*args, **kwargs):
        for index, frame in enumerate(real_frames(*args, **kwargs)):
            if index == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            yield frame

    monkeypatch.setattr(make_bag, "simulated_frames", filling)
    out = tmp_path / name
    status, err = run_cli(["make-bag", str(out), "--simulate", *VLP16_RUN, *EARLY], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    assert f"the disk filled up writing {out} ([Errno 28] No space left on device)" in err, err
    assert "the incomplete bag was removed" in err
    assert entries(tmp_path) == []


# --- the same on a real small disk, each command its own process --------------------------------

#: Runs ``gpu-euclidean-cluster ARGV`` in a process whose output folder is a small tmpfs, then
#: prints what the folder holds as JSON (the tmpfs ends with the process): each path, and for
#: each bag (a file or a folder with metadata.yaml) and .npy file, its frames, or null when it
#: does not read. argv[1] says which estimate the command is told: ``true`` (the command's own),
#: ``no-estimate`` (none: writing starts whatever the size), ``plenty-free`` (the disk reports a
#: petabyte free: only the kernel's ENOSPC stops the writes).
SMALL_DISK_RUNNER = """
import json, sys
from pathlib import Path
import numpy as np
from gpu_euclidean_cluster.commands import cli, make_bag, output_bounds, simulate
from gpu_euclidean_cluster.pointcloud_io.bags import PointCloudBag

mode, disk, argv = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
if mode == "no-estimate":
    make_bag.check_output_size = simulate.check_output_size = lambda *args: None
elif mode == "plenty-free":
    output_bounds.free_space = lambda folder: (10**15, 0)
status = cli.main(argv)

def frames(path):
    try:
        if path.suffix == ".npy":
            return len(np.load(path))
        with PointCloudBag(path) as bag:
            return sum(1 for _ in bag.messages(bag.select_topics()))
    except Exception:
        return None

bags = [p for p in disk.iterdir() if p.suffix in (".bag", ".mcap", ".db3")]
counted = [*disk.rglob("*.npy"), *bags, *(p.parent for p in disk.glob("*/metadata.yaml"))]
report = {
    "status": status,
    "paths": sorted(str(p.relative_to(disk)) for p in disk.rglob("*")),
    "frames": {str(p.relative_to(disk)): frames(p) for p in sorted(counted)},
}
print(json.dumps(report))
"""


def small_disk_available() -> bool:
    """Whether this user may mount a tmpfs in a private namespace (``unshare``)."""
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c"]
    probe.append("mount -t tmpfs -o size=1m tmpfs /tmp")
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


small_disk = pytest.mark.skipif(
    not small_disk_available(), reason="cannot mount a tmpfs here (unshare --user --mount)"
)


def on_small_disk(tmp_path: Path, mode: str, argv: list[str]) -> tuple[dict, str]:
    """Run ``argv`` (``{disk}`` stands for the small disk's folder) with ``SMALL_DISK_RUNNER``;
    the runner's report and the command's stderr."""
    disk = tmp_path / "disk"
    disk.mkdir()
    argv = [arg.format(disk=disk) for arg in argv]
    mount = f'mount -t tmpfs -o size={SMALL_DISK} tmpfs "$0" && exec "$@"'
    command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, str(disk)]
    command += [sys.executable, "-c", SMALL_DISK_RUNNER, mode, str(disk), *argv]
    done = run(command, dict(os.environ), timeout_s=DEADLINE_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # the runner itself (-9: killed at the deadline)
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr.strip()


#: The outputs on the small disk: make-bag's four kinds of bag and simulate's folder.
OUTPUT_IDS = ["bag", "mcap", "db3", "bag-folder", "simulate"]
OUTPUTS = [
    ["make-bag", "{disk}/run.bag", "--simulate", *VLP16_RUN, *EARLY],
    ["make-bag", "{disk}/run.mcap", "--simulate", *VLP16_RUN, *EARLY],
    ["make-bag", "{disk}/run.db3", "--simulate", *VLP16_RUN, *EARLY],
    ["make-bag", "{disk}/run_dir", "--simulate", *VLP16_RUN, *EARLY],
    ["simulate", "--out", "{disk}/sweeps", *VLP16_RUN],
]


@small_disk
@pytest.mark.parametrize("argv", [OUTPUTS[0], OUTPUTS[-1]], ids=["make-bag", "simulate"])
def test_small_disk_refuses_before_writing(tmp_path, argv):
    report, err = on_small_disk(tmp_path, "true", argv)
    assert report["status"] == 2 and report["paths"] == []
    assert len(err.splitlines()) == 1 and "MB free, of which" in err, err


@small_disk
@pytest.mark.parametrize("argv", OUTPUTS, ids=OUTPUT_IDS)
def test_small_disk_that_fills_up_stops_with_complete_output(tmp_path, argv):
    report, err = on_small_disk(tmp_path, "no-estimate", argv)
    assert report["status"] == 2 and len(err.splitlines()) == 1, err
    assert "the disk is nearly full" in err, err
    counts = list(report["frames"].values())
    assert counts and None not in counts, report
    if argv[0] == "make-bag":
        [written] = counts
        assert 0 < written < 20 and f"stopped after {written} of 20 frames" in err, (report, err)
        assert not [p for p in report["paths"] if p.startswith(".")], report
    else:
        assert 0 < len(counts) < 20 and f"stopped before sweep {len(counts) + 1}" in err


@small_disk
@pytest.mark.parametrize("argv", OUTPUTS, ids=OUTPUT_IDS)
def test_small_disk_full_all_the_same_is_one_line(tmp_path, argv):
    """The disk reports plenty free, the kernel refuses the writes (ENOSPC, SQLite's full
    database): make-bag leaves nothing, simulate its whole files."""
    report, err = on_small_disk(tmp_path, "plenty-free", argv)
    assert report["status"] == 2 and len(err.splitlines()) == 1, err
    assert "the disk filled up writing" in err, err
    if argv[0] == "make-bag":
        assert report["paths"] == [] and "the incomplete bag was removed" in err, report
    else:
        counts = list(report["frames"].values())
        assert 0 < len(counts) < 20 and None not in counts, report
        assert f"keeps the {len(counts)} sweeps written before" in err, err


# --- never over an existing path; options checked when parsed ----------------------------------


def test_make_bag_never_writes_over_an_input(tmp_path, capsys):
    source = tmp_path / "frame.bag"  # an input named like a bag
    np.save(tmp_path / "frame.npy", _points(100))
    (tmp_path / "frame.npy").rename(source)
    before = source.read_bytes()
    status, err = run_cli(["make-bag", str(source), str(source), "--format", "npy"], capsys)
    assert status == 2
    assert err.endswith(f"{source} is an input; not overwriting: give a new output name"), err
    assert source.read_bytes() == before
    status, err = run_cli(["make-bag", str(tmp_path), "--simulate"], capsys)
    assert status == 2 and f"{tmp_path} exists already; not overwriting" in err, err


def test_simulate_never_writes_over_a_file(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    status, err = run_cli(["simulate", "--frames", "1", "--out", str(target)], capsys)
    assert status == 2 and len(err.splitlines()) == 1, err
    assert target.read_text() == "keep me"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--frame-id", ""], "argument --frame-id: a frame id must not be empty, got ''"),
        (["--seed", "-1"], "argument --seed: must be a whole number >= 0, got -1"),
        (["--ring-sensor", "hdl128"], "argument --ring-sensor: invalid choice: 'hdl128'"),
    ],
)
def test_make_bag_options_are_checked_as_replay_checks_them(tmp_path, capsys, option, message):
    source = tmp_path / "frame.npy"
    np.save(source, _points(100))
    out = tmp_path / "out.bag"
    status, err = run_cli(["make-bag", str(out), str(source), *option], capsys)
    assert status == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_make_bag_and_replay_share_the_frame_id_rule(capsys):
    """``replay --frame-id ''`` is refused by the same rule and words."""
    from gpu_euclidean_cluster.ros.parameters.velodyne_options import VelodyneOptions

    with pytest.raises(ValueError, match="--frame-id must not be empty"):
        VelodyneOptions(frame_id="")
    status, err = run_cli(["replay", "any.bag", "--frame-id", ""], capsys)
    assert status == 2 and "argument --frame-id: a frame id must not be empty" in err, err


def _points(count: int) -> np.ndarray:
    """``count`` points with x y z and intensity (float32), a KITTI-like structured array."""
    points = np.zeros(count, dtype=[(n, "<f4") for n in ("x", "y", "z", "intensity")])
    points["x"] = np.linspace(2.0, 40.0, count)
    points["z"] = -1.5
    points["intensity"] = 0.5
    return points
