"""Oriented bounding boxes of clusters: the minimum-area rectangle of each cluster's x-y points
and its z range (Autoware.ai's ``pose_estimation``), ROS-free.

Autoware.ai's ``lidar_euclidean_cluster_detect`` with ``pose_estimation: true`` fits OpenCV's
``minAreaRect`` to each cluster's 2-D points and reports yaw, extents and the z range. This is
the same rectangle (a rectangle of minimum area enclosing a convex polygon has a side collinear
with one of its edges, Freeman & Shapira 1975), with a canonical yaw:

* each cluster's convex hull in x-y: a quickhull run for all clusters at once (NumPy, one pass
  over the clusters' points per round, ``ufunc.at`` reductions per hull edge, no sort);
* for every hull edge the rectangle with a side along it (the hull vertices projected on the
  edge's direction and normal), and per cluster the one of least area.

This module is the rule and the CPU backend's implementation (NumPy; ``CpuBackend.
oriented_boxes``). The CUDA backend's twin (``cuda/stages/oriented_boxes.py``) runs the same
quickhull and the same rectangles on the GPU and hands each cluster's least-area edges to
:func:`box_rows` (here, on the host: the yaw's ``arctan2`` and the choice among equal areas), so
both backends give identical boxes, bit for bit.

Definition of a box (:data:`BOX_DTYPE`, one row per cluster ``0..K-1``, float64 computed from
the coordinates as given, float32 as clustered, taken exactly as float64):

* ``center_x``, ``center_y``: the rectangle's centre;
* ``length`` >= ``width``: its sides; ``yaw`` in (-pi/2, pi/2]: the direction of the ``length``
  side from the x axis, counter-clockwise (the direction of a side is defined up to pi, hence the
  half-open interval). A square (``length == width``) takes the smaller ``|yaw|`` of its two
  sides (at +-pi/4 exactly: the positive one). Among hull edges whose rectangles have exactly the
  same least area, the one with the smaller ``|yaw|``, then the larger yaw, then the first edge
  counter-clockwise from the lowest (x, y) point;
* ``min_z``, ``max_z``: the cluster's z range; any member that is zero is +0.0, never -0.0;
* degenerate clusters: all points at one (x, y) (one point, or several on a vertical line):
  centre that point, yaw 0, length and width 0; points on one line: the segment between its
  ends, length its length, width 0, yaw its direction.

The arithmetic is float64 with rounded (not exact) predicates: a point within rounding of a hull
edge may be taken for inside, which changes the rectangle by rounding only. The result depends
only on each cluster's set of points (not on their order) and is deterministic. Every expression
is one IEEE operation at a time in the order written (no fused multiply-add), which the GPU twin
repeats. An edge's direction ``(ux, uy)`` is ``(dx, dy)`` scaled by ``2**-e`` (``e`` the
``frexp`` exponent of ``max(|dx|, |dy|)``, exact) and divided by the square root of the scaled
components' sum of squares (``hypot`` without its libm rounding, which the GPU does not share).
Clustered coordinates must be finite and within :data:`MAX_BOX_COORDINATE` in magnitude, so that
no product overflows.

Cost: O(N) per quickhull round (rounds ~ log of the largest hull), then O(sum of h**2) for hulls
of h vertices (LiDAR clusters: tens of vertices; evaluated in blocks of bounded memory).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

#: One row per cluster: the minimum-area rectangle in x-y and the z range (module docstring).
BOX_DTYPE = np.dtype(
    [
        ("cluster_id", np.int32),
        ("center_x", np.float64),
        ("center_y", np.float64),
        ("yaw", np.float64),
        ("length", np.float64),
        ("width", np.float64),
        ("min_z", np.float64),
        ("max_z", np.float64),
    ]
)

#: Largest clustered |coordinate| (m) a box is fitted to: differences and their products stay
#: finite in float64.
MAX_BOX_COORDINATE = 1e150

#: Vertex-edge pairs evaluated at once (bounds the memory of large hulls: ~100 MB).
_PAIR_BLOCK = 1 << 21

_NO_POINT = np.iinfo(np.int64).max


def oriented_boxes(
    x: np.ndarray, y: np.ndarray, z: np.ndarray, labels: np.ndarray, num_clusters: int
) -> np.ndarray:
    """The minimum-area rectangle in x-y and the z range of clusters ``0..num_clusters-1``.

    Args:
        x, y, z: (N,) coordinates (any float dtype; points labelled -1 are ignored and may be
            non-finite).
        labels: (N,) int cluster ids, -1 for points in no kept cluster.
        num_clusters: K; every id in ``0..K-1`` must label at least one point.

    Returns:
        (K,) array of :data:`BOX_DTYPE` (see the module docstring for the definition).

    Raises:
        ValueError: arrays of different lengths, or labels that do not number exactly K
            non-empty clusters.
    """
    labels = np.asarray(labels).reshape(-1)
    if not len(x) == len(y) == len(z) == len(labels):
        raise ValueError(f"{len(x)}, {len(y)}, {len(z)} coordinates for {len(labels)} labels")
    kept = np.flatnonzero(labels >= 0)
    cluster = labels[kept].astype(np.int64)
    counts = np.bincount(cluster, minlength=num_clusters)
    if len(counts) != num_clusters or (num_clusters and counts.min() == 0):
        raise ValueError(f"labels do not number {num_clusters} non-empty clusters")
    if num_clusters == 0:
        return np.zeros(0, dtype=BOX_DTYPE)
    # grouped by cluster, input order within each (a radix sort where ids fit in 16 bits)
    order = np.argsort(
        cluster.astype(np.uint16) if num_clusters <= 0x10000 else cluster, kind="stable"
    )
    kept, cluster = kept[order], cluster[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    px = np.asarray(x).reshape(-1)[kept].astype(np.float64)
    py = np.asarray(y).reshape(-1)[kept].astype(np.float64)
    pz = np.asarray(z).reshape(-1)[kept].astype(np.float64)
    for values in (px, py, pz):
        if not (np.abs(values) <= MAX_BOX_COORDINATE).all():
            raise ValueError(COORDINATE_ERROR)
    first, last = _lexicographic_extremes(px, py, cluster, starts)
    flat = (px[first] == px[last]) & (py[first] == py[last])  # every point at one (x, y)
    hull_cluster, hull = _hulls(px, py, cluster, starts, first, last, flat)
    return box_rows(
        np.minimum.reduceat(pz, starts),
        np.maximum.reduceat(pz, starts),
        flat,
        px[first],
        py[first],
        _edge_rectangles(px, py, hull_cluster, hull),
    )


#: The error of a clustered coordinate that is not finite or beyond :data:`MAX_BOX_COORDINATE`.
COORDINATE_ERROR = (
    f"oriented boxes need finite clustered coordinates within +-{MAX_BOX_COORDINATE:g} m"
)


class EdgeRectangles(NamedTuple):
    """Rectangles with a side along hull edges (one row per edge), as :func:`box_rows` takes
    them: every hull edge (the CPU), or only each cluster's least-area edges (the GPU twin).

    Attributes:
        cluster: the edge's cluster id.
        position: the edge's place on its hull, counter-clockwise from the cluster's least
            (x, y) point (edge ``i`` runs from vertex ``i`` to vertex ``i + 1``).
        ux, uy: the edge's unit direction (module docstring).
        area: ``side_u * side_n``.
        side_u, side_n: the rectangle's side along the edge and along its inward normal.
        center_x, center_y: the rectangle's centre.
    """

    cluster: np.ndarray
    position: np.ndarray
    ux: np.ndarray
    uy: np.ndarray
    area: np.ndarray
    side_u: np.ndarray
    side_n: np.ndarray
    center_x: np.ndarray
    center_y: np.ndarray


def box_rows(
    min_z: np.ndarray,
    max_z: np.ndarray,
    flat: np.ndarray,
    flat_x: np.ndarray,
    flat_y: np.ndarray,
    edges: EdgeRectangles,
) -> np.ndarray:
    """The (K,) :data:`BOX_DTYPE` rows from per-cluster values and candidate rectangles.

    Args:
        min_z, max_z: (K,) each cluster's z range.
        flat: (K,) bool: every point of the cluster at one (x, y), which is ``(flat_x,
            flat_y)`` (read only where ``flat``).
        edges: for every cluster not ``flat``, at least its edges of least area (any others
            lose to them).

    Per cluster the canonical rectangle (module docstring): least area, then the smaller
    ``|yaw|``, then the larger yaw, then the lower ``position``. Zeros come out as +0.0.
    """
    k = len(min_z)
    boxes = np.zeros(k, dtype=BOX_DTYPE)
    boxes["cluster_id"] = np.arange(k)
    boxes["min_z"] = np.asarray(min_z) + 0.0
    boxes["max_z"] = np.asarray(max_z) + 0.0
    flat = np.asarray(flat, dtype=bool)
    boxes["center_x"][flat] = np.asarray(flat_x)[flat] + 0.0
    boxes["center_y"][flat] = np.asarray(flat_y)[flat] + 0.0
    if len(edges.cluster) == 0:
        return boxes
    ux, uy = edges.ux, edges.uy
    side_u, side_n = edges.side_u, edges.side_n
    yaw_u = _half_turn(np.arctan2(uy, ux))
    yaw_n = _half_turn(np.arctan2(ux, -uy))
    square_pick_u = (np.abs(yaw_u) < np.abs(yaw_n)) | (
        (np.abs(yaw_u) == np.abs(yaw_n)) & (yaw_u > yaw_n)
    )
    along_u = (side_u > side_n) | ((side_u == side_n) & square_pick_u)
    yaw = np.where(along_u, yaw_u, yaw_n)
    cluster = edges.cluster
    # per cluster: least area, then smaller |yaw|, then larger yaw, then the first edge
    order = np.lexsort((edges.position, -yaw, np.abs(yaw), edges.area, cluster))
    chosen = order[np.concatenate(([0], np.flatnonzero(np.diff(cluster[order])) + 1))]
    rows = cluster[chosen]
    boxes["center_x"][rows] = edges.center_x[chosen] + 0.0
    boxes["center_y"][rows] = edges.center_y[chosen] + 0.0
    boxes["yaw"][rows] = yaw[chosen] + 0.0
    boxes["length"][rows] = np.maximum(side_u, side_n)[chosen] + 0.0
    boxes["width"][rows] = np.minimum(side_u, side_n)[chosen] + 0.0
    return boxes


def _lexicographic_extremes(
    px: np.ndarray, py: np.ndarray, cluster: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster (points grouped by cluster from ``starts``) the index of its least and of its
    greatest point in (x, y) order (the first such point where several coincide)."""
    index = np.arange(len(px), dtype=np.int64)
    result = []
    for ufunc, beyond in ((np.minimum, np.inf), (np.maximum, -np.inf)):
        ex = ufunc.reduceat(px, starts)
        on = px == ex[cluster]
        ey = ufunc.reduceat(np.where(on, py, beyond), starts)
        at = on & (py == ey[cluster])
        result.append(np.minimum.reduceat(np.where(at, index, _NO_POINT), starts))
    return result[0], result[1]


def _hulls(
    px: np.ndarray,
    py: np.ndarray,
    cluster: np.ndarray,
    starts: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    flat: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``(hull_cluster, hull)``: the convex hulls of the clusters not ``flat``, vertices
    counter-clockwise from each cluster's least (x, y) point, clusters in order; points on an
    edge between its ends are not vertices (a segment's hull: its two ends).

    Quickhull for all clusters at once: the edges (first -> last) and (last -> first) of each
    cluster, the points strictly right of an edge its candidates; per round, every edge with
    candidates is split at its farthest candidate (the least index among equals) and its
    candidates go to the new edge they are right of, or are dropped (inside the triangle).
    Side tests: the sign of the cross product ``(q - p) x (r - p)`` in float64.
    """
    clusters = np.flatnonzero(~flat)
    low, high = first[clusters], last[clusters]
    # the edge list, in hull order: per cluster first -> last (the lower chain), last -> first
    edge_p = np.column_stack((low, high)).reshape(-1)
    edge_q = np.column_stack((high, low)).reshape(-1)
    edge_cluster = np.repeat(clusters, 2)
    # first round, per cluster (points grouped): every point against the chord first -> last,
    # the farthest point on each side splits its edge
    ax, ay = px[first], py[first]
    dx, dy = px[last] - ax, py[last] - ay
    side = dx[cluster] * (py - ay[cluster]) - dy[cluster] * (px - ax[cluster])
    index = np.arange(len(px), dtype=np.int64)
    apex = np.empty(len(edge_p), dtype=np.int64)
    for chain, sign in enumerate((-1.0, 1.0)):
        distance = np.where(side * sign > 0.0, np.abs(side), -np.inf)
        farthest = np.maximum.reduceat(distance, starts)
        best = (distance == farthest[cluster]) & (distance > 0.0)
        apex[chain::2] = np.minimum.reduceat(np.where(best, index, _NO_POINT), starts)[clusters]
    candidates = np.flatnonzero((side != 0.0) & ~flat[cluster])
    rx, ry = px[candidates], py[candidates]
    slot = np.full(len(first), -1, dtype=np.int64)
    slot[clusters] = 2 * np.arange(len(clusters))
    edge = slot[cluster[candidates]] + (side[candidates] > 0.0)
    distance = np.abs(side[candidates])
    known = True  # the first round's apexes are known
    while len(candidates):
        if not known:
            farthest = np.full(len(edge_p), -np.inf)
            np.maximum.at(farthest, edge, distance)
            best = distance == farthest[edge]
            apex = np.full(len(edge_p), _NO_POINT, dtype=np.int64)
            np.minimum.at(apex, edge[best], candidates[best])
        known = False
        splits = apex != _NO_POINT
        start = np.cumsum(1 + splits) - (1 + splits)
        # candidates: right of p -> apex, else right of apex -> q, else inside (or the apex)
        top = np.where(splits, apex, 0)
        sx, sy, cx, cy = px[edge_p], py[edge_p], px[top], py[top]
        ex, ey = px[edge_q], py[edge_q]
        ox, oy = cx[edge], cy[edge]
        to_first = (ox - sx[edge]) * (ry - sy[edge]) - (oy - sy[edge]) * (rx - sx[edge])
        to_second = (ex[edge] - ox) * (ry - oy) - (ey[edge] - oy) * (rx - ox)
        first_side = to_first < 0.0
        keep = first_side | (to_second < 0.0)
        edge = (start[edge] + ~first_side)[keep]
        distance = -np.where(first_side, to_first, to_second)[keep]
        candidates, rx, ry = candidates[keep], rx[keep], ry[keep]
        edge_p = np.repeat(edge_p, 1 + splits)
        edge_q = np.repeat(edge_q, 1 + splits)
        edge_q[start[splits]] = apex[splits]
        edge_p[start[splits] + 1] = apex[splits]
        edge_cluster = np.repeat(edge_cluster, 1 + splits)
    return edge_cluster, edge_p


def edge_directions(dx: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unit directions ``(ux, uy)`` of edges ``(dx, dy)`` (not both zero): scaled by the power of
    two ``2**-e`` (``e``: ``frexp``'s exponent of ``max(|dx|, |dy|)``; exact), divided by the
    square root of the scaled sum of squares. ``cuda/kernels/stages/oriented_boxes.cu`` repeats
    it."""
    _, exponent = np.frexp(np.maximum(np.abs(dx), np.abs(dy)))
    sx, sy = np.ldexp(dx, -exponent), np.ldexp(dy, -exponent)
    norm = np.sqrt(sx * sx + sy * sy)
    return sx / norm, sy / norm


def _edge_rectangles(
    px: np.ndarray, py: np.ndarray, hull_cluster: np.ndarray, hull: np.ndarray
) -> EdgeRectangles:
    """The rectangle with a side along every edge of the hulls (vertices ``hull`` of clusters
    ``hull_cluster``, grouped by cluster, each counter-clockwise)."""
    edges = len(hull)
    boundary = np.flatnonzero(np.diff(hull_cluster)) + 1
    starts = np.concatenate(([0], boundary))
    sizes = np.diff(np.concatenate((starts, [edges])))
    hull_start = np.repeat(starts, sizes)
    hull_size = np.repeat(sizes, sizes)
    position = np.arange(edges) - hull_start
    following = hull_start + (position + 1) % hull_size
    hx, hy = px[hull], py[hull]
    ux, uy = edge_directions(hx[following] - hx, hy[following] - hy)  # (-uy, ux): inward normal
    extents = np.empty((4, edges))  # min and max along u, min and max along the normal
    done = 0
    pairs_before = np.concatenate(([0], np.cumsum(hull_size)))
    while done < edges:
        end = int(np.searchsorted(pairs_before, pairs_before[done] + _PAIR_BLOCK, "right")) - 1
        end = min(max(end, done + 1), edges)
        block = np.arange(done, end)
        counts = hull_size[block]
        owner = np.repeat(block, counts)
        group = pairs_before[block] - pairs_before[done]
        vertex = hull_start[owner] + np.arange(len(owner)) - np.repeat(group, counts)
        rx, ry = hx[vertex] - hx[owner], hy[vertex] - hy[owner]
        along = rx * ux[owner] + ry * uy[owner]
        across = ry * ux[owner] - rx * uy[owner]
        for row, (ufunc, values) in enumerate(
            ((np.minimum, along), (np.maximum, along), (np.minimum, across), (np.maximum, across))
        ):
            extents[row, block] = ufunc.reduceat(values, group)
        done = end
    s_low, s_high, t_low, t_high = extents
    side_u, side_n = s_high - s_low, t_high - t_low
    s_mid = (s_low + s_high) / 2.0
    t_mid = (t_low + t_high) / 2.0
    return EdgeRectangles(
        cluster=hull_cluster,
        position=position,
        ux=ux,
        uy=uy,
        area=side_u * side_n,
        side_u=side_u,
        side_n=side_n,
        center_x=hx + s_mid * ux - t_mid * uy,
        center_y=hy + s_mid * uy + t_mid * ux,
    )


def _half_turn(angle: np.ndarray) -> np.ndarray:
    """``angle`` (in [-pi, pi]) moved by pi into (-pi/2, pi/2]."""
    angle = np.where(angle > math.pi / 2, angle - math.pi, angle)
    return np.where(angle <= -math.pi / 2, angle + math.pi, angle)


def yaw_quaternion(yaw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(z, w)`` of the rotation by ``yaw`` about the z axis (x = y = 0): ``sin(yaw/2)``,
    ``cos(yaw/2)``; w > 0 for yaw in (-pi/2, pi/2]."""
    half = np.asarray(yaw, dtype=np.float64) / 2.0
    return np.sin(half), np.cos(half)
