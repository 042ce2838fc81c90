"""Helpers for the node tests: clouds as messages, a peer node that publishes and records, marker
bookkeeping. Import only after ``pytest.importorskip("rclpy")``.

Isolation: every node under test runs in a namespace of its own (``_ros2_tools.own_namespace``)
on the test process's own domain (``_ros2_tools.own_domain_id``), and the :class:`Peer` lives in
the same namespace, so its relative topics and parameter calls (``set_parameters(NAME, ...)``)
reach only the node the test started, never a same-named node that someone else runs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header
from visualization_msgs.msg import Marker, MarkerArray

from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (
    from_message,
    from_structured,
    to_structured,
)
from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message
from gpu_euclidean_cluster.ros.node.node import EuclideanClusterNode

from ._ros2_tools import own_domain_id, own_namespace

#: Generous but bounded waits: the CI machine has 2 cores and clusters on the CPU.
TIMEOUT_S = 60.0

#: Header stamp (seconds) of the probe clouds sent by :meth:`Peer.wait_connected`.
PROBE_STAMP = 0

XYZI = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4")])

#: Output topic -> message type recorded by :class:`Peer`.
OUTPUTS = {
    "output/labeled_points": PointCloud2,
    "output/clusters": PointCloud2,
    "output/ground_points": PointCloud2,
    "output/markers": MarkerArray,
    "/diagnostics": DiagnosticArray,
}


@contextlib.contextmanager
def running_node(backend: str, **overrides: Any) -> Iterator[tuple[EuclideanClusterNode, Peer]]:
    """A context of its own with the node on ``backend`` (and start-up ``overrides``) in a
    namespace of its own, and a connected peer in that namespace, both spinning."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=own_domain_id())
    namespace = own_namespace("node")
    given = [Parameter("backend", value=backend)]
    given += [Parameter(name, value=value) for name, value in overrides.items()]
    node = EuclideanClusterNode(context=context, namespace=namespace, parameter_overrides=given)
    peer = Peer(context, (node,), namespace=namespace)
    try:
        peer.wait_connected()
        yield node, peer
    finally:
        peer.close()
        node.destroy_node()
        rclpy.shutdown(context=context)


def header(stamp_s: int, frame_id: str = "lidar") -> Header:
    """A header with a whole-second stamp (easy to match outputs to inputs)."""
    result = Header(frame_id=frame_id)
    result.stamp.sec = stamp_s
    return result


def xyzi_array(points: np.ndarray) -> np.ndarray:
    """(N, 3) or (N, 4) float points as an x y z intensity structured array."""
    points = np.asarray(points, dtype=np.float32)
    out = np.zeros(len(points), dtype=XYZI)
    for axis, name in enumerate(XYZI.names[: points.shape[1]]):
        out[name] = points[:, axis]
    return out


def cloud_message(array: np.ndarray, stamp_s: int, height: int = 1, **kwargs: Any) -> PointCloud2:
    """A PointCloud2 of a structured array (``from_structured`` keyword arguments pass through)."""
    return cloud_to_message(from_structured(array, height=height, **kwargs), header(stamp_s))


def decode(msg: PointCloud2) -> np.ndarray:
    """Every field of a received cloud as a structured array."""
    return to_structured(from_message(msg))


def blobs(centres: list[tuple[float, float, float]], per_blob: int = 20, seed: int = 0):
    """Tight blobs of ``per_blob`` points (0.05 m spread) around each centre, in x y z."""
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [np.asarray(c) + rng.uniform(-0.05, 0.05, (per_blob, 3)) for c in centres]
    ).astype(np.float32)


def alive_markers(history: list[MarkerArray]) -> set[tuple[str, int]]:
    """The (namespace, id) markers a display shows after applying ``history`` in order."""
    alive: set[tuple[str, int]] = set()
    for array in history:
        for marker in array.markers:
            key = (marker.ns, marker.id)
            if marker.action == Marker.DELETEALL:
                alive.clear()
            elif marker.action == Marker.DELETE:
                alive.discard(key)
            else:
                alive.add(key)
    return alive


def diagnostic_values(msg: DiagnosticArray) -> dict[str, str]:
    """Key-value pairs of the first status of a DiagnosticArray."""
    return {kv.key: kv.value for kv in msg.status[0].values}


class Peer:
    """A node that publishes input clouds and records every output, spun in its own thread.

    Each node (the peer's, and ``nodes``) has an executor and a thread of its own, which runs its
    callbacks one at a time, as ``rclpy.spin`` runs the node's in its own process; the nodes run
    side by side. :meth:`close` stops and joins these threads before it shuts the executors down:
    ``Executor.shutdown`` destroys the executor's guard condition without waiting for the thread
    that spins it, and a callback still running there would fail on it (``InvalidHandle: cannot
    use Destroyable because destruction was requested``, in that thread or, with a
    ``MultiThreadedExecutor``, in its pool).

    Args:
        context: the rclpy context (already initialised).
        nodes: further nodes to spin, each in a thread of its own (e.g. the node under test).
        namespace: the node under test's namespace; the peer's own node lives there too, so its
            relative topic and node names (``set_parameters("euclidean_cluster_node", ...)``)
            resolve to the node under test.
        input_topic: where to publish input clouds (default: ``<namespace>/input/points``).
    """

    def __init__(
        self,
        context: Context,
        nodes: tuple[Node, ...] = (),
        namespace: str = "",
        input_topic: str | None = None,
    ) -> None:
        self.node = rclpy.create_node("test_peer", namespace=namespace, context=context)
        self._condition = threading.Condition()
        self.received: dict[str, list[Any]] = {topic: [] for topic in OUTPUTS}
        self._clients: dict[str, AsyncParameterClient] = {}
        for topic, kind in OUTPUTS.items():  # relative names: in the namespace
            self.node.create_subscription(kind, topic, self._recorder(topic), 10)
        input_qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.publisher = self.node.create_publisher(
            PointCloud2, input_topic or "input/points", input_qos
        )
        #: done when :meth:`close` asks the spinning threads to stop (it wakes their executors)
        self._stop: Future = Future()
        self._executors: list[SingleThreadedExecutor] = []
        self._threads: list[threading.Thread] = []
        for node in (self.node, *nodes):
            executor = SingleThreadedExecutor(context=context)
            executor.add_node(node)
            thread = threading.Thread(
                target=self._spin, args=(executor,), name=f"spin {node.get_name()}", daemon=True
            )
            self._executors.append(executor)
            self._threads.append(thread)
            thread.start()

    def _spin(self, executor: SingleThreadedExecutor) -> None:
        """Run ``executor``'s callbacks until :meth:`close` (or the context's shutdown)."""
        with contextlib.suppress(ExternalShutdownException):
            executor.spin_until_future_complete(self._stop)

    def _recorder(self, topic: str) -> Callable[[Any], None]:
        def record(msg: Any) -> None:
            with self._condition:
                self.received[topic].append(msg)
                self._condition.notify_all()

        return record

    def wait_connected(self, timeout_s: float = TIMEOUT_S) -> None:
        """Wait until the node under test answers a probe cloud (stamp 0).

        Matching on the publisher side is not enough: a best-effort reader drops samples from a
        writer it has not discovered yet, so the probe is repeated until an answer comes.
        """
        probe = cloud_message(xyzi_array(np.zeros((1, 3))), PROBE_STAMP)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.publisher.get_subscription_count() > 0:
                self.publish(probe)
                try:
                    self.wait_stamp("output/labeled_points", PROBE_STAMP, timeout_s=0.5)
                    return
                except TimeoutError:
                    continue
            time.sleep(0.05)
        raise TimeoutError("the node under test did not answer")

    def wait_for(
        self, topic: str, predicate: Callable[[Any], bool], timeout_s: float = TIMEOUT_S
    ) -> Any:
        """The first message recorded on ``topic`` that satisfies ``predicate``."""
        with self._condition:
            found = self._condition.wait_for(
                lambda: next((m for m in self.received[topic] if predicate(m)), None),
                timeout_s,
            )
        if found is None:
            raise TimeoutError(f"no matching message on {topic} within {timeout_s} s")
        return found

    def wait_stamp(self, topic: str, stamp_s: int, timeout_s: float = TIMEOUT_S) -> Any:
        """The output on ``topic`` for the input stamped ``stamp_s``."""
        return self.wait_for(topic, lambda m: _stamp_of(m) == stamp_s, timeout_s)

    def publish(self, msg: PointCloud2) -> None:
        """Publish one input cloud."""
        self.publisher.publish(msg)

    def set_parameters(self, target: str, **values: Any) -> list[Any]:
        """Set ``values`` one by one on node ``target`` through its SetParameters service (as
        ``ros2 param set`` does); return one SetParametersResult per value."""
        future = self._client(target).set_parameters(
            [Parameter(k, value=v) for k, v in values.items()]
        )
        return list(_wait_future(future).results)

    def get_parameters(self, target: str, *names: str) -> list[Any]:
        """Current values of ``names`` on node ``target`` (ParameterValue messages)."""
        return list(_wait_future(self._client(target).get_parameters(list(names))).values)

    def _client(self, target: str) -> AsyncParameterClient:
        if target not in self._clients:
            client = AsyncParameterClient(self.node, target)
            if not client.wait_for_services(timeout_sec=TIMEOUT_S):
                raise TimeoutError(f"parameter services of {target} not available")
            self._clients[target] = client
        return self._clients[target]

    def close(self) -> None:
        """Stop the spinning threads and wait for them (no callback runs any more), then shut
        the executors down and destroy the peer node."""
        self._stop.set_result(None)
        for thread in self._threads:
            thread.join(TIMEOUT_S)
            if thread.is_alive():
                raise RuntimeError(
                    f"thread {thread.name!r} still spins {TIMEOUT_S:g} s after close"
                )
        for executor in self._executors:
            executor.shutdown()
        self.node.destroy_node()


def _stamp_of(msg: Any) -> int | None:
    if isinstance(msg, MarkerArray):
        return msg.markers[0].header.stamp.sec if msg.markers else None
    return msg.header.stamp.sec


def _wait_future(future: Any, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while not future.done():
        if time.monotonic() > deadline:
            raise TimeoutError("service call timed out")
        time.sleep(0.02)
    return future.result()


@contextlib.contextmanager
def started_node(command: list[str], domain_id: int) -> Iterator[subprocess.Popen]:
    """The node of ``command`` as its own process on ``domain_id`` (stdout and stderr piped
    together); killed at the end when it still runs."""
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain_id)}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=TIMEOUT_S)


@contextlib.contextmanager
def connected_peer(
    process: subprocess.Popen, domain_id: int, **peer_options: Any
) -> Iterator[Peer]:
    """A :class:`Peer` on ``domain_id`` connected to the node ``process`` runs; the test fails
    with the node's output when it does not come up."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain_id)
    peer = Peer(context, **peer_options)
    try:
        try:
            peer.wait_connected()
        except TimeoutError:
            process.kill()
            pytest.fail(f"node process did not come up: {process.communicate()[0]}")
        yield peer
    finally:
        peer.close()
        rclpy.shutdown(context=context)
