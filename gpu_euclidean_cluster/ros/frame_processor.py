"""One frame through the pipeline: decode, clip, cluster, then build the output clouds. ROS-free.

The node hands each PointCloud2 (as a :class:`RawCloud`) and the settings in force to
:meth:`FrameProcessor.process`; what comes back is everything it publishes, still free of ROS
types, so the whole pipeline is testable without a ROS graph.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..clusterer import Backend, EuclideanClusterer, make_backend
from ..core.cluster_stats import cluster_rgb, cluster_table, pack_rgb
from ..core.config import ClusterConfig
from ..core.result import ClusterResult
from ..cpu.backend import CpuBackend
from ..cuda.matrix_memory import MatrixMemoryError
from ..pointcloud_io.pointcloud2 import RawCloud, append_fields, from_structured, from_xyz, read_xyz
from .settings import NodeSettings

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
        result: the clustering result (labels, sizes, timings, backend that ran).
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

    def __init__(self, backend: str | Backend = "auto", device_id: int = 0) -> None:
        """Create the backend now (from its name, or use the one given), so that a bad
        ``backend`` fails at start-up.

        Raises:
            ConfigError: unknown backend name, or ``cuda`` without a CUDA device.
        """
        self._backend: Backend = (
            make_backend(backend, device_id) if isinstance(backend, str) else backend
        )
        self._clusterer = EuclideanClusterer(ClusterConfig(), self._backend)
        self._cpu_clusterer: EuclideanClusterer | None = None

    @property
    def backend_name(self) -> str:
        """``cuda`` or ``cpu``: the backend frames run on unless they fall back."""
        return self._backend.name

    @property
    def device(self) -> str:
        """The GPU's name, or ``cpu``."""
        return self._backend.device

    def warm_up(self, settings: NodeSettings) -> None:
        """Run a random cloud through :meth:`process` once, so that loading the CUDA kernels and
        growing the memory pool happen at start-up rather than in the first frame (which would
        otherwise take a few hundred ms and make the node skip the frames behind it)."""
        n = WARM_UP_POINTS_CUDA if self._backend.name == "cuda" else WARM_UP_POINTS
        xyz = np.random.default_rng(0).uniform((-50.0, -50.0, -2.0), (50.0, 50.0, 2.0), (n, 3))
        self.process(from_xyz(xyz), settings)

    def process(self, cloud: RawCloud, settings: NodeSettings) -> FrameOutput:
        """Cluster one cloud with ``settings``.

        Raises:
            PointCloud2Error: the cloud cannot be decoded (missing x/y/z, malformed layout).
        """
        xyz = read_xyz(cloud)
        with np.errstate(invalid="ignore"):
            plausible = (np.abs(xyz) <= settings.max_coordinate).all(axis=1)  # NaN: False
        implausible = int(np.count_nonzero(~plausible & np.isfinite(xyz).all(axis=1)))
        mask = clip_mask(xyz, settings) & plausible if settings.clips else plausible
        points = xyz if settings.use_height else _flatten(xyz)
        result, fallback_reason = self._cluster(points, mask, settings.cluster)
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

    def _cluster(
        self, points: np.ndarray, mask: np.ndarray | None, config: ClusterConfig
    ) -> tuple[ClusterResult, str | None]:
        if self._clusterer.config != config:
            self._clusterer = EuclideanClusterer(config, self._backend)
        try:
            return self._clusterer.cluster(points, mask), None
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            reason = f"{self._backend.name} backend out of memory ({error}); frame run on the CPU"
        if self._cpu_clusterer is None or self._cpu_clusterer.config != config:
            self._cpu_clusterer = EuclideanClusterer(config, CpuBackend())
        return self._cpu_clusterer.cluster(points, mask), reason


def clip_mask(xyz: np.ndarray, settings: NodeSettings) -> np.ndarray:
    """True for points inside the range (horizontal distance) and height windows of ``settings``.

    Non-finite points compare False and are excluded.
    """
    horizontal = np.hypot(xyz[:, 0], xyz[:, 1])
    z = xyz[:, 2]
    return (
        (horizontal >= settings.min_range)
        & (horizontal <= settings.max_range)
        & (z >= settings.min_z)
        & (z <= settings.max_z)
    )


def is_out_of_memory(error: BaseException) -> bool:
    """True for CuPy's OutOfMemoryError and the matrix method's :class:`MatrixMemoryError`."""
    if isinstance(error, MatrixMemoryError):
        return True
    kind = type(error)
    return kind.__name__ == "OutOfMemoryError" and kind.__module__.startswith("cupy")


def _flatten(xyz: np.ndarray) -> np.ndarray:
    flat = xyz.copy()
    flat[:, 2] = np.where(np.isfinite(flat[:, 2]), 0.0, flat[:, 2])
    return flat
