"""The kd-tree search (``search: kdtree``): its layout and exactness rules, shared by both twins.

The tree is Wehr & Radkowski's ("Parallel kd-Tree Construction on the GPU with an Adaptive Split
and Sort Strategy", ``../shared/paper/parallel_kdtree_construction_gpu.md``): every node is one
point, the tree is built top-down one level at a time by sorting each node's chunk of the point
array along the level's axis (x, y, z, x, ...) and taking the chunk's median as the node, and the
chunks follow Garrett et al.'s closed form, so no node stores bounds, children or medians.

Layout (the paper's appendix, in exact integer arithmetic). With ``N`` points, the node at level
``l`` (root 0) and index ``c`` (``0 <= c < 2**l``) owns the positions ``[lo, hi)`` of the array:

    lo = 0 if c == 0 else (c * N >> l) + 1        hi = (c + 1) * N >> l
    splitter s = (2c + 1) * N >> (l + 1)          children: (l + 1, 2c), (l + 1, 2c + 1)

(``w = N / 2**l`` is the paper's real chunk width; ``floor(c * w)`` is ``c * N >> l``.) A node is
empty when ``lo >= hi``; otherwise ``lo <= s < hi``, the left child owns ``[lo, s)`` and the right
``(s, hi)``, and every position is the splitter of exactly one node (``test_kdtree.py`` checks
it for every N below 300 and for N up to 3000 around powers of two). The deepest non-empty
level is ``floor(log2 N)``. After the build, the chunk of every node is partitioned along its
axis ``d = l % 3``: the coordinates ``d`` of its left subtree are ``<=`` the splitter's and those
of its right subtree ``>=`` (ties may lie on either side).

Build, as the paper's Algorithm 1: for each level, sort every chunk by the level's axis and move
the other coordinates with it (the array holds x, y, z and the original index together); while
chunks are larger than :data:`SMALL_CHUNK`, all chunks of the level are sorted at once (one
segmented sort over the whole array: the paper's point that the GPU stays busy while there are
few, large chunks); from the first level whose chunks are all at most :data:`SMALL_CHUNK`
points, one thread per chunk finishes its subtree with insertion sorts (the paper's small-array
switch). The splitters of earlier levels stay where they are.

Where this deviates from the paper, and why:

* Keys are exact: the paper quantises coordinates to integers ``0..F`` for its radix sort; two
  coordinates equal after quantisation could then land on the wrong side of a splitter, and an
  exact search needs the partition above. The sort key is the float32's bits mapped to an
  order-preserving uint32 (:func:`float_order_keys`), in the low half of an int64 whose high
  half is the point's chunk (the "segment"): one radix sort over all chunks of a level (CuPy's
  CUB sort) replaces the paper's own segmented radix sort with per-chunk histograms.
* The sequential phase uses insertion sort for every chunk of at most :data:`SMALL_CHUNK` (32)
  points; the paper uses a sequential radix sort between 16 points and its cutoff. Its cutoff
  equals its threads per block, best at 32 for clouds up to 200 k points (its Fig. 5), which is
  the cutoff here.
* The query is an exact fixed-radius search, not the paper's approximate nearest neighbour
  with a bounded priority queue: a depth-first walk with an explicit stack visits a node's
  subtree unless the splitting plane is at least :func:`search_radius` away on the wrong side
  (the "bounds-overlap-ball" test of Friedman et al., which the paper also uses), and tests every
  node visited with the float32 rule. For the benchmark's nearest-neighbour comparison the same
  walk keeps the best point instead (exact, ties to the smallest index).

Exactness: the float32 rule may call a pair neighbours whose true distance is a hair above
``sqrt(T)`` (``T = float32(d_th**2)``, rounding of the differences, squares and sums; absolute
underflow near zero). :func:`search_radius` bounds every such distance, so a subtree whose
splitting plane is at least that far from the query (on the side away from it) holds no
neighbour: all its points lie at least as far away along the axis. Every pair the rule accepts
is therefore reached from both of its points, and every pair reached is tested with the rule
itself: the neighbour set is exactly the rule's.
"""

from __future__ import annotations

import math

import numpy as np

from .neighbour_rule import CELL_MARGIN

#: The cutoff between the all-chunks sort and one thread per chunk (the paper's ``cutoff``).
SMALL_CHUNK = 32

#: Absolute slack (added to ``T``) that covers the float32 rule's underflow near zero: every
#: operation of the rule rounds by at most half the smallest subnormal, 2**-150, when its result
#: is subnormal.
UNDERFLOW_SLACK = 2.0**-140


def search_radius(thr_sq: float) -> float:
    """A distance that every pair the float32 rule accepts at ``thr_sq`` is closer than (float64).

    ``sqrt(T + 2**-140) * (1 + CELL_MARGIN)``: relative rounding of the rule is below 2**-21 of
    the squared distance, absolute underflow below 2**-147, both far inside the margins; inf
    when ``T`` is.
    """
    t = float(thr_sq)
    if math.isinf(t):
        return math.inf
    return math.sqrt(max(t, 0.0) + UNDERFLOW_SLACK) * (1.0 + CELL_MARGIN)


def tree_depth(n: int) -> int:
    """The deepest level holding a node, ``floor(log2 n)`` (0 for one point, -1 for none)."""
    return int(n).bit_length() - 1


def first_small_level(n: int) -> int:
    """The first level whose chunks all hold at most :data:`SMALL_CHUNK` points (a chunk of level
    ``l`` holds at most ``ceil(n / 2**l)``)."""
    level = 0
    while -(-n >> level) > SMALL_CHUNK:
        level += 1
    return level


def chunk_bounds(level: int, chunk: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` of the nodes ``chunk`` (int64) at ``level``: the positions they own."""
    lo = np.where(chunk > 0, ((chunk * n) >> level) + 1, 0)
    hi = ((chunk + 1) * n) >> level
    return lo, hi


def splitter(level: int, chunk: np.ndarray, n: int) -> np.ndarray:
    """The position of the point that is node ``chunk`` (int64) at ``level``."""
    return ((2 * chunk + 1) * n) >> (level + 1)


def level_segments(n: int, level: int) -> np.ndarray:
    """int64 (n,) the sort segment of every position at ``level``, increasing with the position:
    ``2c`` for the positions of chunk ``c``, ``2k - 1`` for the splitter of an earlier level
    that lies between chunks ``k - 1`` and ``k`` (a segment of its own: it does not move)."""
    position = np.arange(n, dtype=np.int64)
    k = ((position << level) + n - 1) // n
    fixed = (k >= 1) & (k < (1 << level)) & (((k * n) >> level) == position)
    return np.where(fixed, 2 * k - 1, 2 * ((position << level) // n))


def float_order_keys(values: np.ndarray) -> np.ndarray:
    """uint32 keys of float32 ``values`` in their numeric order (-0.0 just before +0.0):
    the sign bit flipped for non-negatives, every bit flipped for negatives."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return np.where(bits & np.uint32(0x80000000), ~bits, bits | np.uint32(0x80000000))
