"""The node's ``input/packets`` callback (``ros/node/packet_input.py``) never lets a message stop
the node: a message that is not a scan, one the decoder refuses (over its budget, another
model's packets, a sweep cut at the budget) and any other failure of its decoding (a MemoryError,
say) each become one line for the node's throttled warning and ``/diagnostics`` count, and the
next message is decoded as usual. ROS-free: the subscription is a stand-in that keeps the
callback; the node as its own process: ``test_packet_input.py``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

from gpu_euclidean_cluster.frame.packets import PacketSweeps, SweepCloud
from gpu_euclidean_cluster.ros.node.packet_input import packet_sweeps, subscribe_packets
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS

from ..._velodyne_helpers import hostile_messages, rotating_packets, scan_message


class _Node:
    """Keeps the callback a subscription would call."""

    callback: Callable[[bytes], None]

    def create_subscription(self, kind: Any, topic: str, callback: Any, qos: Any, raw: bool):
        assert raw and topic == "input/packets"
        self.callback = callback
        return object()


def _subscribed(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[PacketSweeps, Callable[[bytes], None], list[str], list[SweepCloud], list[str]]:
    """A VLP-16 packet input on the CPU: its decoder, the callback, and what reached
    ``on_error`` (its lines, then its kinds) and ``on_sweep``."""
    package = types.ModuleType("velodyne_msgs.msg")
    package.VelodyneScan = object  # the type is only passed on to create_subscription
    monkeypatch.setitem(sys.modules, "velodyne_msgs", types.ModuleType("velodyne_msgs"))
    monkeypatch.setitem(sys.modules, "velodyne_msgs.msg", package)
    values = {spec.name: spec.default for spec in PARAMETERS}
    sweeps = packet_sweeps({**values, "sensor_model": "VLP16", "return_mode": "SingleStrongest"})
    node, errors, completed = _Node(), [], []
    kinds: list[str] = []

    def on_error(kind: str, reason: str) -> None:
        kinds.append(kind)
        errors.append(reason)

    subscribe_packets(node, sweeps, None, lambda s, _: completed.append(s), on_error, float)
    return sweeps, node.callback, errors, completed, kinds


def _turning(first_s: float) -> list[bytes]:
    """Three messages of a turning VLP-16, 60 packets each (75 a turn: sweeps complete)."""
    packets = rotating_packets(180, product=0x22)
    return [scan_message(packets[60 * i : 60 * (i + 1)], first_s + i) for i in range(3)]


def test_hostile_messages_are_each_one_line_and_the_next_is_decoded(monkeypatch):
    _, receive, errors, completed, counted = _subscribed(monkeypatch)
    hostile = hostile_messages(603, 0x22, 0x28)
    for _, message in hostile:
        receive(message)
    kinds = [kind for kind, _ in hostile if kind]
    assert [e.split(")")[0] for e in errors] == [f"VelodyneScan refused ({k}" for k in kinds]
    assert errors[0] == (
        "VelodyneScan refused (message_over_budget): 604 packets at once, over the VLP16 budget "
        "of 603 (2 rotations at 300 RPM, dual return): not decoded"
    )
    receive(b"\x00\x01\x00\x00 not a scan")
    assert errors[-1].startswith("bad VelodyneScan: ")
    assert counted == [*kinds, "malformed"]  # each refusal counted under its own kind
    assert all("\n" not in e for e in errors) and completed == []
    for message in _turning(50.0):
        receive(message)
    assert len(completed) == 2  # the cut sweep left nothing behind: a fresh decoder's sweeps


def test_any_failure_of_the_decoding_is_one_line_not_the_end(monkeypatch):
    sweeps, receive, errors, completed, counted = _subscribed(monkeypatch)
    feed = sweeps.feed

    def out_of_memory(cdr: bytes) -> list[SweepCloud]:
        raise MemoryError

    monkeypatch.setattr(sweeps, "feed", out_of_memory)
    receive(_turning(40.0)[0])
    assert errors == ["VelodyneScan not decoded: MemoryError: no message"]
    assert counted == ["decode_error"]
    monkeypatch.setattr(sweeps, "feed", feed)
    for message in _turning(50.0):
        receive(message)
    assert len(errors) == 1 and len(completed) == 2
