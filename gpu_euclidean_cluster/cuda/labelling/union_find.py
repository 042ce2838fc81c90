"""The ``union_find`` labelling method on the GPU: neighbour search fused with union-find.

No adjacency list, no edge list: each neighbour pair found is unioned at once (O(N) memory
whatever the degree), and no host synchronisation anywhere in the method.

Range search (RS) builds the voxel grid of the paper's Section 4.4 (Algorithm 7), but as a hash
grid of *clique cells* (side ``sqrt(T / 3) * (1 - CELL_MARGIN)``, ``T = float32(d_th**2)``): any two
points of a cell are neighbours under the float32 rule, so a cell is connected before any distance
is computed (FDBSCAN-DenseBox's dense boxes, Prokopenko et al., ICPP'23, for every cell) and the
union-find runs over cells. A pair of adjacent cells (the 62 forward offsets of the 5 x 5 x 5
stencil) is merged at its first neighbour pair and skipped when both cells already share a root.
The union-find is ECL-CC's (Jaiganesh & Burtscher, HPDC'18): atomicCAS hooking of the larger root
under the smaller, find with intermediate pointer jumping. The grid build replaces the sort and
the scan of Algorithm 7 with one hash insert per point and an atomic bump allocation per cell.

Exhaustive search (ES) tiles all pairs ``j > i`` through shared memory (``exhaustive_search`` in
``common.cuh``) and unions each neighbour pair it finds.

Kernel launches per call: RS 7 (init, bbox, insert, alloc, scatter, link, finish), ES 3 (init,
link, finish); host synchronisations: none (``UnionFindLabelling.dense_cells_used`` and
``num_cells`` read the device when asked, and only then). The launches are built as data
(:func:`grid_steps`, :func:`exhaustive_steps`, :func:`isolated_steps`, ``launches.py``) over
buffers the caller may keep: :func:`label_union_find` allocates them and issues the steps at once;
the graph path (``cuda/graphs/cluster_graphs.py``) builds the same steps over a size bucket's
buffers and captures them. Non-finite points are in no component (id -1;
``cuda/kernels/labelling/union_find.cu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import cupy
import numpy as np

from ...core.clique_cells import GAP_LIMIT, clique_cell_side
from ...core.config import PAPER_SEARCHES
from ...core.neighbour_rule import threshold_sq
from ..graphs.launches import KernelLaunch, issue
from ..module import ES_TILE, THREADS, KernelSource, blocks

#: Resident blocks per SM of ``uf_link_cells``: passed to ``union_find.cu`` with ``-D``, where
#: the kernel's ``__launch_bounds__`` guarantees it, and the size of the link grid here.
UF_LINK_BLOCKS_PER_SM = 4
#: Resident blocks per SM of ``uf_link_exhaustive`` (32 registers, 4 KiB shared).
ES_BLOCKS_PER_SM = 8
#: Blocks per SM of ``uf_bbox`` (a grid-stride loop, six atomics per block).
BBOX_BLOCKS_PER_SM = 2

#: The method's compile unit. Its link kernels run blocks of ``ES_TILE`` threads (the
#: exhaustive search needs exactly its tile; ``cuda/module.py`` passes it to ``common.cuh``).
UNION_FIND = KernelSource(
    "union_find",
    ("common.cuh", "ecl_cc.cuh", "labelling/union_find.cu"),
    {"UF_LINK_BLOCKS_PER_SM": UF_LINK_BLOCKS_PER_SM},
)


@dataclass
class UnionFindLabelling:
    """Result of :func:`label_union_find`.

    Attributes:
        components: int32 (N,) on the device; equal ids exactly for connected points. Ids are point
            indices (the first point of the root cell, or the root point), so they lie in [0, N);
            -1 for a non-finite point (in no component).
        search: ``"range"`` or ``"exhaustive"``.
        grid_attempted: the host chose the clique-cell grid (RS, T finite and >= 2^-100); the
            device may still have fallen back to ES for a cloud too wide for the grid.
        launches: kernel launches made (no host synchronisation was made).
        status: uint64 (2,) on the device for RS: ``(cells << 32) | points`` and 1 if the grid ran.
    """

    components: cupy.ndarray
    search: str
    grid_attempted: bool
    launches: int
    status: cupy.ndarray | None = None

    @property
    def dense_cells_used(self) -> bool:
        """Whether clique (dense) cells were used; reads the device (synchronises) when asked."""
        return self.status is not None and int(self.status[1]) == 1

    @property
    def num_cells(self) -> int:
        """Non-empty clique cells (0 without the grid); reads the device when asked."""
        return 0 if self.status is None else int(self.status[0]) >> 32


@cache
def _sm_count(device_id: int) -> int:
    return int(cupy.cuda.Device(device_id).attributes["MultiProcessorCount"])


def table_capacity(n: int) -> int:
    """Hash-table slots for ``n`` points: a power of two >= 2n (load factor <= 1/2)."""
    return 1 << max(5, (2 * n - 1).bit_length())


#: How :func:`search_kind` labels a cloud: the clique-cell grid, all pairs, or no pair at all.
GRID, EXHAUSTIVE, ISOLATED = "grid", "exhaustive", "isolated"


def search_kind(d_th: float, search: str) -> tuple[str, np.float32, float | None]:
    """``(kind, T, side)`` for ``d_th`` and ``search``: :data:`ISOLATED` where no pair can satisfy
    ``S < T`` (T <= 0 or NaN), :data:`GRID` for range search with clique cells of side ``side``,
    else :data:`EXHAUSTIVE` (``side`` None)."""
    if search not in PAPER_SEARCHES:
        raise ValueError(f"search must be one of {PAPER_SEARCHES}, not {search!r}")
    with np.errstate(over="ignore"):  # d_th**2 beyond float32: T = inf
        thr = threshold_sq(d_th)
    if not thr > 0:
        return ISOLATED, thr, None
    side = clique_cell_side(thr)
    if search == "range" and side is not None:
        return GRID, thr, side
    return EXHAUSTIVE, thr, None


@dataclass
class GridBuffers:
    """Device buffers of the clique-cell grid for clouds of ``n`` points."""

    n: int
    keys: cupy.ndarray
    cnt: cupy.ndarray
    start: cupy.ndarray
    parent: cupy.ndarray  # cells by slot; points if the device falls back to ES
    cells: cupy.ndarray
    slot_of: cupy.ndarray
    sorted_points: cupy.ndarray
    spid: cupy.ndarray
    bbox: cupy.ndarray
    status: cupy.ndarray
    components: cupy.ndarray  # each point's rank in its cell until uf_finish

    @classmethod
    def allocate(cls, n: int) -> GridBuffers:
        cap = table_capacity(n)
        return cls(
            n=n,
            keys=cupy.empty(cap, dtype=cupy.int64),
            cnt=cupy.empty(cap, dtype=cupy.int32),
            start=cupy.empty(cap, dtype=cupy.int32),
            parent=cupy.empty(cap, dtype=cupy.int32),
            cells=cupy.empty(n, dtype=cupy.int32),
            slot_of=cupy.empty(n, dtype=cupy.int32),
            sorted_points=cupy.empty((n, 4), dtype=cupy.float32),
            spid=cupy.empty(n, dtype=cupy.int32),
            bbox=cupy.empty(6, dtype=cupy.uint32),
            status=cupy.empty(2, dtype=cupy.uint64),
            components=cupy.empty(n, dtype=cupy.int32),
        )

    @property
    def nbytes(self) -> int:
        return sum(
            int(getattr(self, name).nbytes) for name in self.__dataclass_fields__ if name != "n"
        )


def grid_steps(
    device_id: int,
    points: cupy.ndarray,
    thr: np.float32,
    side: float,
    buffers: GridBuffers,
) -> list[KernelLaunch]:
    """The 7 launches of the clique-cell grid over the first n points of ``points`` (n: the
    cloud size the buffers were allocated for)."""
    n, b = buffers.n, buffers
    cap = int(b.keys.shape[0])
    sm = _sm_count(device_id)
    n32, cap32, mask = np.int32(n), np.int32(cap), np.int32(cap - 1)
    inv_h = np.float64(1.0 / side)
    grid_n, grid_cap = blocks(n), blocks(cap)
    # One warp per cell (k <= n cells), every block resident at once, grid-stride beyond.
    link_grid = (min(UF_LINK_BLOCKS_PER_SM * sm, -(-n // (ES_TILE // 32))),)
    bbox_grid = (min(grid_n[0], BBOX_BLOCKS_PER_SM * sm),)
    link_args = (
        points,
        n32,
        thr,
        b.bbox,
        inv_h,
        np.float64(GAP_LIMIT),
        b.keys,
        b.cnt,
        b.start,
        b.cells,
        b.status,
        mask,
        b.sorted_points,
        b.parent,
    )
    return [
        _launch(
            "uf_init", grid_cap, (cap32, np.int32(1), b.keys, b.cnt, b.parent, b.bbox, b.status)
        ),
        _launch("uf_bbox", bbox_grid, (points, n32, b.bbox)),
        _launch(
            "uf_insert",
            grid_n,
            (points, n32, b.bbox, inv_h, b.keys, b.cnt, mask, b.slot_of, b.components),
        ),
        _launch("uf_alloc", grid_cap, (b.bbox, inv_h, b.cnt, cap32, b.status, b.start, b.cells)),
        _launch(
            "uf_scatter",
            grid_n,
            (points, n32, b.bbox, inv_h, b.slot_of, b.components, b.start, b.sorted_points, b.spid),
        ),
        _launch("uf_link_cells", link_grid, link_args, ES_TILE),
        _launch(
            "uf_finish",
            grid_n,
            (
                points,
                n32,
                np.int32(1),
                b.bbox,
                inv_h,
                b.parent,
                b.slot_of,
                b.start,
                b.spid,
                b.components,
            ),
        ),
    ]


def exhaustive_steps(
    device_id: int,
    points: cupy.ndarray,
    n: int,
    thr: np.float32,
    parent: cupy.ndarray,
    components: cupy.ndarray,
) -> list[KernelLaunch]:
    """The 3 launches of the exhaustive search over the first ``n`` points of ``points``."""
    n32 = np.int32(n)
    tiles = -(-n // ES_TILE)
    es_grid = (min(tiles, ES_BLOCKS_PER_SM * _sm_count(device_id)),)
    return [
        _init_parent(n, parent),
        _launch("uf_link_exhaustive", es_grid, (points, n32, thr, parent), ES_TILE),
        _finish_points(points, n, parent, components),
    ]


def isolated_steps(
    points: cupy.ndarray, n: int, parent: cupy.ndarray, components: cupy.ndarray
) -> list[KernelLaunch]:
    """The 2 launches that make every finite point its own component (T <= 0: no pair)."""
    return [_init_parent(n, parent), _finish_points(points, n, parent, components)]


def _launch(
    kernel: str,
    grid: tuple[int],
    args: tuple,
    block: int = THREADS,
    source: KernelSource = UNION_FIND,
) -> KernelLaunch:
    return KernelLaunch(source, kernel, grid, block, args)


def _init_parent(n: int, parent: cupy.ndarray, source: KernelSource = UNION_FIND) -> KernelLaunch:
    """``uf_init`` without a grid: every point its own root."""
    # Unused pointer arguments get `parent` (never dereferenced with with_grid = 0).
    return _launch(
        "uf_init",
        blocks(n),
        (np.int32(n), np.int32(0), parent, parent, parent, parent, parent),
        source=source,
    )


def _finish_points(
    points: cupy.ndarray,
    n: int,
    parent: cupy.ndarray,
    components: cupy.ndarray,
    source: KernelSource = UNION_FIND,
) -> KernelLaunch:
    """``uf_finish`` without a grid: each point's root as its id, -1 for a non-finite point."""
    # grid = 0: the grid's arguments are never dereferenced.
    return _launch(
        "uf_finish",
        blocks(n),
        (
            points,
            np.int32(n),
            np.int32(0),
            parent,
            np.float64(0.0),
            parent,
            parent,
            parent,
            parent,
            components,
        ),
        source=source,
    )


def point_links(
    source: KernelSource, points: cupy.ndarray, parent: cupy.ndarray, components: cupy.ndarray
) -> tuple[KernelLaunch, KernelLaunch]:
    """The launches around a search that unites neighbour pairs of ``points`` itself (the
    kd-tree's and the scan bins', compiled into ``source`` with ``union_find.cu``): every point
    its own root before it, each point's root as its id after it."""
    n = int(points.shape[0])
    return (
        _init_parent(n, parent, source),
        _finish_points(points, n, parent, components, source),
    )


def label_union_find(
    device_id: int, points: cupy.ndarray, d_th: float, search: str = "range"
) -> UnionFindLabelling:
    """Connected components of the float32 neighbour graph of ``points`` at ``d_th``.

    Args:
        device_id: the CUDA device, current during the call (kernels of :data:`UNION_FIND`).
        points: float32 (N, 3) on that device; a non-finite point gets the id -1.
        d_th: distance threshold; neighbours satisfy ``((dx*dx + dy*dy) + dz*dz) < float32(d_th²)``.
        search: ``"range"`` (clique-cell hash grid) or ``"exhaustive"`` (all pairs, tiled).
    """
    kind, thr, side = search_kind(d_th, search)
    n = int(points.shape[0])
    if n == 0:
        return UnionFindLabelling(cupy.empty(0, dtype=cupy.int32), search, False, 0)
    points = cupy.ascontiguousarray(points, dtype=cupy.float32)
    if kind == GRID:
        assert side is not None
        buffers = GridBuffers.allocate(n)
        steps = grid_steps(device_id, points, thr, side, buffers)
        issue(steps, device_id)
        return UnionFindLabelling(buffers.components, "range", True, len(steps), buffers.status)
    parent = cupy.empty(n, dtype=cupy.int32)
    components = cupy.empty(n, dtype=cupy.int32)
    if kind == ISOLATED:
        steps = isolated_steps(points, n, parent, components)
    else:
        steps = exhaustive_steps(device_id, points, n, thr, parent, components)
    issue(steps, device_id)
    return UnionFindLabelling(components, search, False, len(steps))
