"""Velodyne sensor models and the decoder settings, named and defaulted as in nebula.

nebula has three packet decoders (``vlp16_decoder.cpp``, ``vlp32_decoder.cpp``,
``vls128_decoder.cpp``) and picks one per model: VLP-16 uses the VLP-16 rules, VLP-32C, HDL-32E
and HDL-64E (S2 and S3 alike) the VLP-32 rules, VLS-128 the VLS-128 rules. :data:`SENSOR_MODELS`
maps nebula's model names to those rule sets (the ``family``), to the model's own firing
timing (:class:`FiringTiming`, from its user manual), which the ``sensor`` azimuth timing uses
(:data:`AZIMUTH_TIMINGS`), and to the product ids its packets carry (:data:`PRODUCT_IDS`).

What a model's stream may cost is derived here too (:attr:`SensorModel.sweep_packet_budget`):
the packets of one rotation at nebula's slowest ``rotation_speed`` (:data:`SLOWEST_RPM`, 300
RPM), in dual-return mode, :data:`SWEEP_MARGIN` times over. Per model (packets; points at 384 a
packet, 32 bytes each):

========  ===================  ===============  ======  ===========  ==========
model     dual packet period   packets / 0.2 s  budget  points       point MB
========  ===================  ===============  ======  ===========  ==========
VLP16     663.552 us           301.4            603     231 552      7.4
VLP32     331.776 us           602.8            1 206   463 104      14.8
HDL32     276.48 us            723.4            1 447   555 648      17.8
HDL64     172.8 us             1 157.4          2 315   888 960      28.4
VLS128    53.3 us              3 752.3          7 505   2 881 920    92.2
========  ===================  ===============  ======  ===========  ==========

(The HDL-64E S2 fires faster than the S3 timing the table holds, 48 us a block pair: its
rotation at 300 RPM dual is 1 389 packets, the budget 1.67 times that.)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum


class Family(str, Enum):
    """The nebula decoder whose rules a model follows."""

    VLP16 = "vlp16"
    VLP32 = "vlp32"
    VLS128 = "vls128"


#: Positions of a firing sequence: ``bank origin + slot`` (bank origin 0, 32, 64 or 96).
SEQUENCE_POSITIONS = 128

#: The ``azimuth_timing`` rules. ``nebula``: nebula's decoders bit for bit (each family's timing
#: constants, its block recurrence, no interpolation of a single-return packet's last block).
#: ``sensor``: each model's own firing timing (:class:`FiringTiming`), a firing's azimuth gap
#: to the next firing of the packet, the previous gap for the packet's last firing.
AZIMUTH_TIMINGS = ("nebula", "sensor")


@dataclass(frozen=True)
class FiringTiming:
    """When a model fires the returns of one firing, from its user manual.

    A firing is the returns that share one block azimuth: a data block of the VLP-16 (two
    16-laser sequences), VLP-32C and HDL-32E, the upper and lower block of the HDL-64E, the four
    blocks of a VLS-128 sequence; in dual-return mode each block comes twice.

    Attributes:
        blocks: data blocks of one firing in single-return mode (dual: twice as many).
        duration_us: microseconds from one firing's azimuth to the next firing's: the time the
            azimuth gap between them spans.
        offsets_us: for each position ``bank origin + slot`` (:data:`SEQUENCE_POSITIONS`), when
            its laser fires, in microseconds after the firing's azimuth.
    """

    blocks: int
    duration_us: float
    offsets_us: tuple[float, ...]

    def blocks_per_firing(self, dual: bool) -> int:
        """Data blocks of one firing in single-return (``dual`` false) or dual-return mode."""
        return self.blocks * (2 if dual else 1)


def _positions(offset_us: Callable[[int], float]) -> tuple[float, ...]:
    return tuple(offset_us(position) for position in range(SEQUENCE_POSITIONS))


#: VLP-16 user manual (63-9243 Rev E, 9.4-9.5): 16 lasers fire 2.304 us apart, a sequence
#: every 55.296 us; a data block holds two sequences (slots 0-15, 16-31), the block's azimuth
#: gap spans both (110.592 us). nebula's constants.
VLP16_FIRING = FiringTiming(
    1, 110.592, _positions(lambda p: 55.296 * (p % 32 // 16) + 2.304 * (p % 16))
)
#: VLP-32C user manual (63-9325 Rev C, 9.4, Figure 9-7): lasers fire in pairs (slots 2k, 2k+1)
#: every 2.304 us, 16 firings and the recharge in 55.296 us, one data block. nebula interpolates
#: slot j at j * 2.304 us, much as the manual's pseudo code of 9.5 does (its K steps by two and
#: is not halved), which the manual's timing table (and nebula's own point times) contradict.
VLP32C_FIRING = FiringTiming(1, 55.296, _positions(lambda p: 2.304 * (p % 32 // 2)))
#: HDL-32E user manual and application note 63-9277 Rev D: one laser every 1.152 us, 32 firings
#: and a 9.216 us recharge in 46.08 us, one data block (nebula uses the VLP-32C's 2.304/55.296).
HDL32E_FIRING = FiringTiming(1, 46.08, _positions(lambda p: 1.152 * (p % 32)))
_HDL64E_S3_PATTERN = (0.0, 1.3, 2.5, 3.7)
#: HDL-64E S3 user manual (63-HDL64ES3, laser firing time table): an upper-block and a
#: lower-block laser fire together; slots fire in groups of four, 7.2 us a group (inside a
#: group 0, 1.3, 2.5, 3.7 us), 57.6 us the upper and lower block pair. (The S2's table: 6 us a
#: group, 0/1.26/2.46/3.66 us, 48 us: the same group fractions, inside a group at most 0.012 of
#: a gap apart.)
HDL64E_FIRING = FiringTiming(
    2, 57.6, _positions(lambda p: 7.2 * (p % 32 // 4) + _HDL64E_S3_PATTERN[p % 4])
)
#: VLS-128 user manual (63-9483 Rev A, 9.4-9.5): groups of 8 lasers 2.665 us apart, a
#: maintenance period after the 8th group, 53.3 us a sequence of four data blocks; laser ``l``
#: fires in group ``l / 8 + l / 64``. nebula's constants, but it interpolates with the gap to the
#: next block, which is 0 inside a sequence.
VLS128_FIRING = FiringTiming(4, 53.3, _positions(lambda p: 2.665 * (p // 8 + p // 64)))


#: Offset of a packet's second factory byte, the product id (the first, 1204, is the return
#: mode); 0 where the recording left it unset.
PRODUCT_ID_OFFSET = 1205
#: Velodyne's product ids (factory byte 2; the VLP-16, VLP-32C and VLS-128 user manuals' factory
#: byte tables, VeloView's ``SensorType``): the product each names. 0x23 is left out: sources
#: disagree on it (VLP-32A/B, or Puck LITE). The HDL-64E has none: its bytes 1204-1205 carry a
#: rolling status (type and value) instead.
PRODUCT_IDS: dict[int, str] = {
    0x21: "HDL-32E",
    0x22: "VLP-16 / Puck LITE",
    0x24: "Puck Hi-Res",
    0x28: "VLP-32C",
    0x31: "Velarray",
    0x63: "VLS-128 (early firmware)",
    0xA1: "VLS-128",
}
#: nebula's slowest rotation: its ``rotation_speed`` parameter takes 300 to 1200 RPM (nebula's
#: ``lidar_velodyne.json`` schema; the sensors' manuals: 5 to 20 Hz).
SLOWEST_RPM = 300
#: A sweep (and a message) may hold this many rotations' packets at :data:`SLOWEST_RPM`.
SWEEP_MARGIN = 2
#: Returns of a packet: 12 blocks of 32.
PACKET_RETURNS = 384


@dataclass(frozen=True)
class SensorModel:
    """A model: nebula's name, its decoder family, its laser count, its firing timing and the
    product ids its packets carry (:data:`PRODUCT_IDS`; empty: not checked, the HDL-64E's)."""

    name: str
    family: Family
    lasers: int
    description: str
    firing: FiringTiming
    product_ids: tuple[int, ...] = ()

    def packets_per_second(self, dual: bool) -> float:
        """Packets a second in single-return (``dual`` false) or dual-return mode: a packet holds
        ``12 // blocks_per_firing`` firings of ``firing.duration_us`` each."""
        firings = 12 // self.firing.blocks_per_firing(dual)
        return 1e6 / (firings * self.firing.duration_us)

    @property
    def sweep_packet_budget(self) -> int:
        """Most packets one sweep (or one message) may hold: :data:`SWEEP_MARGIN` rotations at
        :data:`SLOWEST_RPM` in dual-return mode, rounded up (the module docstring's table)."""
        return math.ceil(SWEEP_MARGIN * 60.0 / SLOWEST_RPM * self.packets_per_second(True))

    @property
    def sweep_point_budget(self) -> int:
        """Most points a sweep within :attr:`sweep_packet_budget` can hold (384 a packet)."""
        return self.sweep_packet_budget * PACKET_RETURNS

    def foreign_product(self, product_id: int) -> bool:
        """True when ``product_id`` names another product than this model: a known id
        (:data:`PRODUCT_IDS`) not among :attr:`product_ids`. 0 (unset), an unknown id, and every
        id for a model without product ids are not foreign."""
        return (
            bool(self.product_ids)
            and product_id in PRODUCT_IDS
            and (product_id not in self.product_ids)
        )


SENSOR_MODELS: dict[str, SensorModel] = {
    model.name: model
    for model in (
        SensorModel(
            "VLP16", Family.VLP16, 16, "Velodyne VLP-16 (Puck)", VLP16_FIRING, (0x22, 0x24)
        ),
        SensorModel(
            "VLP32", Family.VLP32, 32, "Velodyne VLP-32C (Ultra Puck)", VLP32C_FIRING, (0x28,)
        ),
        SensorModel("HDL32", Family.VLP32, 32, "Velodyne HDL-32E", HDL32E_FIRING, (0x21,)),
        SensorModel(
            "HDL64",
            Family.VLP32,
            64,
            "Velodyne HDL-64E S2/S3 (upper and lower block)",
            HDL64E_FIRING,
        ),
        SensorModel(
            "VLS128",
            Family.VLS128,
            128,
            "Velodyne VLS-128 (Alpha Prime)",
            VLS128_FIRING,
            (0xA1, 0x63),
        ),
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


class DecoderSettingsError(ValueError):
    """Decoder settings that are refused (one line). The message names the settings by their
    field names; :meth:`naming` words it with a front end's names for them (the node's
    ``sensor_min_range`` for ``min_range``, ``replay``'s ``--min-range``).

    Attributes:
        values: the settings the refusal is about, field name -> value, in the message's order.
    """

    def __init__(self, template: str, **values: object) -> None:
        self.template = template
        self.values = values
        super().__init__(self.naming({}))

    def naming(self, names: Mapping[str, str]) -> str:
        """The message with each setting called ``names[field]`` (default: its field name)."""
        return self.template.format(
            **{
                field: f"{names.get(field, field)} {value!r}"
                for field, value in self.values.items()
            }
        )


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class DecoderSettings:
    """nebula's ``VelodyneSensorConfiguration`` fields the decoder reads, checked on construction:
    settings under which no return could ever be kept are refused
    (:class:`DecoderSettingsError`).

    Attributes:
        model: nebula's model name (see :data:`SENSOR_MODELS`), in any case; written in the
            table's spelling on construction.
        return_mode: one of :data:`RETURN_MODES` (see there: it never changes the decoding).
        frame_id: the frame of the decoded clouds (not empty).
        min_range, max_range: metres; a point is kept when ``min_range < distance < max_range``
            (compared in double, the distance being float32). ``min_range`` is finite and not
            negative, ``max_range`` above it (``inf``: no upper limit).
        scan_phase: degrees, in [0, 360]; where a sweep is cut (``round(scan_phase * 100)``
            centidegrees) and, with :meth:`phase_radians`, which trailing points move on.
        cloud_min_angle, cloud_max_angle: whole degrees in [0, 360], not equal. ``min < max``
            keeps azimuths in ``[min * 100, max * 100]`` centidegrees; ``min > max`` keeps the
            wrapped range (``<= max * 100`` or ``>= min * 100``). ``min == max`` would keep
            nothing (nebula's rule: its VLP-16 and VLS-128 decoders then skip every block) and
            is refused; 0 and 360 keep every azimuth.
        view_direction, view_width: degrees. nebula's decoders never read them; its HDL-64 test
            harness derives cloud angles from them (:func:`cloud_angles_from_view`).
        azimuth_timing: one of :data:`AZIMUTH_TIMINGS`: ``nebula`` (default) interpolates each
            return's azimuth as nebula does, ``sensor`` with the model's own firing timing
            (:class:`FiringTiming`; see :mod:`.packets`, step 1 and 3).

    Raises:
        ValueError: an unknown ``model`` (:func:`sensor_model`).
        DecoderSettingsError: any other setting out of its range, or settings that keep no return.
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
    azimuth_timing: str = "nebula"

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", sensor_model(self.model, "model").name)
        if self.return_mode not in RETURN_MODES:
            raise DecoderSettingsError(
                f"{{return_mode}} not in {RETURN_MODES}",
                return_mode=self.return_mode,
            )
        if self.azimuth_timing not in AZIMUTH_TIMINGS:
            raise DecoderSettingsError(
                f"{{azimuth_timing}} not in {AZIMUTH_TIMINGS}",
                azimuth_timing=self.azimuth_timing,
            )
        if not (_is_number(self.scan_phase) and 0.0 <= self.scan_phase <= 360.0):
            raise DecoderSettingsError("{scan_phase} outside [0, 360]", scan_phase=self.scan_phase)
        for name in ("cloud_min_angle", "cloud_max_angle"):
            value = getattr(self, name)
            if not (_is_number(value) and 0 <= value <= 360 and int(value) == value):
                raise DecoderSettingsError(
                    f"{{{name}}} is not a whole degree in [0, 360]", **{name: value}
                )
        if self.cloud_min_angle == self.cloud_max_angle:
            raise DecoderSettingsError(
                "{cloud_min_angle} equals {cloud_max_angle}: no azimuth would be kept (0 and "
                "360 keep every azimuth)",
                cloud_min_angle=self.cloud_min_angle,
                cloud_max_angle=self.cloud_max_angle,
            )
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
        if not self.frame_id:
            raise DecoderSettingsError("{frame_id} is empty", frame_id=self.frame_id)

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
