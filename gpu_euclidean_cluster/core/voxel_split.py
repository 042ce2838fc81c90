"""The ``voxel_grid`` algorithm's shared rules: its constants and the principal-axis bisection of
oversized voxel clusters, :func:`split_oversized` (the CPU twin;
``cuda/labelling/autoware_voxel.py`` runs the same rounds on the GPU,
``cuda/kernels/labelling/autoware_voxel.cu``'s ``aw_split_round``, to the bit).

Autoware's ``splitOversizedClusters`` bounds every cluster of voxel centroids to at most
``max(1, max_voxels_per_cluster)`` voxels without dropping any: a group over the bound is cut in
two along the principal axis of its centroids, and both halves are checked again. Per group, its
voxels in the group's *order* (a component: ascending voxel number, as PCL lists them; a half:
the order of its parent's sort, as Autoware pushes it):

* mean and covariance of the centroids' x and y in double precision, every sum in the fixed
  order of :func:`fixed_sums` (Autoware sums sequentially; the two differ only in the last bits,
  which can change a piece only where projections tie to the last bit);
* the principal axis ``(lambda_max - c_yy, c_xy)`` normalised by ``sqrt(a_x^2 + a_y^2)`` (std::hypot
  in Autoware: equal but for the last bit), where ``lambda_max`` is the larger eigenvalue of the
  2x2 covariance; if ``|c_xy| <= 1e-9`` the x axis when ``c_xx >= c_yy`` (x wins a tie), else the
  y axis;
* the voxels sorted by their projection ``x * a_x + y * a_y`` (double), ties by voxel number;
  the first ``floor(n / 2)`` form one piece, the rest the other, each in that sorted order.

Every group over the bound is split in the same round (Autoware's stack visits them in another
order, which changes nothing: a group's halves depend on the group alone), so after ``r`` rounds
the largest piece has ``ceil(n_max / 2^r)`` voxels and the number of rounds is known in advance.
A piece is named by one of its voxels: a component within the bound by its smallest voxel, a
piece of a split by the first voxel of its sorted order.
"""

from __future__ import annotations

import numpy as np

from .cluster_stats import pairwise_tree

#: PCL VoxelGrid's leaf size along z in Autoware's call: two layers, split at z = 0.
Z_LEAF = 100000.0

#: The multipliers of the point-index hash that picks the points a thinned voxel keeps (Chris
#: Wellons' "lowbias32": ``x ^= x >> 16; x *= M1; x ^= x >> 15; x *= M2; x ^= x >> 16`` on
#: uint32, a bijection, so two points never tie). Passed to the CUDA kernel with ``-D``.
HASH_MUL_1 = 0x7FEB352D
HASH_MUL_2 = 0x846CA68B
#: Their inverses modulo 2^32: the CUDA twin sorts the keys alone and recovers each point's
#: index from the hash (``x ^= x >> 16; x *= I2; x ^= x >> 15 ^ x >> 30; x *= I1; x ^= x >> 16``).
HASH_INV_1 = pow(HASH_MUL_1, -1, 2**32)
HASH_INV_2 = pow(HASH_MUL_2, -1, 2**32)

#: Below this ``|c_xy|`` the covariance counts as diagonal (Autoware's constant).
DIAGONAL_COVARIANCE = 1e-9

#: Values per leaf of :func:`fixed_sums` (a ``-D`` constant of the CUDA twin).
SPLIT_LEAF = 64


def fixed_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Float64 sums of consecutive groups of ``values`` in the split's fixed order.

    A group of ``counts[g]`` values, in the given order, is cut into leaves of
    :data:`SPLIT_LEAF` consecutive values; a leaf is summed left to right starting from +0.0;
    then the leaf sums are added pairwise, level by level (leaf ``2i`` + leaf ``2i + 1``; an
    unpaired last one goes up unchanged), until one value remains. Every addition is one IEEE
    float64 addition, so the CUDA twin (one thread per leaf, then the tree) gets the same bits.

    Args:
        values: float64 (M, K), the groups one after another.
        counts: int (G,), every count >= 1, summing to M.

    Returns:
        float64 (G, K).
    """
    counts = np.asarray(counts, dtype=np.int64)
    m, k = values.shape
    leaves = -(-counts // SPLIT_LEAF)
    rank = np.arange(m) - np.repeat(np.cumsum(counts) - counts, counts)
    leaf = np.repeat(np.cumsum(leaves) - leaves, counts) + rank // SPLIT_LEAF
    # Column 0 is the leaf's +0.0 start, missing values are +0.0 (adding them changes nothing:
    # a sum started at +0.0 is never -0.0); cumsum is a sequential left-to-right sum.
    padded = np.zeros((int(leaves.sum()), SPLIT_LEAF + 1, k))
    padded[leaf, rank % SPLIT_LEAF + 1] = values
    sums = np.cumsum(padded, axis=1)[:, -1]
    return pairwise_tree(sums, leaves)


def principal_axes(
    cov_xx: np.ndarray, cov_xy: np.ndarray, cov_yy: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Autoware's unit principal axes of 2x2 covariances (the module's rule), float64."""
    trace = cov_xx + cov_yy
    det = cov_xx * cov_yy - cov_xy * cov_xy
    disc = trace * trace / 4.0 - det
    lam = trace / 2.0 + np.sqrt(np.where(disc > 0.0, disc, 0.0))
    tilted = np.abs(cov_xy) > DIAGONAL_COVARIANCE
    x_wins = cov_xx >= cov_yy
    axis_x = np.where(tilted, lam - cov_yy, np.where(x_wins, 1.0, 0.0))
    axis_y = np.where(tilted, cov_xy, np.where(x_wins, 0.0, 1.0))
    norm = np.sqrt(axis_x * axis_x + axis_y * axis_y)
    return axis_x / norm, axis_y / norm


def rounds_needed(largest: int, max_voxels: int) -> int:
    """Rounds of bisection that bring a group of ``largest`` voxels within the bound."""
    bound = max(1, int(max_voxels))
    rounds = 0
    while -(-int(largest) // (1 << rounds)) > bound:
        rounds += 1
    return rounds


def split_oversized(
    components: np.ndarray, cx: np.ndarray, cy: np.ndarray, max_voxels: int
) -> np.ndarray:
    """Pieces of at most ``max(1, max_voxels)`` voxels, by the module's rounds.

    Args:
        components: int array (V,): the component of each voxel (any ids).
        cx, cy: float32 arrays (V,): the voxel centroids' x and y.
        max_voxels: the bound (values below 1 act as 1, as in Autoware).

    Returns:
        int32 array (V,): each voxel's piece, numbered 0..P-1 by the voxel that names it
        (see the module's docstring); components within the bound keep their voxels together.
    """
    bound = max(1, int(max_voxels))
    v = int(components.shape[0])
    if v == 0:
        return np.empty(0, dtype=np.int32)
    _, first, comp = np.unique(np.asarray(components), return_index=True, return_inverse=True)
    comp = comp.reshape(-1)
    sizes = np.bincount(comp)
    piece = first[comp]  # a component is named by its smallest voxel
    members = np.flatnonzero(sizes[comp] > bound)
    if members.shape[0]:
        # The arrangement: the oversized components one after another, each ascending.
        arrangement = members[np.argsort(comp[members], kind="stable")]
        lengths = sizes[np.unique(comp[members])]
        starts = np.cumsum(lengths) - lengths
        x = np.asarray(cx, dtype=np.float64)
        y = np.asarray(cy, dtype=np.float64)
        while (lengths > bound).any():
            active = lengths > bound
            a_starts, a_lengths = starts[active], lengths[active]
            local = np.repeat(np.arange(a_starts.shape[0]), a_lengths)
            offset = np.repeat(np.cumsum(a_lengths) - a_lengths, a_lengths)
            positions = a_starts[local] + np.arange(local.shape[0]) - offset
            voxels = arrangement[positions]
            gx, gy = x[voxels], y[voxels]
            means = fixed_sums(np.stack((gx, gy), axis=1), a_lengths) / a_lengths[:, None]
            dx = gx - means[local, 0]
            dy = gy - means[local, 1]
            cov = fixed_sums(np.stack((dx * dx, dx * dy, dy * dy), axis=1), a_lengths)
            axis_x, axis_y = principal_axes(cov[:, 0], cov[:, 1], cov[:, 2])
            projection = gx * axis_x[local] + gy * axis_y[local]
            arrangement[positions] = voxels[np.lexsort((voxels, projection, local))]
            half = a_lengths // 2
            starts = np.concatenate((starts[~active], a_starts, a_starts + half))
            lengths = np.concatenate((lengths[~active], half, a_lengths - half))
            by_start = np.argsort(starts, kind="stable")
            starts, lengths = starts[by_start], lengths[by_start]
        # A piece of a split is named by the first voxel of its sorted order.
        names = arrangement[starts]
        piece[arrangement] = np.repeat(names, lengths)
    return np.unique(piece, return_inverse=True)[1].reshape(-1).astype(np.int32)
