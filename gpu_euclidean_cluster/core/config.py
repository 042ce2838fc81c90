"""Clustering configuration: the knobs of Euclidean cluster extraction and their validation.

The one source of every clustering default, limit and choice list: the library, the CLI, the ROS
node and the benchmarks derive theirs from here, so that every front end accepts and rejects
exactly the same values with the same reasons.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Literal, get_args

from .units import INT32_MAX

Method = Literal["auto", "union_find", "vertex", "edge", "matrix"]
Search = Literal["exhaustive", "range", "kdtree", "scan"]
BackendName = Literal["auto", "cuda", "cpu"]
Algorithm = Literal["exact", "voxel_grid"]

#: Every method a front end accepts: ``auto`` picks the fastest exact one for the cloud.
METHODS: tuple[str, ...] = get_args(Method)
#: The labelling methods that run as such (``auto`` resolves to one of them).
LABELLING_METHODS: tuple[str, ...] = METHODS[1:]
#: The paper's three methods (Section 4), which build a graph structure before labelling.
PAPER_METHODS: tuple[str, ...] = ("vertex", "edge", "matrix")
SEARCHES: tuple[str, ...] = get_args(Search)
#: The paper's two searches (Section 4.4): all pairs, and the voxel grid.
PAPER_SEARCHES: tuple[str, ...] = ("exhaustive", "range")
#: The searches of the companion papers (``core/kdtree.py``, ``core/scan_search.py``): they build
#: a structure of their own and hand every labelling method the neighbour pairs it finds.
PAIR_SEARCHES: tuple[str, ...] = ("kdtree", "scan")
BACKENDS: tuple[str, ...] = get_args(BackendName)
#: What is clustered: ``exact`` Euclidean cluster extraction on the points, or ``voxel_grid``,
#: Autoware's ``voxel_grid_based_euclidean_cluster`` (clusters of voxel centroids in x-y).
ALGORITHMS: tuple[str, ...] = get_args(Algorithm)
#: Where to cluster unless told otherwise: CUDA when CuPy sees a device, else the CPU.
DEFAULT_BACKEND: BackendName = "auto"

#: Largest cluster size that means "no upper limit" (PCL's default is INT_MAX as well).
UNLIMITED_CLUSTER_SIZE = INT32_MAX

#: Seconds of neighbour search a configuration may be estimated to take before the library
#: refuses it (``core/work.py``): far beyond any frame rate, short of a silent minute. Also the
#: library's bound of a RANSAC ground fit (``GroundSettings.max_work_s``, ``core/ground.py``).
DEFAULT_MAX_WORK_S = 10.0

#: Threads per block of the matrix-based method (the paper's ``b``): points merged by
#: INITIAL_EC and labels per sub-matrix side. A multiple of 32 so a sub-matrix row is whole words.
DEFAULT_MATRIX_BLOCK = 256


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the value and the reason."""


@dataclass(frozen=True)
class ClusterConfig:
    """What to cluster with.

    Attributes:
        algorithm: ``exact`` (the default): Euclidean cluster extraction on the points, as
            described below. ``voxel_grid``: Autoware's ``voxel_grid_based_euclidean_cluster``
            (Autoware Universe's ``autoware_euclidean_cluster``, 2026 semantics): the points
            are binned into a PCL voxel grid of ``voxel_leaf_size`` in x-y (two layers split
            at z = 0), voxels with fewer than
            ``min_points_per_voxel`` points are dropped, the voxel centroids flattened to z = 0
            are clustered exactly with ``d_th`` (Autoware's ``tolerance``: strict, float32,
            x-y only; ``method`` and ``search`` choose how, any method gives the same
            partition), components of more than ``max_voxels_per_cluster`` voxels are bisected
            along their principal axis, the points follow their voxel, pieces of more than
            ``large_cluster_voxel_count_threshold`` voxels keep at most
            ``large_cluster_max_points_per_voxel`` points per voxel (a deterministic spread
            choice; Autoware shuffles), and ``min_cluster_size`` and ``max_cluster_size`` count
            the points left after that thinning (``min_cluster_size`` is Autoware's
            ``min_points_per_cluster``; Autoware's voxel node ignores a maximum, which the
            default ``UNLIMITED_CLUSTER_SIZE`` matches). The algorithm is always 2-D on the
            centroids but reads the points' true z for its two layers: do not flatten z
            before it. Points in a dropped voxel or thinned away are labelled -1.
        d_th: distance threshold in metres (PCL's ``cluster_tolerance``). Two points are neighbours
            when their squared distance, computed in float32, is below ``d_th**2``.
        method: labelling method: ``union_find`` (the neighbour search fused with a lock-free
            union-find over clique cells, O(N) memory; ``docs/union_find.md``), one of the
            paper's Section 4 methods ``vertex`` (4.1), ``edge`` (4.2) or ``matrix`` (4.3), or
            ``auto``: the fastest exact method for the cloud (see :func:`resolve_method`).
        search: neighbour search: ``exhaustive`` (ES) or ``range`` (RS, voxel grid) of Section
            4.4; ``kdtree``, the GPU kd-tree of Wehr & Radkowski with an exact fixed-radius query
            (``core/kdtree.py``); or ``scan``, bins of laser ring and azimuth sector after the
            Velodyne scan paper, with windows proven to hold every neighbour
            (``core/scan_search.py``; rings from ``cluster(..., rings=...)`` or the cloud's
            ``ring``/``channel`` field, else elevation bands). Every search finds exactly the
            float32 rule's pairs: the partition does not depend on it.
        min_cluster_size: clusters with fewer points are labelled -1.
        max_cluster_size: clusters with more points are labelled -1.
        matrix_block: the matrix method's block size ``b`` (multiple of 32, at most 1024).
        pointer_jumping: vertex and edge methods only: hook labels at their roots and compress
            paths after each pass (Hawick et al.'s label-equivalence steps). Same labels in far
            fewer passes. Set it to False to run the paper's algorithms exactly as written.
        memory_budget: bytes the paper's methods may spend on their graph structure (edge list,
            adjacency list, matrices); None: half the host memory available at the time on the
            CPU, the free memory on the GPU. Over it they raise ``StructureTooLargeError``
            before allocating; ``union_find`` needs O(N) memory and ignores it.
        max_work_s: seconds the neighbour search of a paper's method or of exhaustive search
            may be estimated to take on the backend (point pairs examined at its measured rate,
            ``core/work.py``); over it the run raises ``WorkTooLargeError`` before searching,
            naming ``auto``. None: no limit. ``auto`` and ``union_find`` with range search cost
            O(N) and are never refused.

        voxel_leaf_size: ``voxel_grid`` only: the voxel edge in x and y, metres (Autoware's
            ``voxel_leaf_size``).
        min_points_per_voxel: ``voxel_grid`` only: voxels with fewer points are dropped, their
            points labelled -1.
        max_voxels_per_cluster: ``voxel_grid`` only: components of more voxels are split by
            principal-axis bisection until each piece has at most this many (Autoware treats
            values below 1 as 1; here they are rejected).
        large_cluster_voxel_count_threshold: ``voxel_grid`` only: pieces of more voxels than
            this (strictly) are thinned.
        large_cluster_max_points_per_voxel: ``voxel_grid`` only: points a voxel of a thinned
            piece keeps at most.

        clustering_ranges: ``exact`` only: range-dependent tolerances, Autoware.ai's
            ``lidar_euclidean_cluster_detect`` (``use_multiple_thres``, ``clustering_ranges``,
            ``segmentByDistance``): the band edges in metres, strictly increasing and > 0. A
            point's range is its horizontal distance ``sqrt(x**2 + y**2)`` (computed in float64,
            rounded to float32, as Autoware.ai's ``float origin_distance``); band ``i`` holds the
            ranges in ``[clustering_ranges[i-1], clustering_ranges[i])`` (band 0 from 0, the last
            band unbounded). Each band is clustered on its own with its own tolerance: points of
            different bands never share a cluster, however close. Empty (the default): one band,
            clustered with ``d_th``. Where set, ``d_th`` is not used. Autoware.ai's defaults
            (``config/params.yaml`` there): ``(15, 30, 45, 60)``.
        clustering_distances: ``exact`` only: the tolerance of each band, metres (Autoware.ai's
            ``clustering_distances``; defaults there ``(0.5, 1.1, 1.6, 2.1, 2.6)``), one more
            than ``clustering_ranges``, each used as ``d_th`` is on its band's points. Empty
            exactly when ``clustering_ranges`` is.
        cluster_merge_threshold: ``exact`` only: merge clusters whose centroids lie within this
            many metres of each other in x-y (Autoware.ai's ``cluster_merge_threshold``, 1.5
            there; ``checkAllForMerge``). 0 (the default): no merging. Merging is transitive
            (connected components of the "centroids within the threshold" relation) and runs
            twice, as Autoware.ai's, the second time on the merged clusters' centroids
            (``core/merging.py`` gives the exact rule and where it differs from Autoware.ai).
            ``min_cluster_size`` and ``max_cluster_size`` count the points of merged clusters.

        downsample_leaf_size: ``exact`` only: voxel-grid downsampling before clustering,
            Autoware.ai's ``downsample_cloud`` with its ``leaf_size`` (0.1 m there); 0 (the
            default): none. The points are binned into PCL ``VoxelGrid``'s grid of leaf ``(L, L,
            L)`` (float32 inverse leaf, cells from the cloud's minima, voxels by ascending linear
            index; where the grid would have more than INT32_MAX cells PCL returns the cloud
            unchanged, and so every point is then its own voxel), each occupied voxel's centroid
            stands for its points, the centroids are clustered exactly in 3-D with ``d_th`` (or
            the range bands, a centroid's band by its own range; then merged by
            ``cluster_merge_threshold``), and every point takes its voxel's cluster.
            ``min_cluster_size`` and ``max_cluster_size`` count input points (Autoware.ai counted
            the downsampled points). ``core/downsample.py`` gives the exact rules.

    The defaults (``auto``, range search) run the fastest exact configuration measured on real
    LiDAR frames and dense clouds (see benchmarks/README.md).
    """

    d_th: float = 0.5
    method: Method = "auto"
    search: Search = "range"
    min_cluster_size: int = 1
    max_cluster_size: int = UNLIMITED_CLUSTER_SIZE
    matrix_block: int = DEFAULT_MATRIX_BLOCK
    pointer_jumping: bool = True
    memory_budget: int | None = None
    max_work_s: float | None = DEFAULT_MAX_WORK_S
    algorithm: Algorithm = "exact"
    voxel_leaf_size: float = 0.3
    min_points_per_voxel: int = 1
    max_voxels_per_cluster: int = 800
    large_cluster_voxel_count_threshold: int = 65
    large_cluster_max_points_per_voxel: int = 10
    clustering_ranges: tuple[float, ...] = ()
    clustering_distances: tuple[float, ...] = ()
    cluster_merge_threshold: float = 0.0
    downsample_leaf_size: float = 0.0

    def __post_init__(self) -> None:
        for name in ("clustering_ranges", "clustering_distances"):
            value = getattr(self, name)
            if isinstance(value, list):  # as YAML and ROS parameters give them
                object.__setattr__(self, name, tuple(value))
        for problem in config_problems(self):
            raise ConfigError(problem)

    def with_changes(self, **changes: object) -> ClusterConfig:
        """A validated copy with ``changes`` applied (raises ConfigError, self unchanged)."""
        return replace(self, **changes)  # type: ignore[arg-type]


def resolve_method(method: str) -> str:
    """The labelling method that runs for ``method``: the one rule of ``auto``, for every backend.

    ``auto`` runs ``union_find``: the fastest exact method measured on every real frame, and the
    one whose memory follows the points, not the pairs, for every cloud and threshold (the CPU
    twin's clique cells hold any finite cloud, far outliers and degenerate thresholds included;
    the CUDA kernels fall back to an all-pairs search on the device where their grid cannot
    hold the cloud). Any other method is returned unchanged.
    """
    return "union_find" if method == "auto" else method


def config_problems(config: ClusterConfig) -> list[str]:
    """Every reason ``config`` is invalid, as human-readable sentences (empty when valid)."""
    problems = []
    d_th = config.d_th
    if isinstance(d_th, bool) or not isinstance(d_th, (int, float)) or not math.isfinite(d_th):
        problems.append(f"d_th must be a finite number of metres, got {d_th!r}")
    elif d_th <= 0:
        problems.append(f"d_th must be > 0 m, got {d_th}")
    if config.method not in METHODS:
        problems.append(f"unknown method {config.method!r}; expected one of {', '.join(METHODS)}")
    if config.search not in SEARCHES:
        problems.append(f"unknown search {config.search!r}; expected one of {', '.join(SEARCHES)}")
    problems.extend(_size_problems(config.min_cluster_size, config.max_cluster_size))
    block = config.matrix_block
    if not _is_int(block) or block < 32 or block > 1024 or block % 32:
        problems.append(f"matrix_block must be a multiple of 32 in [32, 1024], got {block!r}")
    budget = config.memory_budget
    if budget is not None and (not _is_int(budget) or budget < 1):
        problems.append(f"memory_budget must be a number of bytes >= 1 or None, got {budget!r}")
    work = config.max_work_s
    if work is not None and (
        isinstance(work, bool)
        or not isinstance(work, (int, float))
        or not math.isfinite(work)
        or work <= 0
    ):
        problems.append(f"max_work_s must be a finite number of seconds > 0 or None, got {work!r}")
    if not isinstance(config.pointer_jumping, bool):
        problems.append(f"pointer_jumping must be true or false, got {config.pointer_jumping!r}")
    problems.extend(_voxel_grid_problems(config))
    problems.extend(_range_band_problems(config))
    problems.extend(_downsample_problems(config))
    return problems


def _downsample_problems(config: ClusterConfig) -> list[str]:
    """Problems of Autoware.ai's voxel-grid downsampling (``downsample_leaf_size``)."""
    leaf = config.downsample_leaf_size
    if isinstance(leaf, bool) or not isinstance(leaf, (int, float)) or not math.isfinite(leaf):
        return [
            f"downsample_leaf_size must be a finite number of metres (0: no downsampling), "
            f"got {leaf!r}"
        ]
    if leaf < 0:
        return [f"downsample_leaf_size must be >= 0 m (0: no downsampling), got {leaf}"]
    if leaf > 0 and config.algorithm == "voxel_grid":
        return [
            "downsample_leaf_size applies to algorithm 'exact' only: 'voxel_grid' bins the "
            "points into its own grid (voxel_leaf_size); leave it 0 with 'voxel_grid'"
        ]
    return []


def _range_band_problems(config: ClusterConfig) -> list[str]:
    """Problems of Autoware.ai's range bands and centroid merging (``clustering_ranges``,
    ``clustering_distances``, ``cluster_merge_threshold``)."""
    problems = []
    ranges, distances = config.clustering_ranges, config.clustering_distances
    ranges_ok = _is_number_tuple(ranges)
    distances_ok = _is_number_tuple(distances)
    if not ranges_ok:
        problems.append(
            f"clustering_ranges must be a tuple of finite numbers of metres, got {ranges!r}"
        )
    elif any(r <= 0 for r in ranges) or any(b <= a for a, b in itertools.pairwise(ranges)):
        problems.append(
            f"clustering_ranges must be > 0 m and strictly increasing, got {list(ranges)}"
        )
    if not distances_ok:
        problems.append(
            f"clustering_distances must be a tuple of finite numbers of metres, got {distances!r}"
        )
    elif any(d <= 0 for d in distances):
        problems.append(f"clustering_distances must all be > 0 m, got {list(distances)}")
    if ranges_ok and distances_ok and (ranges or distances):
        if len(distances) != len(ranges) + 1:
            problems.append(
                f"clustering_distances must have one entry more than clustering_ranges (one "
                f"tolerance per band): {len(ranges)} ranges need {len(ranges) + 1} distances, "
                f"got {len(distances)}"
            )
        elif not ranges:
            problems.append(
                "clustering_distances needs clustering_ranges (with no bands, set d_th instead)"
            )
    merge = config.cluster_merge_threshold
    if isinstance(merge, bool) or not isinstance(merge, (int, float)) or not math.isfinite(merge):
        problems.append(f"cluster_merge_threshold must be a finite number of metres, got {merge!r}")
    elif merge < 0:
        problems.append(f"cluster_merge_threshold must be >= 0 m (0: no merging), got {merge}")
    if config.algorithm == "voxel_grid" and (ranges or distances or merge != 0):
        problems.append(
            "clustering_ranges, clustering_distances and cluster_merge_threshold apply to "
            "algorithm 'exact' only; leave them empty and 0 with 'voxel_grid'"
        )
    return problems


def _is_number_tuple(values: object) -> bool:
    return isinstance(values, tuple) and all(
        not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) for v in values
    )


def _voxel_grid_problems(config: ClusterConfig) -> list[str]:
    problems = []
    if config.algorithm not in ALGORITHMS:
        problems.append(
            f"unknown algorithm {config.algorithm!r}; expected one of {', '.join(ALGORITHMS)}"
        )
    leaf = config.voxel_leaf_size
    if isinstance(leaf, bool) or not isinstance(leaf, (int, float)) or not math.isfinite(leaf):
        problems.append(f"voxel_leaf_size must be a finite number of metres, got {leaf!r}")
    elif leaf <= 0:
        problems.append(f"voxel_leaf_size must be > 0 m, got {leaf}")
    for name in (
        "min_points_per_voxel",
        "max_voxels_per_cluster",
        "large_cluster_voxel_count_threshold",
        "large_cluster_max_points_per_voxel",
    ):
        value = getattr(config, name)
        if not _is_int(value) or value < 1:
            problems.append(f"{name} must be an integer >= 1, got {value!r}")
    return problems


def _size_problems(min_size: object, max_size: object) -> list[str]:
    problems = []
    if not _is_int(min_size) or min_size < 1:  # type: ignore[operator]
        problems.append(f"min_cluster_size must be an integer >= 1, got {min_size!r}")
    if not _is_int(max_size) or max_size < 1:  # type: ignore[operator]
        problems.append(f"max_cluster_size must be an integer >= 1, got {max_size!r}")
    if not problems and min_size > max_size:  # type: ignore[operator]
        problems.append(
            f"min_cluster_size ({min_size}) must not exceed max_cluster_size ({max_size})"
        )
    return problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The defaults every front end shows and starts from.
DEFAULT_CONFIG = ClusterConfig()
