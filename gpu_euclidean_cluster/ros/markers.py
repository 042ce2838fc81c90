"""RViz markers of the clusters: a translucent box and an id label per cluster.

The box is the axis-aligned one of the cluster table, or where the frame has oriented boxes
(``FrameOutput.boxes``, ``core.oriented_boxes``) that box: centre (``center_x``, ``center_y``,
middle of the z range), rotated by ``yaw`` about z (quaternion z = sin(yaw/2), w = cos(yaw/2)),
scale ``length``, ``width``, z range (each at least :data:`MIN_BOX_SIDE`).
"""

from __future__ import annotations

import numpy as np
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import Marker, MarkerArray

from ..core.cluster_stats import cluster_rgb
from ..core.oriented_boxes import yaw_quaternion

BOX_NAMESPACE = "cluster_boxes"
LABEL_NAMESPACE = "cluster_ids"
#: Smallest drawn box side (m), so flat or single-point clusters stay visible.
MIN_BOX_SIDE = 0.05
BOX_ALPHA = 0.4
LABEL_HEIGHT = 0.5


class MarkerBuilder:
    """Builds each frame's MarkerArray, deleting the markers of clusters that no longer exist.

    Marker ids are cluster ids, so a frame with K clusters adds or modifies ids ``0..K-1`` in both
    namespaces and deletes the ids from K up to the previous frame's count.
    """

    def __init__(self) -> None:
        self._previous = 0

    def forget(self) -> None:
        """Forget the previous frame's markers (when nobody received them, none need deleting)."""
        self._previous = 0

    def build(
        self, table: np.ndarray, header: Header, boxes: np.ndarray | None = None
    ) -> MarkerArray:
        """Markers for the cluster rows ``table``, the boxes those of ``boxes`` where given.

        ``table`` holds the rows of :func:`~..core.cluster_stats.cluster_table`, ``boxes`` (one
        per row) those of :func:`~..core.oriented_boxes.oriented_boxes`.
        """
        colours = cluster_rgb(table["cluster_id"]) / 255.0
        if boxes is not None and len(boxes) != len(table):
            raise ValueError(f"{len(boxes)} boxes for {len(table)} clusters")
        markers = []
        for index, (row, colour) in enumerate(zip(table, colours, strict=True)):
            box = _box(row, colour, header)
            if boxes is not None:
                _orient(box, boxes[index])
            markers.append(box)
            markers.append(_label(row, header))
        for stale in range(len(table), self._previous):
            for namespace in (BOX_NAMESPACE, LABEL_NAMESPACE):
                markers.append(Marker(header=header, ns=namespace, id=stale, action=Marker.DELETE))
        self._previous = len(table)
        return MarkerArray(markers=markers)


def _box(row: np.void, colour: np.ndarray, header: Header) -> Marker:
    marker = Marker(header=header, ns=BOX_NAMESPACE, id=int(row["cluster_id"]))
    marker.type = Marker.CUBE
    marker.action = Marker.ADD
    for axis in "xyz":
        low, high = float(row[f"min_{axis}"]), float(row[f"max_{axis}"])
        setattr(marker.pose.position, axis, (low + high) / 2.0)
        setattr(marker.scale, axis, max(high - low, MIN_BOX_SIDE))
    marker.pose.orientation.w = 1.0
    red, green, blue = (float(c) for c in colour)
    marker.color = ColorRGBA(r=red, g=green, b=blue, a=BOX_ALPHA)
    return marker


def _orient(marker: Marker, box: np.void) -> None:
    low, high = float(box["min_z"]), float(box["max_z"])
    marker.pose.position.x = float(box["center_x"])
    marker.pose.position.y = float(box["center_y"])
    marker.pose.position.z = (low + high) / 2.0
    z, w = yaw_quaternion(np.float64(box["yaw"]))
    marker.pose.orientation.z, marker.pose.orientation.w = float(z), float(w)
    marker.scale.x = max(float(box["length"]), MIN_BOX_SIDE)
    marker.scale.y = max(float(box["width"]), MIN_BOX_SIDE)
    marker.scale.z = max(high - low, MIN_BOX_SIDE)


def _label(row: np.void, header: Header) -> Marker:
    marker = Marker(header=header, ns=LABEL_NAMESPACE, id=int(row["cluster_id"]))
    marker.type = Marker.TEXT_VIEW_FACING
    marker.action = Marker.ADD
    marker.text = f"{int(row['cluster_id'])} ({int(row['num_points'])})"
    marker.pose.position.x = float(row["x"])
    marker.pose.position.y = float(row["y"])
    marker.pose.position.z = float(row["max_z"]) + LABEL_HEIGHT
    marker.pose.orientation.w = 1.0
    marker.scale.z = LABEL_HEIGHT
    marker.color = ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0)
    return marker
