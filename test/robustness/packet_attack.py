"""The hostile-input suite's Velodyne cases: the node's packet input at start-up and
under hostile ``VelodyneScan`` messages.

- ``node`` group, start-up (:func:`start_up_cases`): calibration files the attack broke (a value
  of 1e39, 1e400, ``max_intensity`` 1e30, ``laser_id`` 1e8, ``rot_correction`` 1e-999999999,
  ``num_lasers`` 0, 8 and -5, every ``laser_id`` 0, ``distance_resolution`` 0, ``/dev/zero``, a
  FIFO, a VLS-128 and a VLP-32C file on a VLP-16) and decoder settings that keep no return
  (``sensor_min_range`` >= ``sensor_max_range``, ``cloud_min_angle`` == ``cloud_max_angle``):
  each one line and exit 2, at once.
- ``packets`` group, at run time (:func:`packet_cases`): this module run as a driver, ``python -m
  test.robustness.packet_attack MESSAGES ...``, starts the node (VLP-32C, its own process),
  publishes the hostile messages of the file ``MESSAGES`` and then a turning sensor's, and exits
  0 when the node refused each hostile kind (its log and ``/diagnostics``), clustered the turning
  sensor's sweeps afterwards, and ended on SIGINT with status 0; else 1 with the reason and the
  node's log. The messages: one of 100 000 packets (121 MB) whose azimuth never wraps (it needed
  more than 4 GB and ended the node), a sensor that never turns for 58 800 packets (the node grew
  without bound), and a VLP-16's packets on the VLP-32C node (decoded as garbage). The case's
  peak RSS (the driver's and the node's, whichever is larger) is judged against 20 x the
  messages' file + the allowance. Needs ``velodyne_msgs`` (``../shared/msgs/build.sh``); without
  it the group is not run, and says so.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .._velodyne_helpers import rotating_packets, scan_message, stuck_packets

#: The node's packet model in the run-time cases, and its product id.
MODEL, PRODUCT, OTHER_PRODUCT = "VLP32", 0x28, 0x22
#: Seconds the driver waits for the node to come up, for each step, and for it to stop.
UP_TIMEOUT_S, STEP_TIMEOUT_S = 40.0, 30.0
#: The variables a process using the built message packages needs (their ``setup.bash``).
MSGS_VARIABLES = ("PYTHONPATH", "LD_LIBRARY_PATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH")
SHIPPED = Path(__file__).resolve().parents[2] / "config" / "velodyne"
PROG = "python -m test.robustness.packet_attack"


# --- the messages file ----------------------------------------------------------------------


def write_messages(path: Path, messages: Iterator[bytes]) -> None:
    """Serialized messages, each after its 8-byte little-endian length."""
    with open(path, "wb") as file:
        for message in messages:
            file.write(struct.pack("<Q", len(message)))
            file.write(message)


def read_messages(path: Path) -> Iterator[bytes]:
    """The messages :func:`write_messages` wrote, one at a time."""
    with open(path, "rb") as file:
        while header := file.read(8):
            yield file.read(struct.unpack("<Q", header)[0])


def huge_message() -> Iterator[bytes]:
    """One VelodyneScan of 100 000 packets (121 MB) of a sensor whose azimuth never moves."""
    packets = np.tile(stuck_packets(1, product=PRODUCT), (100_000, 1))
    yield scan_message(packets, 10.0)


def endless_sweep(messages: int = 294, size: int = 200) -> Iterator[bytes]:
    """A sensor that never turns: ``messages`` messages of ``size`` packets (58 800 in all). A
    VLP-32C's sweep is cut at every seventh (1 400 packets would pass its budget of 1 206), the
    294th too: the turning sensor after them opens a sweep afresh. (Had the stream stopped with
    a sweep of 1 200 stuck packets in progress, the turning sensor's first packet would complete
    it: a sweep of 460 000 points at 415 places, which takes the CPU backend minutes to
    cluster.)"""
    packets = stuck_packets(size, product=PRODUCT)
    for index in range(messages):
        yield scan_message(packets, 10.0 + index)


def other_model(messages: int = 10) -> Iterator[bytes]:
    """A turning VLP-16's packets (its product id) on the VLP-32C node."""
    packets = rotating_packets(75 * messages, product=OTHER_PRODUCT)
    for index in range(messages):
        yield scan_message(packets[75 * index : 75 * (index + 1)], 10.0 + index)


def turning_messages(first_s: float, turns: int = 4) -> list[bytes]:
    """A turning VLP-32C, one turn (75 packets) a message: every message after the first
    completes a sweep."""
    packets = rotating_packets(75 * turns, product=PRODUCT)
    return [scan_message(packets[75 * i : 75 * (i + 1)], first_s + i) for i in range(turns)]


# --- the cases ------------------------------------------------------------------------------


def start_up_cases(folder: Path) -> list[tuple[str, list[str], str]]:
    """``(name, node arguments, refusal)`` of each start-up input the attack broke, the files
    written into ``folder``."""
    text = (SHIPPED / "VLP16.yaml").read_text()
    broken = {
        "a value of 1e39": ("dist_correction: 0.0", "dist_correction: 1e39", "is outside"),
        "a value of 1e400": ("dist_correction: 0.0", "dist_correction: 1e400", "exponent"),
        "max_intensity 1e30": (
            "focal_slope: 0.0,",
            "focal_slope: 0.0, max_intensity: 1e30,",
            "max_intensity 1e30 is outside [0, 255]",
        ),
        "laser_id 1e8": ("laser_id: 0,", "laser_id: 100000000,", "laser_id 100000000 is outside"),
        "rot_correction 1e-999999999": (
            "rot_correction: 0.0",
            "rot_correction: 1e-999999999",
            "has an exponent beyond",
        ),
        "num_lasers 0": ("num_lasers: 16", "num_lasers: 0", "num_lasers 0 is outside"),
        "num_lasers -5": ("num_lasers: 16", "num_lasers: -5", "num_lasers -5 is outside"),
        "num_lasers 8": ("num_lasers: 16", "num_lasers: 8", "num_lasers 8, but a VLP16 has 16"),
        "distance_resolution 0": (
            "distance_resolution: 0.002",
            "distance_resolution: 0",
            "distance_resolution 0 is outside (0, 1]",
        ),
    }
    cases = []
    for name, (old, new, refusal) in broken.items():
        path = folder / f"calibration {name}.yaml".replace(" ", "_")
        path.write_text(text.replace(old, new, 1))
        cases.append((f"calibration {name}", [f"calibration_file:={path}"], refusal))
    zeros = folder / "calibration_every_laser_id_0.yaml"
    zeros.write_text(re.sub(r"laser_id: \d+", "laser_id: 0", text))
    fifo = folder / "calibration_fifo.yaml"
    if not fifo.exists():
        os.mkfifo(fifo)
    cases += [
        ("calibration every laser_id 0", [f"calibration_file:={zeros}"], "laser 1: laser_id 0"),
        ("calibration /dev/zero", ["calibration_file:=/dev/zero"], "not a regular file"),
        ("calibration a FIFO", [f"calibration_file:={fifo}"], "not a regular file"),
        (
            "a VLS-128 calibration",
            [f"calibration_file:={SHIPPED / 'VLS128.yaml'}"],
            "num_lasers 128",
        ),
        ("a VLP-32C calibration", [f"calibration_file:={SHIPPED / 'VLP32.yaml'}"], "num_lasers 32"),
        (
            "sensor_min_range >= sensor_max_range",
            ["sensor_min_range:=50.0", "sensor_max_range:=5.0"],
            "sensor_min_range 50.0 is not below sensor_max_range 5.0",
        ),
        (
            "cloud_min_angle == cloud_max_angle",
            ["cloud_min_angle:=90", "cloud_max_angle:=90"],
            "cloud_min_angle 90 equals cloud_max_angle 90",
        ),
    ]
    return [
        (f"packet input: {name}", [a for p in ["sensor_model:=VLP16", *args] for a in ("-p", p)], r)
        for name, args, r in cases
    ]


def packet_cases(
    folder: Path, namespace: str, backend: str, not_run: list[str]
) -> list[tuple[str, str, tuple[str, ...], Path, str]]:
    """``(name, what, command, messages file, expected kind)`` of each run-time case, the files
    written into ``folder``; none, and why in ``not_run``, without ``velodyne_msgs``."""
    from .._perception_msgs import perception_msgs_env

    env, reason = perception_msgs_env()
    if env is None:
        not_run.append(f"packets: {reason}")
        return []
    settings = [f"{k}={env[k]}" for k in MSGS_VARIABLES if k in env]
    streams = [
        ("a 100 000-packet VelodyneScan (121 MB) whose azimuth never wraps", huge_message(),
         "message_over_budget"),
        ("a sensor that never turns: 58 800 packets, 200 a message", endless_sweep(),
         "sweep_over_budget"),
        ("a VLP-16's packets on a VLP32 node", other_model(), "other_model"),
    ]  # fmt: skip
    cases = []
    for index, (what, messages, kind) in enumerate(streams):
        path = folder / f"packets_{kind}.bin"
        write_messages(path, messages)
        command = (
            "env", *settings, sys.executable, "-m", "test.robustness.packet_attack", str(path),
            "--namespace", f"{namespace}/packets_{index}", "--backend", backend, "--expect", kind,
        )  # fmt: skip
        cases.append((f"node fed {kind}", what, command, path, kind))
    return cases


# --- the driver -------------------------------------------------------------------------------


class _Driver:
    """The driver's rclpy side: publishes scans to the node, records its clouds and reports."""

    def __init__(self, namespace: str, expect: Sequence[str]) -> None:
        import threading

        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import PointCloud2
        from velodyne_msgs.msg import VelodyneScan

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("packet_attack", namespace=namespace, context=self.context)
        qos = QoSProfile(depth=2, reliability=ReliabilityPolicy.RELIABLE)
        self.publisher = self.node.create_publisher(VelodyneScan, "input/packets", qos)
        self.clouds = 0
        #: the refusals of the expected kinds the node's /diagnostics counted (per kind:
        #: ``frames_rejected_<kind>``)
        self.expect = tuple(expect)
        self.rejected = 0
        self.node.create_subscription(PointCloud2, "output/labeled_points", self._cloud, 10)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._report, 10)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _cloud(self, message: object) -> None:
        self.clouds += 1

    def _report(self, message: object) -> None:
        values = {kv.key: kv.value for kv in message.status[0].values}  # type: ignore[attr-defined]
        counted = sum(int(values.get(f"frames_rejected_{kind}", 0)) for kind in self.expect)
        self.rejected = max(self.rejected, counted)

    def publish(self, raw: bytes) -> None:
        import rclpy

        self.publisher.publish(raw)
        self.publisher.wait_for_all_acked(rclpy.duration.Duration(seconds=STEP_TIMEOUT_S))

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()


def _until(condition: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.1)
    return bool(condition())  # type: ignore[operator]


def drive(messages: Path, namespace: str, backend: str, expect: Sequence[str]) -> str | None:
    """Run the node, feed it ``messages`` and a turning sensor; None when it held (the summary is
    printed), else why not."""
    node_script = Path(sys.executable).parent / "euclidean_cluster_node"
    command = [str(node_script)] if node_script.exists() else [
        sys.executable, "-m", "gpu_euclidean_cluster.ros.node.node"
    ]  # fmt: skip
    command += [
        "--ros-args", "-r", f"__ns:={namespace}", "-p", f"backend:={backend}",
        "-p", f"sensor_model:={MODEL}", "-p", "qos_reliability:=reliable",
        "-p", "qos_depth:=1000",  # every message reaches the decoder, however busy the node
    ]  # fmt: skip
    with tempfile.TemporaryFile() as log:
        node = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

        def output() -> str:
            log.seek(0)
            return log.read().decode("utf-8", "replace")

        driver = _Driver(namespace, expect)
        try:
            why = _feed(driver, node, messages, expect, output)
        finally:
            driver.close()
            if node.poll() is None:
                node.send_signal(signal.SIGINT)
                try:
                    node.wait(STEP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    node.kill()
                    node.wait()
        status = node.returncode
        text = output()
    if why is None and status != 0:
        why = f"the node ended with status {status} on SIGINT"
    if why is None and "Traceback" in text:
        why = "the node printed a traceback"
    if why is not None:
        return f"{why}; the node's log:\n{text[-4000:]}"
    print(
        f"node ran on: refused {', '.join(expect)} ({driver.rejected} counted in /diagnostics), "
        f"{driver.clouds} sweeps clustered after, exit {status}"
    )
    return None


def _feed(driver: _Driver, node: subprocess.Popen, messages: Path, expect, output) -> str | None:
    if not _until(lambda: driver.publisher.get_subscription_count() > 0, UP_TIMEOUT_S):
        return f"the node did not subscribe within {UP_TIMEOUT_S:g} s"
    time.sleep(0.5)  # discovery settles on the node's side too
    for raw in read_messages(messages):
        driver.publish(raw)
        if node.poll() is not None:
            return f"the node ended (status {node.returncode}) under the hostile messages"
    missing = [k for k in expect if f"VelodyneScan refused ({k})" not in output()]
    if missing and not _until(
        lambda: all(f"VelodyneScan refused ({k})" in output() for k in expect), STEP_TIMEOUT_S
    ):
        return f"no warning of {', '.join(missing)}"
    if not _until(lambda: driver.rejected >= 1, STEP_TIMEOUT_S):
        return "/diagnostics counted no refusal"
    for raw in turning_messages(1000.0):
        driver.publish(raw)
    if not _until(lambda: driver.clouds >= 2, STEP_TIMEOUT_S):
        return f"{driver.clouds} sweeps clustered after the hostile messages, not 2 or more"
    if node.poll() is not None:
        return f"the node ended (status {node.returncode})"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("messages", type=Path, help="the hostile messages (write_messages)")
    parser.add_argument("--namespace", required=True, help="the node's namespace")
    parser.add_argument("--backend", default="cpu", help="the node's backend")
    parser.add_argument("--expect", action="append", required=True, help="a refusal kind")
    args = parser.parse_args(argv)
    why = drive(args.messages, args.namespace, args.backend, args.expect)
    if why is not None:
        print(f"{PROG}: {why}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
