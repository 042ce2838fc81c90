"""Autoware.ai's whole pipeline in the node as its own process, on a full-size frame from another.

The node starts as a user starts it for Autoware.ai (``euclidean_cluster_node --ros-args
--params-file config/autoware_ai.param.yaml``) with every optional stage switched on besides:
the side filter, downsampling at 0.1 m, the Difference of Normals and Autoware.ai's range bands.
kitti_000001 (120 268 points, Autoware.ai's ``PointXYZIR`` layout) comes from the package's
``replay`` in another process. The labelled cloud must pass every input field through and carry
exactly the library's labels for those settings; ``output/clusters`` the library's rows with
their oriented boxes; ``output/ground_points`` the ground points' records.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml

rclpy = pytest.importorskip("rclpy")

from gpu_euclidean_cluster.frame import (  # noqa: E402
    DiffNormalsFilter,
    FramePipeline,
    GroundRemoval,
)
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings, settings_from_values  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS  # noqa: E402

from ..._ros2_tools import BIN, Background, describe, private_domain, run, user_env  # noqa: E402
from ..node.test_cross_process import TIMEOUT_S, Recorder, _wait_matched  # noqa: E402

pytestmark = [
    pytest.mark.ros,
    pytest.mark.skipif(
        not all((BIN / n).exists() for n in ("euclidean_cluster_node", "gpu-euclidean-cluster")),
        reason="the package's console scripts are not installed beside this Python",
    ),
]

FRAME = "kitti_000001.bin"
PARAMS_FILE = Path(__file__).resolve().parents[3] / "config" / "autoware_ai.param.yaml"
#: Every other stage on, as ``-p`` overrides after the file.
OVERRIDES = {
    "keep_lanes": True,
    "keep_lane_left_distance": 15.0,
    "keep_lane_right_distance": 15.0,
    "downsample_leaf_size": 0.1,
    "use_diffnormals": True,
    "clustering_ranges": [15.0, 30.0, 45.0, 60.0],
    "clustering_distances": [0.5, 1.1, 1.6, 2.1, 2.6],
}
TOPICS = ("/output/labeled_points", "/output/clusters", "/output/ground_points")
STAMP_S = 3000


def _ros_value(value: object) -> str:
    return "[" + ",".join(map(str, value)) + "]" if isinstance(value, list) else str(value).lower()


def expected_settings() -> NodeSettings:
    """The node's settings for the file and the overrides, as the node computes them."""
    values: dict[str, object] = {spec.name: spec.default for spec in PARAMETERS}
    values.update(yaml.safe_load(PARAMS_FILE.read_text())["/**"]["ros__parameters"])
    values.update(OVERRIDES)
    return settings_from_values(values)


@pytest.fixture(scope="module")
def domain() -> Iterator[int]:
    with private_domain() as domain_id:
        yield domain_id


@pytest.fixture(scope="module")
def node(domain, tmp_path_factory) -> Iterator[Background]:
    command = [str(BIN / "euclidean_cluster_node"), "--ros-args", "--params-file", str(PARAMS_FILE)]
    for name, value in OVERRIDES.items():
        command += ["-p", f"{name}:={_ros_value(value)}"]
    log = tmp_path_factory.mktemp("node") / "node.log"
    process = Background(command, user_env(domain), log)
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.slow
def test_autoware_ai_pipeline_on_a_full_frame_from_another_process(
    domain, node, load_frame, lidar_data_dir, point_cloud2, tmp_path
):
    frame = load_frame(FRAME)
    bag = tmp_path / "kitti_000001_xyzir.bag"
    command = [str(BIN / "gpu-euclidean-cluster"), "make-bag", str(bag)]
    command += [str(lidar_data_dir / FRAME)] * 3 + ["--topic", "/input/points", "--layout"]
    command += ["xyzir", "--rate-hz", "1", "--start-time", str(STAMP_S)]
    made = run(command, user_env(0), timeout_s=TIMEOUT_S)
    assert made.returncode == 0, describe(made)

    recorder = Recorder(domain, TOPICS)
    try:
        _wait_matched(recorder, node)
        command = [str(BIN / "replay"), str(bag), "--qos-reliability", "reliable", "-q"]
        command += ["--wait-for-subscribers", str(TIMEOUT_S)]
        replayed = run(command, user_env(domain), timeout_s=2 * TIMEOUT_S)
        assert replayed.returncode == 0, describe(replayed)
        stamps = {STAMP_S, STAMP_S + 1, STAMP_S + 2}
        labeled = recorder.wait(TOPICS[0], stamps)
        assert labeled is not None, f"no labelled cloud:\n{node.output()}"
        clusters = recorder.wait(TOPICS[1], {labeled.header.stamp.sec})
        ground = recorder.wait(TOPICS[2], {labeled.header.stamp.sec})
    finally:
        recorder.close()
    assert clusters is not None and ground is not None, node.output()

    names = [f.name for f in labeled.fields]
    assert names[:5] == ["x", "y", "z", "intensity", "ring"] and names[-2:] == ["cluster_id", "rgb"]
    points = point_cloud2.read_points(labeled, field_names=names)
    xyz = np.stack([np.asarray(points[a], dtype=np.float32) for a in "xyz"], axis=1)
    assert xyz.tobytes() == frame.tobytes()

    settings = expected_settings()
    stages = [GroundRemoval(settings.ground), DiffNormalsFilter(settings.diffnormals)]
    expected = FramePipeline("cpu", stages=stages).process(
        from_xyz(frame), settings.cluster, settings.window, oriented_boxes=True
    )
    ids = np.asarray(points["cluster_id"])
    np.testing.assert_array_equal(ids, np.asarray(expected.result.labels))
    assert expected.result.num_clusters > 10

    rows = point_cloud2.read_points(clusters, field_names=("yaw", "length", "width"))
    assert len(rows) == len(expected.table)
    for column in ("yaw", "length", "width"):
        np.testing.assert_array_equal(np.asarray(rows[column]), expected.boxes[column].astype("f4"))
    ground_rows = point_cloud2.read_points(ground, field_names=("x", "y", "z"))
    assert len(ground_rows) == int(expected.ground.sum()) > 0
