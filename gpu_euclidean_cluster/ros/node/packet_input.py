"""The node's ``input/packets``: raw Velodyne or Hesai packets decoded inside the node (no
PointCloud2 crosses the middleware between the driver and the clusterer).

Subscribed only when the ``sensor_model`` parameter names a model; the messages are read raw
and decoded from their CDR bytes, in arrival order on the executor thread: a sweep may span
messages, so none may be skipped. A Velodyne model's are ``velodyne_msgs/msg/VelodyneScan``
(:class:`~...frame.packets.PacketSweeps`; on the GPU with the CUDA backend), a Hesai model's
``pandar_msgs/msg/PandarScan`` (:class:`~...frame.packets.HesaiPacketSweeps`; on the CPU with
every backend for now, the sweep copied to the device by the frame codec). Each completed sweep
is handed to the node like a received cloud.

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
from ...frame.packets import HesaiPacketSweeps, PacketSweeps, SweepCloud
from ...pointcloud_io import hesai
from ...pointcloud_io.velodyne import CalibrationError, DecoderSettings, sensor_model
from ...pointcloud_io.velodyne.sensors import DecoderSettingsError
from ...pointcloud_io.velodyne.sweeps import PacketsRefusedError
from ..messages import BUILD_MESSAGE_PACKAGES
from ..parameters.hesai_options import (
    HESAI_SETTING_PARAMETERS,
    is_hesai_model,
    shipped_hesai_calibration,
)
from ..parameters.velodyne_options import (
    DEFAULT_CALIBRATION,
    SETTING_PARAMETERS,
    shipped_calibration,
)

PACKETS_TOPIC = "input/packets"
#: The packet decoder of either sensor line.
Sweeps = PacketSweeps | HesaiPacketSweeps


def packet_sweeps(values: dict[str, Any], backend: Any = None) -> Sweeps | None:
    """The decoder the node's parameter ``values`` ask for, on ``backend``'s device (None: NumPy;
    a Hesai model's on the CPU whatever the backend), or None without ``sensor_model``.

    Raises:
        ConfigError: an unknown model, bad decoder settings, or a missing or bad calibration.
    """
    model = values["sensor_model"]
    if not model:
        return None
    if is_hesai_model(model):
        return hesai_packet_sweeps(values)
    try:
        model = sensor_model(model, "sensor_model").name
    except ValueError as error:
        hesai_models = ", ".join(hesai.SENSOR_MODELS)
        raise ConfigError(f"{error}, or a Hesai model: {hesai_models}") from None
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


def hesai_packet_sweeps(values: dict[str, Any]) -> HesaiPacketSweeps:
    """The Hesai decoder the node's parameter ``values`` ask for (``sensor_model`` a Hesai name).

    Raises:
        ConfigError: bad decoder settings, or a missing or bad calibration.
    """
    model = hesai.sensor_model(values["sensor_model"], "sensor_model").name
    calibration = values["calibration_file"] or shipped_hesai_calibration(model)
    if not calibration:
        raise ConfigError(
            f"sensor_model {model} needs calibration_file (nebula's CSV; no shipped default "
            "for this model)"
        )
    try:
        given = {field: values[name] for field, name in HESAI_SETTING_PARAMETERS.items()}
        settings = hesai.DecoderSettings(**{**given, "model": model})
    except hesai.DecoderSettingsError as error:
        raise ConfigError(f"packet input: {error.naming(HESAI_SETTING_PARAMETERS)}") from None
    try:
        return HesaiPacketSweeps(calibration, settings)
    except (ValueError, OSError) as error:  # hesai.CalibrationError is a ValueError
        raise ConfigError(f"packet input: {error}") from None


def subscribe_packets(
    node: Any,
    sweeps: Sweeps,
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
        ConfigError: ``velodyne_msgs`` (``pandar_msgs`` for a Hesai model) is not installed.
    """
    if isinstance(sweeps, HesaiPacketSweeps):
        scan_type, name = pandar_scan_type(sweeps.settings.model), "PandarScan"
    else:
        scan_type, name = velodyne_scan_type(sweeps.settings.model), "VelodyneScan"

    def receive(cdr: bytes) -> None:
        received = clock()
        try:
            completed = sweeps.feed(cdr)
        except (PacketsRefusedError, hesai.PacketsRefusedError) as error:
            on_error(error.kind, f"{name} refused ({error.kind}): {error}")
            return
        except ValueError as error:
            on_error("malformed", f"bad {name}: {error}")
            return
        except Exception as error:  # one message never stops the node
            reason = " ".join(str(error).split()) or "no message"
            on_error("decode_error", f"{name} not decoded: {type(error).__name__}: {reason}")
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


def pandar_scan_type(model: str) -> type:
    """``pandar_msgs/msg/PandarScan``, the message of Hesai sensor ``model``'s packets.

    Raises:
        ConfigError: ``pandar_msgs`` is not installed (the line says how to build it).
    """
    try:
        from pandar_msgs.msg import PandarScan
    except ImportError as error:
        raise ConfigError(
            f"sensor_model {model} needs the pandar_msgs package ({error}): install nebula's "
            "pandar_msgs, or " + BUILD_MESSAGE_PACKAGES
        ) from None
    return PandarScan
