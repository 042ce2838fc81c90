"""The kd-tree search on the GPU (``search: kdtree``): build and queries through CuPy.

``core/kdtree.py`` has the layout, the exactness argument and the deviations from Wehr &
Radkowski's construction; ``cuda/kernels/search/kdtree.cu`` the kernels; ``cpu/search/kdtree.py``
the NumPy twin.

Build: one kernel writes the tree array (x, y, z and the original index's bits per point); for
each level whose chunks are larger than ``SMALL_CHUNK``, one kernel writes the level's sort keys,
CuPy's CUB radix sort (``cupy.argsort``) sorts all chunks at once and a gather moves the points
(the paper's "parallel reorganization"); one kernel then finishes every small chunk, one thread
per chunk. No host synchronisation.

Queries: :meth:`GpuKdTree.launch` runs the ``kd_`` twin of
:class:`~..labelling.graph.NeighbourSearch`'s kernels (neighbour counts, adjacency list, edge set,
matrix bits), :meth:`GpuKdTree.components` unites every pair found with ``union_find.cu``'s
union-find (``union_find`` over the kd-tree), and :meth:`GpuKdTree.nearest` is the exact
nearest-neighbour query of the benchmark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import cupy
import numpy as np

from ...core.kdtree import first_small_level, search_radius, tree_depth
from ...core.neighbour_rule import threshold_sq
from ..labelling.union_find import UNION_FIND, point_links
from ..module import COMMON_HEADER, THREADS, blocks, get_kernel

#: The compile unit of the companion papers' searches: the visitors of ``graph.cu``, the
#: union-find of ``union_find.cu`` (so built with its constants) and the kd-tree and scan
#: kernels.
STRUCTURES = replace(
    UNION_FIND,
    name="structures",
    files=(
        COMMON_HEADER,
        "labelling/graph.cu",
        "ecl_cc.cuh",
        "labelling/union_find.cu",
        "search/kdtree.cu",
        "search/scan_search.cu",
    ),
)


@dataclass
class GpuKdTree:
    """A built kd-tree and the threshold its queries use.

    Attributes:
        device_id: the CUDA device holding it (current while it is used).
        tree: int32 (N, 4) on the device: the points in tree order as float32 bits, and each
            point's original index.
        thr_sq: ``float32(d_th**2)``.
        radius: :func:`~...core.kdtree.search_radius` of ``thr_sq``.
        points: float32 (N, 3) the points in their own order (``uf_finish`` reads them).
    """

    device_id: int
    tree: cupy.ndarray
    thr_sq: np.float32
    radius: float
    points: cupy.ndarray

    @property
    def n(self) -> int:
        return int(self.tree.shape[0])

    def launch(self, name: str, *args: object) -> None:
        """Launch ``kd_<name>`` over every point (``graph.cu``'s searches: the tree's leading
        arguments, ``n`` and ``thr_sq``, then ``args``)."""
        kernel = get_kernel(STRUCTURES, f"kd_{name}", self.device_id)
        search = (self.tree, np.float64(self.radius), np.int32(self.n), self.thr_sq)
        kernel(blocks(self.n), (THREADS,), (*search, *args))

    def components(self) -> cupy.ndarray:
        """int32 (N,) component ids (root point indices) of the neighbour graph: every pair found
        united by ``union_find.cu``'s ``UfVisit``."""
        return link_components(
            self.device_id, self.points, lambda parent: self.launch("link", parent)
        )

    def nearest(self, queries: cupy.ndarray) -> cupy.ndarray:
        """int32 (M,) the original index of the tree point nearest each float32 (M, 3) query
        (float32 squared distance, ties to the smallest index: ``cpu/search/kdtree.py``'s
        ``nearest_neighbours``)."""
        queries = cupy.ascontiguousarray(queries, dtype=cupy.float32)
        m = int(queries.shape[0])
        nearest = cupy.empty(m, dtype=cupy.int32)
        if m:
            get_kernel(STRUCTURES, "kd_nearest", self.device_id)(
                blocks(m), (THREADS,), (self.tree, np.int32(self.n), queries, np.int32(m), nearest)
            )
        return nearest


def build_kdtree(device_id: int, points: cupy.ndarray, d_th: float) -> GpuKdTree:
    """The kd-tree of finite float32 (N, 3) ``points`` (N >= 1) on ``device_id`` (current)."""
    points = cupy.ascontiguousarray(points, dtype=cupy.float32)
    n = int(points.shape[0])
    kernel = get_kernel(STRUCTURES, "kd_init", device_id)
    tree = cupy.empty((n, 4), dtype=cupy.int32)
    kernel(blocks(n), (THREADS,), (points, np.int32(n), tree))
    small = min(first_small_level(n), max(tree_depth(n), 0))
    keys = cupy.empty(n, dtype=cupy.int64)
    level_keys = get_kernel(STRUCTURES, "kd_level_keys", device_id)
    for level in range(small):
        level_keys(blocks(n), (THREADS,), (tree, np.int32(n), np.int32(level), keys))
        tree = tree[cupy.argsort(keys)]
    get_kernel(STRUCTURES, "kd_finish_small", device_id)(
        blocks(1 << small), (THREADS,), (tree, np.int32(n), np.int32(small))
    )
    with np.errstate(over="ignore"):
        thr = threshold_sq(d_th)
    return GpuKdTree(device_id, tree, thr, search_radius(thr), points)


def link_components(
    device_id: int, points: cupy.ndarray, link: Callable[[cupy.ndarray], None]
) -> cupy.ndarray:
    """Component ids of the float32 (N, 3) ``points`` after ``link(parent)`` has united their
    neighbour pairs (``union_find.cu``'s ``uf_init``, then ``link``, then ``uf_finish``: roots as
    ids, -1 for a non-finite point)."""
    n = int(points.shape[0])
    parent = cupy.empty(n, dtype=cupy.int32)
    components = cupy.empty(n, dtype=cupy.int32)
    init, finish = point_links(STRUCTURES, points, parent, components)
    init.issue(device_id)
    link(parent)
    finish.issue(device_id)
    return components
