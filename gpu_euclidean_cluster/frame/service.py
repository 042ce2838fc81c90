"""A front end's frames, ROS-free: a received message in, a clustered frame out, every mishap
booked.

    >>> frames = FrameService("auto", 0, ledger, logger.warning)
    >>> frames.warm_up(settings)  # every stage's kernels, before the first frame
    >>> clustered = frames.process(cdr, settings)  # or a FrameRejection (booked and warned)
    >>> clustered.output, clustered.cloud, clustered.stamp, clustered.frame_id, clustered.stage_ms

The node (``ros/node/node.py``) owns the topics and the worker thread; the service owns the rest of
a frame's life. Its :class:`~.pipeline.FramePipeline` runs on the backend asked for, without
copying its output (the front end publishes a frame before it processes the next); the warm-up
runs every stage once; each frame gets the stages its settings ask for, in Autoware.ai's order
(ground removal, then Difference of Normals: ``frame/ground.py``, ``frame/diffnormals.py``).
A message that cannot be decoded, or a frame whose processing fails, is rejected, never raised;
a frame run otherwise than configured (on the CPU, with ``union_find``, or with the RANSAC
hypotheses capped by ``ground_max_work_s``) is a fallback; points
beyond ``max_coordinate`` are counted. Each is booked in the :class:`FrameLedger` (the node's
``ros/node/frame_stats.py``), rejections and fallbacks warned about at most once every
:data:`WARNING_THROTTLE_S` seconds each.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..clusterer import Backend
from ..core.config import ClusterConfig
from ..core.diffnormals import DiffNormalsSettings
from ..core.frame import FrameWindow, LabeledLayout
from ..core.ground import GroundSettings
from ..pointcloud_io.pointcloud2 import PointCloud2Error, RawCloud, from_cdr
from .diffnormals import DiffNormalsFilter
from .ground import GroundRemoval
from .packets import SweepCloud
from .pipeline import FrameOutput, FramePipeline, FrameStage

#: Seconds between two warnings about rejected frames, and between two about fallbacks.
WARNING_THROTTLE_S = 2.0


class FrameSettings(Protocol):
    """What the service reads of the settings in force (the node's ``NodeSettings``)."""

    @property
    def cluster(self) -> ClusterConfig: ...
    @property
    def window(self) -> FrameWindow: ...
    @property
    def ground(self) -> GroundSettings | None: ...
    @property
    def diffnormals(self) -> DiffNormalsSettings | None: ...
    @property
    def pose_estimation(self) -> bool: ...
    @property
    def labeled_layout(self) -> LabeledLayout: ...
    @property
    def max_point_fields(self) -> int: ...


class FrameLedger(Protocol):
    """Where the service books what befell a frame (the node's ``FrameStats``)."""

    def rejected(self, kind: str, reason: str) -> None: ...
    def fell_back(self, reason: str, on_cpu: bool) -> None: ...
    def excluded_implausible(self, count: int, reason: str) -> None: ...


@dataclass(frozen=True)
class FrameRejection:
    """A frame that is not published, already booked and warned about.

    Attributes:
        kind: what groups the counts (``malformed``, ``missing_fields``, ``processing_error``,
            ...: a ``PointCloud2Error``'s kind, or the front end's).
        reason: why, in one line.
    """

    kind: str
    reason: str


@dataclass(frozen=True)
class ClusteredFrame:
    """One frame through the service: what a front end publishes.

    Attributes:
        output: the pipeline's output (``labeled`` and ``grouped`` valid until the next frame).
        cloud: the input cloud (the ground and object clouds copy its records).
        stamp: the input's stamp, ``(sec, nanosec)``: the outputs keep it.
        frame_id: the input's frame.
        stage_ms: ``decode_build`` (everything around the clustering) and ``cluster`` (the
            library's total), in ms.
    """

    output: FrameOutput
    cloud: RawCloud
    stamp: tuple[int, int]
    frame_id: str
    stage_ms: dict[str, float]


class FrameService:
    """A front end's frame layer: one pipeline, its stages and the accounting of its frames."""

    def __init__(
        self,
        backend: str | Backend,
        device_id: int,
        ledger: FrameLedger,
        warn: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Create the backend and the pipeline (on the GPU: compile the codec's kernels).

        Args:
            backend: ``auto``, ``cuda``, ``cpu``, or a backend object.
            device_id: CUDA device of a backend given by name.
            ledger: books rejections, fallbacks and implausible points.
            warn: logs a warning (throttled here: :data:`WARNING_THROTTLE_S`).
            clock: monotonic seconds, for the throttle.

        Raises:
            ConfigError: unknown backend name, or ``cuda`` without a CUDA device.
        """
        self._pipeline = FramePipeline(backend, device_id, copy_output=False)
        self._ground = GroundRemoval()
        self._diffnormals = DiffNormalsFilter()
        self._ledger = ledger
        self._warn = warn
        self._clock = clock
        self._next_warning = {"rejection": -math.inf, "fallback": -math.inf}

    @property
    def backend(self) -> Backend:
        """The backend frames run on unless they fall back."""
        return self._pipeline.backend

    def warm_up(self, settings: FrameSettings) -> None:
        """Run a cloud through every stage, the boxes and the merging once, so that turning any on
        live costs no compile (``FramePipeline.warm_up``)."""
        self._pipeline.stages = (self._ground, self._diffnormals)
        self._pipeline.warm_up(settings.cluster, settings.window, every_stage=True)

    def process(
        self, message: bytes | SweepCloud, settings: FrameSettings, group_records: bool = False
    ) -> ClusteredFrame | FrameRejection:
        """Decode a serialized PointCloud2 (or take a decoded sweep), run the stages ``settings``
        ask for and cluster; with ``group_records``, also group the records by cluster. A message
        that cannot be decoded, or a frame whose processing fails, is rejected (:meth:`reject`)."""
        started = time.perf_counter()
        try:
            if isinstance(message, SweepCloud):
                cloud, stamp = message.cloud, divmod(message.stamp_ns, 1_000_000_000)
                frame_id = message.frame_id
            else:
                cloud, decoded = from_cdr(message, settings.max_point_fields)
                stamp, frame_id = (decoded.stamp.sec, decoded.stamp.nanosec), decoded.frame_id
            self._pipeline.stages = self._stages(settings)
            output = self._pipeline.process(
                cloud,
                settings.cluster,
                settings.window,
                group_records=group_records,
                oriented_boxes=settings.pose_estimation,
                labeled_layout=settings.labeled_layout,
            )
        except PointCloud2Error as error:
            return self.reject(error.kind, f"bad PointCloud2: {error}")
        except Exception as error:  # a frame must never kill the front end
            return self.reject("processing_error", f"{type(error).__name__}: {error}")
        if output.implausible_points:
            self._ledger.excluded_implausible(
                output.implausible_points,
                f"{output.implausible_points} point(s) beyond max_coordinate "
                f"{settings.window.max_coordinate:g} m in the last such frame",
            )
        if output.fallback_reason:
            on_cpu = output.result.backend != self.backend.name
            self._ledger.fell_back(output.fallback_reason, on_cpu)
            self._throttled("fallback", output.fallback_reason)
        cluster_ms = output.result.timings_ms["total"]
        process_ms = (time.perf_counter() - started) * 1e3
        stage_ms = {"decode_build": process_ms - cluster_ms, "cluster": cluster_ms}
        return ClusteredFrame(output, cloud, stamp, frame_id, stage_ms)

    def reject(self, kind: str, reason: str) -> FrameRejection:
        """Book a frame that is not published (``kind`` groups the counts) and warn about it."""
        self._ledger.rejected(kind, reason)
        self._throttled("rejection", f"frame rejected ({kind}): {reason}")
        return FrameRejection(kind, reason)

    def _throttled(self, topic: str, warning: str) -> None:
        now = self._clock()
        if now >= self._next_warning[topic]:
            self._next_warning[topic] = now + WARNING_THROTTLE_S
            self._warn(warning)

    def _stages(self, settings: FrameSettings) -> tuple[FrameStage, ...]:
        """The preprocessing stages ``settings`` ask for, in Autoware.ai's order."""
        stages: list[FrameStage] = []
        if settings.ground is not None:
            self._ground.settings = settings.ground
            stages.append(self._ground)
        if settings.diffnormals is not None:
            self._diffnormals.settings = settings.diffnormals
            stages.append(self._diffnormals)
        return tuple(stages)
