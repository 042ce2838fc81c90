"""The node's frame step by step, in one process, and the floors under it.

What ``euclidean_cluster_node`` does with one PointCloud2 (kitti_000001 as x, y, z, intensity
float32, or a random cloud of its size when the file is absent), with the node's default
settings, each step timed on its own (the GPU steps end with a host synchronisation, as the node's
do):

- ``from_cdr``: the serialized message parsed into a cloud (a view of the payload);
- ``decode``: the backend's frame codec (on CUDA: the layout plan, the copy into pinned memory,
  the host -> device copy and the decode kernel);
- ``cluster``: the clusterer (on CUDA: the ``union_find`` graph, device-resident input);
- ``encode``: the labelled cloud and the cluster table (on CUDA: the kernels, the table's sort,
  the copies back, the synchronisation);
- ``labeled_cdr`` / ``clusters_cdr``: the outputs serialized for ``publish``;
- ``frame``: ``FramePipeline.process`` whole (on CUDA: one frame graph,
  ``cuda/graphs/frame_graphs.py``, also timed stage by stage: ``graph_stages``),
  ``frame staged``: the same with ``whole_frames=False`` (decode, cluster, encode as above), and
  ``frame + cdr`` with both serializations: what the node's ``decode_build`` + ``cluster`` stand
  for, without rclpy.

And the floors of the host the node runs on: ``python_call`` (an empty Python call),
``gpu_round_trip`` (an empty kernel launched and waited for), ``copy_in`` (the frame's payload into
pinned memory and onto the device) and ``copy_out`` (the labelled payload back).

    python -m benchmarks.frame_split [--backend cuda] [--repeats 200] [--labeled-layout compact]
    python -m benchmarks.frame_split --profile 500   # cProfile of the whole frame, 500 times
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from gpu_euclidean_cluster.clusterer import EuclideanClusterer, make_backend
from gpu_euclidean_cluster.core.frame import DEFAULT_LABELED_LAYOUT, LABELED_LAYOUTS, LabeledLayout
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import RawCloud, from_cdr, from_structured

from .cases import data_dir
from .environment import cpu_model
from .publish_cost import FRAME, FRAME_POINTS, XYZI, PublishTiming, time_cases
from .stage_split import frame_graph_split


@dataclass(frozen=True)
class FrameSplit:
    """The frame measured and the timing of each step (ms)."""

    frame: str
    labeled_layout: str
    points: int
    clusters: int
    backend: str
    device: str
    cpu: str
    #: other work on the machine skews the timings
    load_average: tuple[float, float, float]
    timings: dict[str, PublishTiming]
    #: the whole frame's graph stage by stage (median ms; ``stage_split.frame_graph_split``),
    #: or None where the frame is not one graph
    graph_stages: dict[str, float] | None = None


def input_cloud(seed: int = 0) -> tuple[RawCloud, str]:
    """kitti_000001 as x, y, z, intensity float32 (or random points of its size), and its
    source."""
    path = data_dir() / FRAME
    if path.is_file():
        raw, source = np.fromfile(path, dtype="<f4").reshape(-1, 4), str(path)
    else:
        rng = np.random.default_rng(seed)
        raw = rng.uniform(-80.0, 80.0, (FRAME_POINTS, 4)).astype("<f4")
        source = f"random ({FRAME} not found)"
    return from_structured(np.ascontiguousarray(raw).view(XYZI).reshape(-1)), source


def measure_frame_split(
    backend_name: str = "auto",
    warmup: int = 5,
    repeats: int = 200,
    budget_s: float = 5.0,
    labeled_layout: LabeledLayout = DEFAULT_LABELED_LAYOUT,
) -> FrameSplit:
    """Median and p99 of each step (see the module doc), each run ``warmup`` times untimed and
    up to ``repeats`` times within ``budget_s`` seconds; the labelled cloud in
    ``labeled_layout``."""
    from std_msgs.msg import Header

    from gpu_euclidean_cluster.frame import FramePipeline
    from gpu_euclidean_cluster.ros.messages.serialized import point_cloud_cdr
    from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

    settings = NodeSettings()
    config, window = settings.cluster, settings.window
    cloud, source = input_cloud()
    header = Header(frame_id="velodyne")
    message = point_cloud_cdr(cloud, header)
    backend = make_backend(backend_name)
    pipeline = FramePipeline(backend, copy_output=False)
    pipeline.warm_up(config, window)
    staged = FramePipeline(backend, copy_output=False, whole_frames=False)
    staged.warm_up(config, window)
    codec = backend.frame_codec()
    clusterer = EuclideanClusterer(config, backend)
    parsed, _ = from_cdr(message)
    frame = codec.decode(parsed, window)
    result = clusterer.cluster(frame.points, frame.mask)
    output = pipeline.process(parsed, config, window, labeled_layout=labeled_layout)

    def decode() -> Any:
        decoded = codec.decode(parsed, window)
        backend.synchronize()
        return decoded

    def encode() -> Any:
        return codec.encode(result.labels, result.cluster_sizes, copy=False, layout=labeled_layout)

    def whole(serialize: bool, frames: FramePipeline = pipeline) -> Callable[[], Any]:
        def run() -> Any:
            cloud_in, _ = from_cdr(message)
            out = frames.process(cloud_in, config, window, labeled_layout=labeled_layout)
            if serialize:
                point_cloud_cdr(out.labeled, header)
                point_cloud_cdr(out.clusters, header)
            return out

        return run

    cases: dict[str, Callable[[], Any]] = {
        "from_cdr": lambda: from_cdr(message),
        "decode": decode,
        "cluster": lambda: clusterer.cluster(frame.points, frame.mask),
        "encode": encode,
        "labeled_cdr": lambda: point_cloud_cdr(output.labeled, header),
        "clusters_cdr": lambda: point_cloud_cdr(output.clusters, header),
        "frame": whole(serialize=False),
        "frame staged": whole(serialize=False, frames=staged),
        "frame + cdr": whole(serialize=True),
        "python_call": lambda: None,
        **_device_floors(backend, cloud, output.labeled),
    }
    timings = time_cases(cases, warmup, repeats, budget_s)
    graph_stages = None
    if backend.name == "cuda":
        graph_stages = frame_graph_split(codec, parsed, config, window, labeled_layout)
    return FrameSplit(
        frame=source,
        labeled_layout=labeled_layout,
        points=cloud.num_points,
        clusters=result.num_clusters,
        backend=backend.name,
        device=backend.device,
        cpu=cpu_model(),
        load_average=os.getloadavg(),
        timings=timings,
        graph_stages=graph_stages,
    )


def _device_floors(
    backend: Any, cloud: RawCloud, labeled: RawCloud
) -> dict[str, Callable[[], Any]]:
    """The GPU round trip and the frame's copies in and out (CUDA backend only)."""
    if backend.name != "cuda":
        return {}
    import cupy

    empty = cupy.RawKernel('extern "C" __global__ void frame_split_empty() {}', "frame_split_empty")
    stream = cupy.cuda.get_current_stream()
    payload = np.frombuffer(cloud.data, dtype=np.uint8)
    pinned_in = _pinned(payload.nbytes)
    device_in = cupy.empty(payload.nbytes, dtype=cupy.uint8)
    out_bytes = np.frombuffer(labeled.data, dtype=np.uint8).nbytes
    device_out = cupy.zeros(out_bytes, dtype=cupy.uint8)
    pinned_out = _pinned(out_bytes)

    def round_trip() -> None:
        empty((1,), (1,), ())
        stream.synchronize()

    def copy_in() -> None:
        np.copyto(pinned_in, payload)
        cupy.cuda.runtime.memcpyAsync(
            device_in.data.ptr, pinned_in.ctypes.data, payload.nbytes, 1, stream.ptr
        )
        stream.synchronize()

    def copy_out() -> None:
        cupy.cuda.runtime.memcpyAsync(
            pinned_out.ctypes.data, device_out.data.ptr, out_bytes, 2, stream.ptr
        )
        stream.synchronize()

    return {"gpu_round_trip": round_trip, "copy_in": copy_in, "copy_out": copy_out}


def _pinned(nbytes: int) -> np.ndarray:
    """A page-locked host buffer of ``nbytes`` bytes."""
    import cupyx

    return cupyx.empty_pinned(nbytes, dtype=np.uint8)


def profile_frame(
    backend_name: str, calls: int, labeled_layout: LabeledLayout, top: int = 40
) -> str:
    """cProfile's table (internal time first) of ``calls`` frames through ``from_cdr`` and
    ``FramePipeline.process``, as the node runs them, after a warm-up."""
    import cProfile
    import io
    import pstats

    from std_msgs.msg import Header

    from gpu_euclidean_cluster.frame import FramePipeline
    from gpu_euclidean_cluster.ros.messages.serialized import point_cloud_cdr
    from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

    settings = NodeSettings()
    message = point_cloud_cdr(input_cloud()[0], Header(frame_id="velodyne"))
    pipeline = FramePipeline(make_backend(backend_name), copy_output=False)
    pipeline.warm_up(settings.cluster, settings.window)

    def frames(count: int) -> None:
        for _ in range(count):
            cloud, _ = from_cdr(message)
            pipeline.process(
                cloud, settings.cluster, settings.window, labeled_layout=labeled_layout
            )

    frames(5)
    profiler = cProfile.Profile()
    profiler.runcall(frames, calls)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.frame_split", description=__doc__)
    parser.add_argument("--backend", default="auto", help="auto, cuda or cpu (default auto)")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per step")
    parser.add_argument(
        "--labeled-layout",
        choices=LABELED_LAYOUTS,
        default=DEFAULT_LABELED_LAYOUT,
        help=f"the labelled cloud's layout (default {DEFAULT_LABELED_LAYOUT})",
    )
    parser.add_argument(
        "--profile",
        type=int,
        metavar="FRAMES",
        help="instead: cProfile's table of FRAMES whole frames (internal time first)",
    )
    args = parser.parse_args(argv)
    if args.profile:
        print(profile_frame(args.backend, args.profile, args.labeled_layout))
        return 0
    started = time.perf_counter()
    split = measure_frame_split(
        args.backend, repeats=args.repeats, labeled_layout=args.labeled_layout
    )
    print(
        json.dumps({**asdict(split), "wall_s": round(time.perf_counter() - started, 1)}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
