"""The matrix-based method on the GPU (Section 4.3, Algorithms 2-6).

Algorithm 2 drives it: INITIAL_EC merges each block of ``b`` consecutive points in shared memory,
BUILD_MATRIX compacts the remaining labels ``R`` and fills the |R| x |R| adjacency matrix ``M``,
then the layers of ``b x b`` sub-matrices are evaluated one by one; the first layer that merges
anything triggers UPDATE (which rebuilds ``R``, ``C`` and ``M``) and evaluation restarts at layer 0,
until a full sweep over the layers merges nothing. ``M`` holds one bit per entry.

The method's kernels (``cuda/kernels/labelling/matrix.cu``) are compiled per block size:
:func:`matrix_source` passes ``b`` as ``MATRIX_B``. The neighbour searches that fill ``M`` come from
:data:`~..module.CLUSTERING`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import cupy
import numpy as np

from ...core.neighbour_rule import threshold_sq
from ...core.timing import StageClock
from ..module import THREADS, KernelSource, blocks, get_kernel
from .graph import NeighbourSearch
from .matrix_memory import check_matrix_memory, matrix_row_words

#: ``kernels(name)``: the kernel ``name`` of the matrix source in use, on its device.
_Kernels = Callable[[str], cupy.RawKernel]


def matrix_source(block: int) -> KernelSource:
    """The matrix kernels specialised for blocks of ``block`` threads (``-DMATRIX_B=block``)."""
    return KernelSource(
        f"matrix_b{block}", ("common.cuh", "labelling/matrix.cu"), {"MATRIX_B": block}
    )


@dataclass
class MatrixLabelling:
    """Labels (compact ids 0..|R|-1 per point) and what the run did."""

    labels: cupy.ndarray
    updates: int
    labels_after_initial: int
    peak_bytes: int


class _AdjacencyMatrix:
    """``M`` over ``num_labels`` labels, padded to whole groups of ``b``."""

    def __init__(self, num_labels: int, b: int) -> None:
        self.num_labels = num_labels
        self.num_groups = max(1, -(-num_labels // b))
        self.padded = self.num_groups * b
        self.words_per_row = matrix_row_words(self.padded)
        self.bits = cupy.zeros(self.padded * self.words_per_row, dtype=cupy.uint32)


def label_matrix(
    device_id: int,
    points: cupy.ndarray,
    d_th: float,
    search: str,
    b: int,
    free_memory: Callable[[], int],
    clock: StageClock,
    rings: cupy.ndarray | None = None,
) -> MatrixLabelling:
    """Algorithm 2 on finite (N, 3) float32 ``points`` on ``device_id`` (current), with blocks of
    ``b`` threads (the kernels of :func:`matrix_source` ``(b)``); ``rings`` bins the ``scan``
    search.

    INITIAL_EC and BUILD_MATRIX are timed as the ``build`` stage of ``clock``, the layer sweeps
    and UPDATEs as ``label``.

    Raises:
        MatrixMemoryError: the matrices over the labels left by INITIAL_EC do not fit in the
            free GPU memory (checked before allocating).
    """
    n = int(points.shape[0])
    kernels: _Kernels = partial(get_kernel, matrix_source(b), device_id=device_id)
    pool = cupy.get_default_memory_pool()
    base = pool.used_bytes()
    with clock("build"):
        labels = cupy.empty(n, dtype=cupy.int32)
        kernels("initial_ec")(blocks(n, b), (b,), (points, np.int32(n), threshold_sq(d_th), labels))
        num_labels, _ = _compact(kernels, labels, n + 1, labels)
        check_matrix_memory(-(-num_labels // b) * b, free_memory())
        matrix = _AdjacencyMatrix(num_labels, b)
        NeighbourSearch(device_id, points, d_th, search, rings).launch(
            "set_matrix", labels, matrix.bits, np.int64(matrix.words_per_row)
        )
    peak = pool.used_bytes()
    labels_after_initial = num_labels
    updates = 0
    with clock("label"):
        while (merges := _sweep_layers(kernels, matrix, b)) is not None:
            rebuilt = _update(kernels, labels, n, matrix, merges, b)
            peak = max(peak, pool.used_bytes())  # old and new matrix both alive
            matrix = rebuilt
            updates += 1
    return MatrixLabelling(labels, updates, labels_after_initial, peak - base)


def _compact(
    kernels: _Kernels, values: cupy.ndarray, size: int, labels: cupy.ndarray
) -> tuple[int, cupy.ndarray]:
    """Mark the label ids in ``values`` (all < size - 1), scan, and renumber ``labels`` to 0..k-1.

    Algorithm 4 lines 1-6 (``values`` = ``labels`` = C) and Algorithm 6 lines 2-7 (``values`` = R).
    Returns k and ``L``, the exclusive scan of the marks (old id -> new id).
    """
    used = cupy.zeros(size, dtype=cupy.int32)
    count = int(values.shape[0])
    kernels("mark_labels")(blocks(count), (THREADS,), (values, np.int32(count), used))
    scanned = cupy.cumsum(used, dtype=cupy.int32) - used
    n = int(labels.shape[0])
    kernels("remap_labels")(blocks(n), (THREADS,), (labels, np.int32(n), scanned))
    return int(scanned[-1]), scanned


def _sweep_layers(kernels: _Kernels, matrix: _AdjacencyMatrix, b: int) -> cupy.ndarray | None:
    """Algorithm 2 lines 5-9: evaluate layers until one merges; return its R (None: no merge)."""
    merges = cupy.arange(matrix.padded, dtype=cupy.int32)
    m_d = cupy.zeros(1, dtype=cupy.int32)
    words = np.int64(matrix.words_per_row)
    kernels("merge_diagonal")((matrix.num_groups,), (b,), (matrix.bits, words, merges, m_d))
    if int(m_d.get()[0]):
        return merges
    padded_groups = matrix.num_groups + (matrix.num_groups % 2)
    merge_layer = kernels("merge_layer")
    for layer in range(1, padded_groups):
        merge_layer(
            (padded_groups // 2,),
            (b,),
            (
                matrix.bits,
                words,
                np.int32(matrix.num_groups),
                np.int32(padded_groups),
                np.int32(layer),
                merges,
                m_d,
            ),
        )
        if int(m_d.get()[0]):
            return merges
    return None


def _update(
    kernels: _Kernels,
    labels: cupy.ndarray,
    n: int,
    matrix: _AdjacencyMatrix,
    merges: cupy.ndarray,
    b: int,
) -> _AdjacencyMatrix:
    """Algorithm 6: apply the merges to C, compact R, and rebuild M over the new labels."""
    kernels("remap_labels")(blocks(n), (THREADS,), (labels, np.int32(n), merges))
    old_labels = matrix.num_labels
    num_labels, new_index = _compact(kernels, merges[:old_labels], old_labels + 1, labels)
    rebuilt = _AdjacencyMatrix(num_labels, b)
    num_words = matrix.bits.shape[0]
    kernels("rebuild_matrix")(
        blocks(num_words),
        (THREADS,),
        (
            matrix.bits,
            np.int64(matrix.words_per_row),
            np.int64(num_words),
            np.int32(old_labels),
            merges,
            new_index,
            rebuilt.bits,
            np.int64(rebuilt.words_per_row),
        ),
    )
    return rebuilt
