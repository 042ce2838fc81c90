"""CDR bytes of the clouds (``ros/messages/serialized.py``) and the markers
(``ros/messages/markers.py``, by the generic ``ros/messages/cdr.py``) against rclpy's own
serialization.

Fast CDR skips alignment padding without writing it, so the padding bytes of
``serialize_message`` hold whatever its buffer held. :func:`assert_same_cdr` therefore checks
equal lengths, equal bytes except in short runs where ours are zero (our padding), and equal
messages after deserializing both: deserializing reads every byte that is not padding.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from rclpy.serialization import deserialize_message, serialize_message  # noqa: E402
from sensor_msgs.msg import PointCloud2, PointField  # noqa: E402
from std_msgs.msg import Header  # noqa: E402
from visualization_msgs.msg import Marker, MarkerArray  # noqa: E402

from gpu_euclidean_cluster.core.cluster_stats import (  # noqa: E402
    CLUSTER_DTYPE,
    cluster_rgb,
    cluster_table,
    pack_rgb,
)
from gpu_euclidean_cluster.core.oriented_boxes import BOX_DTYPE  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io import pointcloud2 as pc  # noqa: E402
from gpu_euclidean_cluster.ros.messages import cdr, serialized  # noqa: E402
from gpu_euclidean_cluster.ros.messages import columns as message_columns  # noqa: E402
from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message  # noqa: E402
from gpu_euclidean_cluster.ros.messages.markers import (  # noqa: E402
    BOX_ALPHA,
    LABEL_HEIGHT,
    MIN_BOX_SIDE,
    MarkerBuilder,
    MarkerEncoder,
)

from ..._node_helpers import TIMEOUT_S  # noqa: E402
from ..._ros2_tools import own_domain_id  # noqa: E402

pytestmark = pytest.mark.ros

#: Frame ids of every length modulo 8 (and a multi-byte UTF-8 one): they shift what follows.
FRAME_IDS = ("", "a", "ab", "abc", "lidar", "velodyne", "os1_lidar", "lidar_top_", "ünïcödé")

#: (sec, nanosec) stamps, extremes included.
STAMPS = ((0, 0), (1_700_000_000, 999_999_999), (-5, 1), (2**31 - 1, 123))


def make_header(frame_id: str = "lidar", stamp: tuple[int, int] = (12, 345)) -> Header:
    """A std_msgs/Header."""
    header = Header(frame_id=frame_id)
    header.stamp.sec, header.stamp.nanosec = stamp
    return header


def assert_same_cdr(ours: Any, message: Any) -> None:
    """``ours`` is ``serialize_message(message)`` but for zero bytes in Fast CDR's padding."""
    assert isinstance(ours, bytes), f"expected bytes, got {type(ours).__name__}"
    reference = serialize_message(message)
    assert len(ours) == len(reference)
    assert ours[:4] == b"\x00\x01\x00\x00"
    mine = np.frombuffer(ours, dtype=np.uint8)
    differ = np.flatnonzero(mine != np.frombuffer(reference, dtype=np.uint8))
    assert not mine[differ].any(), f"bytes differ at {differ[mine[differ] != 0][:10]}"
    runs = np.split(differ, np.flatnonzero(np.diff(differ) > 1) + 1) if len(differ) else []
    assert all(len(run) < 8 for run in runs), "a difference longer than any padding"
    kind = type(message)
    assert deserialize_message(ours, kind) == deserialize_message(reference, kind)


# --- PointCloud2 -------------------------------------------------------------------------------


def _labelled_cloud(points: int, seed: int = 0) -> pc.RawCloud:
    """x y z intensity plus cluster_id and rgb, as the node publishes on output/labeled_points."""
    rng = np.random.default_rng(seed)
    xyzi = np.zeros(points, dtype=[(n, "<f4") for n in ("x", "y", "z", "intensity")])
    for name in xyzi.dtype.names:
        xyzi[name] = rng.uniform(-50, 50, points)
    labels = rng.integers(-1, 40, points).astype(np.int32)
    return pc.append_fields(
        pc.from_structured(xyzi), {"cluster_id": labels, "rgb": pack_rgb(cluster_rgb(labels))}
    )


def _organised_padded_cloud() -> pc.RawCloud:
    """3 rows of 4 points, 16-byte points, rows padded to 80 bytes, a uint16 and a count-2 field."""
    fields = (
        *(pc.Field(name, 4 * i, pc.FLOAT32) for i, name in enumerate("xyz")),
        pc.Field("ring", 12, pc.UINT16),
        pc.Field("t", 14, pc.UINT8, 2),
    )
    data = bytearray(np.random.default_rng(3).integers(0, 256, 3 * 80, dtype=np.uint8).tobytes())
    return pc.RawCloud(fields, height=3, width=4, point_step=16, row_step=80, data=data)


def _odd_big_endian_cloud() -> pc.RawCloud:
    """float64 x/y, z first, an unaligned uint16, 29-byte points, big-endian, organised, dense."""
    odd = np.dtype(
        {
            "names": ["z", "ring", "x", "y", "rgb"],
            "formats": ["<f4", "<u2", "<f8", "<f8", ("<u1", (3,))],
            "offsets": [0, 4, 7, 15, 23],
            "itemsize": 29,
        }
    )
    points = np.zeros(12, dtype=odd)
    points["x"] = np.linspace(-3, 3, 12)
    points["ring"] = np.arange(12)
    return pc.from_structured(points, height=3, is_bigendian=True, is_dense=True)


CLOUDS = {
    "xyz": lambda: pc.from_xyz(np.random.default_rng(1).uniform(-9, 9, (50, 3))),
    "labelled": lambda: _labelled_cloud(1000),
    "organised_padded_rows": _organised_padded_cloud,
    "odd_big_endian": _odd_big_endian_cloud,
    "empty": lambda: pc.from_xyz(np.empty((0, 3))),
    "no_fields": lambda: pc.RawCloud((), height=0, width=0, point_step=0, row_step=0, data=b""),
    "float32_payload": lambda: pc.RawCloud(
        tuple(pc.Field(n, 4 * i, pc.FLOAT32) for i, n in enumerate("xyz")),
        height=1,
        width=5,
        point_step=12,
        row_step=60,
        data=np.arange(15, dtype="<f4"),
    ),
}


@pytest.mark.parametrize("name", sorted(CLOUDS))
def test_point_cloud_matches_rclpy(name):
    cloud = CLOUDS[name]()
    for index, frame_id in enumerate(FRAME_IDS):
        header = make_header(frame_id, STAMPS[index % len(STAMPS)])
        assert_same_cdr(serialized.point_cloud_cdr(cloud, header), cloud_to_message(cloud, header))


@pytest.mark.parametrize("name", sorted(CLOUDS))
def test_point_cloud_round_trip(name):
    cloud = CLOUDS[name]()
    header = make_header("velodyne", (7, 8))
    message = deserialize_message(serialized.point_cloud_cdr(cloud, header), PointCloud2)
    assert message.header == header
    back = pc.from_message(message)
    assert back.fields == cloud.fields
    assert (back.height, back.width, back.point_step, back.row_step) == (
        cloud.height,
        cloud.width,
        cloud.point_step,
        cloud.row_step,
    )
    assert (back.is_bigendian, back.is_dense) == (cloud.is_bigendian, cloud.is_dense)
    assert bytes(back.data) == bytes(memoryview(cloud.data).cast("B"))


def test_point_cloud_bytes_are_a_copy():
    cloud = _labelled_cloud(10)
    data = serialized.point_cloud_cdr(cloud, make_header())
    before = bytes(data)
    cloud.data[:] = 0xFF  # type: ignore[index]
    assert data == before


def test_publishable_cloud_is_bytes_here():
    cloud = _labelled_cloud(10)
    assert isinstance(serialized.publishable_cloud(cloud, make_header()), bytes)


# --- Markers -----------------------------------------------------------------------------------


def random_table(clusters: int, seed: int) -> np.ndarray:
    """A cluster table: random boxes (some flat), centroids, and counts from 1 to 10**6."""
    rng = np.random.default_rng(seed)
    table = np.zeros(clusters, dtype=CLUSTER_DTYPE)
    table["cluster_id"] = np.arange(clusters)
    table["num_points"] = rng.integers(1, 10**6, clusters) // 10 ** rng.integers(0, 6, clusters)
    table["num_points"] = np.maximum(table["num_points"], 1)
    for axis in "xyz":
        low = rng.uniform(-80, 80, clusters).astype(np.float32)
        high = low + rng.choice([0.0, 0.01, 0.3, 7.5], clusters).astype(np.float32)
        table[f"min_{axis}"], table[f"max_{axis}"] = low, high
        table[axis] = (low + high) / 2
    return table


def test_marker_encoder_serializes_here():
    assert MarkerEncoder().serializes


def test_markers_match_builder_frame_after_frame():
    """0, 1 and many clusters, fewer (stale deletes), none (deletes only), forget."""
    encoder, builder = MarkerEncoder(), MarkerBuilder()
    frames = [0, 1, 9, 300, 40, 40, 0, 0, 5, "forget", 3, 123]
    for index, clusters in enumerate(frames):
        if clusters == "forget":
            encoder.forget()
            builder.forget()
            continue
        table = random_table(clusters, seed=index)
        header = make_header(FRAME_IDS[index % len(FRAME_IDS)], STAMPS[index % len(STAMPS)])
        assert_same_cdr(encoder.build(table, header), builder.build(table, header))


def test_markers_of_a_real_cluster_table_with_2000_clusters():
    rng = np.random.default_rng(5)
    labels = np.concatenate((np.arange(2000), rng.integers(-1, 2000, 20000))).astype(np.int32)
    xyz = rng.normal(0, 30, (len(labels), 3)).astype(np.float32)
    table = cluster_table(xyz, labels, 2000)
    encoder, builder = MarkerEncoder(), MarkerBuilder()
    header = make_header("lidar_top", (99, 1))
    encoder.build(random_table(2100, seed=0), header)  # 100 ids to delete next
    builder.build(random_table(2100, seed=0), header)
    assert_same_cdr(encoder.build(table, header), builder.build(table, header))


def test_markers_content():
    """What a display gets: boxes then labels per cluster, then deletes, ids = cluster ids."""
    encoder = MarkerEncoder()
    encoder.build(random_table(4, seed=0), make_header())
    table = random_table(2, seed=1)
    table["num_points"] = [1234, 7]
    markers = deserialize_message(encoder.build(table, make_header()), MarkerArray).markers
    assert [(m.ns, m.id, m.type, m.action) for m in markers] == [
        ("cluster_boxes", 0, Marker.CUBE, Marker.ADD),
        ("cluster_ids", 0, Marker.TEXT_VIEW_FACING, Marker.ADD),
        ("cluster_boxes", 1, Marker.CUBE, Marker.ADD),
        ("cluster_ids", 1, Marker.TEXT_VIEW_FACING, Marker.ADD),
        ("cluster_boxes", 2, Marker.ARROW, Marker.DELETE),
        ("cluster_ids", 2, Marker.ARROW, Marker.DELETE),
        ("cluster_boxes", 3, Marker.ARROW, Marker.DELETE),
        ("cluster_ids", 3, Marker.ARROW, Marker.DELETE),
    ]
    assert [markers[1].text, markers[3].text] == ["0 (1234)", "1 (7)"]
    assert markers[0].pose.orientation.w == 1.0
    for row, box, label in zip(table, markers[0:4:2], markers[1:4:2], strict=True):
        low = np.array([row[f"min_{a}"] for a in "xyz"], dtype=np.float64)
        high = np.array([row[f"max_{a}"] for a in "xyz"], dtype=np.float64)
        position, scale = box.pose.position, box.scale
        assert [position.x, position.y, position.z] == ((low + high) / 2).tolist()
        assert [scale.x, scale.y, scale.z] == np.maximum(high - low, MIN_BOX_SIDE).tolist()
        red, green, blue = (cluster_rgb(row["cluster_id"]) / 255.0).astype(np.float32).tolist()
        assert (box.color.r, box.color.g, box.color.b) == (red, green, blue)
        assert box.color.a == np.float32(BOX_ALPHA)
        position, scale = label.pose.position, label.scale
        assert [position.x, position.y] == [float(row["x"]), float(row["y"])]
        assert position.z == float(row["max_z"]) + LABEL_HEIGHT
        assert (scale.x, scale.y, scale.z) == (0.0, 0.0, LABEL_HEIGHT)
        assert (label.color.r, label.color.g, label.color.b, label.color.a) == (1.0,) * 4


def random_boxes(table: np.ndarray, seed: int) -> np.ndarray:
    """Oriented boxes for the rows of ``table``: yaws across (-pi/2, pi/2], some thin."""
    rng = np.random.default_rng(seed)
    boxes = np.zeros(len(table), dtype=BOX_DTYPE)
    boxes["cluster_id"] = table["cluster_id"]
    boxes["center_x"], boxes["center_y"] = table["x"], table["y"]
    boxes["yaw"] = rng.uniform(-np.pi / 2, np.pi / 2, len(table))
    boxes["length"] = rng.choice([0.0, 0.02, 3.5], len(table))
    boxes["width"] = boxes["length"] * rng.uniform(0, 1, len(table))
    boxes["min_z"], boxes["max_z"] = table["min_z"], table["max_z"]
    if len(table):
        boxes["yaw"][0] = np.pi / 2
    return boxes


def test_rotated_markers_match_builder_frame_after_frame():
    encoder, builder = MarkerEncoder(), MarkerBuilder()
    for index, clusters in enumerate([0, 1, 9, 300, 40, 0, 5]):
        table = random_table(clusters, seed=index)
        boxes = random_boxes(table, seed=index) if index % 3 else None  # mixed with plain
        header = make_header(FRAME_IDS[index % len(FRAME_IDS)], STAMPS[index % len(STAMPS)])
        assert_same_cdr(encoder.build(table, header, boxes), builder.build(table, header, boxes))


def test_rotated_markers_content():
    encoder = MarkerEncoder()
    encoder.build(random_table(3, seed=0), make_header())
    table = random_table(1, seed=2)
    boxes = random_boxes(table, seed=3)
    boxes["yaw"], boxes["length"], boxes["width"] = 0.5, 4.0, 0.01
    boxes["center_x"], boxes["center_y"] = 1.5, -2.5
    markers = deserialize_message(encoder.build(table, make_header(), boxes), MarkerArray).markers
    box, label = markers[0], markers[1]
    assert (box.pose.position.x, box.pose.position.y) == (1.5, -2.5)
    assert box.pose.position.z == (float(table["min_z"][0]) + float(table["max_z"][0])) / 2
    assert (box.pose.orientation.z, box.pose.orientation.w) == (
        pytest.approx(np.sin(0.25), abs=1e-15),
        pytest.approx(np.cos(0.25), abs=1e-15),
    )
    assert (box.scale.x, box.scale.y) == (4.0, 0.05)  # MIN_BOX_SIDE
    assert (label.pose.orientation.z, label.pose.orientation.w) == (0.0, 1.0)
    assert [m.pose.orientation.w for m in markers[2:]] == [1.0] * 4  # the deletes


def test_row_codec_agrees_with_the_point_cloud_writer():
    """PointField rows (string first, a uint8 inside) by the generic codec and by struct."""
    names = [b"x", b"intensity", b"ab", b"ring", b"abc", b"t", b"timestamp_ns"]
    fields = tuple(
        pc.Field(name.decode(), 3 * i, 1 + i % 8, 1 + i % 3) for i, name in enumerate(names)
    )
    cloud = pc.RawCloud(fields, height=0, width=0, point_step=0, row_step=0, data=b"")
    codec = cdr.RowCodec(PointField)
    for frame_id in FRAME_IDS:
        header = make_header(frame_id)
        start = -(-(8 + 4 + len(frame_id.encode()) + 1) // 4) * 4 + 12  # after the fields count
        expected = serialized.point_cloud_cdr(cloud, header)
        ours = codec.encode(
            expected[: 4 + start],
            len(fields),
            {
                "name": np.array(names),
                "offset": [f.offset for f in fields],
                "datatype": [f.datatype for f in fields],
                "count": [f.count for f in fields],
            },
        )
        assert len(ours) > 4 + start + 12 * len(fields)
        assert ours == expected[: len(ours)]


def test_row_codec_rejects_unknown_members():
    with pytest.raises(ValueError, match="not settable"):
        cdr.RowCodec(Marker).encode(cdr.ENCAPSULATION, 1, {"points": 0})


@pytest.fixture
def mismatching_encoding(monkeypatch):
    """Every check of our bytes against rclpy's fails (as on a ROS 2 with other definitions)."""
    monkeypatch.setattr(message_columns, "_VERIFIED", {})
    monkeypatch.setattr(message_columns, "same_serialization", lambda data, message: False)


def test_messages_instead_of_bytes_when_the_check_fails(mismatching_encoding):
    encoder, builder = MarkerEncoder(), MarkerBuilder()
    assert not encoder.serializes
    for clusters in (5, 2):
        table = random_table(clusters, seed=clusters)
        built = encoder.build(table, make_header())
        assert isinstance(built, MarkerArray)
        assert built == builder.build(table, make_header())
    cloud = _labelled_cloud(10)
    assert isinstance(serialized.publishable_cloud(cloud, make_header()), PointCloud2)


# --- A real publish ----------------------------------------------------------------------------


def test_published_bytes_arrive_as_messages():
    """Bytes through rclpy publishers, received as messages by subscriptions in this process."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=own_domain_id())
    node = rclpy.create_node("serialized_test", context=context)
    executor = SingleThreadedExecutor(context=context)
    try:
        received: dict[str, list[Any]] = {"cloud": [], "markers": []}
        qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(PointCloud2, "labeled", received["cloud"].append, qos)
        node.create_subscription(MarkerArray, "markers", received["markers"].append, qos)
        publishers = {
            "cloud": node.create_publisher(PointCloud2, "labeled", qos),
            "markers": node.create_publisher(MarkerArray, "markers", qos),
        }
        executor.add_node(node)
        header = make_header("lidar_top", (42, 7))
        cloud = _labelled_cloud(20000)
        table = random_table(50, seed=2)
        payloads = {
            "cloud": serialized.point_cloud_cdr(cloud, header),
            "markers": MarkerEncoder().build(table, header),
        }
        deadline = time.monotonic() + TIMEOUT_S
        next_publish = 0.0
        while not all(received.values()) and time.monotonic() < deadline:
            if time.monotonic() >= next_publish:
                for topic, publisher in publishers.items():
                    if not received[topic] and publisher.get_subscription_count():
                        publisher.publish(payloads[topic])
                next_publish = time.monotonic() + 0.5
            executor.spin_once(timeout_sec=0.05)
        assert all(received.values()), (
            f"nothing received on {[k for k, v in received.items() if not v]}"
        )
        message = received["cloud"][0]
        assert message.header == header
        assert pc.from_message(message).fields == cloud.fields
        assert bytes(message.data) == bytes(memoryview(cloud.data).cast("B"))
        expected = serialize_message(MarkerBuilder().build(table, header))
        assert received["markers"][0] == deserialize_message(expected, MarkerArray)
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=context)
