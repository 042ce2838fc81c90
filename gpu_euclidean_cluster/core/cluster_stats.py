"""Per-cluster statistics (size, centroid, axis-aligned box) and stable display colours, ROS-free.

The statistics table is a NumPy structured array with one row per kept cluster, in label order,
whose field names are those of the node's ``output/clusters`` cloud (:data:`CLUSTER_DTYPE`).
"""

from __future__ import annotations

import numpy as np

#: One row per cluster: id, point count, centroid and the axis-aligned bounding box.
CLUSTER_DTYPE = np.dtype(
    [
        ("cluster_id", np.int32),
        ("num_points", np.int32),
        ("x", np.float32),
        ("y", np.float32),
        ("z", np.float32),
        ("min_x", np.float32),
        ("min_y", np.float32),
        ("min_z", np.float32),
        ("max_x", np.float32),
        ("max_y", np.float32),
        ("max_z", np.float32),
    ]
)

#: Colour of points outside every kept cluster (label -1): mid grey.
UNCLUSTERED_RGB = (128, 128, 128)

_GOLDEN_RATIO_CONJUGATE = 0.618033988749895


#: Points per leaf of the centroid's summation tree (:func:`cluster_sums`).
SUM_LEAF = 64


def cluster_table(xyz: np.ndarray, labels: np.ndarray, num_clusters: int) -> np.ndarray:
    """Statistics of clusters ``0..num_clusters-1`` of ``labels`` over the points ``xyz``.

    The arithmetic is this package's own, and every backend follows it to the bit:

    * coordinates are taken as float64 (exact for float32 and integer input);
    * centroid: :func:`cluster_sums` divided by the point count in float64 (one correctly
      rounded division), then rounded to float32 (nearest, ties to even; beyond float32's
      range, +-inf);
    * box: the minimum and maximum of each coordinate with ``-0.0 < +0.0`` (IEEE 754-2019
      ``minimum``/``maximum``; clustered points are finite), rounded to float32.

    Args:
        xyz: (N, 3) coordinates; points labelled -1 are ignored (they may be non-finite).
        labels: (N,) int cluster ids, -1 for points in no kept cluster.
        num_clusters: K; every id in ``0..K-1`` must label at least one point.

    Returns:
        (K,) array of :data:`CLUSTER_DTYPE`.

    Raises:
        ValueError: ``labels`` do not number exactly K non-empty clusters.
    """
    table = np.zeros(num_clusters, dtype=CLUSTER_DTYPE)
    table["cluster_id"] = np.arange(num_clusters)
    if num_clusters == 0:
        return table
    grouped, counts = _grouped(xyz, labels, num_clusters)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    table["num_points"] = counts
    centroid = _tree_sums(grouped, counts) / counts[:, None]
    # Ordered as floats, -0 and +0 are equal: minimum/maximum of the bit patterns' order key
    # (a total order of finite doubles with -0 < +0), then back to the value.
    keys = _order_keys(grouped)
    lower = _from_order_keys(np.minimum.reduceat(keys, starts, axis=0))
    upper = _from_order_keys(np.maximum.reduceat(keys, starts, axis=0))
    with np.errstate(over="ignore"):  # beyond float32's range (float64 input): +-inf
        for axis, name in enumerate("xyz"):
            table[name] = centroid[:, axis]
            table[f"min_{name}"] = lower[:, axis]
            table[f"max_{name}"] = upper[:, axis]
    return table


def cluster_sums(xyz: np.ndarray, labels: np.ndarray, num_clusters: int) -> np.ndarray:
    """(K, 3) float64 coordinate sums per cluster, in this package's fixed order.

    A cluster's points, in index order, are cut into leaves of :data:`SUM_LEAF` consecutive
    points; a leaf is summed left to right starting from its first point; then the leaf sums are
    added pairwise, level by level (leaf ``2i`` + leaf ``2i + 1``; an unpaired last one goes up
    unchanged), until one value remains. Every addition is one IEEE float64 addition.
    """
    if num_clusters == 0:
        return np.zeros((0, 3), dtype=np.float64)
    grouped, counts = _grouped(xyz, labels, num_clusters)
    return _tree_sums(grouped, counts)


def _grouped(
    xyz: np.ndarray, labels: np.ndarray, num_clusters: int
) -> tuple[np.ndarray, np.ndarray]:
    """The labelled points as float64, sorted by label (index order within a label), and the
    count per label."""
    labels = np.asarray(labels)
    kept = labels >= 0
    ids = labels[kept]
    counts = np.bincount(ids, minlength=num_clusters)
    if counts.shape[0] != num_clusters or not counts.all():
        raise ValueError(f"labels do not number exactly {num_clusters} non-empty clusters")
    order = np.argsort(ids, kind="stable")
    # Only the clustered (finite) points are converted: a signalling NaN elsewhere would make
    # the conversion warn.
    return np.asarray(xyz)[kept][order].astype(np.float64), counts


def _tree_sums(grouped: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """:func:`cluster_sums` of points already grouped by cluster."""
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    leaves = -(-counts // SUM_LEAF)  # per cluster
    leaf_cluster = np.repeat(np.arange(len(counts)), leaves)
    leaf_rank = np.arange(int(leaves.sum())) - np.repeat(np.cumsum(leaves) - leaves, leaves)
    leaf_start = starts[leaf_cluster] + SUM_LEAF * leaf_rank
    leaf_len = np.minimum(SUM_LEAF, counts[leaf_cluster] - SUM_LEAF * leaf_rank)
    sums = grouped[leaf_start].copy()
    for j in range(1, SUM_LEAF):  # left to right within every leaf at once
        more = np.flatnonzero(leaf_len > j)
        if more.size == 0:
            break
        sums[more] += grouped[leaf_start[more] + j]
    return pairwise_tree(sums, leaves)


def pairwise_tree(sums: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """Per group, its leaf sums added pairwise up a tree: ``sums`` holds ``leaves[g]`` partial
    sums of group ``g`` after those of group ``g - 1``; at each level partials ``2i`` and
    ``2i + 1`` of a group are added (an odd last one is carried up). Returns one sum per group
    (rows of ``sums`` may be vectors). The GPU twins add in the same order."""
    nodes = leaves.copy()  # per group: partial sums left at this level
    while (nodes > 1).any():
        first = np.cumsum(nodes) - nodes  # each group's first partial in `sums`
        halves = -(-nodes // 2)
        group = np.repeat(np.arange(len(nodes)), halves)
        rank = np.arange(int(halves.sum())) - np.repeat(np.cumsum(halves) - halves, halves)
        left = first[group] + 2 * rank
        paired = 2 * rank + 1 < nodes[group]
        combined = sums[left].copy()
        combined[paired] += sums[left[paired] + 1]
        sums, nodes = combined, halves
    return sums


def _order_keys(values: np.ndarray) -> np.ndarray:
    """int64 keys ordered as the float64 values, with -0.0 below +0.0 (finite values)."""
    bits = values.view(np.int64)
    return np.where(bits < 0, np.int64(-(2**63)) - bits - 1, bits)


def _from_order_keys(keys: np.ndarray) -> np.ndarray:
    """The float64 values of :func:`_order_keys`' keys."""
    bits = np.where(keys < 0, np.int64(-(2**63)) - keys - 1, keys)
    return bits.view(np.float64)


def cluster_rgb(labels: np.ndarray) -> np.ndarray:
    """(N, 3) uint8 colours: a fixed colour per cluster id, grey for -1.

    Hues step by the golden ratio so that neighbouring ids get well separated colours, and the
    same id always gets the same colour, frame after frame.
    """
    labels = np.asarray(labels)
    # One colour per id (row 0 for -1), then one gather per point.
    ids = np.arange(int(labels.max(initial=-1)) + 1)
    palette = np.empty((ids.shape[0] + 1, 3), dtype=np.uint8)
    palette[0] = UNCLUSTERED_RGB
    palette[1:] = _hsv_to_rgb((ids * _GOLDEN_RATIO_CONJUGATE) % 1.0, saturation=0.85, value=1.0)
    return palette[labels + 1]


def pack_rgb(rgb: np.ndarray) -> np.ndarray:
    """(N, 3) uint8 colours as PCL/RViz packed ``rgb`` float32 values (0x00RRGGBB bit patterns)."""
    rgb = np.asarray(rgb, dtype=np.uint32)
    packed = (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]
    return packed.astype(np.uint32).view(np.float32)


def unpack_rgb(packed: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_rgb`: (N,) float32 packed colours to (N, 3) uint8."""
    bits = np.asarray(packed, dtype=np.float32).view(np.uint32)
    return np.stack(((bits >> 16) & 0xFF, (bits >> 8) & 0xFF, bits & 0xFF), axis=1).astype(np.uint8)


def _hsv_to_rgb(hue: np.ndarray, saturation: float, value: float) -> np.ndarray:
    sector = np.floor(hue * 6.0)
    fraction = hue * 6.0 - sector
    p = value * (1.0 - saturation)
    q = value * (1.0 - saturation * fraction)
    t = value * (1.0 - saturation * (1.0 - fraction))
    v = np.full_like(hue, value)
    p = np.full_like(hue, p)
    choices = np.stack(
        (
            np.stack((v, t, p), axis=-1),
            np.stack((q, v, p), axis=-1),
            np.stack((p, v, t), axis=-1),
            np.stack((p, q, v), axis=-1),
            np.stack((t, p, v), axis=-1),
            np.stack((v, p, q), axis=-1),
        )
    )
    index = sector.astype(np.int64) % 6
    rgb = np.take_along_axis(choices, index[None, ..., None], axis=0)[0]
    return np.round(rgb * 255.0).astype(np.uint8)
