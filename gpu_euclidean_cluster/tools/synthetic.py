"""Synthetic point clouds of the paper's Section 5.1 and Table 2, with their exact ground truth.

Nguyen et al. (JRM 2020, Section 5.1) generate clouds from four factors:

* **size** ``n``: the number of points;
* **cluster number** ``c``: clusters in the cloud, at most ``n``;
* **average point degree**: the average number of neighbours of a point; ``degree * c`` must not
  exceed ``n``;
* **point distance** ``D``: "a point cloud with point distance D has points at indices i, i + D,
  i + 2D ... that belong to the i-th cluster"; ``D`` must not exceed ``c``.

The paper gives no geometry, so this module defines one whose every neighbour decision is known in
advance and holds under the float32 rule of :mod:`gpu_euclidean_cluster.core.neighbour_rule`.

**Degree.** ``degree * c <= n`` admits ``degree == n / c`` (Table 2 has n = 4096, c = 128, degree 32
and n = 262144, c = 128, degree 2048), which is only possible when a point's neighbours include the
point itself, as PCL's radius search returns them. So ``degree`` counts the point itself: degree 1
is an isolated point, degree ``m`` in a cluster of ``m`` points is a complete cluster. The graph
degree (other points within ``d_th``) is ``degree - 1``.

**Geometry.** Each cluster is a chain of points on a line parallel to x; clusters lie on separate
lines of a square grid in the y-z plane, ``2 d_th`` apart, so points of different clusters are never
neighbours, and points of one cluster share their float32 y and z exactly. Positions along the chain
are integer multiples of a unit ``u = d_th / (2k + 1.5)``: consecutive points are 2 units apart,
except for a few 1-unit "steps". Two points are neighbours exactly when they are at most ``2k + 1``
units apart (the threshold lies half a unit from both ``2k + 1`` and ``2k + 2``), so every point
reaches its next ``k`` points, and ``k + 1`` points when a step lies within its next ``k + 1`` gaps.
A cluster of ``m`` points then has ``E(k) = k m - k (k + 1) / 2`` edges plus one per point so
covered; choosing ``k`` and the steps hits any edge count ``E`` in ``[0, m (m - 1) / 2]``, hence the
requested average degree ``1 + 2 E / m`` up to rounding ``E`` to an integer. A cluster is connected
whenever ``k ≥ 1`` (average degree about 3 or more); below that it falls into a chain prefix and
single points, and the ground truth says so.

**Point distance.** Clusters form groups of ``D`` consecutive clusters; a group's points take one
contiguous index range, round robin over its clusters, so cluster ``i`` holds indices
``i0, i0 + D, i0 + 2D ...``: ``D = 1`` keeps each cluster contiguous, ``D = c`` interleaves all.
Points follow their chain order, as a LiDAR's scan order keeps an object's points together. When
``c`` does not divide ``n`` the first ``n mod c`` clusters hold one extra point, placed in the last
round of their group.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from ..core.config import UNLIMITED_CLUSTER_SIZE, ConfigError
from ..core.numbering import canonical_labels

#: The generator's factors, as keyword arguments of :func:`synthetic_cloud`.
FACTORS: tuple[str, ...] = ("size", "clusters", "degree", "distance")

#: Distance between the lines of neighbouring clusters, in multiples of ``d_th``.
CLUSTER_SPACING = 2.0


@dataclass(frozen=True)
class SyntheticCloud:
    """A generated cloud and its ground truth.

    Attributes:
        points: (n, 3) float32 coordinates.
        labels: (n,) int32 ground-truth clusters (the connected components of the ``d_th``
            neighbour graph), numbered as :class:`~gpu_euclidean_cluster.core.result.ClusterResult`
            numbers them: by size descending, ties by smallest point index. When every cluster is
            connected, the points of the i-th generated cluster carry label i.
        d_th: the distance threshold the cloud is built for.
        size, clusters, degree, distance, seed: the factors it was generated from.
        num_edges: undirected neighbour pairs (``i < j``) in the cloud.
    """

    points: np.ndarray
    labels: np.ndarray
    d_th: float
    size: int
    clusters: int
    degree: float
    distance: int
    seed: int
    num_edges: int

    @property
    def average_degree(self) -> float:
        """Mean neighbours per point, the point itself included (the paper's point degree)."""
        return 1.0 + 2.0 * self.num_edges / self.size

    @property
    def num_components(self) -> int:
        """Connected components (equal to ``clusters`` when every cluster is connected)."""
        return int(self.labels.max()) + 1


def synthetic_problems(
    size: object, clusters: object, degree: object, distance: object, d_th: object = 1.0
) -> list[str]:
    """Every reason the factors are infeasible, as sentences (empty when they are feasible)."""
    problems = [
        f"{name} must be an integer >= 1, got {value!r}"
        for name, value in (("size", size), ("clusters", clusters), ("distance", distance))
        if not (_is_int(value) and value >= 1)  # type: ignore[operator]
    ]
    if not (_is_real(degree) and degree >= 1):  # type: ignore[operator]
        problems.append(f"degree must be a finite number >= 1 (the point itself), got {degree!r}")
    if not (_is_real(d_th) and d_th > 0):  # type: ignore[operator]
        problems.append(f"d_th must be a finite number > 0, got {d_th!r}")
    if problems:
        return problems
    return _feasibility_problems(int(size), int(clusters), float(degree), int(distance))  # type: ignore[arg-type]


def _feasibility_problems(size: int, clusters: int, degree: float, distance: int) -> list[str]:
    """The paper's constraints between the factors (Section 5.1), for well-typed factors."""
    problems = []
    if clusters > size:
        problems.append(f"cluster number ({clusters}) must not exceed size ({size})")
    elif degree * clusters > size:
        problems.append(
            f"degree * cluster number ({degree:g} * {clusters}) must not exceed size ({size})"
        )
    elif degree > size // clusters:
        problems.append(
            f"degree ({degree:g}) must not exceed the smallest cluster's size ({size // clusters})"
        )
    if distance > clusters:
        problems.append(f"point distance ({distance}) must not exceed cluster number ({clusters})")
    elif clusters % distance:
        problems.append(f"point distance ({distance}) must divide cluster number ({clusters})")
    return problems


def synthetic_cloud(
    size: int, clusters: int, degree: float, distance: int, *, seed: int = 0, d_th: float = 1.0
) -> SyntheticCloud:
    """Generate a cloud of Section 5.1 of the paper (see the module docstring for the layout).

    Args:
        size: number of points ``n``.
        clusters: number of clusters ``c``.
        degree: average neighbours per point, the point itself included (1 <= degree <= n // c).
        distance: point distance ``D`` (divides ``c``).
        seed: seeds the placement of clusters on the grid and their offsets along x; the same
            arguments always give the same cloud.
        d_th: the distance threshold to cluster with.

    Raises:
        ConfigError: infeasible factors, with every reason.
    """
    problems = synthetic_problems(size, clusters, degree, distance, d_th)
    if problems:
        raise ConfigError("; ".join(problems))
    rng = np.random.default_rng(seed)
    small, larger = divmod(size, clusters)
    # Cluster-major arrays: each cluster's chain in order, the larger clusters (if any) first.
    runs = [
        (_Chain.build(m, degree), count)
        for m, count in ((small + 1, larger), (small, clusters - larger))
        if count
    ]
    sizes = np.concatenate([np.full(count, chain.size) for chain, count in runs])
    cluster_of = np.repeat(np.arange(clusters), sizes)
    along = np.concatenate([np.tile(chain.positions(d_th), count) for chain, count in runs])
    reach = np.concatenate([np.tile(chain.reach, count) for chain, count in runs])
    rank = np.concatenate([np.tile(np.arange(chain.size), count) for chain, count in runs])
    component = _components(runs)
    points = _place(along, cluster_of, clusters, d_th, rng)
    _check_float32_rule(points, reach, cluster_of, d_th)
    order = np.lexsort((cluster_of, rank, cluster_of // distance))
    labels, _, _ = canonical_labels(component[order], 1, UNLIMITED_CLUSTER_SIZE)
    return SyntheticCloud(
        points=points[order],
        labels=labels,
        d_th=float(d_th),
        size=size,
        clusters=clusters,
        degree=degree,
        distance=distance,
        seed=seed,
        num_edges=int(reach.sum()),
    )


@dataclass(frozen=True)
class _Chain:
    """One cluster's chain of ``size`` points: integer positions in units and forward reaches."""

    size: int
    k: int
    units: np.ndarray
    reach: np.ndarray
    component: np.ndarray

    @classmethod
    def build(cls, size: int, degree: float) -> _Chain:
        """The chain with ``round((degree - 1) * size / 2)`` edges."""
        edges = math.floor((degree - 1) * size / 2 + 0.5)
        ks = np.arange(size, dtype=np.int64)
        base_edges = ks * size - ks * (ks + 1) // 2
        k = int(np.searchsorted(base_edges, edges, side="right")) - 1
        extra = edges - int(base_edges[k])
        # 1-unit steps at gaps ending in points extra, extra - (k + 1), ...: points 0..extra-1
        # then reach k + 1 points instead of k.
        gaps = np.full(size - 1, 2, dtype=np.int64)
        gaps[np.arange(extra, 0, -(k + 1)) - 1] = 1
        units = np.concatenate(([0], np.cumsum(gaps)))
        p = np.arange(size)
        reach = np.minimum(k, size - 1 - p) + (p < extra)
        breaks = reach[:-1] == 0
        component = np.concatenate(([0], np.cumsum(breaks)))
        return cls(size, k, units, reach, component)

    def positions(self, d_th: float) -> np.ndarray:
        """Float64 positions along the chain, centred on 0."""
        unit = d_th / (2 * self.k + 1.5)
        return (self.units - self.units[-1] / 2) * unit


def _components(runs: list[tuple[_Chain, int]]) -> np.ndarray:
    """Globally unique component ids, cluster-major, from the chains' local ids."""
    parts = []
    first = 0
    for chain, count in runs:
        per_chain = int(chain.component[-1]) + 1
        offsets = first + per_chain * np.arange(count)
        parts.append((offsets[:, None] + chain.component[None, :]).ravel())
        first += per_chain * count
    return np.concatenate(parts)


def _place(
    along: np.ndarray, cluster_of: np.ndarray, clusters: int, d_th: float, rng: np.random.Generator
) -> np.ndarray:
    """Put each cluster's chain on its own grid line (random cell, random shift along x)."""
    side = math.isqrt(clusters - 1) + 1
    cell = rng.permutation(side * side)[:clusters]
    shift = rng.uniform(-0.5, 0.5, size=clusters) * d_th
    spacing = CLUSTER_SPACING * d_th
    points = np.empty((len(along), 3), dtype=np.float64)
    points[:, 0] = along + shift[cluster_of]
    points[:, 1] = (cell % side)[cluster_of] * spacing
    points[:, 2] = (cell // side)[cluster_of] * spacing
    return points.astype(np.float32)


def _check_float32_rule(
    points: np.ndarray, reach: np.ndarray, cluster_of: np.ndarray, d_th: float
) -> None:
    """Verify every chain point's last neighbour and first non-neighbour in float32.

    Along a chain, float32 distances grow with the index (rounding is monotone), so these two
    decisions per point fix the whole neighbour set.

    Raises:
        ConfigError: float32 rounding would flip a decision (a chain too long for float32).
    """
    threshold = np.float32(np.float64(d_th) ** 2)
    index = np.arange(len(points))

    def squared(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        d = points[a] - points[b]
        return (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + d[:, 2] * d[:, 2]

    has = reach > 0
    last = index[has] + reach[has]
    after = index + reach + 1
    beyond = after < len(points)
    beyond[beyond] = cluster_of[after[beyond]] == cluster_of[beyond]
    if np.any(squared(index[has], last) >= threshold) or np.any(
        squared(index[beyond], after[beyond]) < threshold
    ):
        raise ConfigError("float32 rounding would change the neighbour graph; use fewer points")


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


@dataclass(frozen=True)
class Table2Experiment:
    """One row of the paper's Table 2: one factor swept over powers of two, the others fixed.

    Attributes:
        title: the row's name in the paper.
        factor: the swept factor, a keyword of :func:`synthetic_cloud`.
        values: the swept values, ascending.
        fixed: the other three factors.
    """

    title: str
    factor: str
    values: tuple[int, ...]
    fixed: Mapping[str, int] = field(default_factory=dict)

    def parameters(self, value: int) -> dict[str, int]:
        """The four factors of the cloud at ``value`` of the swept factor."""
        return {**self.fixed, self.factor: value}

    def clouds(self, seed: int = 0, d_th: float = 1.0) -> Iterator[tuple[int, SyntheticCloud]]:
        """``(value, cloud)`` for every swept value, generated lazily."""
        for value in self.values:
            yield value, synthetic_cloud(**self.parameters(value), seed=seed, d_th=d_th)


def _powers_of_two(first: int, last: int) -> tuple[int, ...]:
    return tuple(2**e for e in range(first.bit_length() - 1, last.bit_length()))


def _experiment(title: str, factor: str, first: int, last: int, **fixed: int) -> Table2Experiment:
    return Table2Experiment(title, factor, _powers_of_two(first, last), MappingProxyType(fixed))


#: The paper's Table 2, by experiment name.
TABLE2_EXPERIMENTS: Mapping[str, Table2Experiment] = MappingProxyType(
    {
        "size": _experiment(
            "Size variation", "size", 4096, 262144, clusters=128, degree=32, distance=4
        ),
        "cluster_number": _experiment(
            "Cluster number variation", "clusters", 16, 8192, size=262144, degree=32, distance=4
        ),
        "point_degree": _experiment(
            "Point degree variation", "degree", 1, 2048, size=262144, clusters=128, distance=4
        ),
        "point_distance": _experiment(
            "Point distance variation", "distance", 1, 1024, size=65536, clusters=1024, degree=32
        ),
    }
)
