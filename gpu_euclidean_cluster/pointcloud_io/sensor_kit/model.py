"""The sensor kit as the program holds it: frozen dataclasses, checked when the file is loaded
(:mod:`.loading`). The YAML format is ``docs/sensor_kit.md``'s; its JSON Schema
``config/sensor_kit.schema.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..velodyne.sensors import DecoderSettings
from .poses import FrameJoint

#: The kinds of sensor input.
PACKETS = "packets"
POINTS = "points"
#: Where poses come from.
AUTOWARE_CALIBRATION = "autoware_calibration"
TF_STATIC = "tf_static"
INLINE = "inline"
POSE_SOURCES = (AUTOWARE_CALIBRATION, TF_STATIC, INLINE)
#: How a crop box's bounds were given.
BOUNDS = "bounds"
VEHICLE_INFO = "vehicle_info"
MIRROR = "mirror"


@dataclass(frozen=True)
class CropBox:
    """One of Autoware's crop boxes (``CropBoxFilterComponent``), named.

    Attributes:
        name: its name in the kit (``self``, ``mirror``, ...).
        minimum, maximum: ``(x, y, z)`` bounds in metres, float64 as given or derived (the filter
            rounds them to float32: ``core/vehicle_frame.py``); ``minimum < maximum`` on each
            axis; either may be infinite.
        negative: True removes the points inside (Autoware's ``negative: true``, the self and
            mirror boxes), False keeps only them.
        in_sensor_frame: False: the box is in the kit's base frame (Autoware's ``input_frame:
            base_link``); True: in each sensor's own frame.
        derived_from: ``bounds`` (given), ``vehicle_info`` (the self box) or ``mirror``.
    """

    name: str
    minimum: tuple[float, float, float]
    maximum: tuple[float, float, float]
    negative: bool
    in_sensor_frame: bool = False
    derived_from: str = BOUNDS


@dataclass(frozen=True)
class SensorInput:
    """Where a sensor's sweeps come from.

    Attributes:
        kind: ``packets`` (``velodyne_msgs/msg/VelodyneScan``, decoded here) or ``points``
            (``sensor_msgs/msg/PointCloud2``).
        topic: the topic (in a bag or live).
        decoder: packets only: nebula's decoder settings (model, return mode, ranges, scan phase,
            cloud angles; ``frame_id`` the sensor's frame); None for points.
        calibration: packets only: nebula's calibration file, as given: a path (relative to the
            kit file's folder) or a file name shipped in ``config/velodyne``; None: the model's
            shipped file.
    """

    kind: str
    topic: str
    decoder: DecoderSettings | None = None
    calibration: str | None = None


@dataclass(frozen=True)
class Sensor:
    """One LiDAR of the kit.

    Attributes:
        name: its name in the kit (``top``).
        frame: the frame its points are in (``velodyne_top``).
        input: where its sweeps come from.
        crop_boxes: the boxes applied to its points, in the kit's order.
        description: the xacro macro whose ``<frame>_base_link -> <frame>`` joint is added to
            the poses (``VLS-128``; :data:`~.autoware.SENSOR_DESCRIPTIONS`), or None.
    """

    name: str
    frame: str
    input: SensorInput
    crop_boxes: tuple[CropBox, ...] = ()
    description: str | None = None


@dataclass(frozen=True)
class PoseSource:
    """Where the sensors' poses come from.

    Attributes:
        kind: ``autoware_calibration`` (Autoware's calibration files), ``tf_static`` (a bag's
            or the live ``/tf_static``) or ``inline`` (given in the kit).
        joints: the joints read when the kit was loaded (calibration files, inline poses);
            empty for ``tf_static``.
        files: ``autoware_calibration``: the calibration files, resolved.
        bag: ``tf_static``: the bag to read, or None for the live topic.
        topic: ``tf_static``: the topic (default ``/tf_static``).
    """

    kind: str
    joints: tuple[FrameJoint, ...] = ()
    files: tuple[Path, ...] = ()
    bag: Path | None = None
    topic: str = "/tf_static"


@dataclass(frozen=True)
class SensorKit:
    """A vehicle's LiDARs, their poses' source and their crop boxes.

    Attributes:
        version: the format's version (1).
        name: the kit's name.
        base_frame: the frame the sensors' points are brought into (``base_link``).
        poses: where the poses come from.
        sensors: the LiDARs, in the kit's order.
        source: the file it was loaded from, or None.
        concatenation: how the sensors' sweeps are joined: Autoware's
            ``concatenate_and_time_sync_node`` parameters as the kit gives them, ``inputs``
            (sensor names) in place of ``input_topics``, as ``(name, value)`` pairs (checked by
            the frame layer, ``frame/time_sync.py``); empty: Autoware's defaults for these
            sensors.
    """

    version: int
    name: str
    base_frame: str
    poses: PoseSource
    sensors: tuple[Sensor, ...]
    source: Path | None = None
    concatenation: tuple[tuple[str, object], ...] = ()

    def sensor(self, name: str) -> Sensor:
        """The sensor called ``name`` (KeyError naming the known ones)."""
        for sensor in self.sensors:
            if sensor.name == name:
                return sensor
        known = ", ".join(s.name for s in self.sensors)
        raise KeyError(f"no sensor {name!r} in the kit; sensors: {known}")
