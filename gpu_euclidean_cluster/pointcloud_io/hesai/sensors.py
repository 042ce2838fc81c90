"""Hesai sensor models, their packet formats and the decoder settings, named as in nebula.

nebula decodes one packet format per model family (``hesai_packet.hpp`` and the sensor headers
beside it); :data:`PACKET_FORMATS` gives each format's byte layout and :data:`SENSOR_MODELS`
maps nebula's ``sensor_model`` names to a format, an angle corrector (``calibration``: the
CSV's elevation and azimuth offset per channel; ``correction``: the AT128's ``.dat``), the
model's own range limits (nebula's ``SensorT::min_range``/``max_range``, float32, applied
besides the settings'), the return modes its ``return_mode`` setting accepts, whether it swaps
the first and last return of a ``DUAL_FIRST_LAST`` packet, and its point budget.

============ ============== ===== ====== ======== ======= =========== =========
model        packet format  bytes blocks channels returns range (m)   corrector
============ ============== ===== ====== ======== ======= =========== =========
Pandar40P    Packet40P      1262  10     40       2       0.3 - 200   csv
Pandar40M    Packet40P      1262  10     40       2       0.3 - 200   csv
Pandar64     Packet64       1194  6      64       2       0.3 - 200   csv
PandarQT64   PacketQT64     1072  4      64       2       0.1 - 60    csv
PandarQT128  PacketQT128C2X 1095  2      128      2       0.05 - 50   csv
PandarXT16   PacketXT16     568   8      16       2       0.05 - 120  csv
PandarXT32   PacketXT32     1080  8      32       2       0.05 - 120  csv
PandarXT32M  PacketXT32M2X  820   6      32       3       0.5 - 300   csv
PandarAT128  PacketAT128E2X 1078  2      128      2       1 - 180     dat
Pandar128E4X Packet128E3X   861   2      128      2       0.1 - 230   csv
============ ============== ===== ====== ======== ======= =========== =========

(``bytes`` is the packet structure nebula reads; a longer packet, carrying the optional UDP
sequence or cyber-security trailer, is read the same.) nebula's ``Pandar128E3X`` decoder has no
``sensor_model`` name (``sensor_model_from_string`` lacks it), so it is left out.

Budgets (:attr:`HesaiModel.sweep_packet_budget`): nebula reserves ``max_scan_buffer_points``
per sweep (at 600 RPM); a sweep or a call may hold :data:`SWEEP_MARGIN` times the packets that
fill it (twice that at nebula's slowest 300 RPM, and twice again for margin).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

#: The packet's return-mode byte -> (name, returns per firing) (nebula's ``get_n_returns``; any
#: other byte makes nebula throw).
RETURN_MODE_BYTES: dict[int, tuple[str, int]] = {
    0x33: ("SINGLE_FIRST", 1),
    0x34: ("SINGLE_SECOND", 1),
    0x37: ("SINGLE_STRONGEST", 1),
    0x38: ("SINGLE_LAST", 1),
    0x39: ("DUAL_LAST_STRONGEST", 2),
    0x3A: ("DUAL_FIRST_SECOND", 2),
    0x3B: ("DUAL_FIRST_LAST", 2),
    0x3C: ("DUAL_FIRST_STRONGEST", 2),
    0x3D: ("TRIPLE_FIRST_LAST_STRONGEST", 3),
    0x3E: ("DUAL_STRONGEST_SECONDSTRONGEST", 2),
}

#: The ``return_mode`` setting's strings each model accepts (``return_mode_from_string_hesai``).
#: They configure the sensor; the decoder follows each packet's own return-mode byte.
RETURN_MODES_XT = ("Last", "Strongest", "Dual", "LastStrongest", "First", "LastFirst",
                   "FirstStrongest")  # fmt: skip
RETURN_MODES_QT64 = ("Last", "Dual", "LastFirst", "First")
RETURN_MODES_PANDAR = ("Last", "Strongest", "Dual", "LastStrongest")

#: Sweeps (and calls) may hold this many times the packets that fill nebula's sweep buffer.
SWEEP_MARGIN = 4


@dataclass(frozen=True)
class PacketFormat:
    """The byte layout of one of nebula's packet structures (little-endian, packed).

    Attributes:
        name: nebula's structure name.
        size: bytes nebula reads (``sizeof``); shorter packets are refused.
        blocks, channels, max_returns: the body's blocks, the units of a block, and the most
            returns of one firing (blocks of one group).
        header: 0 (no header: the 40P), 8 (``Header8B``) or 12 (``Header12B``) bytes.
        block_size: bytes of a block; ``azimuth_at``: the block's ``uint16`` azimuth within it;
            ``fine_azimuth``: a ``uint8`` fine azimuth follows it (AT128: azimuth ``<< 8``).
        units_at: first unit within a block; ``unit_size``: 3 (distance, reflectivity) or 4.
        degree_subdivisions: block azimuth units in a degree (100, or 25600 for the AT128).
        return_mode_at, timestamp_at: absolute offsets of the return-mode byte and the
            ``uint32`` microseconds.
        date_at, date_kind: the date: ``ymd1900``/``ymd2000`` (year since 1900/2000, month,
            day, hour, minute, second, UTC) or ``epoch`` (a zero byte, 5 bytes of seconds, big
            endian).
        mode_flag_at: the QT128's mode flag (its dual-return firing table); -1: none.
        azimuth_state_at, operational_state_at: the OT128's azimuth states and operational
            state (high resolution 0); -1: none.
        protocol_majors: the UDP protocol's major versions a ``Header12B`` of this format
            carries (Hesai's protocols 1.x: Pandar128E3X/OT128, 3.x: QT, 4.x: AT128, 6.x: XT),
            telling apart formats of equal channel and block counts; empty: not checked.
    """

    name: str
    size: int
    blocks: int
    channels: int
    max_returns: int
    header: int
    block_size: int
    azimuth_at: int
    fine_azimuth: bool
    units_at: int
    unit_size: int
    degree_subdivisions: int
    return_mode_at: int
    timestamp_at: int
    date_at: int
    date_kind: str
    mode_flag_at: int = -1
    azimuth_state_at: int = -1
    operational_state_at: int = -1
    protocol_majors: tuple[int, ...] = ()

    @property
    def units(self) -> int:
        """Units (returns) of one packet."""
        return self.blocks * self.channels

    @property
    def dis_unit_at(self) -> int:
        """Offset of the header's ``dis_unit`` byte (mm), -1 for the header-less 40P (4 mm)."""
        return {0: -1, 8: 5, 12: 9}[self.header]

    @property
    def laser_num_at(self) -> int:
        """Offset of the header's ``laser_num`` byte; -1: none."""
        return {0: -1, 8: 2, 12: 6}[self.header]

    @property
    def full_turn(self) -> int:
        """Block azimuth units of a full turn (36000, or 9216000 for the AT128)."""
        return 360 * self.degree_subdivisions


def _format(name: str, blocks: int, channels: int, max_returns: int, header: int, **kw):
    unit_size = kw.pop("unit_size", 4)
    fine = kw.pop("fine_azimuth", False)
    sob = kw.pop("sob", False)
    units_at = (4 if sob else 2) + int(fine)
    return PacketFormat(
        name=name,
        blocks=blocks,
        channels=channels,
        max_returns=max_returns,
        header=header,
        block_size=units_at + channels * unit_size,
        azimuth_at=2 if sob else 0,
        fine_azimuth=fine,
        units_at=units_at,
        unit_size=unit_size,
        degree_subdivisions=kw.pop("degree_subdivisions", 100),
        **kw,
    )


#: nebula's packet structures (``pandar_*.hpp``); offsets worked out from their packed fields.
PACKET_FORMATS: dict[str, PacketFormat] = {
    f.name: f
    for f in (
        _format("Packet40P", 10, 40, 2, 0, unit_size=3, sob=True, size=1262,
                timestamp_at=1250, return_mode_at=1254, date_at=1256, date_kind="ymd2000"),
        _format("Packet64", 6, 64, 2, 8, unit_size=3, size=1194,
                timestamp_at=1182, return_mode_at=1186, date_at=1188, date_kind="ymd2000"),
        _format("PacketQT64", 4, 64, 2, 12, size=1072, protocol_majors=(3,),
                timestamp_at=1056, return_mode_at=1060, date_at=1062, date_kind="ymd1900"),
        _format("PacketQT128C2X", 2, 128, 2, 12, size=1095, protocol_majors=(3,),
                mode_flag_at=1066, return_mode_at=1073, date_at=1076, timestamp_at=1082,
                date_kind="ymd1900"),
        _format("PacketXT16", 8, 16, 2, 12, size=568, protocol_majors=(6,),
                return_mode_at=550, date_at=553, timestamp_at=559, date_kind="ymd1900"),
        _format("PacketXT32", 8, 32, 2, 12, size=1080, protocol_majors=(6,),
                return_mode_at=1062, date_at=1065, timestamp_at=1071, date_kind="ymd1900"),
        _format("PacketXT32M2X", 6, 32, 3, 12, size=820, protocol_majors=(6,),
                return_mode_at=802, date_at=805, timestamp_at=811, date_kind="ymd1900"),
        _format("PacketAT128E2X", 2, 128, 2, 12, size=1078, protocol_majors=(4,),
                fine_azimuth=True, degree_subdivisions=25600, timestamp_at=1066,
                return_mode_at=1070, date_at=1072, date_kind="epoch"),
        _format("Packet128E3X", 2, 128, 2, 12, unit_size=3, size=861, protocol_majors=(1,),
                azimuth_state_at=814, operational_state_at=816, return_mode_at=817,
                date_at=820, timestamp_at=826, date_kind="ymd1900"),
    )
}  # fmt: skip


@dataclass(frozen=True)
class HesaiModel:
    """A model as nebula decodes it.

    Attributes:
        name: nebula's ``sensor_model`` string.
        packet: its :class:`PacketFormat`.
        corrector: ``calibration`` (a CSV) or ``correction`` (the AT128's ``.dat``).
        min_range, max_range: nebula's ``SensorT`` limits, float32 metres (a return is kept
            only within them and within the settings').
        return_modes: the ``return_mode`` strings its settings accept.
        swaps_first_last: a ``DUAL_FIRST_LAST`` packet lists the last return first (nebula's
            XT16, XT32 and OT128 swap the FIRST/LAST types back).
        scan_buffer_points: nebula's ``max_scan_buffer_points``.
        fov_deg: the sensor's azimuth field of view, whole degrees.
        description: what it is.
    """

    name: str
    packet: PacketFormat
    corrector: str
    min_range: np.float32
    max_range: np.float32
    return_modes: tuple[str, ...]
    swaps_first_last: bool
    scan_buffer_points: int
    fov_deg: tuple[int, int]
    description: str

    @property
    def channels(self) -> int:
        """Channels (lasers) of the model."""
        return self.packet.channels

    @property
    def sweep_packet_budget(self) -> int:
        """Most packets a call, or the packets since the last completed sweep, may hold:
        :data:`SWEEP_MARGIN` times the packets that fill ``scan_buffer_points``."""
        return math.ceil(SWEEP_MARGIN * self.scan_buffer_points / self.packet.units)


def _model(name, packet, corrector, low, high, modes, swaps, points, description, fov=(0, 360)):
    return HesaiModel(
        name, PACKET_FORMATS[packet], corrector, np.float32(low), np.float32(high), modes,
        swaps, points, fov, description,
    )  # fmt: skip


SENSOR_MODELS: dict[str, HesaiModel] = {
    m.name: m
    for m in (
        _model("Pandar40P", "Packet40P", "calibration", 0.3, 200.0, RETURN_MODES_PANDAR, False,
               144000, "Hesai Pandar40P"),
        _model("Pandar40M", "Packet40P", "calibration", 0.3, 200.0, RETURN_MODES_PANDAR, False,
               144000, "Hesai Pandar40M (the 40P's decoder)"),
        _model("Pandar64", "Packet64", "calibration", 0.3, 200.0, RETURN_MODES_PANDAR, False,
               230400, "Hesai Pandar64"),
        _model("PandarQT64", "PacketQT64", "calibration", 0.1, 60.0, RETURN_MODES_QT64, False,
               76800, "Hesai PandarQT64"),
        _model("PandarQT128", "PacketQT128C2X", "calibration", 0.05, 50.0, RETURN_MODES_XT,
               False, 172800, "Hesai PandarQT128 (QT128C2X)"),
        _model("PandarXT16", "PacketXT16", "calibration", 0.05, 120.0, RETURN_MODES_XT, True,
               128000, "Hesai PandarXT16"),
        _model("PandarXT32", "PacketXT32", "calibration", 0.05, 120.0, RETURN_MODES_XT, True,
               256000, "Hesai PandarXT32"),
        _model("PandarXT32M", "PacketXT32M2X", "calibration", 0.5, 300.0, RETURN_MODES_XT,
               False, 384000, "Hesai PandarXT32M (XT32M2X)"),
        _model("PandarAT128", "PacketAT128E2X", "correction", 1.0, 180.0, RETURN_MODES_PANDAR,
               False, 307200, "Hesai AT128 (AT128E2X)", fov=(30, 150)),
        _model("Pandar128E4X", "Packet128E3X", "calibration", 0.1, 230.0, RETURN_MODES_XT,
               True, 691200, "Hesai OT128 (Pandar128E4X)"),
    )
}  # fmt: skip


def sensor_model(name: str | HesaiModel, given_as: str = "") -> HesaiModel:
    """The model of one of nebula's names (``PandarXT32``, ...), matched without regard to case
    or surrounding blanks.

    Raises:
        ValueError: not a name of :data:`SENSOR_MODELS`; the message names the known ones.
    """
    if isinstance(name, HesaiModel):
        return name
    wanted = str(name).strip().lower()
    for model in SENSOR_MODELS.values():
        if model.name.lower() == wanted:
            return model
    where = f" ({given_as})" if given_as else ""
    raise ValueError(
        f"unknown Hesai sensor model {name!r}{where}; choose one of {', '.join(SENSOR_MODELS)}"
    )


class DecoderSettingsError(ValueError):
    """Decoder settings that are refused (one line, naming the settings by their field names;
    :meth:`naming` words it with a front end's names)."""

    def __init__(self, template: str, **values: object) -> None:
        self.template = template
        self.values = values
        super().__init__(self.naming({}))

    def naming(self, names: Mapping[str, str]) -> str:
        """The message with each setting called ``names[field]`` (default: its field name)."""
        return self.template.format(
            **{key: f"{names.get(key, key)} {value!r}" for key, value in self.values.items()}
        )


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_whole(value: object, low: int, high: int) -> bool:
    return (
        _is_number(value)
        and math.isfinite(value)
        and int(value) == value
        and (low <= value <= high)
    )


#: ``2 * M_PIf``: the float32 full turn nebula's scan cutter normalises radians with.
TWO_PI_F32 = np.float32(2.0) * np.float32(math.pi)


def normalize_f32(angle: np.ndarray | float, modulus: float = float(TWO_PI_F32)) -> np.ndarray:
    """nebula's ``normalize_angle`` of float32 radians: ``a - floor(a / m) * m`` in double,
    rounded to float32 once."""
    value = np.asarray(angle, np.float32).astype(np.float64)
    return (value - np.floor(value / modulus) * modulus).astype(np.float32)


def angle_between(start, end, angle, start_inclusive: bool = True, end_inclusive: bool = True):
    """nebula's ``angle_is_between`` (element-wise on NumPy arrays or scalars): ``start == end``
    is the full circle; ``end < start`` wraps."""
    start, end, angle = np.asarray(start), np.asarray(end), np.asarray(angle)
    full = start == end
    on_start = angle == start
    on_end = angle == end
    wraps = end < start
    inside = np.where(wraps, (angle <= end) | (start <= angle), (start <= angle) & (angle <= end))
    inside &= ~(on_start & (not start_inclusive)) & ~(on_end & (not end_inclusive))
    full_value = np.where(on_start, start_inclusive or end_inclusive, True)
    return np.where(full, full_value, inside)


def degrees_to_radians_f32(degrees: float) -> np.float32:
    """``(float) deg2rad(double degrees)``: the double product with ``M_PI / 180.0``, rounded
    to float32 (how nebula's scan cutter receives its angles)."""
    return np.float32(float(degrees) * (math.pi / 180.0))


#: The decoder settings of nebula's parameter files (``config/<model>.param.yaml``) common to
#: every model, and each model's own.
COMMON_DEFAULTS: dict[str, object] = {
    "return_mode": "Dual",
    "frame_id": "hesai",
    "min_range": 0.3,
    "max_range": 300.0,
    "cloud_min_angle": 0,
    "cloud_max_angle": 360,
    "cut_angle": 0.0,
    "sync_angle": 0,
    "dual_return_distance_threshold": 0.1,
}
PARAM_DEFAULTS: dict[str, dict[str, object]] = {
    "PandarAT128": {"cloud_min_angle": 30, "cloud_max_angle": 150, "cut_angle": 150.0,
                    "sync_angle": 30},
    "PandarQT128": {"return_mode": "LastStrongest"},
    "PandarXT32M": {"return_mode": "LastStrongest"},
    "PandarXT16": {"min_range": 0.05, "max_range": 120.0},
    "PandarXT32": {"min_range": 0.05, "max_range": 120.0},
}  # fmt: skip


@dataclass(frozen=True)
class DecoderSettings:
    """nebula's ``HesaiSensorConfiguration`` fields the decoder reads, checked on construction
    as nebula's ROS wrapper and scan cutter check them.

    Attributes:
        model: nebula's model name (any case; stored in :data:`SENSOR_MODELS`' spelling).
        return_mode: one of the model's :attr:`HesaiModel.return_modes`. It configures the
            sensor: the decoder follows each packet's return-mode byte.
        frame_id: the frame of the decoded clouds (not empty).
        min_range, max_range: metres; a return is kept when ``min_range <= distance <=
            max_range`` (compared in double, the distance being float32) and within the model's
            own limits.
        cloud_min_angle, cloud_max_angle: whole degrees in [0, 360]: the field of view, start
            and end inclusive, wrapping past 360 when the end is below the start; equal angles
            (0 and 360 among them) are the whole circle.
        cut_angle: degrees in [0, 360] where sweeps are cut: inside the field of view, never at
            its start; for a whole circle not 360 (cut at 0 instead).
        sync_angle: whole degrees (0-359; the AT128 30-150): the sensor's phase lock, for the
            sensor only (nebula's decoder never reads it).
        dual_return_distance_threshold: metres in [0.01, 0.5]: a return of a multi-return
            group whose distance is within it of another return of the group is dropped, unless
            it is the group's last.

    Raises:
        ValueError: an unknown ``model`` (:func:`sensor_model`).
        DecoderSettingsError: a setting out of its range, or a cut angle nebula refuses.
    """

    model: str = "PandarXT32"
    return_mode: str = "Dual"
    frame_id: str = "hesai"
    min_range: float = 0.3
    max_range: float = 300.0
    cloud_min_angle: int = 0
    cloud_max_angle: int = 360
    cut_angle: float = 0.0
    sync_angle: int = 0
    dual_return_distance_threshold: float = 0.1

    def __post_init__(self) -> None:
        model = sensor_model(self.model, "model")
        object.__setattr__(self, "model", model.name)
        if self.return_mode not in model.return_modes:
            raise DecoderSettingsError(
                f"{{return_mode}} is not one of a {model.name}'s: {', '.join(model.return_modes)}",
                return_mode=self.return_mode,
            )
        if not self.frame_id:
            raise DecoderSettingsError("{frame_id} is empty", frame_id=self.frame_id)
        if not (_is_number(self.min_range) and 0.0 <= self.min_range < math.inf):
            raise DecoderSettingsError(
                "{min_range} is not a distance (finite metres, 0 or more)", min_range=self.min_range
            )
        if not (_is_number(self.max_range) and self.max_range > self.min_range):
            raise DecoderSettingsError(
                "{min_range} is not below {max_range}: no return would be kept",
                min_range=self.min_range,
                max_range=self.max_range,
            )
        threshold = self.dual_return_distance_threshold
        if not (_is_number(threshold) and 0.01 <= threshold <= 0.5):
            raise DecoderSettingsError(
                "{dual_return_distance_threshold} is outside [0.01, 0.5]",
                dual_return_distance_threshold=threshold,
            )
        low, high = (30, 150) if model.corrector == "correction" else (0, 359)
        if not _is_whole(self.sync_angle, low, high):
            raise DecoderSettingsError(
                f"{{sync_angle}} is not a whole degree in [{low}, {high}]",
                sync_angle=self.sync_angle,
            )
        for name in ("cloud_min_angle", "cloud_max_angle"):
            if not _is_whole(getattr(self, name), 0, 360):
                raise DecoderSettingsError(
                    f"{{{name}}} is not a whole degree in [0, 360]", **{name: getattr(self, name)}
                )
        if not (_is_number(self.cut_angle) and 0.0 <= self.cut_angle <= 360.0):
            raise DecoderSettingsError("{cut_angle} is outside [0, 360]", cut_angle=self.cut_angle)
        self._check_cut()

    def _check_cut(self) -> None:
        """The cut angle's rules: nebula's ROS wrapper's (in double degrees), then its scan
        cutter's (on the float32 radians)."""
        low, high, cut = self.cloud_min_angle, self.cloud_max_angle, self.cut_angle
        values = {"cut_angle": cut, "cloud_min_angle": low, "cloud_max_angle": high}
        whole_circle = low == 0 and high == 360
        if not bool(angle_between(float(low), float(high), float(cut))):
            raise DecoderSettingsError(
                "{cut_angle} is outside the field of view {cloud_min_angle} to {cloud_max_angle}",
                **values,
            )
        if not whole_circle and cut == low:
            raise DecoderSettingsError(
                "{cut_angle} is the field of view's start {cloud_min_angle}: cut at its end "
                "{cloud_max_angle} instead",
                **values,
            )
        if whole_circle and cut == 360:
            raise DecoderSettingsError("{cut_angle} cuts a whole circle at 360: cut at 0", **values)
        start, end, cut_rad = (*self.fov_radians, self.cut_radians)
        if start != end and not bool(angle_between(start, end, cut_rad)):
            raise DecoderSettingsError(
                "{cut_angle} is outside the field of view {cloud_min_angle} to "
                "{cloud_max_angle} in float32 radians",
                **values,
            )
        if start != end and cut_rad == start:
            raise DecoderSettingsError(
                "{cut_angle} is the field of view's start {cloud_min_angle} in float32 radians",
                **values,
            )

    @classmethod
    def for_model(cls, model: str, **overrides: object) -> DecoderSettings:
        """The settings of nebula's parameter file for ``model`` (``<model>.param.yaml``:
        :data:`PARAM_DEFAULTS` over the common ones), with ``overrides``."""
        name = sensor_model(model, "model").name
        values: dict[str, object] = {**COMMON_DEFAULTS, **PARAM_DEFAULTS.get(name, {})}
        values.update(overrides)
        return cls(model=name, **values)  # type: ignore[arg-type]

    @property
    def sensor(self) -> HesaiModel:
        """The :class:`HesaiModel` of :attr:`model`."""
        return SENSOR_MODELS[self.model]

    @property
    def cut_radians(self) -> np.float32:
        """The scan cutter's cut angle: ``normalize(float(deg2rad(cut_angle)))``."""
        return normalize_f32(degrees_to_radians_f32(self.cut_angle))[()]

    @property
    def fov_radians(self) -> tuple[np.float32, np.float32]:
        """The scan cutter's field of view, start and end, normalised float32 radians (equal:
        the whole circle)."""
        return (
            normalize_f32(degrees_to_radians_f32(self.cloud_min_angle))[()],
            normalize_f32(degrees_to_radians_f32(self.cloud_max_angle))[()],
        )

    @property
    def whole_circle(self) -> bool:
        """The field of view is the whole circle (its float32 start and end are equal)."""
        start, end = self.fov_radians
        return bool(start == end)

    @property
    def cuts_at_fov_end(self) -> bool:
        """nebula's cutter mode: the cut is the end of a field of view short of a circle."""
        return (not self.whole_circle) and bool(self.cut_radians == self.fov_radians[1])
