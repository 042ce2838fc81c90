"""The ``cluster`` sub-command, in-process through ``cli.main`` and as the installed script."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from gpu_euclidean_cluster import cuda_available
from gpu_euclidean_cluster.commands import cli
from gpu_euclidean_cluster.core.cluster_stats import cluster_rgb
from gpu_euclidean_cluster.pointcloud_io import Cloud, write_pcd
from gpu_euclidean_cluster.tools.birdseye import DPI, PANEL_INCHES

from .._pointcloud_io_helpers import data_file

PROG = "gpu-euclidean-cluster"
PANEL_PX = round(PANEL_INCHES * DPI)


def _blobs_pcd(path: Path) -> Path:
    """Three blobs of 40, 25 and 10 points 5 m apart (spacing 0.1 m), plus one NaN point."""
    rng = np.random.default_rng(3)
    blobs = [
        c + rng.uniform(-0.2, 0.2, size=(n, 3))
        for c, n in (((0, 0, 0), 40), ((5, 0, 0), 25), ((0, 5, 0), 10))
    ]
    xyz = np.vstack([*blobs, [[np.nan, 0, 0]]]).astype(np.float32)
    write_pcd(path, Cloud(xyz, {"intensity": np.arange(len(xyz), dtype=np.float32)}))
    return path


def _run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = cli.main(["cluster", *args])
    out, err = capsys.readouterr()
    return status, out, err


def _script() -> str:
    script = Path(sys.executable).with_name(PROG)
    found = str(script) if script.exists() else shutil.which(PROG)
    if found is None:
        pytest.skip(f"console script {PROG} is not installed")
    return found


def _assert_one_line_error(status: int, out: str, err: str, reason: str) -> None:
    assert status != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{PROG}: error: ") and reason in lines[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("method", ["vertex", "edge", "matrix"])
def test_json_summary_of_a_pcd_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], method: str
) -> None:
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    status, out, _ = _run_main(capsys, str(path), "--json", "--backend", "cpu", "--method", method)
    assert status == 0
    report = json.loads(out)
    assert report["file"] == str(path) and report["format"] == "pcd"
    assert (report["points"], report["finite_points"]) == (76, 75)
    assert (report["clusters"], report["cluster_sizes"]) == (3, [40, 25, 10])
    assert (report["method"], report["search"], report["backend"]) == (method, "range", "cpu")
    assert report["d_th"] == 0.5 and report["max_cluster_size"] is None
    assert report["pointer_jumping"] is True
    assert set(report["timings_ms"]) >= {"build", "label", "filter", "total"}


def test_no_pointer_jumping_runs_the_paper_algorithm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    status, out, _ = _run_main(
        capsys, str(path), "--json", "--backend", "cpu", "--no-pointer-jumping"
    )
    assert status == 0
    report = json.loads(out)
    assert report["pointer_jumping"] is False
    assert (report["clusters"], report["cluster_sizes"]) == (3, [40, 25, 10])


def test_size_filter_and_labels_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    labels_path = tmp_path / "labels.bin"
    status, out, _ = _run_main(
        capsys,
        str(path),
        "--json",
        "--backend",
        "cpu",
        "--search",
        "exhaustive",
        "--d-th",
        "0.75",
        "--min-cluster-size",
        "11",
        "--max-cluster-size",
        "39",
        "--labels-out",
        str(labels_path),
    )
    assert status == 0
    report = json.loads(out)
    assert report["cluster_sizes"] == [25] and report["min_cluster_size"] == 11
    labels = np.fromfile(labels_path, dtype=np.int32)
    expected = np.full(76, -1, np.int32)
    expected[40:65] = 0
    np.testing.assert_array_equal(labels, expected)


def test_human_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    status, out, _ = _run_main(
        capsys, str(path), "--backend", "cpu", "--labels-out", str(tmp_path / "l.bin")
    )
    assert status == 0
    assert "points    76 (75 finite)" in out
    assert "clusters  3 at d_th 0.5 m, sizes 1..unlimited" in out
    assert "largest   40 25 10" in out
    assert "backend   cpu (cpu), method union_find, search range" in out  # auto, resolved
    assert "timings   ms: transfer_in" in out and "total" in out
    assert f"labels    {tmp_path / 'l.bin'} (int32, 76 values)" in out


def test_format_option_overrides_the_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = np.zeros((4, 5), np.float32)
    table[:, 0] = [0, 0.1, 10, 10.1]
    table.tofile(tmp_path / "frame.dat")
    status, out, _ = _run_main(
        capsys, str(tmp_path / "frame.dat"), "--format", "nuscenes", "--json", "--backend", "cpu"
    )
    assert status == 0
    assert json.loads(out)["cluster_sizes"] == [2, 2]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--d-th", "0"], "d_th must be > 0 m"),
        (["--d-th", "-1"], "d_th must be > 0 m"),
        (["--d-th", "nan"], "d_th must be a finite number"),
        (["--d-th", "abc"], "--d-th must be a number of metres, got 'abc'"),
        (["--min-cluster-size", "0"], "min_cluster_size must be an integer >= 1"),
        (["--min-cluster-size", "1.5"], "--min-cluster-size must be an integer"),
        (["--min-cluster-size", "9", "--max-cluster-size", "3"], "must not exceed"),
        (["--method", "ring"], "unknown method 'ring'"),
        (["--search", "kd"], "unknown search 'kd'"),
        (["--backend", "tpu"], "unknown backend 'tpu'"),
        (["--format", "las"], "unknown format 'las'"),
        (["--labels-out", "/nonexistent/folder/l.bin"], "no folder /nonexistent/folder"),
    ],
)
def test_bad_values_give_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], reason: str
) -> None:
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    _assert_one_line_error(*_run_main(capsys, str(path), "--backend", "cpu", *args), reason)


def test_bad_files_give_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "short.bin").write_bytes(b"\0" * 18)
    (tmp_path / "bad.pcd").write_bytes(b"VERSION 0.7\nFIELDS x y\n")
    (tmp_path / "cloud.xyz").write_bytes(b"")
    cases = [
        ("missing.bin", "missing.bin: no such file"),
        ("short.bin", "not a multiple of the 16-byte KITTI record"),
        ("bad.pcd", "no DATA line"),
        ("cloud.xyz", "cannot tell the format from the file name"),
    ]
    for name, reason in cases:
        result = _run_main(capsys, str(tmp_path / name), "--backend", "cpu")
        _assert_one_line_error(*result, reason)


@pytest.mark.skipif(cuda_available(), reason="checks the error when no CUDA device is present")
def test_cuda_backend_without_a_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    _assert_one_line_error(*_run_main(capsys, str(path), "--backend", "cuda"), "no CUDA device")


def test_installed_script_on_kitti_000008(tmp_path: Path) -> None:
    frame = data_file("kitti_000008.bin")
    labels_path = tmp_path / "labels.bin"
    completed = subprocess.run(
        [
            _script(),
            "cluster",
            str(frame),
            "--d-th",
            "0.5",
            "--backend",
            "cpu",
            "--json",
            "--labels-out",
            str(labels_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert (report["points"], report["clusters"]) == (17238, 144)
    assert labels_path.stat().st_size == 4 * report["points"]
    labels = np.fromfile(labels_path, dtype=np.int32)
    assert labels.min() == 0 and labels.max() == report["clusters"] - 1
    assert np.bincount(labels).tolist() == report["cluster_sizes"]


def test_installed_script_errors_without_traceback(tmp_path: Path) -> None:
    completed = subprocess.run(
        [_script(), "cluster", str(tmp_path / "absent.pcd"), "--backend", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    _assert_one_line_error(
        completed.returncode, completed.stdout, completed.stderr, "absent.pcd: no such file"
    )


@pytest.mark.parametrize("fmt", ["pcd", "kitti", "npy"])
def test_devices_are_refused_not_read_forever(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero on this system")
    status, out, err = _run_main(capsys, "/dev/zero", "--format", fmt, "--backend", "cpu")
    _assert_one_line_error(status, out, err, "not a regular file")


def test_empty_file_warns_and_reports_no_clusters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    status, out, _ = _run_main(capsys, str(empty), "--backend", "cpu", "--json")
    assert status == 0
    assert json.loads(out)["clusters"] == 0
    assert any("holds no points" in r.getMessage() for r in caplog.records)


def test_scan_search_reads_the_ring_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--search scan bins by the file's ring field (and still labels as the voxel grid does); a
    ring field that is no laser index is one line naming the file and the field."""
    rng = np.random.default_rng(4)
    xyz = np.vstack([c + rng.uniform(-0.3, 0.3, (30, 3)) for c in ((8, 0, 0), (0, 9, 1))])
    rings = (np.arange(len(xyz)) % 16).astype(np.uint16)
    path = tmp_path / "rings.pcd"
    write_pcd(path, Cloud(xyz.astype(np.float32), {"ring": rings}))
    labels = {}
    for search in ("scan", "range"):
        out = tmp_path / f"{search}.labels"
        status, _, err = _run_main(
            capsys, str(path), "--d-th", "0.5", "--search", search, "--labels-out", str(out)
        )
        assert status == 0, err
        labels[search] = np.fromfile(out, np.int32)
    assert np.array_equal(labels["scan"], labels["range"]) and labels["scan"].max() == 1
    bad = tmp_path / "bad_rings.pcd"
    write_pcd(bad, Cloud(xyz.astype(np.float32), {"ring": np.full(len(xyz), 9000, np.uint16)}))
    status, out, err = _run_main(capsys, str(bad), "--search", "scan")
    _assert_one_line_error(status, out, err, "field ring: ring ids must lie in [0, 4096)")


def test_png_of_the_clusters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    png = tmp_path / "blobs.png"
    status, out, err = _run_main(capsys, str(path), "--backend", "cpu", "--json", "--png", str(png))
    assert status == 0, err
    assert json.loads(out)["png"] == str(png)
    image = imread(png)
    assert image.shape[:2] == (PANEL_PX, PANEL_PX)
    pixels = np.round(image[..., :3] * 255).astype(int).reshape(-1, 3)
    for label in range(3):  # each cluster in the node's colour of its id
        colour = cluster_rgb(np.array([label]))[0].astype(int)
        assert (np.abs(pixels - colour).max(axis=1) <= 1).any(), label
    status, out, _ = _run_main(capsys, str(path), "--backend", "cpu", "--png", str(png))
    assert status == 0 and f"picture   {png}" in out


@pytest.mark.parametrize(
    ("outputs", "reason"),
    [
        (["--png", "{input}"], "--png names the input file; not overwriting it"),
        (["--png", "{dir}"], "cannot write the PNG: is a directory"),
        (["--png", "{dir}/none/x.png"], "cannot write the PNG: no folder"),
        (["--labels-out", "{input}"], "--labels-out names the input file"),
        (
            ["--png", "{dir}/x", "--labels-out", "{dir}/./x"],
            "--png and --labels-out name the same",
        ),
    ],
)
def test_png_and_labels_never_overwrite_the_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], outputs: list[str], reason: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    path = _blobs_pcd(work / "blobs.pcd")
    before = path.read_bytes()
    args = [a.format(input=path, dir=work) for a in outputs]
    _assert_one_line_error(*_run_main(capsys, str(path), "--backend", "cpu", *args), reason)
    assert path.read_bytes() == before


def test_progress_goes_to_stderr_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--progress names each stage on stderr (also when piped); stdout keeps its one JSON
    object. Without the option, stderr that is no terminal gets no progress."""
    path = _blobs_pcd(tmp_path / "blobs.pcd")
    outputs = ["--labels-out", str(tmp_path / "l.bin"), "--png", str(tmp_path / "b.png")]
    status, out, err = _run_main(capsys, str(path), "--backend", "cpu", "--json", *outputs)
    assert status == 0 and json.loads(out)["clusters"] == 3 and err == ""
    status, out, err = _run_main(
        capsys, str(path), "--backend", "cpu", "--json", "--progress", *outputs
    )
    assert status == 0 and json.loads(out)["clusters"] == 3
    stages = [line.split(" ", 1)[1] for line in err.splitlines()]
    expected = [
        f"0/4 \\d+:\\d\\d reading {path}",
        "1/4 \\d+:\\d\\d clustering 76 points on the cpu backend \\(method auto, search range, "
        "d_th 0.5 m\\)",
        f"2/4 \\d+:\\d\\d writing the labels to {tmp_path / 'l.bin'}",
        f"3/4 \\d+:\\d\\d drawing {tmp_path / 'b.png'}",
        "4/4 \\d+:\\d\\d done",
    ]
    assert len(stages) == len(expected), err
    for stage, pattern in zip(stages, expected, strict=True):
        assert re.fullmatch(r"\s*" + pattern, stage), stage
