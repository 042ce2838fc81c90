"""What a frame codec is and hands around: the window a frame clusters, decoded and encoded
frames, and the codec's contract (:class:`FrameCodec`).

The frame layer (``gpu_euclidean_cluster/frame/``) runs one PointCloud2 frame through a backend's
frame codec (``cpu/codecs/frame.py`` or ``cuda/codecs/frame.py``, twins that satisfy
:class:`FrameCodec`): ``decode`` onto the backend's device, then stages, clustering and ``encode``;
or, with no stages, the whole frame at once where the codec can (``process_whole``). These are the
types both twins take and return; the CPU twin's ``cluster_mask`` defines the window's semantics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import numpy as np

if TYPE_CHECKING:
    from .config import ClusterConfig
    from .result import ClusterResult

#: Default plausibility limit of a coordinate (m): no LiDAR sees a kilometre, let alone 1000.
MAX_COORDINATE = 1e6

LabeledLayout = Literal["full", "compact"]
#: The labelled cloud's layouts: ``full`` is every input field, then ``cluster_id`` (int32) and
#: ``rgb`` (packed float32), as ``pointcloud2.append_fields`` lays them out; ``compact`` is x, y
#: and z as the input holds them (its datatypes and byte order), packed, then ``cluster_id``:
#: 16 bytes a point for float32 coordinates.
LABELED_LAYOUTS: tuple[str, ...] = get_args(LabeledLayout)
#: The layout unless asked otherwise: nothing of the input is lost.
DEFAULT_LABELED_LAYOUT: LabeledLayout = "full"


@dataclass(frozen=True)
class FrameWindow:
    """The points a frame clusters: plausible ones inside a range and height window.

    The defaults exclude nothing but non-finite points and points beyond
    :data:`MAX_COORDINATE`.

    Attributes:
        min_range, max_range: horizontal distance window (m, inclusive), compared squared in
            float64 (:meth:`range_bounds_sq`); ``min_range`` >= 0.
        min_z, max_z: height window (m, inclusive), compared in float64.
        min_y, max_y: side window (m, inclusive, float64): Autoware.ai's ``keep_lanes`` keeps
            ``-keep_lane_right_distance <= y <= keep_lane_left_distance``.
        max_coordinate: a point with any ``|coordinate|`` above it (float64) is implausible:
            not clustered, and counted when it is finite.
        use_height: cluster on x, y, z (True) or with z set to +0 where finite (False).
    """

    min_range: float = 0.0
    max_range: float = math.inf
    min_z: float = -math.inf
    max_z: float = math.inf
    max_coordinate: float = MAX_COORDINATE
    use_height: bool = True
    min_y: float = -math.inf
    max_y: float = math.inf

    @property
    def clips(self) -> bool:
        """True when the range, height or side window excludes any point."""
        return (
            self.min_range > 0.0
            or self.max_range < math.inf
            or self.min_z > -math.inf
            or self.max_z < math.inf
            or self.min_y > -math.inf
            or self.max_y < math.inf
        )

    def range_bounds_sq(self) -> tuple[float, float]:
        """``(min_range**2, max_range**2)`` as Python floats (a square beyond float64 is inf)."""
        low, high = float(self.min_range), float(self.max_range)
        return low * low, high * high


@dataclass(frozen=True)
class DecodedFrame:
    """A decoded frame on the backend's device, as stages and the clusterer take it.

    Attributes:
        points: (N, 3) coordinates (NumPy or CuPy), z flattened to +0 where finite unless the
            window's ``use_height``.
        mask: (N,) bool: plausible and inside the window; stages may clear more points.
    """

    points: Any
    mask: Any


@dataclass(frozen=True)
class GroupedRecords:
    """The input records of each cluster, grouped: what an object message with each cluster's
    points needs (``encode(..., group=True)``).

    Attributes:
        counts: (K,) int64 points per cluster (the clusterer's ``cluster_sizes``).
        records: (sum of counts, point_step) uint8, C-contiguous, on the host: the input records
            (every byte of each point, row padding left out) of cluster 0 in input order, then of
            cluster 1, ...; points in no cluster are left out.
    """

    counts: Any
    records: Any


def flatten_heights(xyz: Any) -> Any:
    """A copy of the (N, 3) ``xyz`` (NumPy or CuPy) with z set to +0 where it is finite: the
    clustered points of ``use_height`` False (the GPU decode kernel flattens by the same rule)."""
    from .numbering import array_module

    xp = array_module(xyz)
    flat = xyz.copy()
    flat[:, 2] = xp.where(xp.isfinite(flat[:, 2]), 0.0, flat[:, 2])
    return flat


def group_records(records: np.ndarray, labels: np.ndarray, clusters: int) -> GroupedRecords:
    """The rows of ``records`` grouped by ``labels`` (one per row, -1 = in no cluster, else
    ``0..clusters-1``): cluster 0's rows in input order, then cluster 1's, ...; one stable
    argsort, one gather. The GPU twin gathers by its sorted ``(label + 1) << 32 | index`` keys,
    the same order.

    Raises:
        ValueError: labels and records differ in number, or a label is beyond ``clusters``.
    """
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != len(records):
        raise ValueError(f"{len(labels)} labels for {len(records)} points")
    # -1 first, then cluster 0, 1, ...; as uint16 keys NumPy's stable sort is a radix sort
    keys = (labels + 1).astype(np.uint16) if clusters < 0xFFFF else labels
    order = np.argsort(keys, kind="stable")
    unclustered = int(np.count_nonzero(labels < 0))
    counts = np.bincount(labels[order[unclustered:]], minlength=clusters).astype(np.int64)
    if len(counts) != clusters:
        raise ValueError(f"labels beyond {clusters} clusters")
    return GroupedRecords(counts=counts, records=np.take(records, order[unclustered:], axis=0))


@dataclass(frozen=True)
class EncodedFrame:
    """What a codec's ``encode`` returns for the last decoded frame.

    Attributes:
        labeled: the labelled cloud (a ``pointcloud_io.pointcloud2.RawCloud``) in the layout
            ``encode`` was asked for (:data:`LABELED_LAYOUTS`): by default the input cloud with
            ``cluster_id`` (int32) and ``rgb`` (packed float32) appended.
        table: (K,) rows of ``core.cluster_stats.CLUSTER_DTYPE``, a NumPy array of its own.
        implausible_points: finite points not clustered because a coordinate exceeded the
            window's ``max_coordinate``.
        grouped: each cluster's input records (:class:`GroupedRecords`) where ``encode`` was
            asked to group them, else None.
    """

    labeled: Any
    table: Any
    implausible_points: int
    grouped: GroupedRecords | None = None


@dataclass(frozen=True)
class Unsupported:
    """A path's answer for work it does not do (the caller takes another path), and why.

    Attributes:
        reason: what this path lacks for the work, in words.
    """

    reason: str


#: A whole frame's outputs: the encoding and the clustering result.
WholeFrame = tuple[EncodedFrame, "ClusterResult"]


class FrameCodec(Protocol):
    """A backend's PointCloud2 frame codec (``Backend.frame_codec``): ``cpu/codecs/frame.py``'s and
    ``cuda/codecs/frame.py``'s twins, equal byte for byte. A codec keeps the last decoded frame (and
    its buffers) for the next ``encode``; one codec serves one thread.

    Attributes:
        warm_up_points: points of the random cloud the frame layer runs once at start-up.
    """

    warm_up_points: int

    def decode(self, cloud: Any, window: FrameWindow) -> DecodedFrame:
        """Decode ``cloud`` (a ``pointcloud_io.pointcloud2.RawCloud``) onto the codec's device:
        points (z flattened unless ``window.use_height``) and the window's mask.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (as ``read_xyz`` raises).
        """
        ...

    def encode(
        self,
        labels: Any,
        sizes: Any,
        copy: bool = True,
        group: bool = False,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
    ) -> EncodedFrame:
        """The last decoded frame labelled with ``labels`` ((N,), -1 in no cluster; NumPy or the
        device's arrays), ``sizes`` ((K,) host counts of clusters ``0..K-1``): the labelled
        cloud in ``layout``, the cluster table (``cluster_stats.cluster_table``), the
        implausible count, and with ``group`` each cluster's records (:func:`group_records`).
        ``copy`` False may hand out views of buffers the next ``encode`` reuses.

        Raises:
            ValueError: ``labels`` do not number exactly ``len(sizes)`` non-empty clusters.
        """
        ...

    def process_whole(
        self,
        cloud: Any,
        config: ClusterConfig,
        window: FrameWindow,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
        copy: bool = True,
        group: bool = False,
    ) -> WholeFrame | Unsupported:
        """``decode``, clustering with ``config`` and ``encode`` (``layout``, ``copy``, ``group``
        as there) in one submission, with their outputs; :class:`Unsupported` where this codec
        does not run the frame whole (the caller runs it step by step, with the same outputs).

        Raises:
            PointCloud2Error: the cloud cannot be decoded (as ``read_xyz`` raises).
        """
        ...
