"""One frame through the pipeline: decode, clip, cluster, then build the output clouds. ROS-free.

The node hands each PointCloud2 (as a :class:`RawCloud`) and the settings in force to
:meth:`FrameProcessor.process`; what comes back is everything it publishes, still free of ROS
types, so the whole pipeline is testable without a ROS graph.

Two paths give the same bytes. On the CPU backend (and for a frame the GPU cannot hold) the
NumPy path below decodes, masks, clusters and builds the outputs on the host. On the CUDA backend
the frame stays on the GPU (:mod:`..cuda.frame_pipeline`): one host -> device copy of the raw
payload, decode and mask there, clustering, the labelled payload and the cluster table built
there, one copy back and one synchronisation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..clusterer import Backend, EuclideanClusterer, make_backend
from ..core.cluster_stats import cluster_rgb, cluster_table, pack_rgb
from ..core.config import ClusterConfig
from ..core.memory import StructureTooLargeError
from ..core.result import ClusterResult
from ..cpu.backend import CpuBackend
from ..pointcloud_io.pointcloud2 import RawCloud, append_fields, from_structured, from_xyz, read_xyz
from .settings import NodeSettings

if TYPE_CHECKING:
    from ..cuda.frame_pipeline import FrameWindow, GpuFramePipeline

log = logging.getLogger(__name__)

#: Points of the cloud processed once at start-up by :meth:`FrameProcessor.warm_up`: a full
#: HDL-64E sweep on the GPU (so the memory pool already holds frame-sized blocks), a small cloud on
#: the CPU (where start-up time matters more than the first frame's).
WARM_UP_POINTS = 4096
WARM_UP_POINTS_CUDA = 131072


@dataclass(frozen=True)
class FrameOutput:
    """Everything published for one input frame.

    Attributes:
        labeled: the input cloud with ``cluster_id`` (int32) and ``rgb`` (packed float32) added.
        clusters: one point per cluster, fields of :data:`~..cluster_stats.CLUSTER_DTYPE`.
        table: the same cluster rows as a NumPy structured array.
        result: the clustering result (labels, sizes, timings, backend that ran); its ``labels``
            are a CuPy array when the frame ran on the GPU pipeline (``labeled`` holds them too).
        fallback_reason: why this frame ran on the CPU instead of the GPU, or None.
        implausible_points: finite points not clustered because a coordinate exceeded
            ``max_coordinate``.
    """

    labeled: RawCloud
    clusters: RawCloud
    table: np.ndarray
    result: ClusterResult
    fallback_reason: str | None = None
    implausible_points: int = 0


class FrameProcessor:
    """Clusters frames on one backend, falling back to the CPU for a frame the GPU cannot hold."""

    def __init__(
        self,
        backend: str | Backend = "auto",
        device_id: int = 0,
        *,
        gpu_pipeline: bool = True,
        copy_output: bool = True,
    ) -> None:
        """Create the backend now (from its name, or use the one given), so that a bad
        ``backend`` fails at start-up; on the CUDA backend also compile the GPU frame pipeline.

        Args:
            backend: ``auto``, ``cuda``, ``cpu``, or a backend object.
            device_id: CUDA device of a backend given by name.
            gpu_pipeline: on the CUDA backend, keep the whole frame on the GPU (False: decode and
                build the outputs with NumPy, cluster on the GPU; for comparisons).
            copy_output: on the GPU pipeline, copy the labelled payload out of the pinned buffer
                the next frame reuses (about 0.3 ms for 120 k points), so that a
                :class:`FrameOutput` stays valid for good. False saves the copy for a caller that
                is done with ``labeled`` before it calls :meth:`process` again (the node
                publishes, which copies, before it processes the next frame); ``table`` and
                ``clusters`` are always copies.

        Raises:
            ConfigError: unknown backend name, or ``cuda`` without a CUDA device.
        """
        self._backend: Backend = (
            make_backend(backend, device_id) if isinstance(backend, str) else backend
        )
        self._clusterer = EuclideanClusterer(ClusterConfig(), self._backend)
        self._cpu_clusterer: EuclideanClusterer | None = None
        self._pipeline = _frame_pipeline(self._backend) if gpu_pipeline else None
        self._copy_output = copy_output

    @property
    def backend_name(self) -> str:
        """``cuda`` or ``cpu``: the backend frames run on unless they fall back."""
        return self._backend.name

    @property
    def device(self) -> str:
        """The GPU's name, or ``cpu``."""
        return self._backend.device

    @property
    def uses_gpu_pipeline(self) -> bool:
        """True when frames stay on the GPU from the raw payload to the outputs."""
        return self._pipeline is not None

    def warm_up(self, settings: NodeSettings) -> None:
        """Run a random cloud through :meth:`process` once, so that loading the CUDA kernels and
        growing the memory pool happen at start-up rather than in the first frame (which would
        otherwise take a few hundred ms and make the node skip the frames behind it)."""
        n = WARM_UP_POINTS_CUDA if self._backend.name == "cuda" else WARM_UP_POINTS
        xyz = np.random.default_rng(0).uniform((-50.0, -50.0, -2.0), (50.0, 50.0, 2.0), (n, 3))
        self.process(from_xyz(xyz), settings)

    def process(self, cloud: RawCloud, settings: NodeSettings) -> FrameOutput:
        """Cluster one cloud with ``settings``.

        A frame whose graph structure would not fit (one of the paper's methods on a dense cloud:
        ``StructureTooLargeError``) runs with ``union_find`` on the same backend, which needs O(N)
        memory; a frame the GPU runs out of memory for runs on the CPU. ``fallback_reason`` says
        which, and why.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (missing x/y/z, malformed layout).
        """
        try:
            return self._process_on_backend(cloud, settings)
        except StructureTooLargeError as error:
            reason = f"{error}; frame run with union_find"
        fused = replace(settings, cluster=settings.cluster.with_changes(method="union_find"))
        output = self._process_on_backend(cloud, fused)
        reasons = (reason, output.fallback_reason) if output.fallback_reason else (reason,)
        return replace(output, fallback_reason="; ".join(reasons))

    def _process_on_backend(self, cloud: RawCloud, settings: NodeSettings) -> FrameOutput:
        """The frame on the backend; on the CPU when the GPU runs out of memory."""
        if self._pipeline is None:
            return self._process_on_host(cloud, settings)
        try:
            return self._process_on_gpu(self._pipeline, cloud, settings)
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            reason = f"{self._backend.name} backend out of memory ({error}); frame run on the CPU"
        return self._process_on_host(cloud, settings, fallback_reason=reason)

    def _process_on_gpu(
        self, pipeline: GpuFramePipeline, cloud: RawCloud, settings: NodeSettings
    ) -> FrameOutput:
        """The frame on the GPU pipeline: the same outputs as :meth:`_process_on_host`."""
        frame = pipeline.decode(cloud, frame_window(settings))
        result = self._clusterer_for(settings.cluster).cluster(frame.points, frame.mask)
        encoded = pipeline.encode(result.labels, result.cluster_sizes)
        payload = encoded.payload.copy() if self._copy_output else encoded.payload
        table = encoded.table.copy()
        return FrameOutput(
            labeled=pipeline.output_cloud(payload),
            clusters=from_structured(table, is_dense=True),
            table=table,
            result=result,
            implausible_points=encoded.implausible_points,
        )

    def _process_on_host(
        self, cloud: RawCloud, settings: NodeSettings, fallback_reason: str | None = None
    ) -> FrameOutput:
        """The frame with NumPy around the clustering; on the CPU when ``fallback_reason``."""
        xyz = read_xyz(cloud)
        mask, implausible = cluster_mask(xyz, settings)
        points = xyz if settings.use_height else _flatten(xyz)
        if fallback_reason is None:
            result, fallback_reason = self._cluster(points, mask, settings.cluster)
        else:
            result = self._cpu_clusterer_for(settings.cluster).cluster(points, mask)
        labels = np.asarray(result.labels, dtype=np.int32)
        labeled = append_fields(cloud, {"cluster_id": labels, "rgb": pack_rgb(cluster_rgb(labels))})
        table = cluster_table(xyz, labels, result.num_clusters)
        return FrameOutput(
            labeled=labeled,
            clusters=from_structured(table, is_dense=True),
            table=table,
            result=result,
            fallback_reason=fallback_reason,
            implausible_points=implausible,
        )

    def _clusterer_for(self, config: ClusterConfig) -> EuclideanClusterer:
        if self._clusterer.config != config:
            self._clusterer = EuclideanClusterer(config, self._backend)
        return self._clusterer

    def _cpu_clusterer_for(self, config: ClusterConfig) -> EuclideanClusterer:
        if self._cpu_clusterer is None or self._cpu_clusterer.config != config:
            self._cpu_clusterer = EuclideanClusterer(config, CpuBackend())
        return self._cpu_clusterer

    def _cluster(
        self, points: np.ndarray, mask: np.ndarray | None, config: ClusterConfig
    ) -> tuple[ClusterResult, str | None]:
        try:
            return self._clusterer_for(config).cluster(points, mask), None
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            reason = f"{self._backend.name} backend out of memory ({error}); frame run on the CPU"
        return self._cpu_clusterer_for(config).cluster(points, mask), reason


def frame_window(settings: NodeSettings) -> FrameWindow:
    """The GPU pipeline's mask settings (:class:`~..cuda.frame_pipeline.FrameWindow`) of
    ``settings``: :func:`cluster_mask` on the GPU."""
    from ..cuda.frame_pipeline import FrameWindow

    return FrameWindow(
        min_range=settings.min_range,
        max_range=settings.max_range,
        min_z=settings.min_z,
        max_z=settings.max_z,
        max_coordinate=settings.max_coordinate,
        use_height=settings.use_height,
    )


def cluster_mask(xyz: np.ndarray, settings: NodeSettings) -> tuple[np.ndarray, int]:
    """The points a frame clusters, and how many finite ones were dropped as implausible.

    A point is plausible when every ``|coordinate|`` is at most ``settings.max_coordinate``,
    compared in float64 (NaN never is); the clustered points are the plausible ones inside
    :func:`clip_mask`'s window when the settings have one.

    Returns:
        ``(mask, implausible)``: (N,) bool, and the count of finite points not plausible.
    """
    xyz64 = np.asarray(xyz, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        plausible = (np.abs(xyz64) <= settings.max_coordinate).all(axis=1)  # NaN: False
    implausible = int(np.count_nonzero(~plausible & np.isfinite(xyz64).all(axis=1)))
    mask = clip_mask(xyz64, settings) & plausible if settings.clips else plausible
    return mask, implausible


def clip_mask(xyz: np.ndarray, settings: NodeSettings) -> np.ndarray:
    """True for points inside the range (horizontal distance) and height windows of ``settings``.

    Everything is compared in float64, both bounds inclusive:

    * range: ``r2 = x*x + y*y`` with x, y the float64 values of the coordinates (for float32 or
      integer input each square is exact and the sum is one correctly rounded addition) against
      ``min_range * min_range`` and ``max_range * max_range`` as Python floats (a square beyond
      float64's range is inf, so a ``max_range`` above about 1.3e154 m bounds nothing). A point
      at exactly ``max_range`` (``r2 == max_range**2``) is in, as is one at ``min_range``.
    * height: z as float64 against ``min_z`` and ``max_z``.

    No libm function is involved, so the GPU pipeline (``pc2_decode``: ``__dmul_rn``,
    ``__dadd_rn``, no FMA) gives the same mask bit for bit. NaN compares False; an infinite
    coordinate is only inside an unbounded window (the clusterer drops non-finite points anyway).
    """
    xyz64 = np.asarray(xyz, dtype=np.float64)
    x, y, z = xyz64[:, 0], xyz64[:, 1], xyz64[:, 2]
    min_range, max_range = float(settings.min_range), float(settings.max_range)
    with np.errstate(over="ignore", invalid="ignore"):
        r2 = x * x + y * y
    return (
        (r2 >= min_range * min_range)
        & (r2 <= max_range * max_range)
        & (z >= float(settings.min_z))
        & (z <= float(settings.max_z))
    )


def is_out_of_memory(error: BaseException) -> bool:
    """True for CuPy's OutOfMemoryError (a structure sized in advance and found too large,
    :class:`StructureTooLargeError`, is handled by running ``union_find`` instead)."""
    kind = type(error)
    return kind.__name__ == "OutOfMemoryError" and kind.__module__.startswith("cupy")


def _flatten(xyz: np.ndarray) -> np.ndarray:
    flat = xyz.copy()
    flat[:, 2] = np.where(np.isfinite(flat[:, 2]), 0.0, flat[:, 2])
    return flat


def _frame_pipeline(backend: Backend) -> GpuFramePipeline | None:
    """The GPU frame pipeline for a real CUDA backend, None for any other (also for a stand-in
    named ``cuda`` where CuPy is missing)."""
    if backend.name != "cuda":
        return None
    try:
        from ..cuda.backend import CudaBackend
        from ..cuda.frame_pipeline import GpuFramePipeline
    except ImportError:  # no CuPy
        return None
    if not isinstance(backend, CudaBackend):
        return None
    return GpuFramePipeline(backend.device_id)
