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


def cluster_table(xyz: np.ndarray, labels: np.ndarray, num_clusters: int) -> np.ndarray:
    """Statistics of clusters ``0..num_clusters-1`` of ``labels`` over the points ``xyz``.

    Args:
        xyz: (N, 3) coordinates; points labelled -1 are ignored (they may be non-finite).
        labels: (N,) int cluster ids, -1 for points in no kept cluster.
        num_clusters: K; every id in ``0..K-1`` must label at least one point.

    Returns:
        (K,) array of :data:`CLUSTER_DTYPE`; centroids are accumulated in float64.
    """
    labels = np.asarray(labels)
    kept = labels >= 0
    ids = labels[kept]
    points = np.asarray(xyz, dtype=np.float64)[kept]
    table = np.zeros(num_clusters, dtype=CLUSTER_DTYPE)
    table["cluster_id"] = np.arange(num_clusters)
    if num_clusters == 0:
        return table
    counts = np.bincount(ids, minlength=num_clusters)
    if counts.shape[0] != num_clusters or not counts.all():
        raise ValueError(f"labels do not number exactly {num_clusters} non-empty clusters")
    table["num_points"] = counts
    order = np.argsort(ids, kind="stable")
    grouped = points[order]
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    centroid = np.add.reduceat(grouped, starts, axis=0) / counts[:, None]
    lower = np.minimum.reduceat(grouped, starts, axis=0)
    upper = np.maximum.reduceat(grouped, starts, axis=0)
    for axis, name in enumerate("xyz"):
        table[name] = centroid[:, axis]
        table[f"min_{name}"] = lower[:, axis]
        table[f"max_{name}"] = upper[:, axis]
    return table


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
