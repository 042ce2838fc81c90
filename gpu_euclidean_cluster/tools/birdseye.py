"""Bird's-eye PNG of a point cloud coloured by cluster, optionally beside its ground truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

UNLABELLED_COLOUR = (0.75, 0.75, 0.75, 1.0)


def label_colours(labels: np.ndarray, background: int | None = -1) -> np.ndarray:
    """RGBA colour per point: a 20-colour cycle by label, grey for ``background`` (and < 0)."""
    from matplotlib import colormaps

    labels = np.asarray(labels)
    palette = colormaps["tab20"](np.arange(20))
    colours = palette[np.mod(labels, 20)]
    grey = labels < 0 if background is None else (labels < 0) | (labels == background)
    colours[grey] = UNLABELLED_COLOUR
    return colours


def write_birdseye_png(
    path: str | Path,
    xyz: np.ndarray,
    labels: np.ndarray,
    truth: np.ndarray | None = None,
    *,
    title: str = "",
    extent_m: float = 40.0,
    truth_background: int = 0,
) -> Path:
    """Plot points seen from above (x up, y left), coloured by cluster label.

    Args:
        path: PNG to write (parent directories are created).
        xyz: (N, 3) points.
        labels: (N,) cluster labels, -1 = not in a cluster (drawn grey).
        truth: optional (N,) ground-truth object ids, drawn in a second panel; the id
            ``truth_background`` (the ground) is grey.
        title: figure title.
        extent_m: half-width of the square view around the sensor.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xyz = np.asarray(xyz)
    labels = np.asarray(labels)
    if xyz.ndim != 2 or xyz.shape[1] < 2 or labels.shape != (xyz.shape[0],):
        raise ValueError(f"need (N, 3) points and N labels, got {xyz.shape} and {labels.shape}")
    if truth is not None and np.shape(truth) != labels.shape:
        raise ValueError(f"truth has shape {np.shape(truth)}, expected {labels.shape}")
    panels = [(labels, _count_title("clusters", labels, -1), -1)]
    if truth is not None:
        panels.append(
            (
                np.asarray(truth),
                _count_title("ground truth", truth, truth_background),
                truth_background,
            )
        )
    figure, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 7), squeeze=False)
    for axis, (values, subtitle, background) in zip(axes[0], panels, strict=True):
        order = np.argsort(values >= 0, kind="stable")  # grey points first, clusters on top
        axis.scatter(
            -xyz[order, 1],
            xyz[order, 0],
            s=0.3,
            c=label_colours(values[order], background),
            linewidths=0,
            rasterized=True,
        )
        axis.set_xlim(-extent_m, extent_m)
        axis.set_ylim(-extent_m, extent_m)
        axis.set_aspect("equal")
        axis.set_xlabel("-y (m)")
        axis.set_ylabel("x (m)")
        axis.set_title(subtitle)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _count_title(name: str, values: np.ndarray, background: int) -> str:
    ids = np.unique(np.asarray(values))
    count = int(np.count_nonzero((ids >= 0) & (ids != background)))
    return f"{name}: {count}"
