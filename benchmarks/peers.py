"""CPU peers measured beside the GPU methods: what a CPU-only stack would use instead.

Each peer maps an (N, 3) float32 NumPy cloud and ``d_th`` to one component id per point (ids
arbitrary, -1 for non-finite points). Peers:

- ``cpu-backend``: this package's CPU backend (RS neighbour search + SciPy connected components).
- ``pcl-kdtree``: PCL's ``EuclideanClusterExtraction`` algorithm on a SciPy ``cKDTree``: for each
  unprocessed point, a queue grown with radius searches until it stops growing. The queue is
  expanded a whole breadth-first level per ``query_ball_point`` call (the same searches PCL makes,
  batched), single-threaded like PCL; the kd-tree build is part of the time, as in PCL.
- ``sklearn-dbscan`` / ``open3d-dbscan``: DBSCAN with ``min_points=1``, which is Euclidean
  clustering; only when scikit-learn / Open3D import.
"""

from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from gpu_euclidean_cluster.clusterer import EuclideanClusterer
from gpu_euclidean_cluster.core.config import UNLIMITED_CLUSTER_SIZE, ClusterConfig
from gpu_euclidean_cluster.core.neighbour_rule import squared_distance, threshold_sq
from gpu_euclidean_cluster.core.numbering import canonical_labels

#: The radius handed to the kd-tree is enlarged by this factor, then every candidate is checked with
#: the package's float32 rule, so boundary pairs are decided exactly as PCL and the GPU decide them.
_RADIUS_SLACK = 1.0 + 1e-5


@dataclass(frozen=True)
class Peer:
    """A named CPU clustering implementation."""

    name: str
    cluster: Callable[[np.ndarray, float], np.ndarray]
    description: str


def cpu_backend_labels(points: np.ndarray, d_th: float, method: str = "edge") -> np.ndarray:
    """The package's CPU backend: by default the edge graph from RS and SciPy connected
    components (independent of the GPU's fused method); ``method="union_find"`` for clouds too
    dense for an edge list (its CPU twin, O(N) memory)."""
    # The oracle runs whatever it takes: no max_work_s refusal.
    config = ClusterConfig(d_th=d_th, method=method, search="range", max_work_s=None)  # type: ignore[arg-type]
    return EuclideanClusterer(config, backend="cpu").cluster(points).labels


def canonical_partition(component_ids: np.ndarray) -> np.ndarray:
    """Canonical labels (clusters by size, min size 1) of arbitrary ids; -1 stays -1, so that two
    partitions are equal exactly when these labels are."""
    ids = np.asarray(component_ids)
    labels = np.full(len(ids), -1, dtype=np.int32)
    valid = ids >= 0
    labels[valid], _, _ = canonical_labels(ids[valid], 1, UNLIMITED_CLUSTER_SIZE)
    return labels


def pcl_kdtree_labels(points: np.ndarray, d_th: float) -> np.ndarray:
    """PCL's Euclidean cluster extraction (queue of radius searches per seed) on a cKDTree."""
    labels = np.full(len(points), -1, dtype=np.int32)
    finite = np.flatnonzero(np.isfinite(points).all(axis=1))
    cloud = points[finite]
    tree = cKDTree(cloud)
    unprocessed = np.ones(len(cloud), dtype=bool)
    component = np.full(len(cloud), -1, dtype=np.int32)
    thr = threshold_sq(d_th)
    seed, cluster_id = 0, 0
    while seed < len(cloud):
        seed += int(unprocessed[seed:].argmax())  # next unprocessed point (bool argmax stops early)
        if not unprocessed[seed]:
            break
        unprocessed[seed] = False
        members = _grow_cluster(tree, cloud, seed, unprocessed, d_th, thr)
        component[members] = cluster_id
        cluster_id += 1
    labels[finite] = component
    return labels


def _grow_cluster(
    tree: cKDTree,
    cloud: np.ndarray,
    seed: int,
    unprocessed: np.ndarray,
    d_th: float,
    thr: np.float32,
) -> np.ndarray:
    """Indices of the cluster of ``seed``: radius-search every queued point, queue new ones."""
    frontier = np.array([seed], dtype=np.int64)
    members = [frontier]
    while frontier.size:
        hits = tree.query_ball_point(cloud[frontier], d_th * _RADIUS_SLACK, return_sorted=False)
        counts = np.fromiter(map(len, hits), dtype=np.int64, count=len(hits))
        found = np.fromiter(itertools.chain.from_iterable(hits), dtype=np.int64, count=counts.sum())
        owner = np.repeat(frontier, counts)
        fresh = unprocessed[found]
        owner, found = owner[fresh], found[fresh]
        near = squared_distance(cloud[owner], cloud[found]) < thr
        frontier = np.unique(found[near])
        unprocessed[frontier] = False
        members.append(frontier)
    return np.concatenate(members)


def sklearn_dbscan_labels(points: np.ndarray, d_th: float) -> np.ndarray:
    """scikit-learn's DBSCAN with ``min_samples=1`` on a kd-tree, one thread."""
    from sklearn.cluster import DBSCAN

    return _on_finite(
        points, lambda p: DBSCAN(eps=d_th, min_samples=1, algorithm="kd_tree").fit(p).labels_
    )


def open3d_dbscan_labels(points: np.ndarray, d_th: float) -> np.ndarray:
    """Open3D's ``cluster_dbscan`` with ``min_points=1``."""
    import open3d

    def run(cloud: np.ndarray) -> np.ndarray:
        pcd = open3d.geometry.PointCloud(open3d.utility.Vector3dVector(cloud.astype(np.float64)))
        return np.asarray(pcd.cluster_dbscan(eps=d_th, min_points=1, print_progress=False))

    return _on_finite(points, run)


def _on_finite(points: np.ndarray, run: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``run`` on the finite points only; non-finite points get -1."""
    labels = np.full(len(points), -1, dtype=np.int32)
    finite = np.isfinite(points).all(axis=1)
    labels[finite] = run(points[finite])
    return labels


ALL_PEERS: tuple[Peer, ...] = (
    Peer("cpu-backend", cpu_backend_labels, "this package's CPU backend (RS + SciPy)"),
    Peer("pcl-kdtree", pcl_kdtree_labels, "PCL's algorithm on SciPy cKDTree, 1 thread"),
    Peer("sklearn-dbscan", sklearn_dbscan_labels, "scikit-learn DBSCAN min_samples=1, 1 thread"),
    Peer("open3d-dbscan", open3d_dbscan_labels, "Open3D cluster_dbscan min_points=1"),
)

#: The peer speedups are quoted against (the paper's baseline is PCL).
BASELINE_PEER = "pcl-kdtree"

_MODULES = {"sklearn-dbscan": "sklearn.cluster", "open3d-dbscan": "open3d"}


def peer_names() -> tuple[str, ...]:
    """Names of every peer this tool knows."""
    return tuple(peer.name for peer in ALL_PEERS)


def unavailable_reason(name: str) -> str | None:
    """Why peer ``name`` cannot run here (its module does not import), or None."""
    module = _MODULES.get(name, "").split(".")[0]
    if module and importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    return None


def select_peers(names: list[str]) -> list[Peer]:
    """The peers called ``names``, in the tool's order (unknown names raise ValueError).

    Their optional modules are imported here, so that no timed call pays for the import.
    """
    unknown = sorted(set(names) - set(peer_names()))
    if unknown:
        raise ValueError(
            f"unknown CPU peer(s) {', '.join(unknown)}; known: {', '.join(peer_names())}"
        )
    chosen = [peer for peer in ALL_PEERS if peer.name in names]
    for peer in chosen:
        if peer.name in _MODULES and unavailable_reason(peer.name) is None:
            importlib.import_module(_MODULES[peer.name])
    return chosen
