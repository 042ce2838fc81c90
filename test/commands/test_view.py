"""``gpu-euclidean-cluster view``: one bird's-eye PNG per labelled cloud, from a bag or live.

The labelled clouds are the node's own output: simulated VLP-16 sweeps written by ``make-bag``,
clustered by the frame pipeline the node runs (``frame/pipeline.py``, whose ``labeled`` cloud is
what the node publishes on ``output/labeled_points``), written back to a bag of each storage.
The live path runs ``replay`` of such a bag and ``view --topic`` as their own processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from gpu_euclidean_cluster.commands import cli
from gpu_euclidean_cluster.commands.view import labelled_points, why_unlabelled
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.frame.pipeline import FramePipeline
from gpu_euclidean_cluster.pointcloud_io.bags import PointCloudBag, write_pointcloud_bag
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_cdr, from_xyz, to_structured
from gpu_euclidean_cluster.tools.birdseye import DPI, PANEL_INCHES

from .._ros2_tools import Background, own_namespace, run

PROG = "gpu-euclidean-cluster"
PANEL_PX = round(PANEL_INCHES * DPI)
FRAMES = 3
START_S = 1_700_000_000
LABELLED_TOPIC = "/output/labeled_points"
#: The names view gives the PNGs of the labelled bag: TOPIC_INDEX_STAMP.png, stamps 10 Hz apart.
EXPECTED_NAMES = [
    f"output_labeled_points_{index:06d}_{START_S}.{index * 100_000_000:09d}.png"
    for index in range(FRAMES)
]
CLI = [sys.executable, "-m", "gpu_euclidean_cluster.commands.cli"]


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``source``: make-bag's simulated sweeps (no cluster_id); ``mcap``, ``sqlite3``, ``ros1``:
    their labelled clouds on LABELLED_TOPIC; ``table``: the cluster tables on /output/clusters."""
    folder = tmp_path_factory.mktemp("bags")
    source = folder / "sweeps.mcap"
    status = cli.main(
        [
            "make-bag",
            str(source),
            "--simulate",
            "--sensor",
            "vlp16",
            "--frames",
            str(FRAMES),
            "--start-time",
            str(START_S),
        ]
    )
    assert status == 0
    pipeline = FramePipeline("cpu")
    config = ClusterConfig(d_th=0.5, min_cluster_size=5)
    labelled, tables = [], []
    with PointCloudBag(source) as bag:
        for message in bag.messages(bag.select_topics()):
            cloud, _ = from_cdr(message.cdr)
            output = pipeline.process(cloud, config, FrameWindow())
            assert output.result.num_clusters > 1
            labelled.append((message.timestamp_ns, to_structured(output.labeled)))
            tables.append((message.timestamp_ns, to_structured(output.clusters)))
    paths = {
        "source": source,
        "mcap": folder / "labelled.mcap",
        "sqlite3": folder / "labelled_dir",
        "ros1": folder / "labelled.bag",
        "table": folder / "table.mcap",
    }
    for storage in ("mcap", "sqlite3", "ros1"):
        write_pointcloud_bag(paths[storage], labelled, storage=storage, topic=LABELLED_TOPIC)
    write_pointcloud_bag(paths["table"], tables, storage="mcap", topic="/output/clusters")
    return paths


def _view(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = cli.main(["view", *args])
    out, err = capsys.readouterr()
    return status, out, err


def _assert_one_line_error(status: int, err: str, reason: str) -> None:
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"{PROG}: error: ") and reason in lines[0], err


def _assert_pngs(folder: Path, names: list[str]) -> None:
    """``folder`` holds exactly ``names``, each a one-panel PNG."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)
    for name in names:
        image = imread(folder / name)
        assert image.shape[:2] == (PANEL_PX, PANEL_PX), name
        assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 10  # a picture


@pytest.mark.parametrize("storage", ["mcap", "sqlite3", "ros1"])
def test_a_png_per_labelled_cloud_of_a_bag(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], storage: str
) -> None:
    out_dir = tmp_path / "pngs" / "new"  # created with its parent
    status, out, err = _view(capsys, str(bags[storage]), "--png-dir", str(out_dir))
    assert status == 0, err
    assert out.strip() == f"wrote {FRAMES} PNG(s) to {out_dir} ({LABELLED_TOPIC} {FRAMES})"
    _assert_pngs(out_dir, EXPECTED_NAMES)


def test_count_and_topic_select_the_clouds(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--png-dir", str(tmp_path), "--topic", LABELLED_TOPIC, "--count", "2"]
    status, _, err = _view(capsys, str(bags["mcap"]), *args)
    assert status == 0, err
    _assert_pngs(tmp_path, EXPECTED_NAMES[:2])


def test_bags_without_a_labelled_cloud_give_one_line(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "pngs"
    cases = [
        (
            [str(bags["source"])],
            "no labelled cloud (a PointCloud2 with a cluster_id field) in "
            f"{bags['source']}; PointCloud2 topics: /points_raw: no cluster_id field (fields: x "
            "y z intensity ring)",
        ),
        (
            [str(bags["table"]), "--topic", "/output/clusters"],
            "carries no labelled cloud: a table of clusters (num_points field)",
        ),
        ([str(bags["mcap"]), "--topic", "/absent"], "topic /absent is not in"),
        ([str(bags["mcap"].with_name("missing.mcap"))], "bag not found"),
    ]
    for args, reason in cases:
        status, out, err = _view(capsys, *args, "--png-dir", str(out_dir))
        _assert_one_line_error(status, err, reason)
        assert out == ""
    assert list(out_dir.iterdir()) == []


def test_unusable_png_dirs_give_one_line(
    bags: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "file.png"
    a_file.write_bytes(b"")
    cases = [
        (a_file, "cannot write the PNGs: not a directory"),
        (a_file / "sub", "cannot create the PNG folder"),
    ]
    for folder, reason in cases:
        status, _, err = _view(capsys, str(bags["mcap"]), "--png-dir", str(folder))
        _assert_one_line_error(status, err, f"{folder}: {reason}")
    status, _, err = _view(capsys, "--png-dir", str(tmp_path))
    _assert_one_line_error(status, err, "give a BAG, or --topic T")


def test_labelled_clouds_of_both_layouts_and_not_the_cluster_table() -> None:
    rng = np.random.default_rng(2)
    xyz = np.vstack([rng.uniform(-0.2, 0.2, (30, 3)) + c for c in ((5, 0, 0), (0, 5, 0))])
    cloud = from_xyz(xyz.astype(np.float32))
    pipeline, config = FramePipeline("cpu"), ClusterConfig(d_th=0.5)
    for layout in ("full", "compact"):
        output = pipeline.process(cloud, config, FrameWindow(), labeled_layout=layout)
        points = labelled_points(output.labeled)
        assert points is not None, layout
        np.testing.assert_array_equal(points[0], xyz.astype(np.float32))
        assert points[1].tolist() == [0] * 30 + [1] * 30
        assert labelled_points(output.clusters) is None
        assert why_unlabelled(output.clusters).startswith("a table of clusters")
    assert labelled_points(cloud) is None
    assert why_unlabelled(cloud) == "no cluster_id field (fields: x y z)"


def test_help_works_without_ros() -> None:
    """rclpy is imported only when a live topic is drawn: --help and the bag mode need none."""
    block_ros = (
        "import sys; sys.modules['rclpy'] = None; sys.modules['sensor_msgs'] = None; "
        "from gpu_euclidean_cluster.commands import cli; sys.exit(cli.main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", block_ros, "view", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "TOPIC_INDEX_STAMP.png" in done.stdout
    done = subprocess.run(
        [sys.executable, "-c", block_ros, "view", "--topic", "/t", "--png-dir", "/tmp"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    _assert_one_line_error(done.returncode, done.stderr, "needs the ROS 2 Python packages")


@pytest.mark.ros
@pytest.mark.slow
def test_live_topic_from_a_publisher_process(bags: dict[str, Path], tmp_path: Path) -> None:
    """``replay`` publishes the labelled bag in a loop (its own process); ``view --topic`` (its
    own process) writes --count PNGs and exits; a topic nobody publishes is one line."""
    pytest.importorskip("rclpy")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the test process's domain and range
    topic = f"{own_namespace('view')}/labelled"
    replay = Background(
        [
            *CLI,
            "replay",
            str(bags["mcap"]),
            "--loop",
            "--remap",
            f"{LABELLED_TOPIC}:={topic}",
            "--wait-for-subscribers",
            "120",
            "--quiet",
        ],
        env,
        tmp_path / "replay.log",
    )
    out_dir = tmp_path / "live"
    try:
        done = run(
            [*CLI, "view", "--topic", topic, "--png-dir", str(out_dir), "--count", "2"],
            env,
            timeout_s=180,
        )
    finally:
        replay.stop()
    assert done.returncode == 0, done.stdout + done.stderr + replay.output()
    slug = topic.strip("/").replace("/", "_")
    names = sorted(p.name for p in out_dir.iterdir())
    assert [name.rsplit("_", 1)[0] for name in names] == [f"{slug}_000000", f"{slug}_000001"]
    assert all(name.split("_")[-1].startswith(f"{START_S}.") for name in names)
    _assert_pngs(out_dir, names)
    assert done.stdout.splitlines()[-1] == f"wrote 2 PNG(s) to {out_dir} ({topic} 2)"
    absent = f"{topic}_none"
    wait = ["--wait-for-publisher", "1"]
    nobody = run([*CLI, "view", "--topic", absent, "--png-dir", str(out_dir), *wait], env, 120)
    _assert_one_line_error(nobody.returncode, nobody.stderr, f"no publisher on {absent} within 1 s")
