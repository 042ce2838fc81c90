"""Hesai packets straight into the node, as a user runs it: ``replay`` (its own process) plays
nebula's PandarXT32 bag as recorded (``--packets raw``, ``pandar_msgs/msg/PandarScan``) onto the
node's ``input/packets``; the node (its own process, ``sensor_model:=PandarXT32`` with the bag's
settings of ../shared/data/nebula_hesai/README.md, the shipped calibration) decodes them itself,
and every labelled cloud it publishes must hold exactly the sweep the library's Hesai decoder
cuts from those packets, with the library's cluster labels of it. Plus the node's start-up
checks of a Hesai model's parameters, and replay's decoding of the bag (``--sensor-model``).
Needs ``pandar_msgs``: built from ``../shared/msgs`` (skips with the reason without it).
"""

from __future__ import annotations

import sys
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from gpu_euclidean_cluster.core.config import ConfigError  # noqa: E402
from gpu_euclidean_cluster.frame.packets import HesaiPacketSweeps  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io import hesai  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.hesai.bags import PANDAR_SCAN  # noqa: E402
from gpu_euclidean_cluster.ros.node.packet_input import (  # noqa: E402
    packet_sweeps,
    subscribe_packets,
)
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.velodyne_options import VelodyneOptions  # noqa: E402
from gpu_euclidean_cluster.ros.replay.packet_player import PacketStream  # noqa: E402

from ..._ros2_tools import BIN, Background, private_domain, user_env  # noqa: E402
from .test_packet_input import (  # noqa: E402
    LABELED,
    MSGS_VARIABLES,
    NAMESPACE,
    LabeledRecorder,
    assert_every_sweep_accounted,
    assert_labelled_sweeps,
    msgs_env,  # noqa: F401 (the fixture)
    wait_for_output_matched,
    wait_for_sweeps,
)

pytestmark = [pytest.mark.ros, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
XT32_BAG = Path("nebula_hesai", "xt32", "1673400677802009732")
#: nebula's settings of the XT32 bag (the README's table)
XT32_SETTINGS = hesai.DecoderSettings(
    model="PandarXT32", return_mode="Dual", min_range=0.05, max_range=120.0
)
PACKETS_TOPIC = f"{NAMESPACE}/input/packets"
DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}


@pytest.fixture(scope="module")
def xt32_bag(lidar_data_dir: Path) -> Path:
    bag = lidar_data_dir / XT32_BAG
    if not bag.is_dir():
        pytest.skip(f"{bag} is absent (nebula's Hesai bags)")
    return bag


def expected_sweeps(bag: Path) -> dict[int, np.ndarray]:
    """Stamp (ns) -> points of every sweep the library's Hesai decoder cuts from the bag."""
    calibration = hesai.load_for_model(REPO / "config/hesai/PandarXT32.csv", XT32_SETTINGS.sensor)
    decoder = hesai.SweepDecoder(calibration, XT32_SETTINGS)
    return {
        sweep.stamp_ns: sweep.points
        for scan in hesai.read_pandar_scans(bag)
        for sweep in decoder.feed(scan.packets, scan.sizes)
    }


def test_a_hesai_model_gives_the_hesai_decoder_with_the_node_parameters():
    values = {**DEFAULTS, "sensor_model": "pandarxt32", "sensor_min_range": 0.05}
    values["sensor_max_range"] = 120.0
    sweeps = packet_sweeps(values)
    assert isinstance(sweeps, HesaiPacketSweeps)
    assert sweeps.settings == XT32_SETTINGS


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"sensor_model": "Pandar99"}, "'Pandar99' .*, or a Hesai model: Pandar40P"),
        ({"return_mode": "SingleFirst"}, "return_mode 'SingleFirst' is not one of"),
        ({"cut_angle": 10.0, "cloud_max_angle": 5}, "cut_angle 10.0 is outside the field"),
        ({"calibration_file": str(REPO / "config/hesai/Pandar64.csv")}, "PandarXT32"),
        ({"sensor_model": "Pandar40M"}, "needs calibration_file"),
    ],
)
def test_bad_hesai_settings_stop_the_start_up_in_one_line(changes, message):
    values = {**DEFAULTS, "sensor_model": "PandarXT32", **changes}
    with pytest.raises(ConfigError, match=message) as refused:
        packet_sweeps(values)
    assert "\n" not in str(refused.value)


class _Node:
    """Keeps the callback a subscription would call, and the message type."""

    def create_subscription(self, kind: type, topic: str, callback, qos, raw: bool) -> object:
        assert raw and topic == "input/packets"
        self.kind, self.callback = kind, callback
        return object()


def test_refused_pandar_scans_are_one_line_each_and_the_next_is_decoded(monkeypatch, xt32_bag):
    """The node's callback: an empty PandarScan and a message that is not one are each one
    line and one count of their kind; the bag's scans then give the library's sweeps."""
    package = types.ModuleType("pandar_msgs.msg")
    package.PandarScan = type("PandarScan", (), {})  # only passed on to create_subscription
    monkeypatch.setitem(sys.modules, "pandar_msgs", types.ModuleType("pandar_msgs"))
    monkeypatch.setitem(sys.modules, "pandar_msgs.msg", package)
    values = {**DEFAULTS, "sensor_model": "PandarXT32", "sensor_min_range": 0.05}
    sweeps = packet_sweeps({**values, "sensor_max_range": 120.0})
    node, errors, completed = _Node(), [], []
    subscribe_packets(
        node, sweeps, None, lambda s, _: completed.append(s), lambda *e: errors.append(e), float
    )
    assert node.kind is package.PandarScan
    scans = list(hesai.read_pandar_scans(xt32_bag))
    none = np.zeros(0, np.int64)
    empty = replace(scans[0], packets=np.zeros((0, 1500), np.uint8), sizes=none,
                    stamp_sec=none, stamp_nanosec=none)  # fmt: skip
    node.callback(hesai.scan_to_cdr(empty))
    node.callback(b"\x00\x01\x00\x00 not a scan")
    assert [kind for kind, _ in errors] == ["no_packets", "malformed"]
    assert errors[0][1].startswith("PandarScan refused (no_packets): a PandarScan without")
    assert errors[1][1].startswith("bad PandarScan: ")
    assert all("\n" not in line for _, line in errors)
    for scan in scans:
        node.callback(hesai.scan_to_cdr(scan))
    assert [s.stamp_ns for s in completed] == list(expected_sweeps(xt32_bag))


def test_replay_decodes_pandar_scans_as_the_library(xt32_bag):
    options = VelodyneOptions(sensor_model="PandarXT32")  # nebula's XT32 defaults: the bag's
    decoding = options.resolve()
    assert decoding.settings == XT32_SETTINGS
    assert decoding.calibration_file == REPO / "config" / "hesai" / "PandarXT32.csv"
    stream = PacketStream(xt32_bag, ["/pandar_packets"], True, decoding, print, PANDAR_SCAN)
    messages = list(stream.messages(None, None))
    sweeps = {m.sweep.stamp_ns: m.sweep.points for m in messages if hasattr(m, "sweep")}
    expected = expected_sweeps(xt32_bag)
    assert sweeps.keys() == expected.keys()
    for stamp, points in expected.items():
        assert sweeps[stamp].tobytes() == points.tobytes()
    raw = [m for m in messages if not hasattr(m, "sweep")]
    assert len(raw) == len(list(hesai.read_pandar_scans(xt32_bag)))


def test_velodyne_options_are_refused_with_a_hesai_model():
    with pytest.raises(ValueError, match="--scan-phase apply to Velodyne models only"):
        VelodyneOptions(sensor_model="PandarXT32", scan_phase=10.0).resolve()


def test_replayed_hesai_packets_into_the_node_give_the_librarys_sweeps_and_clusters(
    msgs_env,  # noqa: F811
    xt32_bag,
    tmp_path,
):
    expected = expected_sweeps(xt32_bag)
    assert len(expected) >= 2
    settings = XT32_SETTINGS
    params = ["-p", "backend:=cpu", "-p", "qos_reliability:=reliable", "-p", "qos_depth:=100"]
    params += [arg for name, value in [
        ("sensor_model", "PandarXT32"), ("return_mode", settings.return_mode),
        ("sensor_min_range", settings.min_range), ("sensor_max_range", settings.max_range),
    ] for arg in ("-p", f"{name}:={value}")]  # fmt: skip
    with private_domain() as domain:
        env = user_env(domain)
        env.update({k: msgs_env[k] for k in MSGS_VARIABLES if k in msgs_env})
        node = Background(
            [str(BIN / "euclidean_cluster_node"), "--ros-args", "-r", f"__ns:={NAMESPACE}",
             *params],
            env, tmp_path / "node.log",
        )  # fmt: skip
        recorder = LabeledRecorder(domain, LABELED)
        try:
            wait_for_output_matched(recorder)  # the node publishes while it has a subscriber
            replay = Background(
                [str(BIN / "replay"), str(xt32_bag), "--packets", "raw", "--rate", "0.5",
                 "--qos-depth", "100", "--wait-for-subscribers", "60",
                 "--remap", f"/pandar_packets:={PACKETS_TOPIC}", "--quiet"],
                env, tmp_path / "replay.log",
            )  # fmt: skip
            wait_for_sweeps(recorder, expected)
            replay.close()
            status = node.process.poll()
        finally:
            recorder.close()
            node.stop()
    log = (tmp_path / "node.log").read_text()
    replay_log = (tmp_path / "replay.log").read_text()
    assert status is None and "Traceback" not in log, log
    assert "sensor_model 'PandarXT32'" in log, log
    assert_every_sweep_accounted(recorder, expected, f"{log}\n{replay_log}")
    assert "/pandar_packets" in replay_log, replay_log
    (frame_id,) = {scan.frame_id for scan in hesai.read_pandar_scans(xt32_bag)}
    assert {m.header.frame_id for m in recorder.clouds} == {frame_id}
    assert_labelled_sweeps(recorder.clouds, expected, ("x", "y", "z", "time_stamp", "channel"))
