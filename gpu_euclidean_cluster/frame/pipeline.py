"""One frame through the pipeline: decode, stages, cluster, encode. ROS-free.

    >>> pipeline = FramePipeline("auto")
    >>> output = pipeline.process(cloud, ClusterConfig(d_th=0.5), FrameWindow(max_range=40.0))
    >>> output.labeled, output.clusters, output.table, output.result
    >>> pipeline.process(cloud, config, window, group_records=True).grouped  # records by cluster
    >>> pipeline.process(cloud, config, window, oriented_boxes=True).boxes  # yaw, length, width
    >>> pipeline.process(cloud, config, window, labeled_layout="compact").labeled  # x y z id

The backend's frame codec (``Backend.frame_codec``, a ``core.frame.FrameCodec``:
``cpu/codecs/frame.py`` or ``cuda/codecs/frame.py``, twins with identical output) decodes the
PointCloud2 payload onto the backend's device; the stages run there in order; the clusterer labels
the points; the codec encodes the labelled cloud and the cluster table. On the CUDA backend the
frame stays on the GPU from one host -> device copy of the raw payload to one copy back; the records
grouped by cluster, asked for by a caller that publishes each cluster's points, come back with it. A
frame with no stages or boxes is first offered to the codec whole (``process_whole``): the CUDA
codec runs it as one graph launch and one synchronisation where the clustering is a graph's
(``cuda/graphs/frame_graphs.py``); elsewhere the codec answers ``core.frame.Unsupported`` and the
frame runs step by step. Oriented boxes, asked for, are fitted by the backend
(``Backend.oriented_boxes``) to the decoded coordinates where they are the input's (on the GPU: a
float32 cloud), with one more synchronisation for their rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from ..clusterer import Backend, EuclideanClusterer, make_backend
from ..core.config import ClusterConfig
from ..core.frame import (
    DEFAULT_LABELED_LAYOUT,
    DecodedFrame,
    EncodedFrame,
    FrameCodec,
    FrameWindow,
    GroupedRecords,
    LabeledLayout,
    Unsupported,
    flatten_heights,
)
from ..core.ground import GroundFit
from ..core.memory import StructureTooLargeError
from ..core.result import ClusterResult
from ..core.work import WorkTooLargeError
from ..pointcloud_io.pointcloud2 import (
    DATATYPES,
    XYZ,
    RawCloud,
    from_structured,
    from_xyz,
    read_rings,
    read_xyz,
)

#: The columns ``output/clusters`` gains with ``process(..., oriented_boxes=True)``.
ORIENTED_COLUMNS = ("yaw", "length", "width")


class FrameStage(Protocol):
    """A step between decoding and clustering (sensor decoding, preprocessing), run on the
    backend's device: it takes the decoded frame (NumPy arrays on the CPU backend, CuPy on the
    CUDA backend) and returns the frame to cluster; it may change the points or clear the mask.
    It must give identical results on both backends.

    A stage that finds ground points (``frame/ground.py``'s ``GroundRemoval``) also has a
    ``last_ground`` attribute: the ``core.ground.GroundFit`` of the frame it last applied to,
    its mask on the host; the pipeline copies it into :attr:`FrameOutput.ground`, and its
    ``fallback_reason`` (a fit capped by its work bound) into
    :attr:`FrameOutput.fallback_reason`."""

    name: str

    def apply(self, frame: DecodedFrame) -> DecodedFrame:
        """The frame after this stage."""


@dataclass(frozen=True)
class FrameOutput:
    """Everything published for one input frame.

    Attributes:
        labeled: the input cloud with ``cluster_id`` (int32) and ``rgb`` (packed float32) added;
            with ``process(..., labeled_layout="compact")`` only x, y, z and ``cluster_id``
            (``core.frame.LABELED_LAYOUTS``).
        clusters: one point per cluster, fields of ``core.cluster_stats.CLUSTER_DTYPE``; with
            ``process(..., oriented_boxes=True)`` followed by ``yaw``, ``length`` and ``width``
            (float32: :attr:`boxes`' values rounded to nearest).
        table: the same cluster rows as a NumPy structured array.
        result: the clustering result (labels, sizes, timings, backend that ran); its ``labels``
            are a CuPy array when the frame ran on the GPU (``labeled`` holds them too).
        fallback_reason: why this frame ran otherwise than configured (on the CPU, with
            ``union_find``, or its ground plane fitted with fewer hypotheses under the ground
            stage's work bound), or None.
        implausible_points: finite points not clustered because a coordinate exceeded
            ``max_coordinate``.
        grouped: with ``process(..., group_records=True)``, each cluster's input records
            (counts, and the records of cluster 0, then 1, ..., each in input order; a view of a
            buffer the next frame reuses where the pipeline does not ``copy_output``), else None.
        ground: (N,) host bool mask of the ground points found by a ground stage (the last
            stage with a ``last_ground``), else None; they are not clustered (label -1).
        ground_plane: that stage's plane ``(nx, ny, nz, d)`` (``n . p + d = 0``), or None.
        boxes: with ``process(..., oriented_boxes=True)``, one row per cluster in cluster order
            (``core.oriented_boxes.BOX_DTYPE``: ``cluster_id``, ``center_x``, ``center_y``,
            ``yaw``, ``length``, ``width``, ``min_z``, ``max_z``, float64): the minimum-area
            rectangle of the cluster's x-y points (Autoware.ai's ``pose_estimation``; length >=
            width, yaw of the length side in (-pi/2, pi/2]) and its z range, of the input's
            coordinates (``read_xyz``'s values); fitted by the backend (the twins are equal bit
            for bit); else None.
    """

    labeled: RawCloud
    clusters: RawCloud
    table: np.ndarray
    result: ClusterResult
    fallback_reason: str | None = None
    implausible_points: int = 0
    grouped: GroupedRecords | None = None
    ground: np.ndarray | None = None
    ground_plane: tuple[float, float, float, float] | None = None
    boxes: np.ndarray | None = None


@dataclass(frozen=True)
class _Asked:
    """What a caller of :meth:`FramePipeline.process` asked for beyond the labels."""

    group_records: bool
    oriented_boxes: bool
    labeled_layout: LabeledLayout


class FramePipeline:
    """Runs frames on one backend, falling back to the CPU for a frame the GPU cannot hold."""

    def __init__(
        self,
        backend: str | Backend = "auto",
        device_id: int = 0,
        *,
        stages: Sequence[FrameStage] = (),
        copy_output: bool = True,
        whole_frames: bool = True,
    ) -> None:
        """Create the backend now (from its name, or use the one given), so that a bad
        ``backend`` fails at start-up, and its frame codec (on the GPU: compile its kernels).

        Args:
            backend: ``auto``, ``cuda``, ``cpu``, or a backend object.
            device_id: CUDA device of a backend given by name.
            stages: run in order on every decoded frame, before clustering.
            copy_output: copy the labelled payload (and the grouped records) out of buffers the
                next frame reuses (GPU codec: about 0.3 ms for 120 k points), so that a
                :class:`FrameOutput` stays valid for good. False saves the copy for a caller that
                is done with ``labeled`` and ``grouped`` before it calls :meth:`process` again
                (the node publishes, which copies, before it processes the next frame); ``table``
                and ``clusters`` are always copies.
            whole_frames: let the codec run a frame with no stages or boxes as one
                submission where it can (``process_whole``: the CUDA codec's frame graphs,
                ``cuda/graphs/frame_graphs.py``); False: always step by step (for comparison).

        Raises:
            ConfigError: unknown backend name, or ``cuda`` without a CUDA device.
        """
        self._backend: Backend = (
            make_backend(backend, device_id) if isinstance(backend, str) else backend
        )
        self._codec: FrameCodec = self._backend.frame_codec()
        self._clusterer = EuclideanClusterer(ClusterConfig(), self._backend)
        self._host: FramePipeline | None = None
        self._stages = tuple(stages)
        self._copy_output = copy_output
        self._whole_frames = whole_frames

    @property
    def backend(self) -> Backend:
        """The backend frames run on unless they fall back."""
        return self._backend

    @property
    def stages(self) -> tuple[FrameStage, ...]:
        """The stages run on every frame, in order."""
        return self._stages

    @stages.setter
    def stages(self, stages: Sequence[FrameStage]) -> None:
        """Run ``stages`` from the next frame on (a front end's live settings)."""
        self._stages = tuple(stages)
        if self._host is not None:
            self._host.stages = self._stages

    def warm_up(
        self, config: ClusterConfig, window: FrameWindow, *, every_stage: bool = False
    ) -> None:
        """Run a random cloud through :meth:`process` once, so that loading the kernels and
        growing the memory pool happen at start-up rather than in the first frame (which would
        otherwise take a few hundred ms and make the node skip the frames behind it); the
        records are grouped too, so that their buffers exist before a frame asks for them.

        With ``every_stage``, also what a front end may switch on later: the oriented boxes, and
        the centroid merging where an ``exact`` ``config`` does not merge (:attr:`stages` always
        run)."""
        n = self._codec.warm_up_points
        xyz = np.random.default_rng(0).uniform((-50.0, -50.0, -2.0), (50.0, 50.0, 2.0), (n, 3))
        cloud = from_xyz(xyz)
        self.process(cloud, config, window, group_records=True, oriented_boxes=every_stage)
        if every_stage and config.algorithm == "exact" and not config.cluster_merge_threshold > 0:
            merging = config.with_changes(cluster_merge_threshold=config.d_th)
            self.process(cloud, merging, window, oriented_boxes=True)

    def process(
        self,
        cloud: RawCloud,
        config: ClusterConfig,
        window: FrameWindow,
        *,
        group_records: bool = False,
        oriented_boxes: bool = False,
        labeled_layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
    ) -> FrameOutput:
        """Cluster one cloud, its labelled cloud in ``labeled_layout``
        (``core.frame.LABELED_LAYOUTS``); with ``group_records``, also group the input records by
        cluster (:attr:`FrameOutput.grouped`: on the GPU backend a gather there and one more copy
        back); with ``oriented_boxes``, also fit each cluster's minimum-area rectangle
        (:attr:`FrameOutput.boxes`, and three more columns of ``clusters``; by the backend, on
        the input's x, y, z and the labels: on the CPU about 10 ms for 1700 clusters of 120 k
        points on a 2-core host).

        A frame whose graph structure would not fit (one of the paper's methods on a dense cloud:
        ``StructureTooLargeError``) or whose neighbour search would take longer than
        ``config.max_work_s`` (``WorkTooLargeError``) runs with ``union_find`` on the same
        backend, which needs O(N) memory and time; a frame the GPU runs out of memory for runs on
        the CPU; a ground fit over its own work bound draws fewer hypotheses
        (``frame/ground.py``). ``fallback_reason`` says which, and why.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (missing x/y/z, malformed layout).
        """
        asked = _Asked(group_records, oriented_boxes, labeled_layout)
        try:
            output = self._process_here_or_on_host(cloud, config, window, asked)
        except (StructureTooLargeError, WorkTooLargeError) as error:
            reason = f"{error}; frame run with union_find"
            fused = config.with_changes(method="union_find", search="range")
            output = self._process_here_or_on_host(cloud, fused, window, asked)
            reasons = (reason, output.fallback_reason) if output.fallback_reason else (reason,)
            output = replace(output, fallback_reason="; ".join(reasons))
        return output

    def _process_here_or_on_host(
        self, cloud: RawCloud, config: ClusterConfig, window: FrameWindow, asked: _Asked
    ) -> FrameOutput:
        """The frame on this backend; on the CPU when the device runs out of memory."""
        try:
            return self._process(cloud, config, window, asked)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            reason = f"{self._backend.name} backend out of memory ({error}); frame run on the CPU"
        if self._host is None:
            self._host = FramePipeline("cpu", stages=self._stages)
        output = self._host._process(cloud, config, window, asked)
        reasons = (reason, output.fallback_reason) if output.fallback_reason else (reason,)
        return replace(output, fallback_reason="; ".join(reasons))

    def _process(
        self, cloud: RawCloud, config: ClusterConfig, window: FrameWindow, asked: _Asked
    ) -> FrameOutput:
        boxes = asked.oriented_boxes
        if self._whole_frames and not (self._stages or boxes):
            whole = self._codec.process_whole(
                cloud, config, window, asked.labeled_layout, self._copy_output, asked.group_records
            )
            if not isinstance(whole, Unsupported):
                return _output(*whole)
        # Stages and boxes see the true heights (a ground plane needs z, a box its z range); with
        # use_height False the points are flattened after the stages, as the codec would have
        # flattened them.
        flatten = (bool(self._stages) or boxes) and not window.use_height
        frame = self._codec.decode(cloud, replace(window, use_height=True) if flatten else window)
        decoded = frame.points
        ground: GroundFit | None = None
        for stage in self._stages:
            frame = stage.apply(frame)
            ground = getattr(stage, "last_ground", None) or ground
        points = flatten_heights(frame.points) if flatten else frame.points
        # The scan search bins by the sensor's rings where the cloud has them (read on the host).
        rings = read_rings(cloud) if config.search == "scan" else None
        result = self._clusterer_for(config).cluster(points, frame.mask, rings)
        encoded: EncodedFrame = self._codec.encode(
            result.labels,
            result.cluster_sizes,
            copy=self._copy_output,
            group=asked.group_records,
            layout=asked.labeled_layout,
        )
        output = _output(encoded, result, ground)
        if not boxes:
            return output
        coordinates = decoded if decoded.dtype == coordinates_dtype(cloud) else read_xyz(cloud)
        rows = self._backend.oriented_boxes(coordinates, result.labels, result.cluster_sizes)
        return with_oriented_boxes(output, rows)

    def _clusterer_for(self, config: ClusterConfig) -> EuclideanClusterer:
        if self._clusterer.config != config:
            self._clusterer = EuclideanClusterer(config, self._backend)
        return self._clusterer


def _output(
    encoded: EncodedFrame, result: ClusterResult, ground: GroundFit | None = None
) -> FrameOutput:
    """The frame's output from the codec's encoding, the clustering and the ground stage's fit
    (a fit capped by its work bound gives the frame its fallback reason)."""
    return FrameOutput(
        labeled=encoded.labeled,
        clusters=from_structured(encoded.table, is_dense=True),
        table=encoded.table,
        result=result,
        fallback_reason=None if ground is None else ground.fallback_reason,
        implausible_points=encoded.implausible_points,
        grouped=encoded.grouped,
        ground=None if ground is None else ground.mask,
        ground_plane=None if ground is None else ground.plane,
    )


def coordinates_dtype(cloud: RawCloud) -> np.dtype:
    """The dtype of ``read_xyz(cloud)`` (a decodable cloud): float64 where a coordinate's type
    needs it, else float32."""
    return np.result_type(np.float32, *(DATATYPES[cloud.field(name).datatype] for name in XYZ))


def with_oriented_boxes(output: FrameOutput, boxes: np.ndarray) -> FrameOutput:
    """``output`` with :attr:`FrameOutput.boxes` set to ``boxes`` (one
    ``core.oriented_boxes.BOX_DTYPE`` row per cluster) and their ``yaw``, ``length``, ``width``
    appended to ``clusters`` as float32 columns."""
    table = output.table
    dtype = np.dtype(table.dtype.descr + [(name, np.float32) for name in ORIENTED_COLUMNS])
    rows = np.empty(len(table), dtype=dtype)
    for name in table.dtype.names or ():
        rows[name] = table[name]
    for name in ORIENTED_COLUMNS:
        rows[name] = boxes[name]
    return replace(output, clusters=from_structured(rows, is_dense=True), boxes=boxes)


def is_out_of_memory(error: BaseException) -> bool:
    """True for CuPy's OutOfMemoryError (a structure sized in advance and found too large,
    :class:`StructureTooLargeError`, is handled by running ``union_find`` instead)."""
    kind = type(error)
    return kind.__name__ == "OutOfMemoryError" and kind.__module__.startswith("cupy")
