"""``euclidean_cluster_node``: PointCloud2 in; labelled cloud, clusters, objects and markers out.

Topics (relative, so namespaces and remapping apply):

- subscribes ``input/points`` (sensor_msgs/PointCloud2, sensor-data QoS by default);
- publishes, each only while it has a subscriber (``ros/outputs.py``), ``output/labeled_points``,
  ``output/clusters``, ``output/objects_with_feature`` (tier4_perception_msgs),
  ``output/objects`` (autoware_perception_msgs), ``output/detections`` (vision_msgs): each of
  these three only where its message package is installed; ``output/markers``; and
  ``/diagnostics``.

Processing model: the subscription callback only swaps the newest message into a one-slot buffer
(an overwritten, never processed message counts as dropped) and a worker thread clusters and
publishes, so the executor is never blocked and nothing queues up without bound. Parameter sets
are validated in a callback and apply from the next frame.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.exceptions import ParameterException
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile
from rclpy.subscription import MessageInfo
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ..core.config import ConfigError
from ..frame import DiffNormalsFilter, FrameOutput, FramePipeline, FrameStage, GroundRemoval
from ..frame.packets import SweepCloud
from ..pointcloud_io.pointcloud2 import PointCloud2Error, RawCloud, from_cdr
from .diagnostics import diagnostics_message
from .frame_stats import FrameStats, StatsSnapshot
from .latest_slot import LatestSlot
from .loss_monitor import LossMonitor, fix_hint
from .node_parameters import alias_conflict, declare_node_parameters
from .outputs import NodeOutputs
from .packet_input import packet_sweeps, subscribe_packets
from .parameters import PARAMETERS, SPECS, parameters_help
from .qos import reliability_policy
from .ros_logging import RosLogHandler, forward_package_logging, stop_forwarding
from .settings import NodeSettings, settings_from_values
from .transport import configure_transport, installed_profile

NODE_NAME = "euclidean_cluster_node"
#: Depth of the (reliable) output publishers.
OUTPUT_QOS_DEPTH = 5
#: Seconds between two /diagnostics reports.
DIAGNOSTICS_PERIOD_S = 1.0
#: Seconds between two warnings about rejected frames or CPU fallbacks.
WARNING_THROTTLE_S = 2.0


@dataclass(frozen=True)
class _Frame:
    """A received cloud: a PointCloud2 message still serialized (the subscription is raw: rclpy
    builds no Python message, and the point payload is decoded straight from these bytes), or a
    sweep decoded from ``input/packets``."""

    cdr: bytes | None
    received: float
    sweep: SweepCloud | None = None


class EuclideanClusterNode(Node):
    """The clustering node; usable from Python (``rclpy`` must be initialised first)."""

    def __init__(self, node_name: str = NODE_NAME, **node_kwargs: Any) -> None:
        """Declare the parameters, create the backend, topics and the worker thread.

        Args:
            node_name: the node's name.
            node_kwargs: passed to :class:`rclpy.node.Node` (namespace, parameter_overrides,
                context, ...).

        Raises:
            ConfigError: the parameter values at start-up are invalid, or the backend asked for
                is not available.
            ParameterException: a start-up value has the wrong type or is out of range.
        """
        self._slot: LatestSlot[_Frame] = LatestSlot()
        self._worker: threading.Thread | None = None
        super().__init__(node_name, **node_kwargs)
        try:
            self._set_up()
        except BaseException:
            self.destroy_node()
            raise

    def _set_up(self) -> None:
        # Our names and Autoware's; read-only values included: they do not change later.
        values = declare_node_parameters(self)
        try:  # before the warm-up: a bad name is refused in a moment, not after it
            self._input_reliability = reliability_policy(values["qos_reliability"])
        except ValueError as error:
            raise ConfigError(f"qos_reliability: {error}") from None
        self._settings = settings_from_values(values)
        # The worker publishes each frame before it processes the next, so the labelled payload
        # may stay in the GPU codec's pinned buffer (no copy of ~3 MB per frame).
        self._pipeline = FramePipeline(
            self.get_parameter("backend").value,
            self.get_parameter("device_id").value,
            copy_output=False,
        )
        self._sweeps = packet_sweeps(values, self._pipeline.backend)  # bad settings: before warm-up
        self._ground = GroundRemoval()  # a stage of the frames with remove_ground
        self._diffnormals = DiffNormalsFilter()  # and with use_diffnormals, after it
        # Every optional stage's kernels too, so that turning one on live costs no compile.
        self._pipeline.stages = (self._ground, self._diffnormals)
        self._pipeline.warm_up(self._settings.cluster, self._settings.window, every_stage=True)
        # Everything alive after start-up (rclpy, NumPy, CuPy, the kernels) is moved out of the
        # cyclic collector's generations: a full collection triggered during a frame then walks
        # only what frames allocate (on the CPU backend it walked ~58 000 start-up objects, 9 ms
        # on a 2-core machine).
        gc.freeze()
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._stats = FrameStats()
        self._reported: StatsSnapshot | None = None
        self._create_topics()
        self._worker = threading.Thread(
            target=self._work, name=f"{self.get_name()}_worker", daemon=True
        )
        self._worker.start()
        changed = [
            f"{s.name} {values[s.name]!r}" for s in PARAMETERS if values[s.name] != s.default
        ]
        self.get_logger().info(
            f"clustering on {self._pipeline.backend.name} ({self._pipeline.backend.device}) with "
            + (f"the defaults but {', '.join(changed)}" if changed else "the default parameters")
        )

    @property
    def settings(self) -> NodeSettings:
        """The settings the next frame will be processed with."""
        return self._settings

    def stats(self) -> StatsSnapshot:
        """Frame counters, input rate and latency percentiles (as in /diagnostics)."""
        return self._stats.snapshot()

    def latency_ms(self) -> tuple[float, float]:
        """``(p50, p99)`` receive-to-publish latency in ms over recent frames (NaN if none)."""
        snapshot = self._stats.snapshot()
        return snapshot.latency_p50_ms, snapshot.latency_p99_ms

    def destroy_node(self) -> None:
        """Stop the worker (finishing the frame in progress), then destroy the node."""
        self._slot.close()
        if self._worker is not None:
            self._worker.join()
        super().destroy_node()

    def _create_topics(self) -> None:
        input_qos = QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=self.get_parameter("qos_depth").value,
            reliability=self._input_reliability,
        )
        self._outputs = NodeOutputs(self, OUTPUT_QOS_DEPTH)  # logs which outputs it publishes
        self._diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 1)
        self._input = self.create_subscription(
            PointCloud2, "input/points", self._on_points, input_qos, raw=True
        )
        if self._sweeps is not None:
            self._packets = subscribe_packets(
                self,
                self._sweeps,
                input_qos,
                self._on_sweep,
                lambda reason: self._reject("malformed", reason),
                time.monotonic,
            )
        # Frames lost before the node (a publisher's transport) are warned about with the fix.
        self._loss = LossMonitor(
            self._input.topic_name, fix_hint(installed_profile()), time.monotonic()
        )
        # Steady clock: diagnostics keep coming under use_sim_time even while /clock is paused.
        self.create_timer(
            DIAGNOSTICS_PERIOD_S,
            self._publish_diagnostics,
            clock=Clock(clock_type=ClockType.STEADY_TIME),
        )

    def _parameter_values(self, changes: Sequence[Parameter] = ()) -> dict[str, object]:
        values = {spec.name: self.get_parameter(spec.name).value for spec in PARAMETERS}
        values.update({p.name: p.value for p in changes if p.name in SPECS})
        return values

    def _on_set_parameters(self, changes: list[Parameter]) -> SetParametersResult:
        before, after = self._parameter_values(), self._parameter_values(changes)
        try:
            settings = settings_from_values(after)
        except ConfigError as error:
            return SetParametersResult(successful=False, reason=str(error))
        if conflict := alias_conflict(changes):
            return SetParametersResult(successful=False, reason=conflict)
        changed = [f"{k} {before[k]!r} -> {after[k]!r}" for k in after if after[k] != before[k]]
        if changed:
            self.get_logger().info(f"from the next frame: {', '.join(changed)}")
        self._settings = settings
        return SetParametersResult(successful=True)

    def _on_points(self, cdr: bytes, info: MessageInfo) -> None:
        received = time.monotonic()
        self._stats.received(received)
        gid = info.get("publisher_gid")
        sequence = info.get("publication_sequence_number")
        if gid is not None and sequence is not None:  # gaps: lost before reaching the node
            self._stats.sequence(bytes(gid.get("data", b"")), int(sequence))
        if self._slot.put(_Frame(cdr, received)):
            self._stats.dropped()

    def _on_sweep(self, sweep: SweepCloud, received: float) -> None:
        self._stats.received(received)
        if self._slot.put(_Frame(None, received, sweep)):
            self._stats.dropped()

    def _work(self) -> None:
        while (frame := self._slot.take()) is not None:  # None: the slot was closed
            try:
                self._process(frame)
            except Exception:
                if self.context.ok():
                    raise
                return  # shut down (Ctrl-C) under the frame in flight: nothing to publish to

    def _stages(self, settings: NodeSettings) -> tuple[FrameStage, ...]:
        """The preprocessing stages ``settings`` ask for, in Autoware.ai's order."""
        stages: list[FrameStage] = []
        if settings.ground is not None:
            self._ground.settings = settings.ground
            stages.append(self._ground)
        if settings.diffnormals is not None:
            self._diffnormals.settings = settings.diffnormals
            stages.append(self._diffnormals)
        return tuple(stages)

    def _process(self, frame: _Frame) -> None:
        started = time.perf_counter()
        try:
            if frame.sweep is not None:
                cloud = frame.sweep.cloud
                sec, nanosec = divmod(frame.sweep.stamp_ns, 1_000_000_000)
                stamp, frame_id = Time(sec=sec, nanosec=nanosec), frame.sweep.frame_id
            else:
                cloud, decoded = from_cdr(frame.cdr, self._settings.max_point_fields)
                stamp = Time(sec=decoded.stamp.sec, nanosec=decoded.stamp.nanosec)
                frame_id = decoded.frame_id
            settings = self._settings
            self._pipeline.stages = self._stages(settings)
            output = self._pipeline.process(
                cloud,
                settings.cluster,
                settings.window,
                group_records=self._outputs.groups_records(),
                oriented_boxes=settings.pose_estimation,
                labeled_layout=settings.labeled_layout,
            )
        except PointCloud2Error as error:
            self._reject(error.kind, f"bad PointCloud2: {error}")
            return
        except Exception as error:  # a frame must never kill the node
            self._reject("processing_error", f"{type(error).__name__}: {error}")
            return
        if output.implausible_points:
            self._stats.excluded_implausible(
                output.implausible_points,
                f"{output.implausible_points} point(s) beyond max_coordinate "
                f"{self._settings.max_coordinate:g} m in the last such frame",
            )
        if output.fallback_reason:
            on_cpu = output.result.backend != self._pipeline.backend.name
            self._stats.fell_back(output.fallback_reason, on_cpu)
            self.get_logger().warning(
                output.fallback_reason, throttle_duration_sec=WARNING_THROTTLE_S
            )
        header = Header(stamp=stamp, frame_id=frame_id)  # outputs keep the input's header
        self._publish(output, header, cloud, frame, (time.perf_counter() - started) * 1e3)

    def _publish(
        self, output: FrameOutput, header: Header, cloud: RawCloud, frame: _Frame, process_ms: float
    ) -> None:
        timings = self._outputs.publish(output, header, cloud)
        self._stats.published(timings.published - frame.received)  # the latency ends there
        cluster_ms = output.result.timings_ms["total"]
        self._stats.stages(
            {
                "decode_build": process_ms - cluster_ms,
                "cluster": cluster_ms,
                "publish": timings.publish_ms,
                "markers": timings.markers_ms,
            }
        )

    def _reject(self, kind: str, reason: str) -> None:
        self._stats.rejected(kind, reason)
        self.get_logger().warning(
            f"frame rejected ({kind}): {reason}", throttle_duration_sec=WARNING_THROTTLE_S
        )

    def _publish_diagnostics(self) -> None:
        now = time.monotonic()
        snapshot = self._stats.snapshot(now)
        loss = self._loss.update(
            now,
            snapshot.received,
            snapshot.lost,
            self._input.get_publisher_count(),
            self._settings.diagnostics_warn_share,
        )
        if loss.warning:
            self.get_logger().warning(loss.warning)
        self._diagnostics_pub.publish(
            diagnostics_message(
                f"{self.get_name()}: clustering",
                snapshot,
                self._reported,
                self._pipeline.backend.name,
                self._pipeline.backend.device,
                self.get_clock().now().to_msg(),
                self._settings.diagnostics_warn_share,
                loss.silence,
            )
        )
        self._reported = snapshot


USAGE = f"""usage: {NODE_NAME} [-h] [--ros-args -p NAME:=VALUE ... --params-file FILE ...]

Clusters sensor_msgs/PointCloud2 on input/points; publishes output/labeled_points,
output/clusters, output/objects_with_feature (tier4_perception_msgs/DetectedObjectsWithFeature),
output/objects (autoware_perception_msgs/DetectedObjects), output/detections
(vision_msgs/Detection3DArray), output/markers (each while it has a subscriber; the object
topics where their message package is installed) and /diagnostics. Parameters (set at start-up
with --ros-args, live with `ros2 param set`):
"""


def main(args: Sequence[str] | None = None) -> int:
    """Run the node until shutdown; exit status 2, with one line saying why, when a start-up
    input is invalid (a ROS argument, a params file, a parameter value, the backend).

    Ctrl-C (SIGINT) or SIGTERM stops it with exit status 0. Under ``ros2 launch`` a Ctrl-C
    reaches the node twice (the terminal's SIGINT, then the one launch sends): the second, and
    any signal once the node is stopping, is ignored, so the shutdown finishes without a
    KeyboardInterrupt traceback.
    """
    argv = list(sys.argv if args is None else args)
    own = argv[1 : argv.index("--ros-args")] if "--ros-args" in argv else argv[1:]
    if {"-h", "--help"} & set(own):
        print(USAGE + parameters_help())
        return 0
    problem = params_file_problem(argv)
    if problem:
        print(f"{NODE_NAME}: error: {problem}", file=sys.stderr)
        return 2
    signals = StopSignals()
    signals.install()  # before rclpy's handlers, which call it after shutting ROS down
    try:
        return _run(argv, signals)
    except KeyboardInterrupt:  # Ctrl-C before rclpy started: nothing of ROS to stop
        return 0
    finally:
        signals.ignore()


def _run(argv: list[str], signals: StopSignals) -> int:
    """:func:`main` from ``rclpy.init`` on: a KeyboardInterrupt (the first Ctrl-C) anywhere
    after it stops the node as a shutdown does."""
    transport = configure_transport()  # before the first participant: large output clouds
    try:
        with held_stderr():  # rcl logs its own line before raising; ours says it all
            rclpy.init(args=argv)
    except Exception as error:  # rcl's argument errors (UnknownROSArgsError, ...) are not exported
        print(f"{NODE_NAME}: error: {type(error).__name__}: {rcl_message(error)}", file=sys.stderr)
        return 2
    node: EuclideanClusterNode | None = None
    forwarding: RosLogHandler | None = None
    try:
        logger = rclpy.logging.get_logger(NODE_NAME)
        forwarding = forward_package_logging(logger)
        try:
            node = EuclideanClusterNode()
        except (ConfigError, ParameterException) as error:
            logger.error(f"error: {error}")
            return 2
        node.get_logger().info(transport)
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():
            raise
        # a signal shut ROS down while the executor built its wait set (rcl's RCLError)
    finally:
        signals.stopping = True
        if node is not None:
            node.destroy_node()
        if forwarding is not None:
            stop_forwarding(forwarding)
        rclpy.try_shutdown()
    return 0


class StopSignals:
    """The node's SIGINT handler: the first SIGINT raises KeyboardInterrupt in the main thread
    (rclpy's own handler, which runs first, has shut ROS down); later ones, and any once
    :attr:`stopping` is set, do nothing."""

    def __init__(self) -> None:
        self.stopping = False

    def install(self) -> None:
        """Install the handler; call it before ``rclpy.init`` (rclpy chains to the one it finds)."""
        signal.signal(signal.SIGINT, self._on_signal)

    def ignore(self) -> None:
        """Ignore SIGINT and SIGTERM from now on (call after ``rclpy.try_shutdown``, which puts
        the handlers it found back): Python's finalisation would restore the default action,
        and a late signal would then kill the exiting process (exit status 130)."""
        self.stopping = True
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise KeyboardInterrupt


@contextlib.contextmanager
def held_stderr() -> Iterator[None]:
    """Hold what is written to file descriptor 2 (rcl's log lines) while the block runs; write it
    out afterwards only when the block succeeds."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        held.seek(0)
        sys.stderr.write(held.read().decode("utf-8", "replace"))
        sys.stderr.flush()


def rcl_message(error: BaseException) -> str:
    """rcl's error message on one line, without the C source locations it appends."""
    text = " ".join(str(error).split())
    return re.sub(r",? at \S+\.c:\d+", "", text).strip() or type(error).__name__


def params_file_problem(argv: Sequence[str]) -> str | None:
    """Why a ``--params-file`` of the ROS arguments cannot be read as YAML (missing, not a file,
    unreadable, not YAML), in one line; None when they all can. rcl checks the rest."""
    import yaml

    for path in _params_files(argv):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return f"params file {path}: no such file"
        except IsADirectoryError:
            return f"params file {path}: is a directory"
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
            return f"params file {path}: cannot read: {reason or error}"
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            what = getattr(error, "problem", None) or str(error)
            return f"params file {path}: not valid YAML: {' '.join(str(what).split())}{where}"
    return None


def _params_files(argv: Sequence[str]) -> list[str]:
    """The ``--params-file`` values inside the ``--ros-args`` sections of ``argv``."""
    files: list[str] = []
    inside = False
    for index, arg in enumerate(argv):
        if arg == "--ros-args":
            inside = True
        elif arg == "--":
            inside = False
        elif inside and arg == "--params-file" and index + 1 < len(argv):
            files.append(argv[index + 1])
    return files


if __name__ == "__main__":
    sys.exit(main())
