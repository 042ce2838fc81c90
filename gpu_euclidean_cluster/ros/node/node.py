"""``euclidean_cluster_node``: PointCloud2 in; labelled cloud, clusters, objects and markers out.

Subscribes ``input/points`` (and ``input/packets``: ``ros/node/packet_input.py``), hands the newest
frame to a worker thread (``ros/node/latest_slot.py``) that runs it through the frame layer
(``frame/service.py``) and publishes (``ros/node/outputs.py``); topic names are relative. Parameter
sets are validated in a callback and apply from the next frame. The process:
``ros/node/process.py``.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Sequence
from typing import Any

from builtin_interfaces.msg import Time
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ...core.config import ConfigError
from ...frame.service import FrameRejection, FrameService
from ..parameters.node_parameters import alias_conflict, declare_node_parameters
from ..parameters.settings import NodeSettings, settings_from_values
from ..parameters.specs import PARAMETERS, SPECS, parameters_help
from ..qos import input_qos
from .diagnostics import NodeDiagnostics
from .frame_stats import FrameStats, StatsSnapshot
from .latest_slot import FrameIntake, ReceivedFrame
from .outputs import NodeOutputs
from .packet_input import packet_sweeps, subscribe_packets
from .process import run_node
from .vehicle_input import subscribe_vehicle, vehicle_sweeps

NODE_NAME = "euclidean_cluster_node"
#: Depth of the (reliable) output publishers.
OUTPUT_QOS_DEPTH = 5
#: Seconds between two /diagnostics reports.
DIAGNOSTICS_PERIOD_S = 1.0


class EuclideanClusterNode(Node):
    """The clustering node; usable from Python (``rclpy`` must be initialised first)."""

    def __init__(self, node_name: str = NODE_NAME, **node_kwargs: Any) -> None:
        """Declare the parameters, warm the frame layer up, create the topics; ``node_kwargs`` go
        to :class:`rclpy.node.Node`. Raises ConfigError (a start-up value is invalid, or the
        backend is not available) or ParameterException (a value's type or range is wrong)."""
        super().__init__(node_name, **node_kwargs)
        self._stats = FrameStats()
        self._intake = FrameIntake(self._stats, self._process, f"{self.get_name()}_worker")
        try:
            self._set_up()
        except BaseException:
            self.destroy_node()
            raise

    def _set_up(self) -> None:
        values = declare_node_parameters(self)  # our names and Autoware's, read-only ones too
        qos = input_qos(values["qos_depth"], values["qos_reliability"])  # before the warm-up
        #: The settings the next frame will be processed with.
        self.settings: NodeSettings = settings_from_values(values)
        warn = self.get_logger().warning
        self._frames = FrameService(values["backend"], values["device_id"], self._stats, warn)
        backend = self._frames.backend
        sweeps = packet_sweeps(values, backend)  # bad settings: before the warm-up
        vehicle = vehicle_sweeps(values, backend)
        self._frames.warm_up(self.settings)
        gc.freeze()  # start-up's objects out of the collector's way: frames walk only their own
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._outputs = NodeOutputs(self, OUTPUT_QOS_DEPTH)  # logs which outputs it publishes
        message, put = self._intake.message, self._intake.put
        inputs = [self.create_subscription(PointCloud2, "input/points", message, qos, raw=True)]
        rejected = self._frames.reject  # by the kind of the refusal
        if sweeps is not None:
            inputs.append(subscribe_packets(self, sweeps, qos, put, rejected, time.monotonic))
        if vehicle is not None:
            inputs += subscribe_vehicle(self, vehicle, qos, put, rejected, time.monotonic)
        self._reports = NodeDiagnostics(self, self._stats, backend, inputs, DIAGNOSTICS_PERIOD_S)
        changed = [f"{s.name} {v!r}" for s in PARAMETERS if (v := values[s.name]) != s.default]
        but = f"the defaults but {', '.join(changed)}" if changed else "the default parameters"
        self.get_logger().info(f"clustering on {backend.name} ({backend.device}) with {but}")

    def stats(self) -> StatsSnapshot:
        """Frame counters, input rate and latency percentiles (as in /diagnostics)."""
        return self._stats.snapshot()

    def latency_ms(self) -> tuple[float, float]:
        """``(p50, p99)`` receive-to-publish latency in ms over recent frames (NaN if none)."""
        snapshot = self._stats.snapshot()
        return snapshot.latency_p50_ms, snapshot.latency_p99_ms

    def destroy_node(self) -> None:
        """Stop the worker (finishing the frame in progress), then destroy the node."""
        self._intake.close()
        super().destroy_node()

    def _on_set_parameters(self, changes: list[Parameter]) -> SetParametersResult:
        before = {spec.name: self.get_parameter(spec.name).value for spec in PARAMETERS}
        after = {**before, **{p.name: p.value for p in changes if p.name in SPECS}}
        try:
            settings = settings_from_values(after)
        except ConfigError as error:
            return SetParametersResult(successful=False, reason=str(error))
        if conflict := alias_conflict(changes):
            return SetParametersResult(successful=False, reason=conflict)
        changed = [f"{k} {before[k]!r} -> {after[k]!r}" for k in after if after[k] != before[k]]
        if changed:
            self.get_logger().info(f"from the next frame: {', '.join(changed)}")
        self.settings = settings
        return SetParametersResult(successful=True)

    def _process(self, frame: ReceivedFrame, received: float) -> None:
        try:
            clustered = self._frames.process(frame, self.settings, self._outputs.groups_records())
            if isinstance(clustered, FrameRejection):  # booked and warned
                return
            sec, nanosec = clustered.stamp  # the outputs keep the input's header
            header = Header(stamp=Time(sec=sec, nanosec=nanosec), frame_id=clustered.frame_id)
            timings = self._outputs.publish(clustered.output, header, clustered.cloud)
        except Exception:
            if self.context.ok():
                raise
            return  # shut down (Ctrl-C) under the frame in flight: nothing to publish to
        self._stats.published(timings.published - received)  # the latency ends there
        published = {"publish": timings.publish_ms, "markers": timings.markers_ms}
        self._stats.stages({**clustered.stage_ms, **published})


USAGE = f"""usage: {NODE_NAME} [-h] [--ros-args -p NAME:=VALUE ... --params-file FILE ...]

Clusters sensor_msgs/PointCloud2 on input/points; publishes output/labeled_points,
output/clusters, output/objects_with_feature (tier4_perception_msgs/DetectedObjectsWithFeature),
output/objects (autoware_perception_msgs/DetectedObjects), output/detections
(vision_msgs/Detection3DArray), output/markers (each while it has a subscriber; the object
topics where their message package is installed) and /diagnostics. Parameters (set at start-up
with --ros-args, live with `ros2 param set`):
"""


def main(args: Sequence[str] | None = None) -> int:
    """Run the node until Ctrl-C or SIGTERM: :func:`.process.run_node` (exit status 0; 2, with
    one line saying why, when a start-up input is invalid; ``--help`` lists the parameters)."""
    return run_node(NODE_NAME, EuclideanClusterNode, lambda: USAGE + parameters_help(), args)


if __name__ == "__main__":
    sys.exit(main())
