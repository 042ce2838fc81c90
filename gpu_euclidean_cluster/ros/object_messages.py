"""The clusters as object messages, each as CDR bytes for ``Publisher.publish(bytes)``.

Three optional message packages, each used only where it is installed:

- tier4_perception_msgs/DetectedObjectsWithFeature (:class:`FeatureObjectsEncoder`), what
  Autoware Universe's ``euclidean_cluster`` and ``voxel_grid_based_euclidean_cluster`` nodes
  publish, filled as they fill it (``convertPointCloudClusters2Msg`` in their ``utils.cpp`` and
  the voxel node's output loop): per kept cluster, in cluster id order, one
  DetectedObjectWithFeature whose ``feature.cluster`` holds the cluster's points (the input's
  fields, ``point_step``, byte order and records, byte for byte, in input order; the input's
  header; height 1, width = point count, ``is_dense`` true) and whose object has one
  classification (UNKNOWN, probability 1.0), ``existence_probability`` 0.0 (Autoware does not
  set it either) and ``kinematics.pose_with_covariance.pose`` at the centroid (the cluster
  table's, float32 as in ``output/clusters``; Autoware sums float32 coordinates in double)
  with the identity orientation. Unlike Autoware, which leaves the shape to its
  shape-estimation node, the shape is filled: BOUNDING_BOX with ``dimensions`` the axis-aligned
  extents (max - min per axis; the box is around the points, so its centre is the extents'
  midpoint, not necessarily the pose).
- autoware_perception_msgs/DetectedObjects (:class:`ObjectsEncoder`): the same objects without
  the point clouds (what autoware_core's port of the clustering node publishes).
- vision_msgs/Detection3DArray (:class:`DetectionsEncoder`): per cluster a Detection3D with the
  input's header, ``id`` the cluster id as text, ``bbox`` the axis-aligned box (centre = extents'
  midpoint, identity orientation, ``size`` = extents) and one result: class_id ``"UNKNOWN"``,
  score 1.0, pose at the centroid.

Oriented boxes (``boxes``: the frame's ``FrameOutput.boxes``, rows of
``core.oriented_boxes.BOX_DTYPE`` in cluster order, from ``FramePipeline.process(...,
oriented_boxes=True)``; the node's ``pose_estimation``): every encoder takes them, and where
given the objects carry them as Autoware's shape-estimation node fills its output (and as its
trackers read it): ``kinematics.pose_with_covariance.pose`` at the box centre (``center_x``,
``center_y``, and z the middle of ``min_z``..``max_z``) with the orientation of the yaw
(quaternion x = y = 0, z = sin(yaw/2), w = cos(yaw/2)), ``kinematics.orientation_availability``
SIGN_UNKNOWN (1: a rectangle's heading is known up to a half turn, as shape estimation reports
its boxes), and the BOUNDING_BOX ``dimensions`` x = ``length`` (along the yaw, the object's x
axis), y = ``width``, z = ``max_z - min_z``. Detection3D's ``bbox`` is then that box (centre,
orientation, size); its hypothesis pose stays at the centroid. Without boxes the bytes are
exactly those described above.

The bytes are built column-wise (:class:`~.serialized.RowCodec`: one NumPy scatter per member
for all objects, the clusters' points gathered once and joined in, never copied per cluster),
with no Python message per cluster. Each encoder checks itself once per process against
``rclpy.serialization.serialize_message`` of the equivalent messages (built by the
``*_message`` functions here) and builds those messages instead where the check fails.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from std_msgs.msg import Header

from ..core.cluster_stats import cluster_table
from ..core.frame import group_records
from ..core.oriented_boxes import oriented_boxes, yaw_quaternion
from ..pointcloud_io.pointcloud2 import FLOAT32, UINT8, Field, RawCloud, point_bytes
from .serialized import (
    CdrWriter,
    HeaderLike,
    RowCodec,
    Scratch,
    UnsupportedLayoutError,
    same_serialization,
)

log = logging.getLogger(__name__)

#: Message package -> why it cannot be imported (absent: it can).
MISSING: dict[str, str] = {}


def _missing(package: str, error: ImportError) -> None:
    if isinstance(error, ModuleNotFoundError) and (error.name or "").startswith(package):
        MISSING[package] = f"{package} is not installed"
    else:
        MISSING[package] = f"{package} cannot be imported ({type(error).__name__}: {error})"


try:
    from autoware_perception_msgs.msg import (
        DetectedObject,
        DetectedObjects,
        ObjectClassification,
        Shape,
    )
except ImportError as error:
    _missing("autoware_perception_msgs", error)
    DetectedObject = DetectedObjects = ObjectClassification = Shape = None
try:
    from tier4_perception_msgs.msg import DetectedObjectsWithFeature, DetectedObjectWithFeature
except ImportError as error:
    _missing("tier4_perception_msgs", error)
    DetectedObjectsWithFeature = DetectedObjectWithFeature = None
try:
    from vision_msgs.msg import Detection3D, Detection3DArray, ObjectHypothesisWithPose
except ImportError as error:
    _missing("vision_msgs", error)
    Detection3D = Detection3DArray = ObjectHypothesisWithPose = None

#: Autoware's classification of every cluster: UNKNOWN (0) with probability 1.0.
UNKNOWN_LABEL = 0
CLASS_PROBABILITY = 1.0
#: Autoware's clustering nodes leave ``existence_probability`` at its default.
EXISTENCE_PROBABILITY = 0.0
#: ``DetectedObjectKinematics.orientation_availability`` of an oriented box: SIGN_UNKNOWN.
ORIENTATION_SIGN_UNKNOWN = 1
#: ``ObjectHypothesis.class_id`` of every Detection3D (Autoware's label name) and its score.
DETECTION_CLASS_ID = "UNKNOWN"
DETECTION_SCORE = 1.0


@dataclass(frozen=True)
class ClusterPoints:
    """Each kept cluster's input points, clusters in id order, points in input order.

    Attributes:
        fields: the input cloud's fields.
        point_step: the input's bytes per point.
        is_bigendian: the input's byte order.
        counts: (K,) points per cluster.
        records: (sum of counts, point_step) uint8, C-contiguous: the input records of cluster
            0, then of cluster 1, ...
    """

    fields: tuple[Field, ...]
    point_step: int
    is_bigendian: bool
    counts: np.ndarray
    records: np.ndarray


def cluster_points(cloud: RawCloud, labels: np.ndarray, clusters: int) -> ClusterPoints:
    """The records of ``cloud`` grouped by ``labels`` (one per point, -1 = in no cluster, else
    ``0..clusters-1``), by ``core.frame.group_records``."""
    grouped = group_records(point_bytes(cloud), labels, clusters)
    return ClusterPoints(
        fields=tuple(cloud.fields),
        point_step=cloud.point_step,
        is_bigendian=cloud.is_bigendian,
        counts=grouped.counts,
        records=grouped.records,
    )


def grouped_points(cloud: RawCloud, counts: np.ndarray, records: np.ndarray) -> ClusterPoints:
    """The :class:`ClusterPoints` of ``cloud`` whose records are already grouped (``counts`` per
    cluster, ``records`` a (sum of counts, point_step) uint8 array: the frame layer's
    ``GroupedRecords``)."""
    counts = np.asarray(counts, dtype=np.int64).reshape(-1)
    if records.shape != (int(counts.sum()), cloud.point_step):
        raise ValueError(f"records of shape {records.shape} for {int(counts.sum())} points")
    return ClusterPoints(
        fields=tuple(cloud.fields),
        point_step=cloud.point_step,
        is_bigendian=cloud.is_bigendian,
        counts=counts,
        records=np.ascontiguousarray(records),
    )


# ------------------------------------------------------------------ message objects (reference)


def _point(table_row: np.void, names: tuple[str, str, str], target: Any) -> None:
    for name, axis in zip(names, "xyz", strict=True):
        setattr(target, axis, float(table_row[name]))


def _extents(row: np.void, target: Any) -> None:
    for axis in "xyz":
        setattr(target, axis, float(row[f"max_{axis}"]) - float(row[f"min_{axis}"]))


def _oriented_box(box: np.void, pose: Any, dimensions: Any) -> None:
    """Set ``pose`` (position, orientation) and ``dimensions`` to the oriented box ``box``."""
    low, high = float(box["min_z"]), float(box["max_z"])
    pose.position.x, pose.position.y = float(box["center_x"]), float(box["center_y"])
    pose.position.z = (low + high) / 2.0
    z, w = yaw_quaternion(np.float64(box["yaw"]))
    pose.orientation.z, pose.orientation.w = float(z), float(w)
    dimensions.x, dimensions.y = float(box["length"]), float(box["width"])
    dimensions.z = high - low


def _detected_object(row: np.void, box: np.void | None = None) -> Any:
    item = DetectedObject(existence_probability=EXISTENCE_PROBABILITY)
    item.classification = [ObjectClassification(label=UNKNOWN_LABEL, probability=CLASS_PROBABILITY)]
    pose = item.kinematics.pose_with_covariance.pose
    item.shape.type = Shape.BOUNDING_BOX
    if box is None:
        _point(row, ("x", "y", "z"), pose.position)
        _extents(row, item.shape.dimensions)
    else:
        _oriented_box(box, pose, item.shape.dimensions)
        item.kinematics.orientation_availability = ORIENTATION_SIGN_UNKNOWN
    return item


def _rows(table: np.ndarray, boxes: np.ndarray | None) -> list[tuple[np.void, np.void | None]]:
    if boxes is not None and len(boxes) != len(table):
        raise ValueError(f"{len(boxes)} boxes for {len(table)} clusters")
    return list(zip(table, boxes if boxes is not None else [None] * len(table), strict=True))


def objects_message(table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None) -> Any:
    """autoware_perception_msgs/DetectedObjects of the cluster rows ``table`` (message objects),
    with the oriented ``boxes`` where given."""
    objects = [_detected_object(row, box) for row, box in _rows(table, boxes)]
    return DetectedObjects(header=_header(header), objects=objects)


def feature_objects_message(
    table: np.ndarray,
    points: ClusterPoints,
    header: HeaderLike,
    boxes: np.ndarray | None = None,
) -> Any:
    """tier4_perception_msgs/DetectedObjectsWithFeature of the cluster rows ``table`` and their
    points (message objects), with the oriented ``boxes`` where given."""
    from sensor_msgs.msg import PointField

    fields = [
        PointField(name=f.name, offset=f.offset, datatype=f.datatype, count=f.count)
        for f in points.fields
    ]
    ends = np.cumsum(points.counts)
    objects = []
    rows = _rows(table, boxes)
    for (row, box), count, end in zip(rows, points.counts.tolist(), ends.tolist(), strict=True):
        item = DetectedObjectWithFeature(object=_detected_object(row, box))
        cloud = item.feature.cluster
        cloud.header = _header(header)
        cloud.height, cloud.width, cloud.fields = 1, count, fields
        cloud.is_bigendian, cloud.point_step = points.is_bigendian, points.point_step
        cloud.row_step = count * points.point_step
        cloud.data = points.records[end - count : end].tobytes()
        cloud.is_dense = True
        objects.append(item)
    return DetectedObjectsWithFeature(header=_header(header), feature_objects=objects)


def detections_message(
    table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None
) -> Any:
    """vision_msgs/Detection3DArray of the cluster rows ``table`` (message objects), the
    ``bbox`` the oriented box of ``boxes`` where given."""
    detections = []
    for row, box in _rows(table, boxes):
        item = Detection3D(header=_header(header), id=str(int(row["cluster_id"])))
        hypothesis = ObjectHypothesisWithPose()
        hypothesis.hypothesis.class_id = DETECTION_CLASS_ID
        hypothesis.hypothesis.score = DETECTION_SCORE
        _point(row, ("x", "y", "z"), hypothesis.pose.pose.position)
        item.results = [hypothesis]
        if box is not None:
            _oriented_box(box, item.bbox.center, item.bbox.size)
            detections.append(item)
            continue
        for axis in "xyz":
            low, high = float(row[f"min_{axis}"]), float(row[f"max_{axis}"])
            setattr(item.bbox.center.position, axis, (low + high) / 2.0)
        _extents(row, item.bbox.size)
        detections.append(item)
    return Detection3DArray(header=_header(header), detections=detections)


def _header(header: HeaderLike) -> Header:
    result = Header(frame_id=header.frame_id)
    result.stamp.sec, result.stamp.nanosec = header.stamp.sec, header.stamp.nanosec
    return result


# ------------------------------------------------------------------------------ column-wise CDR


def _object_columns(table: np.ndarray, prefix: str, boxes: np.ndarray | None) -> dict[str, Any]:
    """DetectedObject members of the rows ``table`` (under ``prefix``), with ``boxes``."""
    position = f"{prefix}kinematics.pose_with_covariance.pose.position."
    columns: dict[str, Any] = {
        f"{prefix}existence_probability": EXISTENCE_PROBABILITY,
        f"{prefix}classification[0].label": UNKNOWN_LABEL,
        f"{prefix}classification[0].probability": CLASS_PROBABILITY,
        f"{prefix}shape.type": 0,  # Shape.BOUNDING_BOX, checked by the encoders' sample check
    }
    if boxes is not None:
        columns.update(_box_columns(table, boxes, f"{prefix}kinematics.pose_with_covariance.pose.",
                                    f"{prefix}shape.dimensions."))  # fmt: skip
        columns[f"{prefix}kinematics.orientation_availability"] = ORIENTATION_SIGN_UNKNOWN
        return columns
    for axis in "xyz":
        columns[position + axis] = table[axis]
        columns[f"{prefix}shape.dimensions.{axis}"] = _extent(table, axis)
    return columns


def _box_columns(
    table: np.ndarray, boxes: np.ndarray, pose: str, dimensions: str
) -> dict[str, Any]:
    """The members of a Pose (under ``pose``) and a Vector3 (``dimensions``) of oriented
    ``boxes`` (see the module docstring)."""
    if len(boxes) != len(table):
        raise ValueError(f"{len(boxes)} boxes for {len(table)} clusters")
    low, high = boxes["min_z"].astype(np.float64), boxes["max_z"].astype(np.float64)
    z, w = yaw_quaternion(boxes["yaw"])
    return {
        f"{pose}position.x": boxes["center_x"],
        f"{pose}position.y": boxes["center_y"],
        f"{pose}position.z": (low + high) / 2.0,
        f"{pose}orientation.z": z,
        f"{pose}orientation.w": w,
        f"{dimensions}x": boxes["length"],
        f"{dimensions}y": boxes["width"],
        f"{dimensions}z": high - low,
    }


def _extent(table: np.ndarray, axis: str) -> np.ndarray:
    return table[f"max_{axis}"].astype(np.float64) - table[f"min_{axis}"].astype(np.float64)


def _header_columns(header: HeaderLike, prefix: str) -> dict[str, Any]:
    return {
        f"{prefix}stamp.sec": header.stamp.sec,
        f"{prefix}stamp.nanosec": header.stamp.nanosec,
        f"{prefix}frame_id": header.frame_id.encode(),
    }


def _array_start(header: HeaderLike, count: int) -> CdrWriter:
    """A message of a header and a sequence, written up to the sequence's first element."""
    writer = CdrWriter()
    writer.header(header)
    writer.pack("I", count)
    return writer


def objects_cdr(
    codec: RowCodec, table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None
) -> bytes:
    """The bytes of :func:`objects_message`, with ``codec`` a DetectedObject codec (unchecked:
    use :class:`ObjectsEncoder`)."""
    writer = _array_start(header, len(table))
    columns = _object_columns(table, "", boxes)
    return b"".join((writer.value(), codec.encode(len(table), columns, writer.position)))


def feature_objects_cdr(
    codec: RowCodec,
    table: np.ndarray,
    points: ClusterPoints,
    header: HeaderLike,
    scratch: Scratch | None = None,
    boxes: np.ndarray | None = None,
) -> bytes:
    """The bytes of :func:`feature_objects_message`, with ``codec`` a DetectedObjectWithFeature
    codec for ``len(points.fields)`` fields (unchecked: use :class:`FeatureObjectsEncoder`),
    built in ``scratch`` where given. The records are copied once, into the result."""
    if len(points.counts) != len(table):
        raise ValueError(f"{len(points.counts)} clusters of points for {len(table)} rows")
    cloud = "feature.cluster."
    sizes = points.counts * points.point_step
    columns = _object_columns(table, "object.", boxes)
    columns.update(_header_columns(header, f"{cloud}header."))
    columns.update(
        {
            f"{cloud}height": 1,
            f"{cloud}width": points.counts,
            f"{cloud}is_bigendian": points.is_bigendian,
            f"{cloud}point_step": points.point_step,
            f"{cloud}row_step": sizes,
            f"{cloud}data": sizes,
            f"{cloud}is_dense": True,
        }
    )
    for index, field in enumerate(points.fields):
        at = f"{cloud}fields[{index}]."
        columns[f"{at}name"] = field.name.encode()
        columns[f"{at}offset"] = field.offset
        columns[f"{at}datatype"] = field.datatype
        columns[f"{at}count"] = field.count
    writer = _array_start(header, len(table))
    return codec.encode_joined(
        writer.value(), len(table), columns, points.records.reshape(-1), scratch
    )


def detections_cdr(
    codec: RowCodec, table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None
) -> bytes:
    """The bytes of :func:`detections_message`, with ``codec`` a Detection3D codec (unchecked:
    use :class:`DetectionsEncoder`)."""
    rows = len(table)
    ids = np.char.mod("%d", table["cluster_id"]).astype(bytes) if rows else np.array([b""])
    columns = _header_columns(header, "header.")
    columns["id"] = ids
    hypothesis = "results[0]."
    columns[f"{hypothesis}hypothesis.class_id"] = DETECTION_CLASS_ID.encode()
    columns[f"{hypothesis}hypothesis.score"] = DETECTION_SCORE
    for axis in "xyz":
        low = table[f"min_{axis}"].astype(np.float64)
        high = table[f"max_{axis}"].astype(np.float64)
        columns[f"{hypothesis}pose.pose.position.{axis}"] = table[axis]
        columns[f"bbox.center.position.{axis}"] = (low + high) / 2.0
        columns[f"bbox.size.{axis}"] = high - low
    if boxes is not None:
        columns.update(_box_columns(table, boxes, "bbox.center.", "bbox.size."))
    writer = _array_start(header, rows)
    return b"".join((writer.value(), codec.encode(rows, columns, writer.position)))


# ------------------------------------------------------------------------------------ encoders


class _Encoder:
    """An output's bytes where its check passed, else its message objects."""

    #: the message packages it needs
    packages: tuple[str, ...] = ()
    #: the message class it builds (None where a package is missing)
    message: type | None = None

    @classmethod
    def missing(cls) -> str | None:
        """Why the message cannot be built here (a package is not installed), or None."""
        return next((MISSING[p] for p in cls.packages if p in MISSING), None)

    @property
    def serializes(self) -> bool:
        """True when :meth:`build` returns CDR bytes, False when it returns message objects."""
        raise NotImplementedError


@functools.cache
def _objects_codec() -> RowCodec:
    return RowCodec(DetectedObject, sequences={"classification": 1})


@functools.lru_cache(maxsize=8)
def _feature_codec(fields: int) -> RowCodec:
    return RowCodec(
        DetectedObjectWithFeature,
        sequences={"object.classification": 1, "feature.cluster.fields": fields},
        blob="feature.cluster.data",
    )


@functools.cache
def _detections_codec() -> RowCodec:
    return RowCodec(Detection3D, sequences={"results": 1})


class _TableEncoder(_Encoder):
    """An output built from the cluster rows alone: CDR bytes through a :class:`RowCodec` where
    the check of its message passed, else message objects."""

    #: the message's name in the checks
    checked: str = ""

    def __init__(self) -> None:
        self._codec = self.codec() if _verified(self.checked) else None

    @property
    def serializes(self) -> bool:
        return self._codec is not None

    def build(
        self, table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None
    ) -> bytes | Any:
        """The message of the cluster rows ``table``, with the oriented ``boxes`` if given."""
        if self._codec is None:
            return self.objects(table, header, boxes)
        return self.cdr(self._codec, table, header, boxes)

    @staticmethod
    def codec() -> RowCodec:
        """The codec of one element of the message's array."""
        raise NotImplementedError

    @staticmethod
    def objects(table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None) -> Any:
        """The message as objects."""
        raise NotImplementedError

    @staticmethod
    def cdr(
        codec: RowCodec, table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None
    ) -> bytes:
        """The message as CDR bytes."""
        raise NotImplementedError


class ObjectsEncoder(_TableEncoder):
    """autoware_perception_msgs/DetectedObjects of the clusters (see the module docstring)."""

    packages = ("autoware_perception_msgs",)
    message = DetectedObjects
    checked = "DetectedObjects"
    codec = staticmethod(_objects_codec)
    objects = staticmethod(objects_message)
    cdr = staticmethod(objects_cdr)


class DetectionsEncoder(_TableEncoder):
    """vision_msgs/Detection3DArray of the clusters (see the module docstring)."""

    packages = ("vision_msgs",)
    message = Detection3DArray
    checked = "Detection3DArray"
    codec = staticmethod(_detections_codec)
    objects = staticmethod(detections_message)
    cdr = staticmethod(detections_cdr)


class FeatureObjectsEncoder(_Encoder):
    """tier4_perception_msgs/DetectedObjectsWithFeature of the clusters (see the module
    docstring)."""

    packages = ("tier4_perception_msgs", "autoware_perception_msgs")
    message = DetectedObjectsWithFeature

    def __init__(self) -> None:
        self._verified = _verified("DetectedObjectsWithFeature")
        self._scratch = Scratch()  # the objects' bytes (~0.9 kB each), reused frame to frame

    @property
    def serializes(self) -> bool:
        return self._verified

    def build(
        self,
        table: np.ndarray,
        points: ClusterPoints,
        header: HeaderLike,
        boxes: np.ndarray | None = None,
    ) -> bytes | Any:
        """The message of the cluster rows ``table`` and their points, with the oriented
        ``boxes`` if given."""
        if not self._verified:
            return feature_objects_message(table, points, header, boxes)
        codec = _feature_codec(len(points.fields))
        return feature_objects_cdr(codec, table, points, header, self._scratch, boxes)


@functools.cache
def _verified(name: str) -> bool:
    """Whether the column-wise encoding of message ``name`` passes its check on this ROS 2
    installation (once per process; a failure is logged)."""
    check: Callable[[], bool] = _CHECKS[name]
    try:
        if check():
            return True
        reason = "its CDR encoding does not match this ROS 2"
    except (UnsupportedLayoutError, ValueError, KeyError, TypeError, AttributeError) as error:
        reason = f"it cannot be encoded column-wise ({type(error).__name__}: {error})"
    log.warning("%s: %s; publishing message objects", name, reason)
    return False


def _sample_header() -> Header:
    header = Header(frame_id="lidar_top")  # 9 bytes + NUL: the rest unaligned
    header.stamp.sec, header.stamp.nanosec = 1_700_000_000, 123_456_789
    return header


def sample_clusters(
    sizes: tuple[int, ...] = (1, 2, 3, 5, 7), unclustered: int = 4
) -> tuple[np.ndarray, RawCloud, np.ndarray]:
    """``(table, cloud, labels)``: clusters of ``sizes`` points and ``unclustered`` points
    labelled -1, shuffled, in a cloud of 13-byte points (x y z float32 and a uint8 ``ring``), so
    that the clusters' point bytes leave various remainders modulo 8 (the default sizes: 5, 2, 7,
    1 and 3); for the checks."""
    labels = np.concatenate(
        [np.full(n, k, np.int32) for k, n in enumerate(sizes)] + [np.full(unclustered, -1)]
    ).astype(np.int32)
    rng = np.random.default_rng(len(labels))
    labels = labels[rng.permutation(len(labels))]
    point_step = 13
    data = rng.integers(0, 256, (len(labels), point_step), dtype=np.uint8)
    xyz = rng.uniform(-40.0, 40.0, (len(labels), 3)).astype("<f4")
    data[:, :12] = xyz.view(np.uint8).reshape(-1, 12)
    cloud = RawCloud(
        fields=(
            Field("x", 0, FLOAT32),
            Field("y", 4, FLOAT32),
            Field("z", 8, FLOAT32),
            Field("ring", 12, UINT8),
        ),
        height=1,
        width=len(labels),
        point_step=point_step,
        row_step=point_step * len(labels),
        data=data.reshape(-1),
    )
    return cluster_table(xyz, labels, len(sizes)), cloud, labels


def sample_boxes(cloud: RawCloud, labels: np.ndarray, clusters: int) -> np.ndarray:
    """The oriented boxes of :func:`sample_clusters`' clusters, for the checks."""
    xyz = np.frombuffer(point_bytes(cloud)[:, :12].tobytes(), dtype="<f4").reshape(-1, 3)
    return oriented_boxes(xyz[:, 0], xyz[:, 1], xyz[:, 2], labels, clusters)


def _check_objects() -> bool:
    table, cloud, labels = sample_clusters()
    header = _sample_header()
    codec = _objects_codec()
    return all(
        same_serialization(
            objects_cdr(codec, table, header, boxes), objects_message(table, header, boxes)
        )
        for boxes in (None, sample_boxes(cloud, labels, len(table)))
    )


def _check_feature_objects() -> bool:
    table, cloud, labels = sample_clusters()
    points = cluster_points(cloud, labels, len(table))
    header = _sample_header()
    codec = _feature_codec(len(points.fields))
    return all(
        same_serialization(
            feature_objects_cdr(codec, table, points, header, boxes=boxes),
            feature_objects_message(table, points, header, boxes),
        )
        for boxes in (None, sample_boxes(cloud, labels, len(table)))
    )


def _check_detections() -> bool:
    table, cloud, labels = sample_clusters()
    boxes = np.concatenate([sample_boxes(cloud, labels, len(table))] * 3)
    table = np.concatenate([table] * 3)  # ids of one and two digits
    table["cluster_id"] = np.arange(len(table))
    boxes["cluster_id"] = table["cluster_id"]
    header = _sample_header()
    codec = _detections_codec()
    return all(
        same_serialization(
            detections_cdr(codec, table, header, given), detections_message(table, header, given)
        )
        for given in (None, boxes)
    )


_CHECKS: dict[str, Callable[[], bool]] = {
    "DetectedObjects": _check_objects,
    "DetectedObjectsWithFeature": _check_feature_objects,
    "Detection3DArray": _check_detections,
}
