"""QoS choices shared by the node, the replay tool and the benchmark driver: one spelling each."""

from __future__ import annotations

from typing import Any

from ..core.config import ConfigError

#: Reliability policies by the name every front end uses (node parameter, CLI options).
RELIABILITIES: tuple[str, ...] = ("best_effort", "reliable")
#: The node's input default: best effort receives from best-effort and reliable publishers alike.
DEFAULT_RELIABILITY = "best_effort"


def reliability_policy(name: str) -> Any:
    """The rclpy ``ReliabilityPolicy`` called ``name`` (one of :data:`RELIABILITIES`)."""
    from rclpy.qos import ReliabilityPolicy

    if name not in RELIABILITIES:
        raise ValueError(f"unknown QoS reliability {name!r}; choose {' or '.join(RELIABILITIES)}")
    return ReliabilityPolicy.BEST_EFFORT if name == "best_effort" else ReliabilityPolicy.RELIABLE


def input_qos(depth: int, reliability: str) -> Any:
    """The node's input QoS profile: the last ``depth`` messages, ``reliability`` by name.

    Raises:
        ConfigError: ``reliability`` is not one of :data:`RELIABILITIES`.
    """
    from rclpy.qos import HistoryPolicy, QoSProfile

    try:
        policy = reliability_policy(reliability)
    except ValueError as error:
        raise ConfigError(f"qos_reliability: {error}") from None
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=policy)
