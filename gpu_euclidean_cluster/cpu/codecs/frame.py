"""The frame codec on the CPU: PointCloud2 bytes in, labelled cloud and cluster table out, with
NumPy. Twin of ``cuda/codecs/frame.py``, and the definition its kernels follow bit for bit.

    >>> codec = CpuFrameCodec()
    >>> frame = codec.decode(cloud, FrameWindow(max_range=40.0))
    >>> result = clusterer.cluster(frame.points, mask=frame.mask)
    >>> encoded = codec.encode(result.labels, result.cluster_sizes)
    >>> encoded = codec.encode(result.labels, result.cluster_sizes, group=True)  # + .grouped
    >>> codec.encode(result.labels, result.cluster_sizes, layout="compact").labeled  # x y z id
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.cluster_stats import cluster_rgb, cluster_table, pack_rgb
from ...core.config import ClusterConfig
from ...core.frame import (
    DEFAULT_LABELED_LAYOUT,
    DecodedFrame,
    EncodedFrame,
    FrameWindow,
    LabeledLayout,
    Unsupported,
    WholeFrame,
    flatten_heights,
    group_records,
)
from ...pointcloud_io.pointcloud2 import (
    XYZ,
    RawCloud,
    append_fields,
    keep_fields,
    point_bytes,
    read_xyz,
)

#: The CPU codec's answer to ``process_whole``.
WHOLE_FRAMES_UNSUPPORTED = Unsupported("the CPU codec runs every frame step by step")


class CpuFrameCodec:
    """Decodes PointCloud2 payloads and encodes the labelled output with NumPy (a
    ``core.frame.FrameCodec``)."""

    #: Points of the cloud the frame layer runs once at start-up (start-up time matters more
    #: than the first frame's on the CPU).
    warm_up_points = 4096

    def __init__(self) -> None:
        self._cloud: RawCloud | None = None
        self._xyz: np.ndarray | None = None
        self._implausible = 0

    def process_whole(
        self,
        cloud: RawCloud,
        config: ClusterConfig,
        window: FrameWindow,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
        copy: bool = True,
        group: bool = False,
    ) -> WholeFrame | Unsupported:
        """:data:`WHOLE_FRAMES_UNSUPPORTED`: on the CPU a frame is always decoded, clustered and
        encoded step by step (the GPU twin runs some frames as one graph launch, with the same
        outputs)."""
        return WHOLE_FRAMES_UNSUPPORTED

    def decode(self, cloud: RawCloud, window: FrameWindow) -> DecodedFrame:
        """Decode ``cloud`` for clustering: points (``read_xyz``'s dtype, z flattened unless
        ``window.use_height``) and :func:`cluster_mask`'s mask.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (missing x/y/z, malformed layout).
        """
        xyz = read_xyz(cloud)
        mask, self._implausible = cluster_mask(xyz, window)
        self._cloud, self._xyz = cloud, xyz
        points = xyz if window.use_height else flatten_heights(xyz)
        return DecodedFrame(points=points, mask=mask)

    def encode(
        self,
        labels: Any,
        sizes: Any,
        copy: bool = True,
        group: bool = False,
        layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
    ) -> EncodedFrame:
        """The labelled cloud in ``layout`` (``core.frame.LABELED_LAYOUTS``), cluster table and
        implausible count of the last decoded frame (``copy`` is for the GPU twin's reused
        buffers: these outputs are always new), and with ``group`` each cluster's input records
        (``core.frame.group_records``).

        Raises:
            ValueError: ``labels`` do not number exactly ``len(sizes)`` non-empty clusters.
        """
        if self._cloud is None or self._xyz is None:
            raise RuntimeError("encode() needs a decode() first")
        labels = np.asarray(labels, dtype=np.int32)
        if layout == "compact":
            labeled = append_fields(keep_fields(self._cloud, XYZ), {"cluster_id": labels})
        else:
            colours = pack_rgb(cluster_rgb(labels))
            labeled = append_fields(self._cloud, {"cluster_id": labels, "rgb": colours})
        return EncodedFrame(
            labeled=labeled,
            table=cluster_table(self._xyz, labels, len(sizes)),
            implausible_points=self._implausible,
            grouped=group_records(point_bytes(self._cloud), labels, len(sizes)) if group else None,
        )


def cluster_mask(xyz: np.ndarray, window: FrameWindow) -> tuple[np.ndarray, int]:
    """The points a frame clusters, and how many finite ones were dropped as implausible.

    A point is plausible when every ``|coordinate|`` is at most ``window.max_coordinate``,
    compared in float64 (NaN never is); the clustered points are the plausible ones inside
    :func:`clip_mask`'s window when the window clips.

    Returns:
        ``(mask, implausible)``: (N,) bool, and the count of finite points not plausible.
    """
    xyz64 = _as_float64(xyz)
    with np.errstate(invalid="ignore"):
        plausible = (np.abs(xyz64) <= window.max_coordinate).all(axis=1)  # NaN: False
    implausible = int(np.count_nonzero(~plausible & np.isfinite(xyz64).all(axis=1)))
    mask = clip_mask(xyz64, window) & plausible if window.clips else plausible
    return mask, implausible


def clip_mask(xyz: np.ndarray, window: FrameWindow) -> np.ndarray:
    """True for points inside the range (horizontal distance), height and side windows of
    ``window``.

    Everything is compared in float64, both bounds inclusive:

    * range: ``r2 = x*x + y*y`` with x, y the float64 values of the coordinates (for float32 or
      integer input each square is exact and the sum is one correctly rounded addition) against
      :meth:`FrameWindow.range_bounds_sq` (a square beyond float64's range is inf, so a
      ``max_range`` above about 1.3e154 m bounds nothing). A point at exactly ``max_range``
      (``r2 == max_range**2``) is in, as is one at ``min_range``.
    * height: z as float64 against ``min_z`` and ``max_z``; side: y against ``min_y`` and
      ``max_y``.

    No libm function is involved, so the GPU twin (``pc2_decode``: ``__dmul_rn``,
    ``__dadd_rn``, no FMA) gives the same mask bit for bit. NaN compares False; an infinite
    coordinate is only inside an unbounded window (the clusterer drops non-finite points anyway).
    """
    xyz64 = _as_float64(xyz)
    x, y, z = xyz64[:, 0], xyz64[:, 1], xyz64[:, 2]
    min_range_sq, max_range_sq = window.range_bounds_sq()
    with np.errstate(over="ignore", invalid="ignore"):
        r2 = x * x + y * y
    return (
        (r2 >= min_range_sq)
        & (r2 <= max_range_sq)
        & (z >= float(window.min_z))
        & (z <= float(window.max_z))
        & (y >= float(window.min_y))
        & (y <= float(window.max_y))
    )


def _as_float64(xyz: np.ndarray) -> np.ndarray:
    """``xyz`` as float64; a signalling NaN read from a payload becomes a quiet NaN without
    NumPy's "invalid value" warning (it is not plausible either way)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(xyz, dtype=np.float64)
