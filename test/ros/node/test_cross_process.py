"""Large clouds between processes by default.

The node runs as its own process, started as a user starts it: the
``euclidean_cluster_node`` console script, no arguments but a namespace of the test's own (so that
nothing of the test reaches a node it did not start), default parameters (backend ``auto``: the
CPU without a GPU) and a default environment (no RMW or Fast DDS setting; only the test process's
ROS_DOMAIN_ID). The real kitti_000001 frame (120 268 points, about 1.9 MB) comes from *another*
process, the package's own ``replay`` tool playing a bag written by ``gpu-euclidean-cluster
make-bag``, once best-effort (as a LiDAR driver with sensor-data QoS) and once reliable (as a bag
player). The labelled cloud (about 2.9 MB) must reach this test process, a default-configured
participant, and decode with the reference reader ``sensor_msgs_py.point_cloud2`` to PCL's 1724
clusters at 0.5 m with the input's x/y/z bytes. Default-configured ``ros2`` CLI calls must still
see the node, and set its ``labeled_layout`` to ``compact`` live: a stand-in LiDAR driver
(``_stock_publisher.py``, plain rclpy, Fast DDS defaults but the publisher-side fix the node's
warning names, without which Fast DDS drops a 1.9 MB sample: ``test_third_party_publisher``) then
sends the frame, and the labelled cloud carries x, y, z and cluster_id only, the same bytes and
labels.

Note: ``replay`` exits as soon as it has published its last message; it waits for reliable
readers' acknowledgements only, so a best-effort reader (the node's default input QoS) can lose
that last message (here: 2 of 6 single-frame replays with the 2 cores busy, none with a 2 s pause
before exiting; the publishing participant, and with it the shared-memory segment holding the
sample, is gone before the reader took it). Each bag therefore holds the frame three times, one
second apart, and the test needs one labelled cloud of them.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import PointCloud2  # noqa: E402

from gpu_euclidean_cluster import EuclideanClusterer  # noqa: E402
from gpu_euclidean_cluster.core.config import ClusterConfig  # noqa: E402
from gpu_euclidean_cluster.ros.transport import ENV, LARGE_CLOUD_TRANSPORTS  # noqa: E402

from ..._ros2_tools import (  # noqa: E402
    BIN,
    RMW_SETTINGS,
    SPIN,
    Background,
    describe,
    own_namespace,
    private_domain,
    retry,
    ros2,
    ros2_env,
    run,
    user_env,
)

pytestmark = [
    pytest.mark.ros,
    pytest.mark.skipif(
        not all((BIN / n).exists() for n in ("euclidean_cluster_node", "gpu-euclidean-cluster")),
        reason="the package's console scripts are not installed beside this Python "
        "(pip install -e '.[ros,test]', as the README does)",
    ),
]

FRAME = "kitti_000001.bin"
D_TH = 0.5
#: the node's namespace, one of this test's own
NAMESPACE = own_namespace("cross_process")
NODE = f"{NAMESPACE}/euclidean_cluster_node"
#: the node subscribes ``input/points`` relative to its namespace
INPUT_TOPIC = f"{NAMESPACE}/input/points"
OUTPUTS = (f"{NAMESPACE}/output/labeled_points", f"{NAMESPACE}/output/clusters")
#: clustering kitti_000001 on 2 CPU cores takes a few seconds; discovery under load, too
TIMEOUT_S = 120.0
#: what the node logs when it chose the large-cloud transport itself (nothing was inherited)
OWN_TRANSPORT = "transport: Fast DDS with FASTDDS_BUILTIN_TRANSPORTS=DEFAULT?sockets_size=8MB ("
RELIABILITIES = ("best_effort", "reliable")
#: frames per bag, one a second of bag time, stamped from BAG_START_S x (1, 2, ...) seconds
FRAMES_PER_BAG = 3
BAG_RATE_HZ = 1.0
BAG_START_S = 1000
#: the stand-in driver and the stamps (s) of its frames in the compact-layout test
DRIVER = Path(__file__).resolve().parents[2] / "_stock_publisher.py"
DRIVER_START_S = 5000


@pytest.fixture(scope="module")
def domain() -> Iterator[int]:
    with private_domain() as domain_id:
        yield domain_id


@pytest.fixture(scope="module")
def frame(load_frame) -> np.ndarray:
    """kitti_000001's x, y, z (skips when the data folder lacks it)."""
    return load_frame(FRAME)


@pytest.fixture(scope="module")
def bags(frame, lidar_data_dir: Path, tmp_path_factory) -> dict[str, tuple[Path, set[int]]]:
    """Per reliability, a ROS 1 bag of the frame on the node's input topic, written by the
    package's CLI, and the header stamps (s) of its messages: distinct per bag, so that an output
    is attributed to the replay that caused it.

    Each bag repeats the frame FRAMES_PER_BAG times: ``replay`` exits right after publishing its
    last message, and a best-effort reader (the node's default input QoS) can lose that one (see
    the module's notes); the earlier ones are published while the process still lives.
    """
    folder = tmp_path_factory.mktemp("bags")
    bags = {}
    for index, reliability in enumerate(RELIABILITIES):
        path = folder / f"kitti_000001_{reliability}.bag"
        start_s = BAG_START_S * (index + 1)
        command = [str(BIN / "gpu-euclidean-cluster"), "make-bag", str(path)]
        command += [str(lidar_data_dir / FRAME)] * FRAMES_PER_BAG
        command += ["--topic", INPUT_TOPIC, "--rate-hz", str(BAG_RATE_HZ)]
        command += ["--start-time", str(start_s)]
        done = run(command, user_env(0), timeout_s=TIMEOUT_S)
        assert done.returncode == 0, describe(done)
        stamps = {start_s + round(i / BAG_RATE_HZ) for i in range(FRAMES_PER_BAG)}
        bags[reliability] = (path, stamps)
    return bags


@pytest.fixture(scope="module")
def node(domain, tmp_path_factory) -> Iterator[Background]:
    """``euclidean_cluster_node`` with no arguments but its namespace, in a user's default
    environment."""
    log = tmp_path_factory.mktemp("node") / "node.log"
    command = [str(BIN / "euclidean_cluster_node"), "--ros-args", "-r", f"__ns:={NAMESPACE}"]
    process = Background(command, user_env(domain), log)
    try:
        yield process
    finally:
        process.stop()


class Recorder:
    """A default-configured subscriber of the node's outputs (``topics``, PointCloud2) in this
    process (reliable, depth 10, as RViz or a downstream node would subscribe), spun in its own
    thread."""

    def __init__(self, domain: int, topics: tuple[str, ...] = OUTPUTS) -> None:
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = rclpy.create_node("cross_process_recorder", context=self.context)
        self._condition = threading.Condition()
        self.received: dict[str, list[PointCloud2]] = {topic: [] for topic in topics}
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.subscriptions = [
            self.node.create_subscription(PointCloud2, topic, self._recorder(topic), qos)
            for topic in topics
        ]
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self.executor.spin, daemon=True)
        self._thread.start()

    def _recorder(self, topic: str):
        def record(msg: PointCloud2) -> None:
            with self._condition:
                self.received[topic].append(msg)
                self._condition.notify_all()

        return record

    def wait(
        self, topic: str, stamps: set[int], timeout_s: float = TIMEOUT_S
    ) -> PointCloud2 | None:
        """The first message on ``topic`` stamped (whole seconds) with one of ``stamps``; None if
        none comes in time."""

        def first() -> PointCloud2 | None:
            return next((m for m in self.received[topic] if m.header.stamp.sec in stamps), None)

        with self._condition:
            return self._condition.wait_for(first, timeout_s)

    def stamps(self, topic: str) -> list[int]:
        """The stamps (s) of everything received on ``topic`` so far."""
        with self._condition:
            return [m.header.stamp.sec for m in self.received[topic]]

    def matched(self) -> bool:
        """Whether every output subscription has discovered the node's publisher."""
        return all(s.get_publisher_count() > 0 for s in self.subscriptions)

    def close(self) -> None:
        self.executor.shutdown()
        self._thread.join(30)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


@pytest.fixture(scope="module")
def recorder(domain, node) -> Iterator[Recorder]:
    with pytest.MonkeyPatch.context() as patch:
        for name in RMW_SETTINGS:  # a stock participant, whatever earlier tests set in os.environ
            patch.delenv(name, raising=False)
        recorder = Recorder(domain)
    try:
        yield recorder
    finally:
        recorder.close()


def _wait_matched(recorder: Recorder, node: Background) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not recorder.matched():
        assert node.alive(), f"the node exited:\n{node.output()}"
        assert time.monotonic() < deadline, f"its outputs were not discovered:\n{node.output()}"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("reliability", RELIABILITIES)
def test_labelled_cloud_of_a_frame_from_another_process(
    reliability, frame, bags, node, recorder, domain, point_cloud2, pcl_reference
):
    bag, stamps = bags[reliability]
    _wait_matched(recorder, node)
    command = [str(BIN / "replay"), str(bag), "--qos-reliability", reliability, "-q"]
    command += ["--wait-for-subscribers", str(TIMEOUT_S)]
    replayed = run(command, user_env(domain), timeout_s=2 * TIMEOUT_S)
    assert replayed.returncode == 0, describe(replayed)
    assert f"replay done: {FRAMES_PER_BAG} frames" in replayed.stderr, describe(replayed)
    assert OWN_TRANSPORT in replayed.stderr, describe(replayed)  # replay chose it itself

    labeled = recorder.wait(OUTPUTS[0], stamps)
    assert labeled is not None, (
        f"no labelled cloud within {TIMEOUT_S:g} s of the {reliability} replay (stamps "
        f"{sorted(stamps)}; received {recorder.stamps(OUTPUTS[0])}):\n{node.output()}"
    )
    clusters = recorder.wait(OUTPUTS[1], {labeled.header.stamp.sec})
    assert clusters is not None and clusters.header == labeled.header

    points = point_cloud2.read_points(labeled, field_names=("x", "y", "z", "cluster_id"))
    assert labeled.width * labeled.height == len(points) == len(frame)
    xyz = np.stack([np.asarray(points[axis], dtype=np.float32) for axis in "xyz"], axis=1)
    assert xyz.tobytes() == frame.tobytes()  # the node passes every input byte through
    ids = np.asarray(points["cluster_id"])
    expected = pcl_reference[FRAME][D_TH]
    assert expected == 1724
    assert len(np.unique(ids[ids >= 0])) == expected
    assert ids.min() == 0 and ids.max() == expected - 1  # every point kept (min size 1)
    # and the very labels of the library with the node's defaults, in this process
    library = EuclideanClusterer(ClusterConfig(d_th=D_TH), "cpu").cluster(frame).labels
    np.testing.assert_array_equal(ids, np.asarray(library))
    assert clusters.width * clusters.height == expected
    assert OWN_TRANSPORT in node.output()  # the node chose it itself, nothing was set


def test_default_configured_cli_still_sees_the_node(ros_tools, node, domain):
    env = ros2_env(domain)
    assert not {"FASTDDS_BUILTIN_TRANSPORTS", "FASTDDS_DEFAULT_PROFILES_FILE"} & set(env)
    wanted = {INPUT_TOPIC, *OUTPUTS, "/diagnostics"}
    retry(
        lambda: ros2(env, "topic", "list", *SPIN),
        lambda done: wanted <= set(done.stdout.split()) or not node.alive(),
    )
    assert node.alive(), node.output()
    retry(
        lambda: ros2(env, "node", "list", *SPIN),
        lambda done: NODE in done.stdout.split(),
    )
    done = retry(
        lambda: ros2(env, "param", "get", *SPIN, NODE, "d_th"),
        lambda done: "Double value is" in done.stdout,
    )
    assert done.stdout.strip() == f"Double value is: {D_TH}"


@pytest.mark.slow
def test_compact_layout_set_live_on_a_frame_from_a_stock_driver(
    frame, lidar_data_dir, node, recorder, domain, point_cloud2
):
    """``ros2 param set`` (default-configured CLI) switches the running node to the compact
    layout; a frame from a stock driver then comes back as x, y, z (the input's bytes) and the
    library's labels, 16 bytes a point."""
    _wait_matched(recorder, node)
    env = ros2_env(domain)
    done = retry(
        lambda: ros2(env, "param", "set", *SPIN, NODE, "labeled_layout", "compact"),
        lambda done: "Set parameter successful" in done.stdout or not node.alive(),
    )
    assert "Set parameter successful" in done.stdout, describe(done)
    try:
        driver_env = {**user_env(domain), ENV: LARGE_CLOUD_TRANSPORTS}
        command = [sys.executable, str(DRIVER), str(lidar_data_dir / FRAME)]
        command += ["--topic", INPUT_TOPIC, "--count", str(FRAMES_PER_BAG), "--rate-hz", "1"]
        command += ["--stamp", str(DRIVER_START_S)]
        published = run(command, driver_env, timeout_s=2 * TIMEOUT_S)
        assert published.returncode == 0, describe(published)
        stamps = set(range(DRIVER_START_S, DRIVER_START_S + FRAMES_PER_BAG))
        labeled = recorder.wait(OUTPUTS[0], stamps)
        assert labeled is not None, (
            f"no labelled cloud of the driver's frames (stamps {sorted(stamps)}; received "
            f"{recorder.stamps(OUTPUTS[0])}):\n{node.output()}"
        )
        assert [f.name for f in labeled.fields] == ["x", "y", "z", "cluster_id"]
        assert labeled.point_step == 16 and labeled.width * labeled.height == len(frame)
        points = point_cloud2.read_points(labeled, field_names=("x", "y", "z", "cluster_id"))
        xyz = np.stack([np.asarray(points[axis], dtype=np.float32) for axis in "xyz"], axis=1)
        assert xyz.tobytes() == frame.tobytes()
        library = EuclideanClusterer(ClusterConfig(d_th=D_TH), "cpu").cluster(frame).labels
        np.testing.assert_array_equal(np.asarray(points["cluster_id"]), np.asarray(library))
    finally:
        retry(
            lambda: ros2(env, "param", "set", *SPIN, NODE, "labeled_layout", "full"),
            lambda done: "Set parameter successful" in done.stdout or not node.alive(),
        )
