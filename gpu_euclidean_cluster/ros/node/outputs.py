"""The node's outputs: publishers, and per frame each output built and published only while it
has a subscriber.

Topics (relative to the node's namespace):

- ``output/labeled_points``, ``output/clusters`` (sensor_msgs/PointCloud2, always available);
- ``output/ground_points`` (sensor_msgs/PointCloud2: the input records of the ground points,
  with ``remove_ground``);
- ``output/objects_with_feature`` (tier4_perception_msgs/DetectedObjectsWithFeature),
  ``output/objects`` (autoware_perception_msgs/DetectedObjects) and ``output/detections``
  (vision_msgs/Detection3DArray), each where its message package is installed (see
  :mod:`..messages.object_messages` for what they hold);
- ``output/markers`` (visualization_msgs/MarkerArray), published last.

With oriented boxes (``FramePipeline.process(..., oriented_boxes=True)``: the node's
``pose_estimation``), the object messages and the markers carry the frame's ``boxes`` (yaw,
length, width: see :mod:`..messages.object_messages`), and ``output/clusters`` has their columns.

Everything goes out as CDR bytes (:mod:`..messages.serialized`; the others built column-wise from
each message's column spec: :mod:`..messages.columns`).
An output without a subscriber is not built at all. The clusters' points of
``output/objects_with_feature`` come grouped by cluster from the frame layer (on the GPU backend
gathered there), which the node asks for while that output has a subscriber
(:meth:`NodeOutputs.groups_records`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rclpy.node import Node
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header
from visualization_msgs.msg import MarkerArray

from ...core.frame import GroupedRecords, group_records
from ...frame import FrameOutput
from ...pointcloud_io.pointcloud2 import RawCloud, point_bytes, read_fields, select_points
from ..messages import BUILD_MESSAGE_PACKAGES
from ..messages.columns import ArrayEncoder
from ..messages.markers import MarkerEncoder
from ..messages.object_messages import (
    DETECTED_OBJECTS,
    DETECTED_OBJECTS_WITH_FEATURE,
    DETECTION3D_ARRAY,
)
from ..messages.serialized import publishable_cloud

LABELED_POINTS = "output/labeled_points"
CLUSTERS = "output/clusters"
OBJECTS_WITH_FEATURE = "output/objects_with_feature"
OBJECTS = "output/objects"
DETECTIONS = "output/detections"
MARKERS = "output/markers"
GROUND_POINTS = "output/ground_points"


@dataclass(frozen=True)
class PublishTimings:
    """One frame's publication.

    Attributes:
        published: ``time.monotonic()`` when every output but the markers was out (the end of
            the node's receive-to-publish latency).
        publish_ms: building and publishing the clouds and object messages.
        markers_ms: building and publishing the markers, after them.
    """

    published: float
    publish_ms: float
    markers_ms: float


class NodeOutputs:
    """The output publishers of ``node`` and their per-frame publication.

    Creating it creates the publishers of every output whose message package is installed and
    logs one info line: the outputs published, and those that cannot be, with the reason.
    """

    def __init__(self, node: Node, depth: int) -> None:
        """Args:
        node: creates the publishers and logs.
        depth: history depth of every output publisher (reliable).
        """
        self._labeled = node.create_publisher(PointCloud2, LABELED_POINTS, depth)
        self._clusters = node.create_publisher(PointCloud2, CLUSTERS, depth)
        self._ground = node.create_publisher(PointCloud2, GROUND_POINTS, depth)
        self._objects_with_feature: tuple[Any, ArrayEncoder] | None = None
        self._objects: tuple[Any, ArrayEncoder] | None = None
        self._detections: tuple[Any, ArrayEncoder] | None = None
        unavailable = []
        for attribute, topic, spec in (
            ("_objects_with_feature", OBJECTS_WITH_FEATURE, DETECTED_OBJECTS_WITH_FEATURE),
            ("_objects", OBJECTS, DETECTED_OBJECTS),
            ("_detections", DETECTIONS, DETECTION3D_ARRAY),
        ):
            why = spec.missing()
            if why is not None:
                unavailable.append(f"{topic} ({why})")
                continue
            publisher = node.create_publisher(spec.message, topic, depth)
            setattr(self, attribute, (publisher, ArrayEncoder(spec)))
        self._markers = node.create_publisher(MarkerArray, MARKERS, depth)
        self._marker_encoder = MarkerEncoder()
        self._topics = [
            topic
            for topic, publisher in (
                (LABELED_POINTS, self._labeled),
                (CLUSTERS, self._clusters),
                (GROUND_POINTS, self._ground),
                (OBJECTS_WITH_FEATURE, self._objects_with_feature),
                (OBJECTS, self._objects),
                (DETECTIONS, self._detections),
                (MARKERS, self._markers),
            )
            if publisher is not None
        ]
        line = f"outputs (each while it has a subscriber): {', '.join(self._topics)}"
        if unavailable:
            line += (
                f"; not published: {', '.join(unavailable)}; to get them, {BUILD_MESSAGE_PACKAGES}"
            )
        node.get_logger().info(line)

    def groups_records(self) -> bool:
        """Whether the next frame should be processed with its records grouped by cluster
        (``FramePipeline.process(..., group_records=True)``): while
        ``output/objects_with_feature`` has a subscriber."""
        return self._objects_with_feature is not None and _listened(self._objects_with_feature[0])

    @property
    def topics(self) -> list[str]:
        """The output topics this node publishes (relative names)."""
        return list(self._topics)

    def publish(self, output: FrameOutput, header: Header, cloud: RawCloud) -> PublishTimings:
        """Build and publish each output of ``output`` that has a subscriber.

        Args:
            output: the frame's outputs.
            header: the input's header, which every output keeps.
            cloud: the input cloud ``output`` came from (the object clouds copy its records).
        """
        started = time.perf_counter()
        table, boxes = output.table, output.boxes
        if _listened(self._labeled):
            self._labeled.publish(publishable_cloud(output.labeled, header))
        if _listened(self._clusters):
            self._clusters.publish(publishable_cloud(output.clusters, header))
        if output.ground is not None and _listened(self._ground):
            self._ground.publish(publishable_cloud(select_points(cloud, output.ground), header))
        if self._objects_with_feature is not None and _listened(self._objects_with_feature[0]):
            publisher, encoder = self._objects_with_feature
            points = _points(output, cloud)
            publisher.publish(encoder.build(table, cloud, points, header, boxes))
        if self._objects is not None and _listened(self._objects[0]):
            publisher, objects = self._objects
            publisher.publish(objects.build(table, header, boxes))
        if self._detections is not None and _listened(self._detections[0]):
            publisher, detections = self._detections
            publisher.publish(detections.build(table, header, boxes))
        published, objects_done = time.monotonic(), time.perf_counter()
        # Markers (~3 ms for 2000 clusters) after everything else, only for a display.
        if _listened(self._markers):
            self._markers.publish(self._marker_encoder.build(table, header, boxes))
        else:
            self._marker_encoder.forget()
        return PublishTimings(
            published=published,
            publish_ms=(objects_done - started) * 1e3,
            markers_ms=(time.perf_counter() - objects_done) * 1e3,
        )


def _listened(publisher: Any) -> bool:
    return publisher.get_subscription_count() > 0


def _points(output: FrameOutput, cloud: RawCloud) -> GroupedRecords:
    """The input records of each cluster: the frame's grouped records, or where it has none (a
    subscriber came between processing and publishing) grouped here by the labels in the
    labelled cloud."""
    if output.grouped is not None:
        return output.grouped
    labels = read_fields(output.labeled, ["cluster_id"])["cluster_id"]
    return group_records(point_bytes(cloud), labels, len(output.table))
