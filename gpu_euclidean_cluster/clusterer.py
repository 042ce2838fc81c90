"""The library's front door: points in, canonical cluster labels out, on the GPU or the CPU.

    >>> clusterer = EuclideanClusterer(ClusterConfig(d_th=0.5, method="edge", search="range"))
    >>> result = clusterer.cluster(points)          # (N, 3) float32, NumPy or CuPy
    >>> result.labels, result.cluster_sizes, result.timings_ms

The stages timed are those of the paper's Section 5 breakdown: transfer in, graph or grid build,
labelling, filter (canonical numbering and the size filter) and transfer out; one
:class:`~gpu_euclidean_cluster.core.timing.StageClock` per run times them all, inside the backends
too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import fields
from typing import Any, Protocol

import numpy as np

from .core.config import BACKENDS, DEFAULT_BACKEND, ClusterConfig, ConfigError
from .core.device import DeviceInfo, MemoryPeak
from .core.frame import FrameCodec
from .core.numbering import array_module
from .core.range_bands import band_indices, offset_components
from .core.result import ClusterResult, Labelling
from .core.scan_search import check_rings
from .core.timing import StageClock
from .core.work import WorkEstimate, WorkTooLargeError, examined_pairs, needs_estimate
from .pointcloud_io.velodyne.sweeps import SweepDecoder

log = logging.getLogger(__name__)


class Backend(Protocol):
    """A place to run the neighbour search and the labelling.

    Front ends use a backend only through these members: they never import a backend module or
    branch on a backend's type or name (``test/house/test_layers.py`` checks it).
    """

    name: str
    device: str

    def to_device(self, array: Any, dtype: Any = None) -> Any:
        """``array`` on this backend's device: C-contiguous in ``dtype`` where given (values
        beyond its range become inf), its own dtype otherwise. Large NumPy arrays may cross in
        chunks through page-locked memory, cast on the way (``cuda/staging.py``)."""

    def to_host(self, array: Any) -> np.ndarray:
        """A NumPy array of ``array``, an array on this backend's device: a new one copied from
        the GPU, the array itself on the host."""

    def synchronize(self) -> None:
        """Wait for queued device work (for honest stage timings)."""

    def label(
        self, points: Any, config: ClusterConfig, clock: StageClock, rings: Any = None
    ) -> Labelling:
        """Connected components of the d_th-neighbour graph of finite ``points``.

        The backend times its steps with ``clock("build")`` and ``clock("label")``. ``rings``
        (int32, one per point, on the device; or None) bins the ``scan`` search; other searches
        do not read it.
        """

    def label_voxel_grid(self, points: Any, config: ClusterConfig, clock: StageClock) -> Labelling:
        """Autoware's ``voxel_grid`` algorithm on finite ``points`` (see ``ClusterConfig``):
        one piece id per point, -1 for a point in no cluster (its voxel dropped, or thinned
        away); ``method`` is the method that clustered the voxel centroids. The twins
        (``cpu/labelling/autoware_voxel.py``, ``cuda/labelling/autoware_voxel.py``) give identical
        ids up to renumbering, so identical labels after :meth:`number_clusters`."""

    def downsample(self, points: Any, leaf_size: float, clock: StageClock) -> tuple[Any, Any]:
        """PCL ``VoxelGrid`` at ``(L, L, L)`` on finite ``points`` (``core/downsample.py``): int32
        (N,) each point's voxel and float32 (V, 3) the voxel centroids, voxels numbered by
        ascending linear index; timed as ``clock("build")``. The twins
        (``cpu/labelling/autoware_voxel.py``, ``cuda/labelling/autoware_voxel.py``) are equal bit
        for bit."""

    def cluster_whole(self, points: Any, mask: Any, config: ClusterConfig) -> ClusterResult | None:
        """The whole call for (N, 3) ``points`` of any real dtype and strides, computed in
        float32 (any values; ``mask`` None or a boolean (N,) array) in one submission to the
        device, where this backend offers one for ``config`` (CUDA: a captured graph per size
        bucket); None: the clusterer runs the stages one by one. The labels equal the staged
        path's, on the device of ``points``."""

    def number_clusters(
        self, components: Any, min_size: int, max_size: int
    ) -> tuple[Any, np.ndarray, int]:
        """:func:`~.core.numbering.canonical_labels` on this backend's device (component id -1:
        the point stays -1 and counts towards nothing)."""

    def merge_components(self, points: Any, components: Any, threshold: float) -> Any:
        """Autoware.ai's centroid merging (``core/merging.py``'s rules) of the components of
        finite ``points`` on this backend's device: (N,) int32 ids, equal within a merged group
        (ids arbitrary; the twins, ``core/merging.py`` and ``cuda/stages/merging.py``, give the same
        partition)."""

    def oriented_boxes(self, points: Any, labels: Any, sizes: np.ndarray) -> np.ndarray:
        """The (K,) ``core.oriented_boxes.BOX_DTYPE`` rows of the clusters ``0..K-1`` of
        ``labels`` over the (N, 3) ``points`` (on this backend's device or the host), ``sizes``
        their point counts; the twins (``core/oriented_boxes.py``,
        ``cuda/stages/oriented_boxes.py``) are equal bit for bit."""

    def describe(self) -> DeviceInfo:
        """The device: name, memory, driver and runtime versions."""

    def release_memory(self) -> int | None:
        """Return pooled device memory to the driver; the bytes the pool held before, or None
        where the backend pools nothing."""

    def measure_peak_memory(self, call: Callable[[], Any]) -> MemoryPeak | None:
        """Run ``call`` once from an empty pool and measure its device memory; None where the
        backend has no device memory to measure (``call`` is not run then)."""

    def pairs_per_second(self, method: str, search: str) -> float:
        """Point pairs the neighbour search of ``method`` examines per second here (measured on
        real frames, rounded down), for ``core.work``'s estimates."""

    def sweep_decoder(self, calibration: Any, settings: Any) -> SweepDecoder:
        """Velodyne packets decoded and cut into sweeps on this backend's device: a
        ``pointcloud_io.velodyne.sweeps.SweepDecoder`` (on the GPU, one whose sweeps stay
        there)."""

    def frame_codec(self) -> FrameCodec:
        """A new PointCloud2 frame codec on this backend's device (the contract
        ``core.frame.FrameCodec``, the twins ``cpu/codecs/frame.py`` and ``cuda/codecs/frame.py``;
        the frame layer, ``frame/pipeline.py``, holds one per pipeline, as a codec keeps the last
        frame's buffers)."""


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # any import or driver failure means "no CUDA here"
        return False


_auto_notice_logged = False


def make_backend(name: str = DEFAULT_BACKEND, device_id: int = 0) -> Backend:
    """The backend called ``name``: ``cuda``, ``cpu``, or ``auto`` (CUDA if CuPy finds a device).

    Raises:
        ConfigError: unknown name, or ``cuda`` asked for where CuPy finds no device.
    """
    global _auto_notice_logged
    if name not in BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
    if name == "auto":
        if cuda_available():
            name = "cuda"
        else:
            if not _auto_notice_logged:
                log.warning("no CUDA device found through CuPy: using the CPU backend")
                _auto_notice_logged = True
            name = "cpu"
    if name == "cuda":
        if not cuda_available():
            raise ConfigError("backend 'cuda' asked for, but CuPy finds no CUDA device")
        from .cuda.backend import CudaBackend

        return CudaBackend(device_id)
    from .cpu.backend import CpuBackend

    return CpuBackend()


def checked_points(points: Any) -> Any:
    """Validate an (N, 3) array of coordinates and return it as an array of its module (NumPy or
    CuPy), its dtype and strides as given: the backend converts it on the way to its device.

    Raises:
        ValueError: wrong shape or a non-numeric dtype.
    """
    xp = array_module(points)
    points = xp.asarray(points)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"points must be an (N, 3) array of x, y, z; got shape {points.shape}")
    if points.dtype.kind not in "fiu":
        raise ValueError(f"points must be numeric; got dtype {points.dtype}")
    return points


def as_points(points: Any) -> Any:
    """Validate an (N, 3) array of coordinates and return it as C-contiguous float32.

    Raises:
        ValueError: wrong shape or a non-numeric dtype.
    """
    points = checked_points(points)
    xp = array_module(points)
    with np.errstate(over="ignore"):  # beyond float32's range: inf, i.e. non-finite, label -1
        return xp.ascontiguousarray(points, dtype=xp.float32)


class EuclideanClusterer:
    """Clusters clouds with one configuration on one backend, reusing compiled kernels.

    Args:
        whole_call: let the backend run the whole call in one submission where it can (the CUDA
            backend's graphs, ``Backend.cluster_whole``); False: always stage by stage (each
            stage timed on its own, for comparison).
    """

    def __init__(
        self,
        config: ClusterConfig | None = None,
        backend: str | Backend = DEFAULT_BACKEND,
        device_id: int = 0,
        whole_call: bool = True,
    ) -> None:
        self.config = config or ClusterConfig()
        self.backend = make_backend(backend, device_id) if isinstance(backend, str) else backend
        self.whole_call = whole_call

    def cluster(self, points: Any, mask: Any = None, rings: Any = None) -> ClusterResult:
        """Cluster one cloud.

        Args:
            points: (N, 3) array, NumPy or CuPy, any real dtype (computed in float32).
            mask: optional boolean (N,) array; points where it is False get label -1 and are
                neither clustered nor counted.
            rings: optional integer (N,) array, each point's laser ring (a Velodyne ``ring`` or
                ``channel`` field, ids in ``[0, 4096)``): the bins of ``search="scan"``, which
                without them bins by elevation bands; checked and used by that search only.

        Raises:
            ValueError: ``rings`` of the wrong shape or dtype, or ids out of range (``scan``).
        """
        config = self.config
        host_input = array_module(points) is np
        points = checked_points(points)  # converted to float32 on the way to the device
        mask = None if mask is None else _as_mask(mask, points)
        if self.whole_call:
            whole = self.backend.cluster_whole(points, mask, config)
            if whole is not None:
                return whole
        clock = StageClock(self.backend.synchronize)
        with clock("transfer_in"):
            device_points = self.backend.to_device(points, np.float32)
            device_mask = None if mask is None else self.backend.to_device(_as_mask(mask, points))
            device_rings = (
                self.backend.to_device(check_rings(rings, int(points.shape[0])))
                if rings is not None and config.search == "scan"
                else None
            )
        xp = array_module(device_points)
        with clock("build"):
            valid = xp.isfinite(device_points).all(axis=1)
            if device_mask is not None:
                valid &= device_mask
            valid_index = xp.flatnonzero(valid)
            compact = device_points[valid_index]
            compact_rings = None if device_rings is None else device_rings[valid_index]
            downsampled = config.algorithm == "exact" and config.downsample_leaf_size > 0
            # voxel_grid searches the voxel centroids (at most one per voxel and z layer), not
            # the points: its search is not estimated; downsampling estimates its centroids'.
            bands = None if downsampled else _range_bands(compact, config)
            if config.algorithm == "exact" and not downsampled:
                _check_work(self.backend, compact, config, bands)
        if config.algorithm == "voxel_grid":
            labelling = self.backend.label_voxel_grid(compact, config, clock)
        elif downsampled:
            labelling = _label_downsampled(self.backend, compact, config, clock)
        else:
            labelling = _label_exact(self.backend, compact, config, bands, clock, compact_rings)
        with clock("filter"):
            valid_labels, sizes, num_components = self.backend.number_clusters(
                labelling.components, config.min_cluster_size, config.max_cluster_size
            )
            labels = xp.full(device_points.shape[0], -1, dtype=xp.int32)
            labels[valid_index] = valid_labels
        with clock("transfer_out"):
            if host_input:
                labels = self.backend.to_host(labels)
        return ClusterResult(
            labels=labels,
            cluster_sizes=sizes,
            timings_ms=clock.totals(),
            backend=self.backend.name,
            method=labelling.method,
            search=config.search,
            device=self.backend.device,
            iterations=labelling.iterations,
            num_components=num_components,
            num_edges=labelling.num_edges,
            num_labels_after_initial=labelling.num_labels_after_initial,
            peak_bytes=labelling.peak_bytes,
        )


def _check_work(
    backend: Backend, points: Any, config: ClusterConfig, bands: list[Band] | None
) -> None:
    """Raise WorkTooLargeError where the exact search of ``points`` is estimated over
    ``max_work_s`` (methods and searches that cost O(N) are never estimated)."""
    if config.max_work_s is not None and needs_estimate(config.method, config.search):
        estimate = estimate_work(backend, points, config, bands)
        if estimate.seconds > config.max_work_s:
            raise WorkTooLargeError(estimate, config.max_work_s)


def _label_exact(
    backend: Backend,
    points: Any,
    config: ClusterConfig,
    bands: list[Band] | None,
    clock: StageClock,
    rings: Any = None,
) -> Labelling:
    """The exact clustering of finite ``points``: one tolerance, or the range ``bands``, then
    Autoware.ai's centroid merging where ``cluster_merge_threshold`` is set (``rings``: the
    points' rings for the scan search, or None)."""
    if bands is None:
        labelling = backend.label(points, config, clock, rings)
    else:
        labelling = _label_bands(backend, points, bands, clock, rings)
    if config.cluster_merge_threshold > 0:
        with clock("label"):
            labelling.components = _merged(backend, points, labelling.components, config)
    return labelling


def _label_downsampled(
    backend: Backend, points: Any, config: ClusterConfig, clock: StageClock
) -> Labelling:
    """Autoware.ai's downsampling (``core/downsample.py``): the voxel centroids of finite
    ``points`` clustered as :func:`_label_exact` clusters points (range bands by a centroid's
    range, merging on the centroids), and every point given its voxel's component."""
    voxel, centroids = backend.downsample(points, config.downsample_leaf_size, clock)
    inner = config.with_changes(downsample_leaf_size=0.0)
    with clock("build"):
        bands = _range_bands(centroids, inner)
        _check_work(backend, centroids, inner, bands)
    labelling = _label_exact(backend, centroids, inner, bands, clock)
    with clock("label"):
        labelling.components = labelling.components[voxel]
    return labelling


def estimate_work(
    backend: Backend, points: Any, config: ClusterConfig, bands: list[Band] | None = None
) -> WorkEstimate:
    """The neighbour search's work for finite ``points`` with ``config`` on ``backend``; with
    ``bands`` (:func:`_range_bands`), the sum of every band's search with its own tolerance."""
    if bands is None:
        pairs = examined_pairs(points, config.d_th, config.search)
    else:
        pairs = sum(
            examined_pairs(points[index], band.d_th, config.search) for index, band in bands
        )
    rate = backend.pairs_per_second(config.method, config.search)
    return WorkEstimate(config.method, config.search, backend.name, pairs, pairs / rate)


#: One range band: the indices of its points among the finite points, and the configuration
#: its points are labelled with (the band's tolerance as ``d_th``).
Band = tuple[Any, ClusterConfig]


def _range_bands(points: Any, config: ClusterConfig) -> list[Band] | None:
    """The non-empty range bands of finite ``points`` (``core/range_bands.py``), or None where
    the configuration has none (or no points): the whole cloud is then labelled with ``d_th``."""
    if config.algorithm != "exact" or not config.clustering_ranges or points.shape[0] == 0:
        return None
    distances = config.clustering_distances
    members = band_indices(points, config.clustering_ranges, len(distances))
    bands = []
    for d_th, index in zip(distances, members, strict=True):
        if index.shape[0]:
            band_config = config.with_changes(
                d_th=d_th, clustering_ranges=(), clustering_distances=(), cluster_merge_threshold=0
            )
            bands.append((index, band_config))
    return bands


def _label_bands(
    backend: Backend, points: Any, bands: list[Band], clock: StageClock, rings: Any = None
) -> Labelling:
    """Every band labelled on its own with its tolerance; component ids kept apart per band."""
    labellings = [
        backend.label(points[index], band, clock, None if rings is None else rings[index])
        for index, band in bands
    ]
    with clock("label"):
        components = offset_components(
            [
                (index, labelling.components)
                for (index, _), labelling in zip(bands, labellings, strict=True)
            ],
            int(points.shape[0]),
        )
    edges = [labelling.num_edges for labelling in labellings]
    initial = [labelling.num_labels_after_initial for labelling in labellings]
    peaks = [labelling.peak_bytes for labelling in labellings if labelling.peak_bytes is not None]
    return Labelling(
        components=components,
        # One name where every band ran the same method (as on real frames), else each in turn.
        method="+".join(dict.fromkeys(labelling.method for labelling in labellings)),
        iterations=max(labelling.iterations for labelling in labellings),
        num_edges=None if None in edges else sum(edges),  # type: ignore[arg-type]
        num_labels_after_initial=None if None in initial else sum(initial),  # type: ignore[arg-type]
        peak_bytes=max(peaks) if peaks else None,
    )


def _merged(backend: Backend, points: Any, components: Any, config: ClusterConfig) -> Any:
    """``components`` of finite ``points`` after Autoware.ai's centroid merging
    (``core/merging.py``), on the backend's device."""
    if int(points.shape[0]) == 0:
        return components
    return backend.merge_components(points, components, config.cluster_merge_threshold)


def euclidean_cluster(
    points: Any,
    d_th: float,
    *,
    backend: str = DEFAULT_BACKEND,
    rings: Any = None,
    **config: Any,
) -> ClusterResult:
    """One-shot clustering; see :class:`EuclideanClusterer` for repeated use.

    ``config`` takes any other :class:`ClusterConfig` field (``method``, ``search``,
    ``min_cluster_size``, ...); what is not given keeps ClusterConfig's default. ``rings``: as
    :meth:`EuclideanClusterer.cluster` takes them.

    Raises:
        ConfigError: an invalid value, or a keyword that is no ClusterConfig field.
    """
    known = {f.name for f in fields(ClusterConfig)} - {"d_th"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(
            f"unknown option {', '.join(unknown)}; expected any of {', '.join(sorted(known))}"
        )
    clusterer = EuclideanClusterer(ClusterConfig(d_th=d_th, **config), backend)
    return clusterer.cluster(points, rings=rings)


def _as_mask(mask: Any, points: Any) -> Any:
    xp = array_module(mask)
    mask = xp.asarray(mask)
    if mask.shape != (points.shape[0],) or mask.dtype != bool:
        raise ValueError(f"mask must be a boolean array of shape ({points.shape[0]},)")
    return mask
