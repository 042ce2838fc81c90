"""The kd-tree search on the CPU: NumPy twin of ``cuda/search/kdtree.py`` (rules:
``core/kdtree.py``).

The build sorts every chunk of every level at once (one stable argsort of int64 segment keys
per level, the GPU's all-chunks sort; the CPU needs no switch to per-chunk sorts). The query
walks the tree for a batch of query points together, one level per step: the (query, node)
pairs still open at a level are tested with the float32 rule and open their children on the
sides the search radius reaches. Both give exactly the neighbour pairs of the float32 rule, so
every labelling method sees the same graph as with the other searches.

This module also holds the CPU consumers of any search that yields neighbour pairs in chunks
(the kd-tree here, ``scan_search.py``): the edge set of the paper's methods, within the memory
budget, and the components of ``union_find``, folded chunk by chunk in O(N) memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from ...core.kdtree import (
    chunk_bounds,
    float_order_keys,
    level_segments,
    search_radius,
    splitter,
    tree_depth,
)
from ...core.memory import StructureTooLargeError
from ...core.neighbour_rule import squared_distance, threshold_sq
from ...core.units import format_bytes
from ..labelling.graph import EDGE_BYTES
from ..labelling.union_find import _merge

#: (query, node) pairs tested per vectorised step (bounds the working memory to ~100 MB).
CHUNK_PAIRS = 1 << 21

#: A pair chunk: original point indices ``(i, j)`` of neighbours, ``i < j``, each pair once.
PairChunk = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class KdTree:
    """Points in tree order (``core/kdtree.py``'s layout).

    Attributes:
        points: float32 (N, 3) the points, position by position.
        index: int64 (N,) the original index of the point at each position.
    """

    points: np.ndarray
    index: np.ndarray

    @property
    def size(self) -> int:
        return int(self.index.shape[0])


def build_kdtree(points: np.ndarray) -> KdTree:
    """The kd-tree of finite float32 (N, 3) ``points``: every level's chunks sorted along the
    level's axis, level by level."""
    points = np.ascontiguousarray(points, dtype=np.float32).reshape(-1, 3)
    n = len(points)
    index = np.arange(n, dtype=np.int64)
    for level in range(max(tree_depth(n), 0)):
        keys = (level_segments(n, level) << 32) | float_order_keys(points[:, level % 3]).astype(
            np.int64
        )
        order = np.argsort(keys, kind="stable")
        points, index = points[order], index[order]
    return KdTree(points, index)


def kdtree_pair_chunks(points: np.ndarray, d_th: float) -> Iterator[PairChunk]:
    """Every neighbour pair of finite float32 ``points`` under the float32 rule at ``d_th``, in
    chunks, found with the kd-tree."""
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    if len(points) < 2 or not thr > 0:
        return
    yield from query_pairs(build_kdtree(points), thr)


def query_pairs(tree: KdTree, thr: np.float32) -> Iterator[PairChunk]:
    """The neighbour pairs of the tree's points (each pair once, from its smaller index)."""
    n = tree.size
    radius = search_radius(thr)
    batch = max(1, CHUNK_PAIRS // 64)
    for first in range(0, n, batch):
        query = np.arange(first, min(first + batch, n), dtype=np.int64)
        node = np.zeros(len(query), dtype=np.int64)
        for level in range(tree_depth(n) + 1):
            if not len(query):
                break
            lo, hi = chunk_bounds(level, node, n)
            keep = lo < hi
            query, node, lo, hi = query[keep], node[keep], lo[keep], hi[keep]
            split = splitter(level, node, n)
            mine, theirs = tree.index[query], tree.index[split]
            with np.errstate(over="ignore", invalid="ignore"):
                hit = squared_distance(tree.points[query], tree.points[split]) < thr
            hit &= theirs > mine
            if hit.any():
                yield mine[hit], theirs[hit]
            axis = level % 3
            gap = tree.points[query, axis].astype(np.float64) - tree.points[split, axis]
            inner = hi - lo > 1
            left = inner & (gap < radius)
            right = inner & (-gap < radius)
            query = np.concatenate((query[left], query[right]))
            node = np.concatenate((2 * node[left], 2 * node[right] + 1))


def nearest_neighbours(tree_points: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """int64 (M,) the index in ``tree_points`` nearest each query under the float32 squared
    distance, ties to the smallest index: the definition the GPU kd-tree's nearest-neighbour
    query follows (all pairs, a block of queries at a time)."""
    tree_points = np.ascontiguousarray(tree_points, dtype=np.float32).reshape(-1, 3)
    queries = np.ascontiguousarray(queries, dtype=np.float32).reshape(-1, 3)
    if not len(tree_points):
        raise ValueError("nearest_neighbours needs at least one point to search")
    rows = max(1, CHUNK_PAIRS // len(tree_points))
    nearest = np.empty(len(queries), dtype=np.int64)
    for start in range(0, len(queries), rows):
        with np.errstate(over="ignore", invalid="ignore"):
            sq = squared_distance(queries[start : start + rows, None, :], tree_points[None, :, :])
        nearest[start : start + rows] = np.argmin(sq, axis=1)  # first minimum: smallest index
    return nearest


def collect_edges(chunks: Iterable[PairChunk], method: str, budget: int, search: str) -> np.ndarray:
    """The (E, 2) int32 ``i < j`` edge set from pair ``chunks``.

    Raises:
        StructureTooLargeError: the method's graph would need more than ``budget`` bytes
            (checked as the chunks arrive, before the edges outgrow it).
    """
    parts, total = [], 0
    for i, j in chunks:
        total += len(i)
        if total * EDGE_BYTES[method] > budget:
            raise StructureTooLargeError(
                method,
                f"more than {total} neighbour pairs ({search} search)",
                total * EDGE_BYTES[method],
                f"the CPU memory budget of {format_bytes(budget)}",
            )
        parts.append(np.stack((i, j), axis=1))
    if not parts:
        return np.empty((0, 2), dtype=np.int32)
    return np.concatenate(parts).astype(np.int32, copy=False)


def fold_components(n: int, chunks: Iterable[PairChunk]) -> np.ndarray:
    """int32 (n,) component ids of the graph of pair ``chunks``, each chunk folded into a flat
    label array as it arrives (``union_find``'s O(N) memory, whatever the degree)."""
    labels = np.arange(n)
    for i, j in chunks:
        labels = _merge(labels, i, j)
    return labels.astype(np.int32)
