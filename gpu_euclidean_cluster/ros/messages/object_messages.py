"""The clusters as object messages, each where its message package is installed.

- tier4_perception_msgs/DetectedObjectsWithFeature (:data:`DETECTED_OBJECTS_WITH_FEATURE`), as
  Autoware Universe's ``euclidean_cluster`` nodes fill it (``convertPointCloudClusters2Msg``):
  per kept cluster, in id order, a DetectedObjectWithFeature whose ``feature.cluster`` holds the
  cluster's points (the input's fields, ``point_step``, byte order and records, byte for byte,
  in input order; the input's header; height 1, width = point count, ``is_dense`` true) and
  whose object has one classification (UNKNOWN, probability 1.0), ``existence_probability`` 0.0
  (Autoware leaves it too) and the pose at the centroid (the cluster table's float32) with the
  identity orientation; unlike Autoware (which leaves it to shape estimation) the shape is
  filled: BOUNDING_BOX, ``dimensions`` the axis-aligned extents (max - min).
- autoware_perception_msgs/DetectedObjects (:data:`DETECTED_OBJECTS`): the same objects without
  the point clouds (what autoware_core's port of the clustering node publishes).
- vision_msgs/Detection3DArray (:data:`DETECTION3D_ARRAY`): per cluster a Detection3D with the
  input's header, ``id`` the cluster id as text, ``bbox`` the axis-aligned box (centre = extents'
  midpoint, ``size`` = extents) and one result: class_id ``"UNKNOWN"``, score 1.0, pose at the
  centroid.

With oriented boxes (``FrameOutput.boxes``: the node's ``pose_estimation``) the objects carry
them as Autoware's shape estimation fills its output (and its trackers read it): the pose at the
box centre, rotated by the yaw (:func:`~.columns.box_geometry`),
``orientation_availability`` SIGN_UNKNOWN (a rectangle's heading is known up to a half turn),
``dimensions`` x = ``length`` (along the yaw), y = ``width``, z = the height; Detection3D's
``bbox`` is that box, its hypothesis pose stays at the centroid. Each message is one column spec
(:mod:`.columns`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...core.frame import GroupedRecords
from ...pointcloud_io.pointcloud2 import RawCloud
from .cdr import HeaderLike
from .columns import (
    ArraySpec,
    Columns,
    box_geometry,
    header_columns,
    message_classes,
    sample_frames,
)

DetectedObjects, Kinematics, Label, Shape = message_classes("autoware_perception_msgs",
    "DetectedObjects", "DetectedObjectKinematics", "ObjectClassification", "Shape")  # fmt: skip
(DetectedObjectsWithFeature,) = message_classes("tier4_perception_msgs",
    "DetectedObjectsWithFeature")  # fmt: skip
(Detection3DArray,) = message_classes("vision_msgs", "Detection3DArray")

#: Every Detection3D's hypothesis: Autoware's label name for every cluster, and its score.
DETECTION_CLASS_ID, DETECTION_SCORE = "UNKNOWN", 1.0


def _object_columns(table: np.ndarray, prefix: str, boxes: np.ndarray | None) -> dict[str, Any]:
    """The DetectedObject members (under ``prefix``) of the rows ``table``, with ``boxes``."""
    geometry = box_geometry(table, boxes)
    pose = f"{prefix}kinematics.pose_with_covariance.pose."
    columns = {
        f"{prefix}existence_probability": 0.0,  # Autoware's clustering leaves it at that too
        f"{prefix}classification[0].label": Label.UNKNOWN,
        f"{prefix}classification[0].probability": 1.0,
        f"{prefix}shape.type": Shape.BOUNDING_BOX,
        **geometry.columns(pose, f"{prefix}shape.dimensions."),
    }
    if boxes is not None:
        columns[f"{prefix}kinematics.orientation_availability"] = Kinematics.SIGN_UNKNOWN
    else:  # at the centroid
        columns.update({f"{pose}position.{axis}": table[axis] for axis in "xyz"})
    return columns


def objects_columns(
    table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None
) -> Columns:
    """DetectedObjects of the cluster rows ``table``, with the oriented ``boxes`` where given."""
    return Columns(len(table), _object_columns(table, "", boxes), header)


def feature_objects_columns(
    table: np.ndarray,
    cloud: RawCloud,
    points: GroupedRecords,
    header: HeaderLike,
    boxes: np.ndarray | None = None,
) -> Columns:
    """DetectedObjectsWithFeature of the cluster rows ``table`` and their ``points`` (the records
    of ``cloud`` grouped by cluster: ``core.frame.group_records``), with the oriented ``boxes``
    where given."""
    counts = np.asarray(points.counts, dtype=np.int64).reshape(-1)
    if len(counts) != len(table):
        raise ValueError(f"{len(counts)} clusters of points for {len(table)} rows")
    member = "feature.cluster."
    sizes = counts * cloud.point_step
    columns = {
        **_object_columns(table, "object.", boxes),
        **header_columns(header, f"{member}header."),
        f"{member}height": 1,
        f"{member}width": counts,
        f"{member}is_bigendian": cloud.is_bigendian,
        f"{member}point_step": cloud.point_step,
        f"{member}row_step": sizes,
        f"{member}data": sizes,
        f"{member}is_dense": True,
    }
    for index, field in enumerate(cloud.fields):
        for name in ("name", "offset", "datatype", "count"):
            value = getattr(field, name)
            columns[f"{member}fields[{index}].{name}"] = value.encode() if name == "name" else value
    return Columns(len(table), columns, header, np.ascontiguousarray(points.records).reshape(-1))


def detections_columns(
    table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None
) -> Columns:
    """Detection3DArray of the cluster rows ``table``, the ``bbox`` the oriented ``boxes`` where
    given."""
    ids = np.char.mod("%d", table["cluster_id"]).astype(bytes) if len(table) else b""
    hypothesis = "results[0]."
    columns = {
        **header_columns(header, "header."),
        "id": ids,
        f"{hypothesis}hypothesis.class_id": DETECTION_CLASS_ID.encode(),
        f"{hypothesis}hypothesis.score": DETECTION_SCORE,
        **{f"{hypothesis}pose.pose.position.{axis}": table[axis] for axis in "xyz"},
        **box_geometry(table, boxes).columns("bbox.center.", "bbox.size."),
    }
    return Columns(len(table), columns, header)


def _table_samples() -> Iterator[tuple[Any, ...]]:
    return ((table, header, boxes) for table, _, _, header, boxes in sample_frames())


#: ``ArrayEncoder(DETECTED_OBJECTS).build(table, header, boxes=None)``
DETECTED_OBJECTS = ArraySpec(
    DetectedObjects, "objects", objects_columns, _table_samples, ("autoware_perception_msgs",)
)
#: ``ArrayEncoder(DETECTED_OBJECTS_WITH_FEATURE).build(table, cloud, points, header, boxes=None)``
DETECTED_OBJECTS_WITH_FEATURE = ArraySpec(
    DetectedObjectsWithFeature, "feature_objects", feature_objects_columns, sample_frames,
    ("tier4_perception_msgs", "autoware_perception_msgs"), blob="feature.cluster.data",
)  # fmt: skip
#: ``ArrayEncoder(DETECTION3D_ARRAY).build(table, header, boxes=None)``
DETECTION3D_ARRAY = ArraySpec(
    Detection3DArray, "detections", detections_columns, _table_samples, ("vision_msgs",)
)
