"""The object encoders (``ros/messages/object_messages.py``) and the node's outputs
(``ros/node/outputs.py``).

Every encoder's bytes must be what ``rclpy.serialization.serialize_message`` makes of the
equivalent message objects (but for padding bytes, which Fast CDR leaves uninitialised) and
deserialize back to them: 0, 1 and many clusters, odd point layouts whose cluster clouds leave
every alignment, several field counts, big-endian clouds, empty and long frame ids.

The message packages come from ``../shared/msgs`` (``_perception_msgs.py``); where this process
cannot import them, :func:`test_in_a_process_with_the_message_packages` runs this file again in
a process that can, and the tests that need them skip here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.serialization import deserialize_message  # noqa: E402
from std_msgs.msg import Header  # noqa: E402

from gpu_euclidean_cluster.core.cluster_stats import cluster_table  # noqa: E402
from gpu_euclidean_cluster.core.config import ClusterConfig  # noqa: E402
from gpu_euclidean_cluster.core.frame import FrameWindow, GroupedRecords, group_records  # noqa: E402
from gpu_euclidean_cluster.core.oriented_boxes import oriented_boxes  # noqa: E402
from gpu_euclidean_cluster.frame import FramePipeline, GroundRemoval  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io import pointcloud2 as pc  # noqa: E402
from gpu_euclidean_cluster.ros.messages import BUILD_MESSAGE_PACKAGES  # noqa: E402
from gpu_euclidean_cluster.ros.messages import columns as message_columns  # noqa: E402
from gpu_euclidean_cluster.ros.messages import object_messages as om  # noqa: E402
from gpu_euclidean_cluster.ros.messages.cdr import same_serialization  # noqa: E402
from gpu_euclidean_cluster.ros.messages.columns import ArrayEncoder, ArraySpec  # noqa: E402
from gpu_euclidean_cluster.ros.node import outputs  # noqa: E402

from ..._perception_msgs import perception_msgs_env  # noqa: E402

pytestmark = pytest.mark.ros
REPO = Path(__file__).resolve().parents[3]
needs_msgs = pytest.mark.skipif(
    bool(message_columns.MISSING),
    reason="the message packages are not importable here: "
    "test_in_a_process_with_the_message_packages runs these in a process that has them",
)


def test_in_a_process_with_the_message_packages():
    if not message_columns.MISSING:
        pytest.skip("this process has the message packages: the tests ran here")
    env, reason = perception_msgs_env()
    if env is None:
        pytest.skip(reason)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" in done.stdout, done.stdout[-2000:]


def make_header(frame_id: str = "lidar", stamp: tuple[int, int] = (1_700_000_000, 5)) -> Header:
    header = Header(frame_id=frame_id)
    header.stamp.sec, header.stamp.nanosec = stamp
    return header


#: Frame ids: empty, odd lengths, one long enough for a 3-digit length, non-ASCII.
FRAME_IDS = ("", "a", "lidar", "velodyne_top", "x" * 301, "capteur_été")


def layout_cloud(name: str, labels: np.ndarray, seed: int = 0) -> pc.RawCloud:
    """A cloud of the layout ``name`` with random records, ``len(labels)`` of them (the
    organised layout: rounded up to whole rows)."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    field = pc.Field
    layouts = {  # name -> fields, point_step, big-endian, height
        "xyz12": ((field("x", 0, 7), field("y", 4, 7), field("z", 8, 7)), 12, False, 1),
        "xyzi16": (
            (field("x", 0, 7), field("y", 4, 7), field("z", 8, 7), field("intensity", 12, 7)),
            16, False, 1,
        ),
        "odd13": ((field("x", 0, 7), field("y", 4, 7), field("z", 8, 7), field("r", 12, 2)),
                  13, False, 1),
        "bigendian_odd21": (
            (field("time_stamp", 0, 8), field("x", 8, 7), field("y", 12, 7), field("z", 16, 7),
             field("channel", 20, 2)),
            21, True, 1,
        ),
        "one_field_f64x3": ((field("xyz", 0, 8, 3),), 24, False, 1),
        "organised_padded": ((field("x", 0, 7), field("y", 4, 7), field("z", 8, 7)), 15, False, 2),
    }  # fmt: skip
    fields, point_step, bigendian, height = layouts[name]
    width = -(-n // height) if n else 0
    row_step = width * point_step + (5 if height > 1 else 0)
    data = rng.integers(0, 256, row_step * height, dtype=np.uint8)
    return pc.RawCloud(
        fields=fields,
        height=height if n else 1,
        width=width,
        point_step=point_step,
        row_step=row_step,
        data=data,
        is_bigendian=bigendian,
    )


LAYOUTS = ("xyz12", "xyzi16", "odd13", "bigendian_odd21", "one_field_f64x3", "organised_padded")


def clusters_of(sizes: list[int], unclustered: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(labels, table)``: shuffled labels of clusters of ``sizes`` points plus ``unclustered``
    points labelled -1, and a cluster table of random coordinates."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate(
        [np.full(n, k) for k, n in enumerate(sizes)] + [np.full(unclustered, -1)]
    ).astype(np.int32)
    labels = labels[rng.permutation(len(labels))]
    xyz = rng.normal(0.0, 30.0, (len(labels), 3)).astype(np.float32)
    return labels, cluster_table(xyz, labels, len(sizes))


def cluster_points(cloud: pc.RawCloud, labels: np.ndarray, clusters: int) -> GroupedRecords:
    """The records of ``cloud`` grouped by ``labels``, as the frame layer groups them."""
    return group_records(pc.point_bytes(cloud), labels, clusters)


def message_objects(spec: ArraySpec, *frame: Any) -> Any:
    """The message objects of ``spec`` for ``frame``, as where its check fails: built from the
    same columns as its bytes, so that the two check each other."""
    return ArrayEncoder(spec, serialize=False).build(*frame)


def assert_same(ours: Any, reference: Any) -> None:
    """``ours`` are bytes equal to ``serialize_message(reference)`` but for padding, and they
    deserialize to ``reference``."""
    assert isinstance(ours, bytes)
    assert same_serialization(ours, reference)
    assert deserialize_message(ours, type(reference)) == reference


#: The object messages' specs: with the clusters' points, without, Detection3DArray.
SPECS = (om.DETECTED_OBJECTS_WITH_FEATURE, om.DETECTED_OBJECTS, om.DETECTION3D_ARRAY)

CASES = {  # name -> cluster sizes, unclustered points
    "none": ([], 0),
    "none_of_some_points": ([], 7),
    "one_point": ([1], 0),
    "one": ([9], 3),
    "many": (list(np.random.default_rng(3).integers(1, 40, 300)), 50),
    "every_remainder": ([1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17], 1),
}


@needs_msgs
def test_encoders_serialize_here():
    assert all(ArrayEncoder(spec).serializes for spec in SPECS)


@needs_msgs
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_feature_objects_match_rclpy(layout, case):
    sizes, unclustered = CASES[case]
    labels, table = clusters_of(sizes, unclustered, seed=len(sizes))
    cloud = layout_cloud(layout, labels, seed=len(labels))
    if cloud.height > 1 and len(labels) % 2:  # the organised cloud's last row: unclustered
        labels = np.append(labels, -1)
    points = cluster_points(cloud, labels, len(table))
    encoder = ArrayEncoder(om.DETECTED_OBJECTS_WITH_FEATURE)
    for index, frame_id in enumerate(FRAME_IDS):
        header = make_header(frame_id, (index * 1000, index))
        reference = message_objects(om.DETECTED_OBJECTS_WITH_FEATURE, table, cloud, points, header)
        assert_same(encoder.build(table, cloud, points, header), reference)


@needs_msgs
@pytest.mark.parametrize("case", sorted(CASES))
def test_objects_and_detections_match_rclpy(case):
    sizes, unclustered = CASES[case]
    _, table = clusters_of(sizes, unclustered, seed=len(sizes))
    objects, detections = ArrayEncoder(om.DETECTED_OBJECTS), ArrayEncoder(om.DETECTION3D_ARRAY)
    for frame_id in FRAME_IDS:
        header = make_header(frame_id)
        assert_same(
            objects.build(table, header), message_objects(om.DETECTED_OBJECTS, table, header)
        )
        assert_same(
            detections.build(table, header), message_objects(om.DETECTION3D_ARRAY, table, header)
        )


def boxes_of(labels: np.ndarray, table: np.ndarray, seed: int) -> np.ndarray:
    """Oriented boxes of random points of the clusters ``labels``."""
    rng = np.random.default_rng(seed)
    xyz = rng.normal(0.0, 30.0, (len(labels), 3)).astype(np.float32)
    return oriented_boxes(xyz[:, 0], xyz[:, 1], xyz[:, 2], labels, len(table))


@needs_msgs
@pytest.mark.parametrize("case", sorted(CASES))
def test_oriented_objects_match_rclpy(case):
    sizes, unclustered = CASES[case]
    labels, table = clusters_of(sizes, unclustered, seed=len(sizes))
    boxes = boxes_of(labels, table, seed=len(sizes))
    cloud = layout_cloud("odd13", labels, seed=len(labels))
    points = cluster_points(cloud, labels, len(table))
    feature, objects, detections = (ArrayEncoder(spec) for spec in SPECS)
    for frame_id in FRAME_IDS:
        header = make_header(frame_id)
        assert_same(
            feature.build(table, cloud, points, header, boxes),
            message_objects(om.DETECTED_OBJECTS_WITH_FEATURE, table, cloud, points, header, boxes),
        )
        assert_same(
            objects.build(table, header, boxes),
            message_objects(om.DETECTED_OBJECTS, table, header, boxes),
        )
        assert_same(
            detections.build(table, header, boxes),
            message_objects(om.DETECTION3D_ARRAY, table, header, boxes),
        )
        # without boxes: the bytes of today
        assert objects.build(table, header) == objects.build(table, header, None)


@needs_msgs
def test_oriented_objects_content():
    """What Autoware's trackers read of a box: centre, yaw quaternion, dimensions along it."""
    labels, table = clusters_of([5, 3], 1, seed=9)
    boxes = boxes_of(labels, table, seed=9)
    boxes["yaw"][0] = 0.5
    header = make_header("velodyne", (1, 2))
    message = deserialize_message(
        ArrayEncoder(om.DETECTED_OBJECTS).build(table, header, boxes), om.DetectedObjects
    )
    detections = deserialize_message(
        ArrayEncoder(om.DETECTION3D_ARRAY).build(table, header, boxes), om.Detection3DArray
    )
    for k, (obj, detection) in enumerate(zip(message.objects, detections.detections, strict=True)):
        box = boxes[k]
        pose = obj.kinematics.pose_with_covariance.pose
        z_mid = (float(box["min_z"]) + float(box["max_z"])) / 2
        assert (pose.position.x, pose.position.y, pose.position.z) == (
            float(box["center_x"]), float(box["center_y"]), z_mid
        )  # fmt: skip
        half = float(box["yaw"]) / 2
        assert (pose.orientation.x, pose.orientation.y) == (0.0, 0.0)
        assert pose.orientation.z == pytest.approx(np.sin(half), abs=1e-15)
        assert pose.orientation.w == pytest.approx(np.cos(half), abs=1e-15)
        assert obj.kinematics.orientation_availability == 1  # SIGN_UNKNOWN
        assert obj.shape.type == om.Shape.BOUNDING_BOX
        dims = obj.shape.dimensions
        assert (dims.x, dims.y, dims.z) == (
            float(box["length"]), float(box["width"]), float(box["max_z"]) - float(box["min_z"])
        )  # fmt: skip
        assert detection.bbox.center == pose and detection.bbox.size == dims
        assert detection.results[0].pose.pose.position.x == float(table[k]["x"])  # centroid
    assert message.objects[0].kinematics.pose_with_covariance.pose.orientation.z == pytest.approx(
        np.sin(0.25)
    )


@needs_msgs
def test_detections_content():
    """Per cluster: the header, the id as text, the axis-aligned box, one UNKNOWN hypothesis."""
    _, table = clusters_of([4, 2, 7], 3, seed=11)
    header = make_header("velodyne", (3, 4))
    message = deserialize_message(
        ArrayEncoder(om.DETECTION3D_ARRAY).build(table, header), om.Detection3DArray
    )
    assert message.header == header and len(message.detections) == 3
    for row, detection in zip(table, message.detections, strict=True):
        low = np.array([row[f"min_{a}"] for a in "xyz"], dtype=np.float64)
        high = np.array([row[f"max_{a}"] for a in "xyz"], dtype=np.float64)
        assert detection.header == header and detection.id == str(row["cluster_id"])
        centre, size = detection.bbox.center, detection.bbox.size
        assert [centre.position.x, centre.position.y, centre.position.z] == (
            (low + high) / 2
        ).tolist()
        assert (centre.orientation.z, centre.orientation.w) == (0.0, 1.0)
        assert [size.x, size.y, size.z] == (high - low).tolist()
        (result,) = detection.results
        assert (result.hypothesis.class_id, result.hypothesis.score) == ("UNKNOWN", 1.0)
        position = result.pose.pose.position
        assert [position.x, position.y, position.z] == [float(row[a]) for a in "xyz"]


@needs_msgs
def test_detections_with_ids_of_one_to_four_digits():
    _, table = clusters_of([1] * 1200, 0, seed=1)
    header = make_header("base_link")
    assert_same(
        ArrayEncoder(om.DETECTION3D_ARRAY).build(table, header),
        message_objects(om.DETECTION3D_ARRAY, table, header),
    )


def test_grouping_of_the_input_records_in_input_order():
    labels, table = clusters_of([3, 1, 8], 5, seed=2)
    labels = np.append(labels, -1)  # even: two rows of the organised cloud
    cloud = layout_cloud("organised_padded", labels, seed=4)
    points = cluster_points(cloud, labels, len(table))
    records = pc.point_bytes(cloud)
    assert points.counts.tolist() == [3, 1, 8]
    expected = np.concatenate([records[labels == k] for k in range(3)])
    assert points.records.tobytes() == expected.tobytes()
    with pytest.raises(ValueError, match="labels"):
        cluster_points(cloud, labels[1:], len(table))


@needs_msgs
def test_feature_objects_content():
    """What Autoware's consumers read: as its clustering node fills the message, plus the box."""
    labels, table = clusters_of([4, 2], 3, seed=5)
    cloud = layout_cloud("odd13", labels, seed=6)
    points = cluster_points(cloud, labels, 2)
    header = make_header("velodyne", (12, 34))
    data = ArrayEncoder(om.DETECTED_OBJECTS_WITH_FEATURE).build(table, cloud, points, header)
    message = deserialize_message(data, om.DetectedObjectsWithFeature)
    assert message.header == header and len(message.feature_objects) == 2
    records = pc.point_bytes(cloud)
    for k, item in enumerate(message.feature_objects):
        obj, cluster = item.object, item.feature.cluster
        assert obj.existence_probability == 0.0
        assert [(c.label, c.probability) for c in obj.classification] == [(0, 1.0)]
        pose = obj.kinematics.pose_with_covariance.pose
        assert [pose.position.x, pose.position.y, pose.position.z] == [
            float(table[k][a]) for a in "xyz"
        ]
        assert (pose.orientation.x, pose.orientation.w) == (0.0, 1.0)
        assert obj.shape.type == om.Shape.BOUNDING_BOX
        assert obj.shape.dimensions.x == float(table[k]["max_x"]) - float(table[k]["min_x"])
        assert cluster.header == header
        assert (cluster.height, cluster.width, cluster.point_step) == (1, [4, 2][k], 13)
        assert cluster.row_step == cluster.width * 13 and cluster.is_dense
        assert [(f.name, f.offset, f.datatype, f.count) for f in cluster.fields] == [
            ("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("r", 12, 2, 1)
        ]  # fmt: skip
        assert bytes(cluster.data) == records[labels == k].tobytes()


@needs_msgs
def test_message_objects_when_the_check_fails(monkeypatch):
    labels, table = clusters_of([3, 5], 2, seed=7)
    cloud = layout_cloud("xyzi16", labels)
    points = cluster_points(cloud, labels, 2)
    header = make_header()
    monkeypatch.setattr(message_columns, "_VERIFIED", {})
    monkeypatch.setattr(message_columns, "same_serialization", lambda data, message: False)
    feature, objects, detections = (ArrayEncoder(spec) for spec in SPECS)
    assert not (feature.serializes or objects.serializes or detections.serializes)
    assert feature.build(table, cloud, points, header) == message_objects(
        om.DETECTED_OBJECTS_WITH_FEATURE, table, cloud, points, header
    )
    assert objects.build(table, header) == message_objects(om.DETECTED_OBJECTS, table, header)
    assert detections.build(table, header) == message_objects(om.DETECTION3D_ARRAY, table, header)


# -------------------------------------------------------------------- NodeOutputs, no middleware


class FakePublisher:
    def __init__(self, kind: type, topic: str) -> None:
        self.kind, self.topic = kind, topic
        self.subscribers = 0
        self.sent: list[Any] = []

    def get_subscription_count(self) -> int:
        return self.subscribers

    def publish(self, message: Any) -> None:
        self.sent.append(message)


class FakeNode:
    """What NodeOutputs uses of a node: publishers and an info log."""

    def __init__(self) -> None:
        self.publishers: dict[str, FakePublisher] = {}
        self.lines: list[str] = []

    def create_publisher(self, kind: type, topic: str, depth: int) -> FakePublisher:
        self.publishers[topic] = FakePublisher(kind, topic)
        return self.publishers[topic]

    def get_logger(self) -> FakeNode:
        return self

    def info(self, line: str) -> None:
        self.lines.append(line)


@pytest.fixture(scope="module")
def frame():
    """A small frame through the CPU pipeline with ground removal, with its input cloud: twelve
    blobs above a flat floor at z = -1.7."""
    rng = np.random.default_rng(8)
    centres = rng.uniform((-20, -20, 0), (20, 20, 3), (12, 3))
    blobs = [c + rng.uniform(-0.1, 0.1, (30, 3)) for c in centres]
    floor = np.column_stack([rng.uniform(-20, 20, (400, 2)), np.full(400, -1.7)])
    cloud = pc.from_xyz(np.concatenate([*blobs, floor]).astype("f4"))
    pipeline = FramePipeline("cpu", stages=[GroundRemoval()])
    output = pipeline.process(cloud, ClusterConfig(d_th=0.5), FrameWindow())
    assert output.ground is not None and int(output.ground.sum()) == 400
    return output, cloud


ALL_TOPICS = (
    "output/labeled_points", "output/clusters", "output/ground_points",
    "output/objects_with_feature", "output/objects", "output/detections", "output/markers",
)  # fmt: skip


def test_outputs_without_subscribers_are_neither_built_nor_published(frame, monkeypatch):
    output, cloud = frame
    node = FakeNode()
    node_outputs = outputs.NodeOutputs(node, 5)

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("built without a subscriber")

    monkeypatch.setattr(outputs, "publishable_cloud", never)
    monkeypatch.setattr(outputs, "group_records", never)
    monkeypatch.setattr(ArrayEncoder, "build", never)
    monkeypatch.setattr(node_outputs._marker_encoder, "build", never)
    timings = node_outputs.publish(output, make_header(), cloud)
    assert all(not p.sent for p in node.publishers.values())
    assert timings.publish_ms >= 0 and timings.markers_ms >= 0


def test_each_output_goes_only_to_its_subscribers(frame):
    output, cloud = frame
    node = FakeNode()
    node_outputs = outputs.NodeOutputs(node, 5)
    header = make_header("lidar_top", (5, 6))
    for topic in node_outputs.topics:
        for publisher in node.publishers.values():
            publisher.subscribers, publisher.sent = int(publisher.topic == topic), []
        node_outputs.publish(output, header, cloud)
        assert [p.topic for p in node.publishers.values() if p.sent] == [topic]
        (sent,) = node.publishers[topic].sent
        assert isinstance(sent, bytes)
        message = deserialize_message(sent, node.publishers[topic].kind)
        if topic == "output/markers":
            assert len(message.markers) == 2 * len(output.table) == 24
        elif topic == "output/objects_with_feature":
            assert message.header == header
            points = cluster_points(cloud, output.result.labels, len(output.table))
            assert message == message_objects(
                om.DETECTED_OBJECTS_WITH_FEATURE, output.table, cloud, points, header
            )
        else:
            assert message.header == header


def test_start_up_line_names_what_is_published_and_why_not(monkeypatch):
    node = FakeNode()
    outputs.NodeOutputs(node, 5)
    if message_columns.MISSING:
        (line,) = node.lines
        assert line.startswith(
            "outputs (each while it has a subscriber): output/labeled_points, output/clusters"
        )
        for topic, package in (
            ("output/objects_with_feature", "tier4_perception_msgs"),
            ("output/objects", "autoware_perception_msgs"),
            ("output/detections", "vision_msgs"),
        ):
            if package in message_columns.MISSING:
                assert f"{topic} ({package} is not installed)" in line
                assert topic not in node.publishers
        assert line.endswith(f"; to get them, {BUILD_MESSAGE_PACKAGES}")
        return
    assert node.lines == [f"outputs (each while it has a subscriber): {', '.join(ALL_TOPICS)}"]
    monkeypatch.setitem(message_columns.MISSING, "vision_msgs", "vision_msgs is not installed")
    node = FakeNode()
    outputs.NodeOutputs(node, 5)
    topics = ", ".join(t for t in ALL_TOPICS if t != "output/detections")
    assert node.lines == [
        f"outputs (each while it has a subscriber): {topics}; "
        "not published: output/detections (vision_msgs is not installed); to get them, "
        + BUILD_MESSAGE_PACKAGES
    ]
    assert "colcon" in BUILD_MESSAGE_PACKAGES  # the build command and the source line
    assert "`source $VIRTUAL_ENV/opt/msgs/setup.bash`" in BUILD_MESSAGE_PACKAGES


def test_grouped_records_publish_the_same_objects(frame):
    """A frame processed with its records grouped (what the node asks for while the objects
    have a subscriber) publishes the bytes of one grouped here from its labels."""
    output, cloud = frame
    settings = (ClusterConfig(d_th=0.5), FrameWindow())
    pipeline = FramePipeline("cpu", stages=[GroundRemoval()])  # as the fixture's frame
    grouped = pipeline.process(cloud, *settings, group_records=True)
    assert grouped.grouped is not None and output.grouped is None
    node = FakeNode()
    node_outputs = outputs.NodeOutputs(node, 5)
    topic = "output/objects_with_feature"
    if topic not in node_outputs.topics:
        pytest.skip("tier4_perception_msgs is not importable here")
    assert not node_outputs.groups_records()
    for publisher in node.publishers.values():
        publisher.subscribers, publisher.sent = int(publisher.topic == topic), []
    assert node_outputs.groups_records()
    header = make_header("lidar_top", (5, 6))
    node_outputs.publish(grouped, header, cloud)
    node_outputs.publish(output, header, cloud)
    first, second = node.publishers[topic].sent
    assert isinstance(first, bytes) and first == second


@needs_msgs
def test_feature_objects_encoder_reuses_its_buffer_across_sizes():
    encoder = ArrayEncoder(om.DETECTED_OBJECTS_WITH_FEATURE)
    for index, sizes in enumerate(([40, 3, 17] * 30, [1, 2], [5, 9, 2, 7] * 60, [])):
        labels, table = clusters_of(sizes, 7, seed=index)
        cloud = layout_cloud("odd13", labels, seed=index)
        points = cluster_points(cloud, labels, len(table))
        header = make_header("base_link", (index, index))
        reference = message_objects(om.DETECTED_OBJECTS_WITH_FEATURE, table, cloud, points, header)
        assert_same(encoder.build(table, cloud, points, header), reference)


@needs_msgs
def test_outputs_of_an_oriented_frame_carry_the_boxes(frame):
    """With ``process(..., oriented_boxes=True)`` every object output and the markers carry the
    frame's boxes; the clusters cloud has their columns."""
    _, cloud = frame
    pipeline = FramePipeline("cpu", stages=[GroundRemoval()])
    output = pipeline.process(cloud, ClusterConfig(d_th=0.5), FrameWindow(), oriented_boxes=True)
    assert output.boxes is not None and len(output.boxes) == len(output.table) == 12
    node = FakeNode()
    node_outputs = outputs.NodeOutputs(node, 5)
    for publisher in node.publishers.values():
        publisher.subscribers = 1
    header = make_header("lidar_top", (5, 6))
    node_outputs.publish(output, header, cloud)
    sent = {topic: publisher.sent[0] for topic, publisher in node.publishers.items()}
    points = cluster_points(cloud, output.result.labels, len(output.table))
    boxes = output.boxes
    assert_same(
        sent["output/objects_with_feature"],
        message_objects(
            om.DETECTED_OBJECTS_WITH_FEATURE, output.table, cloud, points, header, boxes
        ),
    )
    assert_same(
        sent["output/objects"], message_objects(om.DETECTED_OBJECTS, output.table, header, boxes)
    )
    assert_same(
        sent["output/detections"],
        message_objects(om.DETECTION3D_ARRAY, output.table, header, boxes),
    )
    from gpu_euclidean_cluster.ros.messages.markers import MarkerBuilder

    assert same_serialization(
        sent["output/markers"], MarkerBuilder().build(output.table, header, boxes)
    )
    names = [f.name for f in output.clusters.fields]
    assert names[-3:] == ["yaw", "length", "width"]
