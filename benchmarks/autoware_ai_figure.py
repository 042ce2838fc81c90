"""Bird's-eye figure of Autoware.ai's pipeline on kitti_000001, for the README.

    python -m benchmarks.autoware_ai_figure --output docs/figures/

Left: every point clustered in x-y at Autoware.ai's tolerance (0.75 m, at least 20 points), no
preprocessing. Right: Autoware.ai's defaults through the frame layer (the values of
``config/autoware_ai.param.yaml``): height window -1.3 to 0.5 m, RANSAC ground removal (ground
points brown), clusters merged at 1.5 m, each cluster's minimum-area oriented box outlined. CPU
backend (the figure is the same on the GPU: every stage's CUDA version equals its CPU twin).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.ground import GroundSettings
from gpu_euclidean_cluster.frame import FrameOutput, FramePipeline, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io import load_points
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_xyz
from gpu_euclidean_cluster.tools.birdseye import label_colours

from .cases import data_dir

FRAME = "kitti_000001.bin"
#: Autoware.ai's defaults (its config/params.yaml and removeFloor).
CLUSTERING = {"d_th": 0.75, "min_cluster_size": 20, "max_cluster_size": 100_000}
WINDOW = FrameWindow(min_z=-1.3, max_z=0.5, use_height=False)
GROUND = GroundSettings(distance_threshold=0.2, max_slope_deg=math.degrees(0.1), iterations=100)
MERGE_M = 1.5
GROUND_COLOUR = (0.55, 0.4, 0.25, 1.0)
EXTENT_M = 40.0


def pipelines(xyz: np.ndarray) -> tuple[FrameOutput, FrameOutput]:
    """``(plain, autoware_ai)`` outputs of the frame ``xyz`` on the CPU backend."""
    cloud = from_xyz(xyz)
    plain = FramePipeline("cpu").process(
        cloud, ClusterConfig(**CLUSTERING), FrameWindow(use_height=False)
    )
    config = ClusterConfig(**CLUSTERING, cluster_merge_threshold=MERGE_M)
    pipeline = FramePipeline("cpu", stages=[GroundRemoval(GROUND)])
    return plain, pipeline.process(cloud, config, WINDOW, oriented_boxes=True)


def write_figure(xyz: np.ndarray, plain: FrameOutput, full: FrameOutput, path: Path) -> Path:
    """The two panels as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(14, 7))
    panels = (
        (plain, f"no preprocessing: {plain.result.num_clusters} clusters"),
        (full, f"Autoware.ai's pipeline: {full.result.num_clusters} clusters"),
    )
    for axis, (output, title) in zip(axes, panels, strict=True):
        labels = np.asarray(output.result.labels)
        colours = label_colours(labels)
        if output.ground is not None:
            colours[output.ground] = GROUND_COLOUR
        order = np.argsort(labels >= 0, kind="stable")  # grey first, clusters on top
        axis.scatter(-xyz[order, 1], xyz[order, 0], s=0.3, c=colours[order], linewidths=0)
        for box in [] if output.boxes is None else output.boxes:
            axis.plot(*_outline(box), color="black", linewidth=0.6)
        axis.set_xlim(-EXTENT_M, EXTENT_M)
        axis.set_ylim(-EXTENT_M, EXTENT_M)
        axis.set_aspect("equal")
        axis.set_xlabel("-y (m)")
        axis.set_ylabel("x (m)")
        axis.set_title(title)
    figure.suptitle(f"{FRAME}: ground brown, unclustered grey, oriented boxes outlined")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _outline(box: np.void) -> tuple[np.ndarray, np.ndarray]:
    """The box's corners (closed) in the plot's axes (-y, x)."""
    cos, sin = math.cos(box["yaw"]), math.sin(box["yaw"])
    half_l, half_w = box["length"] / 2, box["width"] / 2
    corners = np.array([(half_l, half_w), (-half_l, half_w), (-half_l, -half_w), (half_l, -half_w)])
    x = box["center_x"] + corners[:, 0] * cos - corners[:, 1] * sin
    y = box["center_y"] + corners[:, 0] * sin + corners[:, 1] * cos
    return -np.append(y, y[0]), np.append(x, x[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autoware_ai_figure")
    parser.add_argument("--output", type=Path, required=True, metavar="DIR")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder of the frames")
    args = parser.parse_args(argv)
    xyz = load_points((args.data_dir or data_dir()) / FRAME).xyz
    plain, full = pipelines(xyz)
    print(write_figure(xyz, plain, full, args.output / "kitti_000001_autoware_ai.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
