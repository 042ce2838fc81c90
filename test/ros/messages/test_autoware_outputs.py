"""Autoware's object messages from the node as a user runs it: three processes.

The node runs as its own process (the ``euclidean_cluster_node`` script, CPU backend, d_th 0.5,
use_height true) with the perception message packages (built from ``../shared/msgs``; skips with
the reason without them); a reader process subscribes to ``output/objects_with_feature``,
``output/objects`` and ``output/detections`` with the generated message types; a publisher
process publishes kitti_000001 (read with the package's loader) on ``input/points``. Every object
must be the library's cluster of the same frame: the feature cloud holds exactly that cluster's
input records (byte for byte, input order), the pose its centroid, the box its extents.

Run as ``python -m test.ros.messages.test_autoware_outputs publish|read ...`` the module is one of
those processes (the test starts them so).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from gpu_euclidean_cluster import euclidean_cluster  # noqa: E402
from gpu_euclidean_cluster.core.cluster_stats import cluster_table  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.loader import load_points  # noqa: E402

from ..._perception_msgs import perception_msgs_env  # noqa: E402
from ..._ros2_tools import BIN, Background, own_namespace, private_domain, user_env  # noqa: E402

pytestmark = [pytest.mark.ros, pytest.mark.slow]

FRAME = "kitti_000001.bin"
D_TH = 0.5
#: relative to the namespace all processes of the test share (one of its own)
INPUT = "input/points"
TOPICS = ("output/objects_with_feature", "output/objects", "output/detections")
FIRST_STAMP = 100
#: What the message packages' setup.bash sets for a process that uses them.
MSGS_VARIABLES = ("PYTHONPATH", "LD_LIBRARY_PATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH")
TIMEOUT_S = 45.0
REPO = Path(__file__).resolve().parents[3]
XYZI = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4")])


def frame_points(path: Path) -> np.ndarray:
    """The frame as the x y z intensity records the publisher sends."""
    cloud = load_points(path)
    points = np.zeros(len(cloud), dtype=XYZI)
    for axis, name in enumerate("xyz"):
        points[name] = cloud.xyz[:, axis]
    points["intensity"] = cloud.fields["intensity"]
    return points


@pytest.fixture(scope="module")
def msgs_env() -> dict[str, str]:
    env, reason = perception_msgs_env()
    if env is None:
        pytest.skip(reason)
    return env


def wait_until(condition, timeout_s: float, what: str, *logs: Background) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout_s:g} s\n" + "\n".join(
                f"--- {log.log.name}:\n{log.output()[-3000:]}" for log in logs
            ))  # fmt: skip
        time.sleep(0.1)


def test_node_publishes_autowares_objects_of_the_librarys_clusters(
    msgs_env, lidar_data_dir, tmp_path
):
    path = lidar_data_dir / FRAME
    if not path.is_file():
        pytest.skip(f"LiDAR frame {path} not found (set LIDAR_DATA_DIR to the data folder)")
    summary = tmp_path / "received.npz"
    module = [str(BIN / "python"), "-m", "test.ros.messages.test_autoware_outputs"]
    namespace = own_namespace("autoware_outputs")
    with private_domain() as domain:
        env = user_env(domain)
        env.update({k: msgs_env[k] for k in MSGS_VARIABLES if k in msgs_env})
        node = Background(
            [str(BIN / "euclidean_cluster_node"), "--ros-args", "-p", "backend:=cpu",
             "-p", "qos_reliability:=reliable", "-p", f"d_th:={D_TH}", "-p", "use_height:=true",
             "-r", f"__ns:={namespace}"],
            env, tmp_path / "node.log",
        )  # fmt: skip
        reader = publisher = None
        try:
            reader = Background(
                [*module, "read", str(summary), namespace], env, tmp_path / "reader.log", cwd=REPO
            )
            wait_until(lambda: "ready" in reader.output(), TIMEOUT_S, "reader not ready", reader,
                       node)  # fmt: skip
            publisher = Background(
                [*module, "publish", str(path), namespace],
                env,
                tmp_path / "publisher.log",
                cwd=REPO,
            )
            wait_until(lambda: not reader.alive(), TIMEOUT_S, "no objects", reader, node, publisher)
            assert reader.process.returncode == 0, reader.output()
        finally:
            for process in (publisher, reader):
                if process is not None:
                    process.close()
            node.stop()
    log = (tmp_path / "node.log").read_text()
    assert (
        "outputs (each while it has a subscriber): output/labeled_points, output/clusters, "
        "output/ground_points, output/objects_with_feature, output/objects, output/detections, "
        "output/markers\n"
    ) in log, log

    points = frame_points(path)
    xyz = np.stack([points[a] for a in "xyz"], axis=1)
    labels = euclidean_cluster(xyz, D_TH, backend="cpu").labels
    clusters = int(labels.max()) + 1
    table = cluster_table(xyz, labels, clusters)
    order = np.argsort(labels, kind="stable")[np.count_nonzero(labels < 0) :]
    centroids = np.stack([table[a] for a in "xyz"], axis=1).astype(np.float64)
    extents = np.stack(
        [table[f"max_{a}"].astype(np.float64) - table[f"min_{a}"] for a in "xyz"], axis=1
    )
    got = dict(np.load(summary))
    assert clusters > 1000  # about 1700 at d_th 0.5
    # DetectedObjectsWithFeature: one object per cluster, its points byte for byte
    assert np.array_equal(got["feature_width"], np.bincount(labels[labels >= 0]))
    assert got["feature_records"].tobytes() == points[order].tobytes()
    assert np.array_equal(got["feature_position"], centroids)
    assert np.array_equal(got["feature_dimensions"], extents)
    assert set(got["feature_cloud"].tolist()) == {
        f"height 1 point_step 16 dense True bigendian False frame velodyne "
        f"fields {[(n, 4 * i, 7, 1) for i, n in enumerate(XYZI.names)]}"
    }
    assert set(got["feature_object"].tolist()) == {
        "existence 0.0 classification [(0, 1.0)] orientation (0.0, 0.0, 0.0, 1.0) shape 0"
    }
    # DetectedObjects: the same objects
    assert np.array_equal(got["objects_position"], centroids)
    assert np.array_equal(got["objects_dimensions"], extents)
    assert set(got["objects_object"].tolist()) == set(got["feature_object"].tolist())
    # Detection3DArray: id, box and the UNKNOWN hypothesis at the centroid
    assert got["detections_id"].tolist() == [str(k) for k in range(clusters)]
    lows, highs = (
        np.stack([table[f"{end}_{a}"].astype(np.float64) for a in "xyz"], axis=1)
        for end in ("min", "max")
    )
    assert np.array_equal(got["detections_center"], (lows + highs) / 2.0)
    assert np.array_equal(got["detections_size"], extents)
    assert np.array_equal(got["detections_hypothesis_position"], centroids)
    assert set(got["detections_hypothesis"].tolist()) == {"UNKNOWN 1.0"}
    assert got["stamps"].tolist() == [got["stamps"][0]] * 3  # all three of one frame


# ------------------------------------------------------------------------- the child processes


def _publish(frame: str, namespace: str) -> int:
    """Publish the frame (reliable, frame_id velodyne) until the reader has its objects."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import PointCloud2
    from std_msgs.msg import Header

    from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_structured
    from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message

    cloud = from_structured(frame_points(Path(frame)), is_dense=True)
    rclpy.init()
    node = rclpy.create_node("kitti_publisher", namespace=namespace)
    qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.RELIABLE)
    publisher = node.create_publisher(PointCloud2, INPUT, qos)
    deadline = time.monotonic() + TIMEOUT_S
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the node's reader discovers this writer too
    for stamp in range(FIRST_STAMP, FIRST_STAMP + 20):  # until the test stops this process
        header = Header(frame_id="velodyne")
        header.stamp.sec = stamp
        publisher.publish(cloud_to_message(cloud, header))
        print(f"published {stamp}", flush=True)
        time.sleep(1.5)
    return 0


def _read(summary: str, namespace: str) -> int:
    """Receive the three outputs of one frame and write what they hold to ``summary`` (npz)."""
    import threading

    from autoware_perception_msgs.msg import DetectedObjects
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from tier4_perception_msgs.msg import DetectedObjectsWithFeature
    from vision_msgs.msg import Detection3DArray

    rclpy.init()
    node = rclpy.create_node("object_reader", namespace=namespace)
    received: dict[str, dict[int, object]] = {topic: {} for topic in TOPICS}
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    kinds = (DetectedObjectsWithFeature, DetectedObjects, Detection3DArray)
    for topic, kind in zip(TOPICS, kinds, strict=True):
        node.create_subscription(
            kind, topic, lambda m, t=topic: received[t].setdefault(m.header.stamp.sec, m), qos
        )
    executor = rclpy.executors.SingleThreadedExecutor()
    executor.add_node(node)
    spinning = threading.Thread(target=executor.spin)
    spinning.start()
    try:
        return _receive(node, received, summary)
    finally:
        executor.shutdown()
        spinning.join()
        node.destroy_node()
        rclpy.try_shutdown()


def _receive(node, received: dict[str, dict[int, object]], summary: str) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while any(node.count_publishers(t) == 0 for t in TOPICS) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # the node's writers discover these readers too
    print("ready", flush=True)
    while time.monotonic() < deadline:
        common = set.intersection(*(set(received[t]) for t in TOPICS))
        if common:
            stamp = min(common)
            break
        time.sleep(0.05)
    else:
        print(f"timed out: {[sorted(received[t]) for t in TOPICS]}", flush=True)
        return 3
    features, objects, detections = (received[t][stamp] for t in TOPICS)
    np.savez(
        summary,
        stamps=np.array([m.header.stamp.sec for m in (features, objects, detections)]),
        **_feature_summary(features),
        **_object_summary("objects", objects.objects),
        **_detection_summary(detections),
    )
    return 0


def _vector(items, get) -> np.ndarray:
    return np.array([[getattr(get(item), a) for a in "xyz"] for item in items], dtype=np.float64)


def _object_summary(prefix: str, items) -> dict[str, np.ndarray]:
    def describe(item) -> str:
        q = item.kinematics.pose_with_covariance.pose.orientation
        classes = [(c.label, c.probability) for c in item.classification]
        return (f"existence {item.existence_probability} classification {classes} "
                f"orientation {(q.x, q.y, q.z, q.w)} shape {item.shape.type}")  # fmt: skip

    return {
        f"{prefix}_position": _vector(
            items, lambda o: o.kinematics.pose_with_covariance.pose.position
        ),
        f"{prefix}_dimensions": _vector(items, lambda o: o.shape.dimensions),
        f"{prefix}_object": np.array([describe(o) for o in items]),
    }


def _feature_summary(message) -> dict[str, np.ndarray]:
    items = message.feature_objects
    clouds = [item.feature.cluster for item in items]

    def describe(cloud) -> str:
        assert cloud.row_step == cloud.width * cloud.point_step
        assert cloud.header == message.header
        fields = [(f.name, f.offset, f.datatype, f.count) for f in cloud.fields]
        return (
            f"height {cloud.height} point_step {cloud.point_step} dense {cloud.is_dense} "
            f"bigendian {cloud.is_bigendian} frame {cloud.header.frame_id} fields {fields}"
        )

    return {
        "feature_width": np.array([cloud.width for cloud in clouds]),
        "feature_records": np.frombuffer(b"".join(bytes(c.data) for c in clouds), np.uint8),
        "feature_cloud": np.array([describe(cloud) for cloud in clouds]),
        **_object_summary("feature", [item.object for item in items]),
    }


def _detection_summary(message) -> dict[str, np.ndarray]:
    items = message.detections
    for item in items:
        assert item.header == message.header and len(item.results) == 1
    return {
        "detections_id": np.array([item.id for item in items]),
        "detections_center": _vector(items, lambda d: d.bbox.center.position),
        "detections_size": _vector(items, lambda d: d.bbox.size),
        "detections_hypothesis_position": _vector(items, lambda d: d.results[0].pose.pose.position),
        "detections_hypothesis": np.array(
            [f"{d.results[0].hypothesis.class_id} {d.results[0].hypothesis.score}" for d in items]
        ),
    }  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("publish", "read"))
    parser.add_argument("path")
    parser.add_argument("namespace")
    options = parser.parse_args()
    role = _publish if options.role == "publish" else _read
    sys.exit(role(options.path, options.namespace))
