"""The node's ``input/packets``: raw Velodyne packets decoded inside the node (no PointCloud2
crosses the middleware between the driver and the clusterer).

Subscribed only when the ``sensor_model`` parameter names a model; the messages are read raw and
decoded from their CDR bytes (:class:`~...frame.packets.PacketSweeps`; on the GPU with the CUDA
backend), in arrival order on the executor thread: a sweep may span messages, so none may be
skipped. Each completed sweep is handed to the node like a received cloud.

At start-up the decoder settings and the calibration are checked (one line, exit 2): settings
that keep no return, a calibration file that is not a regular file, too large, with a value out
of its range, or not the model's. At run time nothing a message holds stops the node: a message
that is not a scan, one over the decoder's budget or of another model (refused before any
work), and any other failure of its decoding each go to ``on_error`` (the node's throttled
warning and its ``/diagnostics`` count), and the next message is taken as usual.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.config import ConfigError
from ...frame.packets import PacketSweeps, SweepCloud
from ...pointcloud_io.velodyne import CalibrationError, DecoderSettings, sensor_model
from ...pointcloud_io.velodyne.sensors import DecoderSettingsError
from ...pointcloud_io.velodyne.sweeps import PacketsRefusedError
from ..messages import BUILD_MESSAGE_PACKAGES
from ..parameters.velodyne_options import (
    DEFAULT_CALIBRATION,
    SETTING_PARAMETERS,
    shipped_calibration,
)

PACKETS_TOPIC = "input/packets"


#: The node parameter that sets each ``DecoderSettings`` field.
def packet_sweeps(values: dict[str, Any], backend: Any = None) -> PacketSweeps | None:
    """The decoder the node's parameter ``values`` ask for, on ``backend``'s device (None: NumPy),
    or None without ``sensor_model``.

    Raises:
        ConfigError: an unknown model, bad decoder settings, or a missing or bad calibration.
    """
    model = values["sensor_model"]
    if not model:
        return None
    try:
        model = sensor_model(model, "sensor_model").name
    except ValueError as error:
        raise ConfigError(str(error)) from None
    calibration = values["calibration_file"] or shipped_calibration(
        DEFAULT_CALIBRATION.get(model, "")
    )
    if not calibration:
        raise ConfigError(
            f"sensor_model {model} needs calibration_file (nebula's YAML; no shipped default "
            "for this model)"
        )
    try:
        given = {field: values[name] for field, name in SETTING_PARAMETERS.items()}
        settings = DecoderSettings(**{**given, "model": model})
    except DecoderSettingsError as error:
        raise ConfigError(f"packet input: {error.naming(SETTING_PARAMETERS)}") from None
    try:
        return PacketSweeps(calibration, settings, backend)
    except (ValueError, OSError, CalibrationError) as error:
        raise ConfigError(f"packet input: {error}") from None


def subscribe_packets(
    node: Any,
    sweeps: PacketSweeps,
    qos: Any,
    on_sweep: Callable[[SweepCloud, float], None],
    on_error: Callable[[str, str], None],
    clock: Callable[[], float],
) -> Any:
    """Subscribe ``node`` to :data:`PACKETS_TOPIC`; each completed sweep goes to ``on_sweep``
    with the arrival time (``clock()``), and why a message gave none to ``on_error`` as a kind
    (the ``/diagnostics`` count it goes to) and one line: ``malformed`` (not a scan), the
    decoder's refusal (``PacketsRefusedError.kind``), or ``decode_error`` for any other failure
    (never raised: the node keeps running).

    Raises:
        ConfigError: ``velodyne_msgs`` is not installed.
    """
    scan_type = velodyne_scan_type(sweeps.settings.model)

    def receive(cdr: bytes) -> None:
        received = clock()
        try:
            completed = sweeps.feed(cdr)
        except PacketsRefusedError as error:
            on_error(error.kind, f"VelodyneScan refused ({error.kind}): {error}")
            return
        except ValueError as error:
            on_error("malformed", f"bad VelodyneScan: {error}")
            return
        except Exception as error:  # one message never stops the node
            reason = " ".join(str(error).split()) or "no message"
            on_error("decode_error", f"VelodyneScan not decoded: {type(error).__name__}: {reason}")
            return
        for sweep in completed:
            on_sweep(sweep, received)

    return node.create_subscription(scan_type, PACKETS_TOPIC, receive, qos, raw=True)


def velodyne_scan_type(model: str) -> type:
    """``velodyne_msgs/msg/VelodyneScan``, the message of sensor ``model``'s packets.

    Raises:
        ConfigError: ``velodyne_msgs`` is not installed (the line says how to build it).
    """
    try:
        from velodyne_msgs.msg import VelodyneScan
    except ImportError as error:
        raise ConfigError(
            f"sensor_model {model} needs the velodyne_msgs package ({error}): "
            "install a ROS 2 distribution's ros-<distro>-velodyne-msgs, or "
            + BUILD_MESSAGE_PACKAGES
        ) from None
    return VelodyneScan
