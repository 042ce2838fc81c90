"""One clustering node per LiDAR: the plan behind ``launch/multi_lidar.launch.py``, ROS-free.

:func:`plan_nodes` turns the launch arguments into one :class:`LidarNode` per input topic:

- ``input_topics``: comma-separated PointCloud2 topics (spaces around the commas are ignored);
  at least one, no empty entry, no topic twice.
- ``namespaces``: comma-separated, one per topic in the same order, or empty to derive each from
  its topic (:func:`derive_namespace`): the topic's parent path segment
  (``/sensing/lidar/top/pointcloud`` -> ``top``), or the topic's own name when it has no parent
  (``/points_raw`` -> ``points_raw``). A namespace is a ROS name: tokens of letters, digits and
  underscores, not starting with a digit, separated by ``/`` (``perception/top``; a leading ``/``
  is allowed). The namespaces must be unique: two topics that derive the same one (``/a/top/points``
  and ``/b/top/points``) are refused, naming both, so that ``namespaces:=`` is given instead.
- ``gpus``: how many GPUs to spread the nodes over; ``auto`` (or empty) asks CuPy
  (``cupy.cuda.runtime.getDeviceCount()``) and takes 1 when CuPy is missing or sees no device.
  Node ``i`` (in ``input_topics`` order) gets ``device_id = i % gpus`` (round-robin).

Every refusal is a :class:`MultiLidarError` with a one-line message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: one token of a ROS 2 name (rmw's rule: letters, digits, underscores; no leading digit)
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: ``gpus`` values that ask CuPy for the device count
AUTO = ("", "auto")


class MultiLidarError(ValueError):
    """Bad multi-LiDAR launch arguments; the message is one line for the user."""


@dataclass(frozen=True)
class LidarNode:
    """One node of the plan: the topic it clusters, its namespace and its CUDA device."""

    input_topic: str
    namespace: str
    device_id: int


def split_list(text: str, what: str) -> list[str]:
    """The entries of a comma-separated launch argument, stripped; empty text gives []."""
    if not text.strip():
        return []
    entries = [entry.strip() for entry in text.split(",")]
    if any(not entry for entry in entries):
        raise MultiLidarError(f"{what}: empty entry in {text!r} (comma-separated, no blanks)")
    return entries


def is_valid_namespace(namespace: str) -> bool:
    """True for a ROS namespace: ``/``-separated name tokens, optionally a leading ``/``."""
    tokens = namespace[1:] if namespace.startswith("/") else namespace
    return bool(tokens) and all(_TOKEN.fullmatch(token) for token in tokens.split("/"))


def derive_namespace(topic: str) -> str:
    """The namespace of ``topic``'s node: its parent path segment, or its own name when the
    topic has no parent (see the module docstring). Raises MultiLidarError when the result is
    not a valid namespace token."""
    segments = [s for s in topic.strip().split("/") if s]
    if not segments:
        raise MultiLidarError(f"input_topics: {topic!r} is not a topic name")
    namespace = segments[-2] if len(segments) >= 2 else segments[-1]
    if not _TOKEN.fullmatch(namespace):
        raise MultiLidarError(
            f"namespaces: {namespace!r} derived from {topic} is not a valid ROS name; "
            "give namespaces:=..."
        )
    return namespace


def detect_gpus() -> int:
    """The number of CUDA devices CuPy sees; 1 without CuPy or without a device."""
    try:
        import cupy

        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy, no driver, no device: one (CPU or the only GPU)
        return 1
    return max(count, 1)


def parse_gpus(text: str) -> int:
    """The ``gpus`` argument: ``auto``/empty (:func:`detect_gpus`) or a whole number >= 1."""
    value = text.strip().lower()
    if value in AUTO:
        return detect_gpus()
    try:
        gpus = int(value)
    except ValueError:
        gpus = 0
    if gpus < 1:
        raise MultiLidarError(f"gpus: {text!r} is not auto or a whole number >= 1")
    return gpus


def spread_devices(count: int, gpus: int) -> list[int]:
    """Round-robin ``device_id`` of ``count`` nodes over ``gpus`` devices: ``i % gpus``."""
    if gpus < 1:
        raise MultiLidarError(f"gpus: {gpus} is not >= 1")
    return [index % gpus for index in range(count)]


def plan_nodes(input_topics: str, namespaces: str = "", gpus: str = "auto") -> list[LidarNode]:
    """One :class:`LidarNode` per topic of the launch arguments (see the module docstring)."""
    topics = split_list(input_topics, "input_topics")
    if not topics:
        raise MultiLidarError("input_topics: give at least one PointCloud2 topic")
    repeated = sorted({t for t in topics if topics.count(t) > 1})
    if repeated:
        raise MultiLidarError(f"input_topics: {', '.join(repeated)} given more than once")
    for topic in topics:
        if not is_valid_namespace(topic.lstrip("~")):  # a topic name is a namespace-like path
            raise MultiLidarError(f"input_topics: {topic!r} is not a valid topic name")
    given = split_list(namespaces, "namespaces")
    if given and len(given) != len(topics):
        raise MultiLidarError(
            f"namespaces: {len(given)} given for {len(topics)} input_topics; "
            "give one per topic, in the same order, or none to derive them"
        )
    for namespace in given:
        if not is_valid_namespace(namespace):
            raise MultiLidarError(
                f"namespaces: {namespace!r} is not a valid ROS namespace (tokens of letters, "
                "digits and underscores, not starting with a digit, separated by /)"
            )
    chosen = given or [derive_namespace(topic) for topic in topics]
    first: dict[str, str] = {}
    for topic, namespace in zip(topics, chosen, strict=True):
        key = namespace.strip("/")
        if key in first:
            how = "given" if given else "derived"
            raise MultiLidarError(
                f"namespaces: {key!r} {how} for both {first[key]} and {topic}; "
                "namespaces must be unique (give namespaces:=...)"
            )
        first[key] = topic
    devices = spread_devices(len(topics), parse_gpus(gpus))
    return [
        LidarNode(topic, namespace, device)
        for topic, namespace, device in zip(topics, chosen, devices, strict=True)
    ]


def describe(nodes: Sequence[LidarNode], node_name: str) -> list[str]:
    """One line per node for the launch log: topic -> node, device."""
    return [
        f"{n.input_topic} -> /{n.namespace.strip('/')}/{node_name} (device_id {n.device_id})"
        for n in nodes
    ]
