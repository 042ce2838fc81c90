"""Autoware.ai's pipeline through the frame layer on kitti_000001: CUDA and CPU, same run."""

import os
import time

import numpy as np

from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.frame import FrameWindow
from gpu_euclidean_cluster.core.ground import GroundSettings
from gpu_euclidean_cluster.frame import FramePipeline, GroundRemoval
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_structured

raw = np.fromfile(
    os.path.join(os.environ["LIDAR_DATA_DIR"], "kitti_000001.bin"), np.float32
).reshape(-1, 4)
cloud = np.zeros(len(raw), dtype=[(n, "<f4") for n in ("x", "y", "z", "intensity")])
for i, n in enumerate(cloud.dtype.names):
    cloud[n] = raw[:, i]
cloud = from_structured(cloud)
base = dict(d_th=0.75, min_cluster_size=20, max_cluster_size=100000)
cases = {
    "plain d_th 0.75": (ClusterConfig(**base), FrameWindow(use_height=False), False, False),
    "autoware.ai defaults (clip, ground, merge 1.5, boxes)": (
        ClusterConfig(**base, cluster_merge_threshold=1.5),
        FrameWindow(min_z=-1.3, max_z=0.5, use_height=False),
        True,
        True,
    ),
    "+ downsample 0.1": (
        ClusterConfig(**base, cluster_merge_threshold=1.5, downsample_leaf_size=0.1),
        FrameWindow(min_z=-1.3, max_z=0.5, use_height=False),
        True,
        True,
    ),
    "+ range bands": (
        ClusterConfig(
            **base,
            cluster_merge_threshold=1.5,
            downsample_leaf_size=0.1,
            clustering_ranges=(15.0, 30.0, 45.0, 60.0),
            clustering_distances=(0.5, 1.1, 1.6, 2.1, 2.6),
        ),
        FrameWindow(min_z=-1.3, max_z=0.5, use_height=False),
        True,
        True,
    ),
}
ground = GroundSettings(distance_threshold=0.2, max_slope_deg=5.729577951308232, iterations=100)
for backend, reps in (("cuda", 50), ("cpu", 5)):
    for name, (config, window, remove_ground, boxes) in cases.items():
        pipe = FramePipeline(
            backend, stages=[GroundRemoval(ground)] if remove_ground else [], copy_output=False
        )
        out = pipe.process(cloud, config, window, oriented_boxes=boxes)
        ts, stages = [], []
        for _ in range(reps):
            t = time.perf_counter()
            out = pipe.process(cloud, config, window, oriented_boxes=boxes)
            ts.append((time.perf_counter() - t) * 1e3)
            stages.append(out.result.timings_ms["total"])
        ground_n = 0 if out.ground is None else int(out.ground.sum())
        median, p99 = np.median(ts), np.percentile(ts, 99)
        print(
            f"{backend:4s} {name:55s} median {median:7.2f} p99 {p99:7.2f} ms"
            f" (clustering {np.median(stages):6.2f}) clusters {out.result.num_clusters}"
            f" ground {ground_n}",
            flush=True,
        )
