"""Bird's-eye PNGs of a point cloud coloured by cluster, optionally beside its ground truth.

Seen from above, x up and y to the left, around the sensor (the origin). Points in no cluster
(label -1) are light grey; each cluster gets the colour the node's ``rgb`` field gives it
(``core.cluster_stats.cluster_rgb``: RViz shows the same colours) and its oriented box
(``core.oriented_boxes``, the minimum-area rectangle of its x-y points). A scale bar sits in the
lower right corner. With a ground truth, its panel is drawn beside and the colours follow the
objects (:func:`object_colour_keys`): a cluster has the colour of the object it mostly covers.

Drawn with matplotlib's Agg canvas on a ``Figure`` of its own (no pyplot, no display needed):
each panel is :data:`PANEL_INCHES` square at :data:`DPI`, so a one-panel PNG is 770 x 770 pixels.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from ..core.cluster_stats import cluster_rgb
from ..core.oriented_boxes import MAX_BOX_COORDINATE, oriented_boxes

UNLABELLED_COLOUR = (0.75, 0.75, 0.75, 1.0)
#: Side of one panel (inches) and the resolution: a panel is 770 pixels square.
PANEL_INCHES = 7.0
DPI = 110
#: Smallest half-width of a view chosen from the points (m).
MIN_EXTENT_M = 1.0
#: Characters of the title per line and panel (longer titles are wrapped at spaces).
TITLE_CHARACTERS = 70
#: Share of the points an automatic view holds (the farthest few stray returns fall outside).
EXTENT_QUANTILE = 0.98


def label_colours(labels: np.ndarray, background: int | None = -1) -> np.ndarray:
    """RGBA colour per point: a 20-colour cycle by label, grey for ``background`` (and < 0)."""
    from matplotlib import colormaps

    labels = np.asarray(labels)
    palette = colormaps["tab20"](np.arange(20))
    colours = palette[np.mod(labels, 20)]
    grey = labels < 0 if background is None else (labels < 0) | (labels == background)
    colours[grey] = UNLABELLED_COLOUR
    return colours


def key_colours(keys: np.ndarray) -> np.ndarray:
    """(N, 4) RGBA colours of colour keys: key ``k >= 0`` the node's colour of cluster id ``k``
    (``cluster_rgb``), light grey for a negative key."""
    keys = np.asarray(keys, dtype=np.int64)
    colours = np.empty((len(keys), 4))
    colours[:, :3] = cluster_rgb(np.maximum(keys, -1)) / 255.0
    colours[:, 3] = 1.0
    colours[keys < 0] = UNLABELLED_COLOUR
    return colours


def object_colour_keys(
    labels: np.ndarray, truth: np.ndarray, background: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Colour keys per point of a cluster panel and its ground-truth panel (:func:`key_colours`),
    so that the same object has the same colour on both.

    The truth panel's key is the object id (-1 for ``background`` and negative ids). A cluster
    takes the key of the object holding more than half of its points (majority overlap; several
    clusters of a split object all take it); a cluster without such an object (mostly
    background, or a merge of objects none of which holds half) gets a key of its own, above
    every object id, so it has a colour no object has. Points with label < 0 get -1.

    Returns:
        ``(cluster_keys, truth_keys)``, int64 (N,) each.
    """
    labels = np.asarray(labels, dtype=np.int64)
    truth = np.asarray(truth, dtype=np.int64)
    truth_keys = np.where((truth < 0) | (truth == background), -1, truth)
    cluster_keys = np.full(labels.shape, -1, dtype=np.int64)
    clustered = labels >= 0
    if not clustered.any():
        return cluster_keys, truth_keys
    _, cluster, sizes = np.unique(labels[clustered], return_inverse=True, return_counts=True)
    objects = truth_keys[clustered]
    on_object = objects >= 0
    pairs, overlap = np.unique(
        np.stack([cluster[on_object], objects[on_object]]), axis=1, return_counts=True
    )
    key = np.full(len(sizes), -1, dtype=np.int64)
    majority = 2 * overlap > sizes[pairs[0]]  # at most one object per cluster
    key[pairs[0, majority]] = pairs[1, majority]
    unmatched = key < 0
    key[unmatched] = int(truth_keys.max(initial=-1)) + 1 + np.arange(int(unmatched.sum()))
    cluster_keys[clustered] = key[cluster]
    return cluster_keys, truth_keys


def cluster_box_corners(xyz: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The oriented boxes (``core.oriented_boxes``) of the clusters of ``labels`` as corners.

    Labels need not be numbered ``0..K-1``; points with a non-finite coordinate are left out.

    Returns:
        ``(ids, corners)``: the K cluster ids in ascending order and (K, 4, 2) x-y corners of
        their minimum-area rectangles, counter-clockwise.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    labels = np.asarray(labels)
    z = xyz[:, 2] if xyz.shape[1] > 2 else np.zeros(len(xyz))
    usable = (labels >= 0) & (np.abs(xyz) <= MAX_BOX_COORDINATE).all(axis=1)
    ids, numbered = np.unique(labels[usable], return_inverse=True)
    compact = np.full(len(labels), -1, dtype=np.int64)
    compact[usable] = numbered
    boxes = oriented_boxes(xyz[:, 0], xyz[:, 1], z, compact, len(ids))
    along = np.stack([np.cos(boxes["yaw"]), np.sin(boxes["yaw"])], axis=1)
    across = np.stack([-along[:, 1], along[:, 0]], axis=1)
    half_length = (boxes["length"] / 2)[:, None]
    half_width = (boxes["width"] / 2)[:, None]
    centre = np.stack([boxes["center_x"], boxes["center_y"]], axis=1)
    corners = np.stack(
        [
            centre + sign_l * half_length * along + sign_w * half_width * across
            for sign_l, sign_w in ((-1, -1), (1, -1), (1, 1), (-1, 1))
        ],
        axis=1,
    )
    return ids, corners


def view_extent(xyz: np.ndarray) -> float:
    """Half-width (m) of a square view around the sensor holding :data:`EXTENT_QUANTILE` of the
    finite points, rounded up to a half step of its order of magnitude (43 m -> 45 m)."""
    xy = np.asarray(xyz)[:, :2]
    reach = np.abs(xy[np.isfinite(xy).all(axis=1)]).max(axis=1, initial=0.0)
    if reach.size == 0:
        return MIN_EXTENT_M
    extent = float(np.quantile(reach, EXTENT_QUANTILE)) * 1.05
    if not extent > MIN_EXTENT_M:
        return MIN_EXTENT_M
    step = 10.0 ** math.floor(math.log10(extent)) / 2
    return math.ceil(extent / step) * step


def scale_length(extent_m: float) -> float:
    """A round length (1, 2 or 5 times a power of ten) of at most a fifth of the view's width."""
    target = 2 * extent_m / 5
    power = 10.0 ** math.floor(math.log10(target))
    return max(m * power for m in (1, 2, 5) if m * power <= target)


def write_birdseye_png(
    path: str | Path,
    xyz: np.ndarray,
    labels: np.ndarray,
    truth: np.ndarray | None = None,
    *,
    title: str = "",
    extent_m: float | None = None,
    truth_background: int = 0,
) -> Path:
    """Plot points seen from above (x up, y left), coloured by cluster, with the clusters' boxes.

    Args:
        path: PNG to write (parent directories are created); written as PNG whatever its name.
        xyz: (N, 3) points (N, 2 is taken as z = 0).
        labels: (N,) cluster labels, -1 = not in a cluster (drawn grey).
        truth: optional (N,) ground-truth object ids, drawn in a second panel; the id
            ``truth_background`` (the ground) is grey. Colours then follow the objects
            (:func:`object_colour_keys`).
        title: figure title (wrapped at spaces to fit).
        extent_m: half-width of the square view around the sensor; None: :func:`view_extent`.

    Raises:
        ValueError: shapes that do not match.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    xyz = np.asarray(xyz)
    labels = np.asarray(labels)
    if xyz.ndim != 2 or xyz.shape[1] < 2 or labels.shape != (xyz.shape[0],):
        raise ValueError(f"need (N, 3) points and N labels, got {xyz.shape} and {labels.shape}")
    if truth is not None and np.shape(truth) != labels.shape:
        raise ValueError(f"truth has shape {np.shape(truth)}, expected {labels.shape}")
    extent = view_extent(xyz) if extent_m is None else float(extent_m)
    if truth is None:
        cluster_keys = labels.astype(np.int64)
        panels = [(cluster_keys, _count_title("clusters", labels))]
    else:
        cluster_keys, truth_keys = object_colour_keys(labels, truth, truth_background)
        panels = [
            (cluster_keys, _count_title("clusters", labels)),
            (truth_keys, _count_title("ground truth", truth_keys)),
        ]
    ids, corners = cluster_box_corners(xyz, labels)
    present, first_point = np.unique(labels, return_index=True)
    box_keys = cluster_keys[first_point[np.searchsorted(present, ids)]]
    figure = Figure(figsize=(PANEL_INCHES * len(panels), PANEL_INCHES), dpi=DPI)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    marker_area = float(np.clip(3e4 / max(len(labels), 1), 0.3, 6.0))
    for index, (axis, (keys, subtitle)) in enumerate(zip(axes, panels, strict=True)):
        order = np.argsort(keys >= 0, kind="stable")  # grey points first, clusters on top
        axis.scatter(
            -xyz[order, 1],
            xyz[order, 0],
            s=marker_area,
            c=key_colours(keys[order]),
            linewidths=0,
            rasterized=True,
        )
        if index == 0 and len(ids):
            axis.add_collection(
                PolyCollection(
                    np.stack([-corners[..., 1], corners[..., 0]], axis=-1),
                    closed=True,
                    facecolors="none",
                    edgecolors=key_colours(box_keys),
                    linewidths=0.8,
                )
            )
        length = scale_length(extent)
        axis.add_artist(
            AnchoredSizeBar(axis.transData, length, f"{length:g} m", "lower right", frameon=True)
        )
        axis.set_xlim(-extent, extent)
        axis.set_ylim(-extent, extent)
        axis.set_aspect("equal")
        axis.set_xlabel("-y (m)")
        axis.set_ylabel("x (m)")
        axis.set_title(subtitle)
    if title:
        figure.suptitle("\n".join(textwrap.wrap(title, TITLE_CHARACTERS * len(panels))))
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def _count_title(name: str, keys: np.ndarray) -> str:
    """``"name: count"`` of the distinct non-negative keys."""
    ids = np.unique(np.asarray(keys))
    return f"{name}: {int(np.count_nonzero(ids >= 0))}"
