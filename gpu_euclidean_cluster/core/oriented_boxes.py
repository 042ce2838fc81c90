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

It runs on the host for both backends (the frame's input coordinates and labels are host arrays
once the frame is encoded): one implementation, so both backends give identical boxes and no
twin is needed.

Definition of a box (:data:`BOX_DTYPE`, one row per cluster ``0..K-1``, float64 computed from
the coordinates as given, float32 as clustered, taken exactly as float64):

* ``center_x``, ``center_y``: the rectangle's centre;
* ``length`` >= ``width``: its sides; ``yaw`` in (-pi/2, pi/2]: the direction of the ``length``
  side from the x axis, counter-clockwise (the direction of a side is defined up to pi, hence the
  half-open interval). A square (``length == width``) takes the smaller ``|yaw|`` of its two
  sides (at +-pi/4 exactly: the positive one). Among hull edges whose rectangles have exactly the
  same least area, the one with the smaller ``|yaw|``, then the larger yaw, then the first edge
  counter-clockwise from the lowest (x, y) point;
* ``min_z``, ``max_z``: the cluster's z range (a zero as +0.0);
* degenerate clusters: all points at one (x, y) (one point, or several on a vertical line):
  centre that point, yaw 0, length and width 0; points on one line: the segment between its
  ends, length its length, width 0, yaw its direction.

The arithmetic is float64 with rounded (not exact) predicates: a point within rounding of a hull
edge may be taken for inside, which changes the rectangle by rounding only. The result depends
only on each cluster's set of points (not on their order) and is deterministic.

Cost: O(N) per quickhull round (rounds ~ log of the largest hull), then O(sum of h**2) for hulls
of h vertices (LiDAR clusters: tens of vertices; evaluated in blocks of bounded memory).
"""

from __future__ import annotations

import math

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
    boxes = np.zeros(num_clusters, dtype=BOX_DTYPE)
    boxes["cluster_id"] = np.arange(num_clusters)
    kept = np.flatnonzero(labels >= 0)
    cluster = labels[kept].astype(np.int64)
    counts = np.bincount(cluster, minlength=num_clusters)
    if len(counts) != num_clusters or (num_clusters and counts.min() == 0):
        raise ValueError(f"labels do not number {num_clusters} non-empty clusters")
    if num_clusters == 0:
        return boxes
    # grouped by cluster, input order within each (a radix sort where ids fit in 16 bits)
    order = np.argsort(
        cluster.astype(np.uint16) if num_clusters <= 0x10000 else cluster, kind="stable"
    )
    kept, cluster = kept[order], cluster[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    px = np.asarray(x).reshape(-1)[kept].astype(np.float64)
    py = np.asarray(y).reshape(-1)[kept].astype(np.float64)
    pz = np.asarray(z).reshape(-1)[kept].astype(np.float64)
    boxes["min_z"] = np.minimum.reduceat(pz, starts) + 0.0
    boxes["max_z"] = np.maximum.reduceat(pz, starts) + 0.0

    first, last = _lexicographic_extremes(px, py, cluster, starts)
    flat = (px[first] == px[last]) & (py[first] == py[last])  # every point at one (x, y)
    boxes["center_x"][flat], boxes["center_y"][flat] = px[first[flat]], py[first[flat]]
    hull_cluster, hull = _hulls(px, py, cluster, starts, first, last, flat)
    if len(hull):
        _fit_rectangles(boxes, px, py, hull_cluster, hull)
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


def _fit_rectangles(
    boxes: np.ndarray, px: np.ndarray, py: np.ndarray, hull_cluster: np.ndarray, hull: np.ndarray
) -> None:
    """Fill the rectangle members of ``boxes`` for the clusters of the hulls: per hull edge the
    rectangle with a side along it, per cluster the canonical one of least area."""
    edges = len(hull)
    boundary = np.flatnonzero(np.diff(hull_cluster)) + 1
    starts = np.concatenate(([0], boundary))
    sizes = np.diff(np.concatenate((starts, [edges])))
    hull_start = np.repeat(starts, sizes)
    hull_size = np.repeat(sizes, sizes)
    position = np.arange(edges) - hull_start
    following = hull_start + (position + 1) % hull_size
    hx, hy = px[hull], py[hull]
    dx, dy = hx[following] - hx, hy[following] - hy
    norm = np.hypot(dx, dy)
    ux, uy = dx / norm, dy / norm  # the edge's direction; (-uy, ux) its inward normal
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
    area = side_u * side_n
    yaw_u = _half_turn(np.arctan2(uy, ux))
    yaw_n = _half_turn(np.arctan2(ux, -uy))
    square_pick_u = (np.abs(yaw_u) < np.abs(yaw_n)) | (
        (np.abs(yaw_u) == np.abs(yaw_n)) & (yaw_u > yaw_n)
    )
    along_u = (side_u > side_n) | ((side_u == side_n) & square_pick_u)
    yaw = np.where(along_u, yaw_u, yaw_n)
    # per cluster: least area, then smaller |yaw|, then larger yaw, then the first edge
    order = np.lexsort((np.arange(edges), -yaw, np.abs(yaw), area, hull_cluster))
    chosen = order[np.concatenate(([0], np.flatnonzero(np.diff(hull_cluster[order])) + 1))]
    s_mid = (s_low[chosen] + s_high[chosen]) / 2.0
    t_mid = (t_low[chosen] + t_high[chosen]) / 2.0
    ex, ey = ux[chosen], uy[chosen]
    rows = hull_cluster[chosen]
    boxes["center_x"][rows] = hx[chosen] + s_mid * ex - t_mid * ey
    boxes["center_y"][rows] = hy[chosen] + s_mid * ey + t_mid * ex
    boxes["yaw"][rows] = yaw[chosen]
    boxes["length"][rows] = np.maximum(side_u, side_n)[chosen]
    boxes["width"][rows] = np.minimum(side_u, side_n)[chosen]


def _half_turn(angle: np.ndarray) -> np.ndarray:
    """``angle`` (in [-pi, pi]) moved by pi into (-pi/2, pi/2]."""
    angle = np.where(angle > math.pi / 2, angle - math.pi, angle)
    return np.where(angle <= -math.pi / 2, angle + math.pi, angle)


def yaw_quaternion(yaw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(z, w)`` of the rotation by ``yaw`` about the z axis (x = y = 0): ``sin(yaw/2)``,
    ``cos(yaw/2)``; w > 0 for yaw in (-pi/2, pi/2]."""
    half = np.asarray(yaw, dtype=np.float64) / 2.0
    return np.sin(half), np.cos(half)
