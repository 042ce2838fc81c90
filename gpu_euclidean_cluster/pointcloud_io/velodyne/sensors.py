"""Velodyne sensor models and the decoder settings, named and defaulted as in nebula.

nebula has three packet decoders (``vlp16_decoder.cpp``, ``vlp32_decoder.cpp``,
``vls128_decoder.cpp``) and picks one per model: VLP-16 uses the VLP-16 rules, VLP-32C, HDL-32E
and HDL-64E (S2 and S3 alike) the VLP-32 rules, VLS-128 the VLS-128 rules. :data:`SENSOR_MODELS`
maps nebula's model names to those rule sets (the ``family``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum


class Family(str, Enum):
    """The nebula decoder whose rules a model follows."""

    VLP16 = "vlp16"
    VLP32 = "vlp32"
    VLS128 = "vls128"


@dataclass(frozen=True)
class SensorModel:
    """A model: nebula's name, its decoder family and its laser count."""

    name: str
    family: Family
    lasers: int
    description: str


SENSOR_MODELS: dict[str, SensorModel] = {
    model.name: model
    for model in (
        SensorModel("VLP16", Family.VLP16, 16, "Velodyne VLP-16 (Puck)"),
        SensorModel("VLP32", Family.VLP32, 32, "Velodyne VLP-32C (Ultra Puck)"),
        SensorModel("HDL32", Family.VLP32, 32, "Velodyne HDL-32E"),
        SensorModel("HDL64", Family.VLP32, 64, "Velodyne HDL-64E S2/S3 (upper and lower block)"),
        SensorModel("VLS128", Family.VLS128, 128, "Velodyne VLS-128 (Alpha Prime)"),
    )
}

#: nebula's ``return_mode`` strings. The packet's own mode byte (offset 1204: 55 strongest,
#: 56 last, 57 dual) decides how each packet is decoded; the setting only picks the time table,
#: and only nebula's ``ReturnMode::DUAL`` picks the dual one, which ``"Dual"`` never yields
#: (nebula maps it to ``DUAL_ONLY``), so every string decodes with the single-return table.
RETURN_MODES = ("SingleFirst", "SingleStrongest", "SingleLast", "Dual")


def sensor_model(name: str | SensorModel, given_as: str = "") -> SensorModel:
    """The model of one of nebula's names (``VLP16``, ``VLP32``, ``HDL32``, ``HDL64``,
    ``VLS128``) in any case and without surrounding blanks (``vlp16`` is ``VLP16``): the one rule
    of the node's ``sensor_model``, ``replay --sensor-model`` and nebula's parameter files.

    Raises:
        ValueError: not a name of :data:`SENSOR_MODELS`; the message names the model, where it
            was given (``given_as``, when not empty) and the known names.
    """
    if isinstance(name, SensorModel):
        return name
    model = SENSOR_MODELS.get(str(name).strip().upper())
    if model is None:
        where = f" ({given_as})" if given_as else ""
        raise ValueError(
            f"unknown Velodyne sensor model {name!r}{where}; choose one of "
            f"{', '.join(SENSOR_MODELS)}"
        )
    return model


@dataclass(frozen=True)
class DecoderSettings:
    """nebula's ``VelodyneSensorConfiguration`` fields the decoder reads.

    Attributes:
        model: nebula's model name (see :data:`SENSOR_MODELS`), in any case; written in the
            table's spelling on construction.
        return_mode: one of :data:`RETURN_MODES` (see there: it never changes the decoding).
        frame_id: the frame of the decoded clouds.
        min_range, max_range: metres; a point is kept when ``min_range < distance < max_range``
            (compared in double, the distance being float32).
        scan_phase: degrees, in [0, 360]; where a sweep is cut (``round(scan_phase * 100)``
            centidegrees) and, with :meth:`phase_radians`, which trailing points move on.
        cloud_min_angle, cloud_max_angle: whole degrees in [0, 360]. ``min < max`` keeps
            azimuths in ``[min * 100, max * 100]`` centidegrees; ``min > max`` keeps the
            wrapped range (``<= max * 100`` or ``>= min * 100``); ``min == max`` keeps nothing
            (nebula's rule: its VLP-16 and VLS-128 decoders then skip every block).
        view_direction, view_width: degrees. nebula's decoders never read them; its HDL-64 test
            harness derives cloud angles from them (:func:`cloud_angles_from_view`).
    """

    model: str = "VLP16"
    return_mode: str = "Dual"
    frame_id: str = "velodyne"
    min_range: float = 0.3
    max_range: float = 300.0
    scan_phase: float = 0.0
    cloud_min_angle: int = 0
    cloud_max_angle: int = 360
    view_direction: float = 0.0
    view_width: float = 360.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", sensor_model(self.model, "model").name)
        if self.return_mode not in RETURN_MODES:
            raise ValueError(f"return_mode {self.return_mode!r} not in {RETURN_MODES}")
        if not 0.0 <= self.scan_phase <= 360.0:
            raise ValueError(f"scan_phase {self.scan_phase} outside [0, 360]")
        for name in ("cloud_min_angle", "cloud_max_angle"):
            value = getattr(self, name)
            if int(value) != value or not 0 <= value <= 360:
                raise ValueError(f"{name} {value} is not a whole degree in [0, 360]")
        if not self.frame_id:
            raise ValueError("frame_id is empty")

    @property
    def sensor(self) -> SensorModel:
        """The :class:`SensorModel` of :attr:`model`."""
        return SENSOR_MODELS[self.model]

    @property
    def phase_centidegrees(self) -> int:
        """nebula's ``phase_``: ``(uint16_t) round(scan_phase * 100)``, half away from zero."""
        return math.floor(self.scan_phase * 100.0 + 0.5)

    @property
    def phase_radians(self) -> float:
        """``angles::from_degrees(scan_phase)``: ``scan_phase * M_PI / 180.0`` in double."""
        return self.scan_phase * math.pi / 180.0


def cloud_angles_from_view(view_direction: float, view_width: float) -> tuple[int, int]:
    """``(cloud_min_angle, cloud_max_angle)`` in whole degrees for a view centred on
    ``view_direction`` (degrees, the sensor's angle) ``view_width`` degrees wide.

    nebula's HDL-64 test harness computes the same window in hundredths of a degree and stores
    it where whole degrees are expected; this returns degrees, rounded to the nearest.
    """
    direction = math.radians(view_direction)
    width = math.radians(view_width)
    low = math.fmod(math.fmod(direction + width / 2, 2 * math.pi) + 2 * math.pi, 2 * math.pi)
    high = math.fmod(math.fmod(direction - width / 2, 2 * math.pi) + 2 * math.pi, 2 * math.pi)
    cloud_min = round(math.degrees(2 * math.pi - low)) % 360
    cloud_max = round(math.degrees(2 * math.pi - high)) % 360
    if cloud_min == cloud_max:
        return 0, 360
    return cloud_min, cloud_max
