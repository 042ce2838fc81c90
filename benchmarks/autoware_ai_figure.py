"""Bird's-eye figures of Autoware.ai's pipeline on kitti_000001, for docs/autoware.md.

    python -m benchmarks.autoware_ai_figure --output docs/figures/

``kitti_000001_autoware_ai.png``, left: every point clustered in x-y at Autoware.ai's tolerance
(0.75 m, at least 20 points), no preprocessing. Right: Autoware.ai's defaults through the frame
layer (the values of ``config/autoware_ai.param.yaml``): height window -1.3 to 0.5 m, RANSAC
ground removal (ground points brown), clusters merged at 1.5 m, each cluster's minimum-area
oriented box outlined.

``kitti_000001_autoware_ai_stages.png``: the stages one after the other (:data:`STAGES`), each
panel the frame through every stage up to its own: no preprocessing, the height window,
voxel-grid downsampling, ground removal, Difference of Normals, then range bands, merging and
oriented boxes. CPU backend (the figures are the same on the GPU: every stage's CUDA version
equals its CPU twin).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.diffnormals import DiffNormalsSettings
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.ground import GroundSettings
from gpu_euclidean_cluster.frame import DiffNormalsFilter, FrameOutput, FramePipeline, GroundRemoval
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
#: Autoware.ai's use_multiple_thres bands, its leaf_size.
BANDS = {
    "clustering_ranges": (15.0, 30.0, 45.0, 60.0),
    "clustering_distances": (0.5, 1.1, 1.6, 2.1, 2.6),
}
LEAF_M = 0.1
#: The stages figure's panels: title, and what the frame goes through (cumulative).
STAGES: tuple[tuple[str, dict], ...] = (
    ("no preprocessing", {}),
    ("+ height window -1.3…0.5 m", {"window": True}),
    ("+ voxel grid 0.1 m", {"window": True, "leaf": True}),
    ("+ RANSAC ground removal", {"window": True, "leaf": True, "ground": True}),
    ("+ Difference of Normals", {"window": True, "leaf": True, "ground": True, "don": True}),
    (
        "+ range bands, merging, oriented boxes",
        {"window": True, "leaf": True, "ground": True, "don": True, "bands": True},
    ),
)
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


def stage_outputs(xyz: np.ndarray) -> list[FrameOutput]:
    """The frame through each panel of :data:`STAGES` (CPU backend)."""
    cloud = from_xyz(xyz)
    outputs = []
    for _, stage in STAGES:
        config = ClusterConfig(
            **CLUSTERING,
            downsample_leaf_size=LEAF_M if stage.get("leaf") else 0.0,
            **(dict(BANDS, cluster_merge_threshold=MERGE_M) if stage.get("bands") else {}),
        )
        stages = [GroundRemoval(GROUND)] if stage.get("ground") else []
        stages += [DiffNormalsFilter(DiffNormalsSettings())] if stage.get("don") else []
        window = WINDOW if stage.get("window") else FrameWindow(use_height=False)
        pipeline = FramePipeline("cpu", stages=stages)
        outputs.append(
            pipeline.process(cloud, config, window, oriented_boxes=bool(stage.get("bands")))
        )
    return outputs


def write_figure(xyz: np.ndarray, plain: FrameOutput, full: FrameOutput, path: Path) -> Path:
    """The two panels as a PNG at ``path``."""
    panels = (
        (plain, f"no preprocessing: {plain.result.num_clusters} clusters"),
        (full, f"Autoware.ai's pipeline: {full.result.num_clusters} clusters"),
    )
    return _draw(xyz, panels, (1, 2), path)


def write_stages_figure(xyz: np.ndarray, outputs: list[FrameOutput], path: Path) -> Path:
    """One panel per stage of :data:`STAGES` as a PNG at ``path``."""
    panels = [
        (output, f"{title}: {output.result.num_clusters} clusters")
        for (title, _), output in zip(STAGES, outputs, strict=True)
    ]
    return _draw(xyz, panels, (2, 3), path)


def _draw(
    xyz: np.ndarray, panels: Sequence[tuple[FrameOutput, str]], shape: tuple[int, int], path: Path
) -> Path:
    """Bird's-eye panels of ``xyz``, each coloured by its output's clusters, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, columns = shape
    figure, axes = plt.subplots(rows, columns, figsize=(7 * columns, 7 * rows), squeeze=False)
    for axis, (output, title) in zip(axes.flat, panels, strict=True):
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
    figure.tight_layout(rect=(0.0, 0.0, 1.0, 0.97))
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
    stages = stage_outputs(xyz)
    print(write_stages_figure(xyz, stages, args.output / "kitti_000001_autoware_ai_stages.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
