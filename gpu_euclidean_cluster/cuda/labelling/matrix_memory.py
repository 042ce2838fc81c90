"""Memory need of the matrix-based method (Section 4.3), checked before anything is allocated.

The method keeps an adjacency matrix ``M`` over the |R| labels left after INITIAL_EC, and
UPDATE (Algorithm 6) builds ``M'`` while ``M`` still exists. We store one bit per entry (rows padded
to whole 32-bit words) instead of the paper's ``int``, a 32-fold saving; the need is still
quadratic in |R|, the limit the paper itself admits (Section 6).
"""

from __future__ import annotations

from ...core.memory import StructureTooLargeError
from ...core.units import format_bytes


class MatrixMemoryError(StructureTooLargeError):
    """The matrix method's adjacency matrices do not fit in the free GPU memory."""

    def __init__(self, num_labels: int, need_bytes: int, free_bytes: int) -> None:
        super().__init__(
            "matrix",
            f"the adjacency matrices over |R| = {num_labels} labels",
            need_bytes,
            f"the {format_bytes(free_bytes)} of free GPU memory",
        )
        self.num_labels = num_labels
        self.free_bytes = free_bytes


def matrix_row_words(num_labels: int) -> int:
    """32-bit words per row of a bit-packed |R| x |R| matrix."""
    return (num_labels + 31) // 32


def matrix_bytes(num_labels: int) -> int:
    """Bytes of one bit-packed adjacency matrix over ``num_labels`` labels."""
    return num_labels * matrix_row_words(num_labels) * 4


def matrix_bytes_needed(num_labels: int) -> int:
    """Peak bytes of the matrices: ``M`` and, during UPDATE, ``M'`` of at most the same size."""
    return 2 * matrix_bytes(num_labels)


def check_matrix_memory(num_labels: int, free_bytes: int) -> int:
    """The need in bytes; raises :class:`MatrixMemoryError` when it exceeds ``free_bytes``."""
    need = matrix_bytes_needed(num_labels)
    if need > free_bytes:
        raise MatrixMemoryError(num_labels, need, free_bytes)
    return need
