"""Autoware's ``voxel_grid_based_euclidean_cluster`` on the GPU: the CUDA twin of
``cpu/labelling/autoware_voxel.py`` (whose docstring states the rules), equal to it bit for bit.

Per frame, all on the device (``cuda/kernels/labelling/autoware_voxel.cu``), with one host
synchronisation, the kept-voxel count (a 4-byte copy into page-locked memory), which sizes the
centroids:

* build: the cloud's bounds and PCL's grid (``aw_minmax``, ``aw_grid``), the sort keys
  (``aw_keys``), cupy's sort of the keys alone, the kept-voxel flags (``aw_flags``) and their
  scan, then the flattened centroids (``aw_centroids``);
* label: the backend's exact clustering of the centroids (no synchronisation of its own with
  ``union_find``);
* build: the component sizes and smallest voxels (``aw_component_sizes``); when the kept voxels
  outnumber the bound, the split of ``core/voxel_split.py`` (``aw_split_init``,
  ``aw_split_place``, then ``aw_split_round`` once per round, the rounds being those that would
  bring a component of every voxel within the bound: a round with nothing left to split returns
  at once); finally the points' pieces (``aw_points``).

Kernel launches: 7 + 1 sort + 1 scan before the labelling, then 2 (no split possible) or
4 + rounds after it, plus two memsets.

:func:`downsample_gpu` runs the same grid and centroids (``_voxels``, ``_centroids``) with a leaf
``(L, L, L)`` and every voxel kept, then each point's voxel (``aw_voxel_of_points``): the
downsampling of ``ClusterConfig.downsample_leaf_size`` (``core/downsample.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import cupy
import numpy as np

from ...core.downsample import Leaf, autoware_leaf, cube_leaf, inverse_leaf
from ...core.timing import StageClock
from ...core.units import INT32_MAX
from ...core.voxel_split import (
    DIAGONAL_COVARIANCE,
    HASH_INV_1,
    HASH_INV_2,
    HASH_MUL_1,
    HASH_MUL_2,
    SPLIT_LEAF,
    rounds_needed,
)
from ..module import THREADS, KernelSource, blocks, get_kernel

#: Threads per block of ``aw_split_round`` (one block per piece; ``-D AW_SPLIT_THREADS``).
SPLIT_THREADS = 1024
#: Most blocks of a split round (they loop over the round's pieces).
SPLIT_MAX_BLOCKS = 1024
#: Points of a voxel whose loads ``aw_centroids`` issues together (``-D AW_CENTROID_BATCH``).
CENTROID_BATCH = 16
#: Blocks of ``aw_minmax`` (a grid-stride loop, six atomics per warp).
MINMAX_BLOCKS = 64

#: The voxel_grid kernels, built with the hash's multipliers and the split's constants.
AUTOWARE_VOXEL = KernelSource(
    "autoware_voxel",
    ("labelling/autoware_voxel.cu",),
    {
        "AW_HASH_MUL_1": HASH_MUL_1,
        "AW_HASH_MUL_2": HASH_MUL_2,
        "AW_HASH_INV_1": HASH_INV_1,
        "AW_HASH_INV_2": HASH_INV_2,
        "AW_DIAGONAL_COVARIANCE": DIAGONAL_COVARIANCE,
        "AW_SPLIT_LEAF": SPLIT_LEAF,
        "AW_SPLIT_THREADS": SPLIT_THREADS,
        "AW_CENTROID_BATCH": CENTROID_BATCH,
    },
)

_D2H = 2  # cudaMemcpyDeviceToHost
_HOST = threading.local()  # a page-locked int32 word per thread, for the voxel count


def _read_int(device_word: cupy.ndarray) -> int:
    """One int32 of the device, through this thread's page-locked word (synchronises)."""
    word = getattr(_HOST, "word", None)
    if word is None:
        word = np.frombuffer(cupy.cuda.alloc_pinned_memory(4), np.int32, 1)
        _HOST.word = word
    stream = cupy.cuda.get_current_stream()
    cupy.cuda.runtime.memcpyAsync(word.ctypes.data, device_word.data.ptr, 4, _D2H, stream.ptr)
    stream.synchronize()
    return int(word[0])


@dataclass
class _Voxels:
    """A cloud's PCL voxel grid on the device (the CPU twin's ``voxel_grid``, steps 1 and 2).

    Attributes:
        points: the (N, 3) float32 points, C-contiguous.
        keys: uint64 (N,): the sorted keys ``linear index << 32 | hash32(point index)``.
        flag: int32 (N,): 1 where a sorted position starts a kept voxel.
        number: int32 (N,): the inclusive scan of ``flag`` (a kept voxel's number plus one).
        count: V, the kept voxels (read back: the one host synchronisation).
    """

    points: cupy.ndarray
    keys: cupy.ndarray
    flag: cupy.ndarray
    number: cupy.ndarray
    count: int


def _voxels(device_id: int, points: cupy.ndarray, leaf: Leaf, min_points_per_voxel: int) -> _Voxels:
    """The grid of finite ``points`` (N > 0) at ``leaf`` per axis, with PCL's guard: the bounds
    and the grid on the device (``aw_minmax``, ``aw_grid``), the keys (``aw_keys``) sorted by
    cupy, the kept-voxel flags (``aw_flags``) and their scan, and V read back."""

    def kernel(name: str) -> cupy.RawKernel:
        return get_kernel(AUTOWARE_VOXEL, name, device_id)

    points = cupy.ascontiguousarray(points, dtype=cupy.float32)
    n = int(points.shape[0])
    n32 = np.int32(n)
    grid = blocks(n)
    inv = inverse_leaf(leaf)
    params = cupy.zeros(8, dtype=cupy.uint64)  # AwGrid
    kernel("aw_minmax")((MINMAX_BLOCKS,), (THREADS,), (points, n32, params))
    kernel("aw_grid")((1,), (1,), (params, inv[0], inv[1], inv[2]))
    keys = cupy.empty(n, dtype=cupy.uint64)
    kernel("aw_keys")(grid, (THREADS,), (points, n32, inv[0], inv[1], inv[2], params, keys))
    keys.sort()
    flag = cupy.empty(n, dtype=cupy.int32)
    min_points = np.int32(min(max(int(min_points_per_voxel), 1), INT32_MAX))
    kernel("aw_flags")(grid, (THREADS,), (keys, n32, min_points, params, flag))
    number = cupy.cumsum(flag, dtype=cupy.int32)
    return _Voxels(points, keys, flag, number, _read_int(number[n - 1 :]))


def _centroids(device_id: int, voxels: _Voxels, with_z: bool) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Each kept voxel's first sorted position, int32 (V,), and its centroid, float32 (V, 3):
    (x, y, z) ``with_z``, else flattened to (x, y, 0) (``aw_centroids``)."""
    n = int(voxels.keys.shape[0])
    vstart = cupy.empty(voxels.count, dtype=cupy.int32)
    centroids = cupy.empty((voxels.count, 3), dtype=cupy.float32)
    get_kernel(AUTOWARE_VOXEL, "aw_centroids", device_id)(
        blocks(n),
        (THREADS,),
        (
            voxels.points,
            voxels.keys,
            voxels.flag,
            voxels.number,
            np.int32(n),
            np.int32(with_z),
            vstart,
            centroids,
        ),
    )
    return vstart, centroids


def downsample_gpu(
    device_id: int, points: cupy.ndarray, leaf_size: float
) -> tuple[cupy.ndarray, cupy.ndarray]:
    """PCL ``VoxelGrid`` at ``(L, L, L)`` on finite (N, 3) float32 ``points`` on the device
    (``core/downsample.py``; the CPU twin's ``downsample``): int32 (N,) each point's voxel,
    float32 (V, 3) the centroids. One host synchronisation (V)."""
    n = int(points.shape[0])
    if n == 0:
        return cupy.empty(0, dtype=cupy.int32), cupy.empty((0, 3), dtype=cupy.float32)
    voxels = _voxels(device_id, points, cube_leaf(leaf_size), 1)
    _, centroids = _centroids(device_id, voxels, with_z=True)
    voxel = cupy.empty(n, dtype=cupy.int32)
    get_kernel(AUTOWARE_VOXEL, "aw_voxel_of_points", device_id)(
        blocks(n), (THREADS,), (voxels.keys, voxels.number, np.int32(n), voxel)
    )
    return voxel, centroids


def voxel_grid_components_gpu(
    device_id: int,
    points: cupy.ndarray,
    leaf: float,
    min_points_per_voxel: int,
    max_voxels_per_cluster: int,
    large_threshold: int,
    large_cap: int,
    label_centroids: Callable[[cupy.ndarray], cupy.ndarray],
    clock: StageClock,
) -> cupy.ndarray:
    """int32 (N,) on the device: each point's piece, -1 where dropped or thinned away (the CPU
    twin's ``voxel_grid_components``; ``device_id`` current during the call)."""
    n = int(points.shape[0])
    if n == 0:
        return cupy.empty(0, dtype=cupy.int32)

    def kernel(name: str) -> cupy.RawKernel:
        return get_kernel(AUTOWARE_VOXEL, name, device_id)

    n32 = np.int32(n)
    grid = blocks(n)
    with clock("build"):
        voxels = _voxels(device_id, points, autoware_leaf(leaf), min_points_per_voxel)
        if voxels.count == 0:
            return cupy.full(n, -1, dtype=cupy.int32)
        keys, number = voxels.keys, voxels.number
        vstart, flat = _centroids(device_id, voxels, with_z=False)
    components = cupy.ascontiguousarray(label_centroids(flat), dtype=cupy.int32)
    with clock("build"):
        piece, piece_voxels = _pieces(device_id, flat, components, max_voxels_per_cluster)
        ids = cupy.empty(n, dtype=cupy.int32)
        kernel("aw_points")(
            grid,
            (THREADS,),
            (
                keys,
                number,
                vstart,
                piece,
                piece_voxels,
                n32,
                np.int32(min(int(large_threshold), INT32_MAX)),
                np.int32(min(int(large_cap), INT32_MAX)),
                ids,
            ),
        )
    return ids


def _pieces(
    device_id: int, flat: cupy.ndarray, components: cupy.ndarray, max_voxels: int
) -> tuple[cupy.ndarray, cupy.ndarray]:
    """Each voxel's piece (a voxel number naming it) and the voxels per piece (indexed by that
    name), by ``core/voxel_split.py``'s rounds; no host synchronisation."""

    def kernel(name: str) -> cupy.RawKernel:
        return get_kernel(AUTOWARE_VOXEL, name, device_id)

    v = int(components.shape[0])
    bound = max(1, min(int(max_voxels), INT32_MAX))
    v32, bound32 = np.int32(v), np.int32(bound)
    rounds = rounds_needed(v, bound)
    # Zeroed: sizes, smallest voxels (as v - voxel), cursors, the arrangement's total, and the
    # pieces listed per round.
    zeroed = cupy.zeros(3 * v + 2 + rounds, dtype=cupy.int32)
    sizes, rep = zeroed[:v], zeroed[v : 2 * v].view(cupy.uint32)
    kernel("aw_component_sizes")(blocks(v), (THREADS,), (components, v32, sizes, rep))
    if rounds == 0:  # no component can be over the bound: the components are the pieces
        return components, sizes
    cursor, total, counts = zeroed[2 * v : 3 * v], zeroed[3 * v : 3 * v + 1], zeroed[3 * v + 1 :]
    ints = cupy.empty((6, v), dtype=cupy.int32)
    cstart, arrangement, piece, piece_voxels, v0, v1 = ints
    lists = cupy.empty((2, v, 2), dtype=cupy.int32)
    sort_keys = cupy.empty((2, v), dtype=cupy.uint64)
    sums = cupy.empty((2, 3 * v), dtype=cupy.float64)
    kernel("aw_split_init")(
        blocks(v), (THREADS,), (sizes, v32, bound32, cstart, total, lists[0], counts[0:])
    )
    kernel("aw_split_place")(
        blocks(v),
        (THREADS,),
        (components, sizes, rep, cstart, v32, bound32, cursor, arrangement, piece, piece_voxels),
    )
    split = kernel("aw_split_round")
    split_blocks = (max(1, min(v // (bound + 1), SPLIT_MAX_BLOCKS)),)
    for r in range(rounds):
        split(
            split_blocks,
            (SPLIT_THREADS,),
            (
                flat,
                lists[r % 2],
                counts[r:],
                np.int32(r == 0),
                bound32,
                arrangement,
                sort_keys[0],
                v0,
                sort_keys[1],
                v1,
                sums[0],
                sums[1],
                lists[(r + 1) % 2],
                counts[r + 1 :],
                piece,
                piece_voxels,
            ),
        )
    return piece, piece_voxels
