"""The GPU graphs' steps timed stage by stage: what each stage of a captured graph costs.

A captured graph (``cuda/graphs/cluster_graphs.py``'s clustering graph,
``cuda/graphs/frame_graphs.py``'s frame graph) runs as one launch, so its stages cannot be timed
inside it. Here the graph's own steps (held by the last call's record, ``GraphCall.graph`` /
``FrameCall.graph``) are issued one stage at a time on the current stream between events (a stage of
several launches includes the host's gaps between them); the copies beside the graph are timed on
the host clock up to a synchronisation. CuPy is imported on first use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: The stages of :func:`cluster_graph_split`, in order: the input's copy (host clock), the
#: graph's steps grouped (events), the labels' copy into the returned array (host clock).
CLUSTER_STAGES = ("copy_points", "copy_in", "stage", "grid", "link", "finish", "numbering",
                  "copy_out", "labels_out")  # fmt: skip
#: The stages of :func:`frame_graph_split`, in order: the payload's copy in (host clock), the
#: graph's steps grouped (events), the payload and labels back (host clock).
FRAME_STAGES = ("payload_in", "shape_in", "decode", "cluster", "encode", "sort", "table",
                "group", "copy_out", "payload_out")  # fmt: skip


def cluster_graph_split(
    graphs: Any, points: Any, config: Any, repeats: int = 20
) -> dict[str, float] | None:
    """Median milliseconds of each of :data:`CLUSTER_STAGES` for ``points`` (no mask) on
    ``graphs`` (a ``ClusterGraphs``); None where graphs are off."""
    import cupy

    to_host = isinstance(points, np.ndarray)
    xp = np if to_host else cupy
    points = xp.ascontiguousarray(points, dtype=xp.float32)
    n = int(points.shape[0])
    graphs.last_call = None
    if graphs.cluster(points, None, config, "") is None or graphs.last_call is None:
        return None
    call = graphs.last_call
    stream = cupy.cuda.get_current_stream()
    with graphs.lock:
        bucket = graphs.bucket(call.bucket)
        return split_stages(
            call.graph.captured.steps,
            CLUSTER_STAGES,
            lambda: graphs.copy_input(bucket, points, None, n, stream),
            lambda: graphs.fetch_labels(bucket, to_host, n, stream),
            repeats,
            graphs.device_id,
        )


def frame_graph_split(
    codec: Any, cloud: Any, config: Any, window: Any, layout: str = "full", repeats: int = 20
) -> dict[str, float] | None:
    """Median milliseconds of each of :data:`FRAME_STAGES` for the frame ``codec`` (a CUDA
    frame codec) runs whole; None where it runs staged."""
    import cupy

    from gpu_euclidean_cluster.core.frame import Unsupported
    from gpu_euclidean_cluster.cuda.graphs.frame_graphs import copy_frame_in, copy_frame_out

    frame_graphs = codec.frame_graphs
    if isinstance(codec.process_whole(cloud, config, window, layout, False), Unsupported):
        return None
    n = cloud.num_points
    shape = (n, cloud.width, cloud.row_step, cloud.row_step * cloud.height)
    entry = frame_graphs.last_call.graph
    stream = cupy.cuda.get_current_stream()
    with cupy.cuda.Device(frame_graphs.device_id), frame_graphs.cluster_graphs.lock:
        return split_stages(
            entry.captured.steps,
            FRAME_STAGES,
            lambda: copy_frame_in(entry, cloud, shape, stream),
            lambda: copy_frame_out(entry, n, stream),
            repeats,
            frame_graphs.device_id,
        )


def split_stages(
    steps: list[tuple[str, Any]],
    stages: tuple[str, ...],
    copy_in: Callable[[], object],
    copy_out: Callable[[], object],
    repeats: int,
    device_id: int,
) -> dict[str, float]:
    """Median milliseconds of each of ``stages``: the first is ``copy_in`` and the last
    ``copy_out``, each timed on the host clock up to a synchronisation; between them, the
    ``steps`` tagged with each stage, issued one stage at a time on the current stream between
    events."""
    import cupy

    from gpu_euclidean_cluster.cuda.graphs.launches import issue

    stream = cupy.cuda.get_current_stream()
    samples: dict[str, list[float]] = {stage: [] for stage in stages}
    inside = stages[1:-1]
    for _ in range(repeats):
        samples[stages[0]].append(_host_ms(copy_in, stream))
        events = {stage: (cupy.cuda.Event(), cupy.cuda.Event()) for stage in inside}
        for stage in inside:
            events[stage][0].record(stream)
            issue([step for tag, step in steps if tag == stage], device_id)
            events[stage][1].record(stream)
        stream.synchronize()
        for stage in inside:
            samples[stage].append(cupy.cuda.get_elapsed_time(*events[stage]))
        samples[stages[-1]].append(_host_ms(copy_out, stream))
    return {stage: float(np.median(values)) for stage, values in samples.items()}


def _host_ms(call: Callable[[], object], stream: Any) -> float:
    """Milliseconds of ``call`` on the host clock, from an idle stream to its synchronisation."""
    stream.synchronize()
    start = time.perf_counter()
    call()
    stream.synchronize()
    return (time.perf_counter() - start) * 1e3
