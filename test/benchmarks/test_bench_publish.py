"""``python -m benchmarks.frame_split`` and ``python -m benchmarks.publish_cost --sweep`` (CPU, a
few calls each): every step measured, on the frame the node would cluster, and the sweep's
messages of the sizes its layouts promise, to a subscriber in another process."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks.frame_split import input_cloud, main, measure_frame_split
from benchmarks.publish_cost import SWEEP_CLUSTERS, SWEEP_POINTS, measure_publish_sweep
from gpu_euclidean_cluster.frame import FramePipeline
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

pytestmark = [
    pytest.mark.ros,
    pytest.mark.skipif(
        importlib.util.find_spec("rclpy") is None, reason="needs rclpy (pip install -e '.[ros]')"
    ),
]

STEPS = {
    "from_cdr", "decode", "cluster", "encode", "labeled_cdr", "clusters_cdr", "frame",
    "frame staged", "frame + cdr", "python_call",
}  # fmt: skip


@pytest.mark.parametrize("layout", ["full", "compact"])
def test_frame_split_times_every_step_of_the_nodes_frame(layout):
    split = measure_frame_split("cpu", warmup=0, repeats=1, budget_s=0.1, labeled_layout=layout)
    assert set(split.timings) == STEPS  # no GPU floors on the CPU
    assert all(t.runs == 1 and t.median_ms >= 0 for t in split.timings.values())
    assert (split.backend, split.labeled_layout) == ("cpu", layout)
    settings = NodeSettings()
    output = FramePipeline("cpu").process(input_cloud()[0], settings.cluster, settings.window)
    assert split.clusters == output.result.num_clusters > 0


def test_frame_split_refuses_an_unknown_layout(capsys):
    with pytest.raises(SystemExit):
        main(["--labeled-layout", "xyz"])
    assert "invalid choice: 'xyz'" in capsys.readouterr().err


def test_publish_sweep_reaches_a_subscriber_process_with_the_layouts_sizes():
    rows = measure_publish_sweep(repeats=1, budget_s=0.1)
    assert all(row.matched == 1 for row in rows), [(r.topic, r.matched) for r in rows]
    by_topic: dict[str, dict[int, int]] = {}
    for row in rows:
        by_topic.setdefault(row.topic.split("/")[-1], {})[row.rows] = row.cdr_bytes
    assert set(by_topic["labeled"]) == set(by_topic["compact"]) == set(SWEEP_POINTS)
    assert set(by_topic["clusters"]) == set(SWEEP_CLUSTERS)
    for n in SWEEP_POINTS[1:]:  # per point: 24 bytes (x y z intensity cluster_id rgb), 16 bytes
        assert by_topic["labeled"][n] - by_topic["labeled"][0] == 24 * n
        assert by_topic["compact"][n] - by_topic["compact"][0] == 16 * n
