"""Loading a sensor kit file (``docs/sensor_kit.md``) into :class:`~.model.SensorKit`.

Every field is checked and every problem reported, one line each (``<file>: <field>: <why>``),
in one :class:`~.fields.SensorKitError`. The files a kit names (Autoware's calibration files,
``vehicle_info.param.yaml``, ``mirror.param.yaml``) are read while it loads, relative to the
kit file's folder (``~`` and ``$VAR`` expanded); a ``tf_static`` bag only when the poses are
resolved (:func:`~.kit_poses.sensor_poses`).
"""

from __future__ import annotations

from pathlib import Path

from ..velodyne.sensors import DecoderSettings
from . import model as m
from .autoware import SENSOR_DESCRIPTIONS, calibration_joints
from .crop_boxes import parse_crop_box
from .fields import (
    NAME,
    Problems,
    SensorKitError,
    joints_from_mapping,
    mapping,
    read_into,
    read_yaml,
    resolve_path,
    text,
)

FORMAT_VERSION = 1
#: Most sensors a kit, and most crop boxes a sensor, may hold.
MAX_SENSORS = 32
MAX_CROP_BOXES = 16
TOP_KEYS = ("version", "name", "base_frame", "poses", "crop_boxes", "sensors", "concatenation")
#: Autoware's ``concatenate_and_time_sync_node`` parameters a kit's ``concatenation`` may give
#: (``inputs``: the sensors by name, in ``input_topics``' place and order).
CONCATENATION_KEYS = (
    "inputs",
    "timeout_sec",
    "matching_strategy",
    "publish_previous_but_late_pointcloud",
    "rosbag_length",
    "is_motion_compensated",
)
SENSOR_KEYS = ("name", "frame", "input", "crop_boxes", "description")
#: nebula's decoder settings a ``packets`` input may give (``DecoderSettings`` fields).
DECODER_KEYS = (
    "model",
    "return_mode",
    "min_range",
    "max_range",
    "scan_phase",
    "cloud_min_angle",
    "cloud_max_angle",
    "azimuth_timing",
)


def load_sensor_kit(path: str | Path) -> m.SensorKit:
    """The sensor kit of the YAML file ``path``.

    Raises:
        SensorKitError: the file or a file it names cannot be read, or any field is wrong; one
            line per problem.
    """
    path = Path(path)
    return parse_sensor_kit(read_yaml(path), path.parent, source=path)


def parse_sensor_kit(document: object, folder: Path, source: Path | None = None) -> m.SensorKit:
    """The sensor kit of a parsed YAML ``document``; paths in it are relative to ``folder``."""
    problems = Problems()
    top = mapping(document, "kit", problems, TOP_KEYS) or {}
    version = top.get("version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        problems.add("version", f"must be {FORMAT_VERSION}, got {version!r}")
    name = text(top.get("name", source.stem if source else "sensor_kit"), "name", problems)
    base_frame = text(top.get("base_frame", "base_link"), "base_frame", problems)
    poses = _pose_source(top.get("poses"), folder, problems)
    declared = mapping(top.get("crop_boxes", {}), "crop_boxes", problems) or {}
    boxes = {}
    for box_name, value in declared.items():
        box = parse_crop_box(box_name, value, folder, base_frame, problems)
        if box is not None:
            boxes[box_name] = box
    sensors = []
    listed = top.get("sensors")
    if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_SENSORS:
        problems.add("sensors", f"must be a list of 1 to {MAX_SENSORS} sensors")
        listed = []
    for index, value in enumerate(listed):
        sensor = _sensor(f"sensors[{index}]", value, boxes, set(declared), problems)
        if sensor is not None:
            sensors.append(sensor)
    for what in ("name", "frame"):
        _unique([getattr(s, what) for s in sensors], f"sensor {what}", problems)
    _unique([s.input.topic for s in sensors], "sensor topic", problems)
    # the inputs are checked against the sensors once every sensor read (no second line)
    complete = sensors if len(sensors) == len(listed) else None
    concatenation = _concatenation(top.get("concatenation", {}), complete, problems)
    if problems:
        prefix = f"{source}: " if source else ""
        raise SensorKitError([prefix + line for line in problems])
    return m.SensorKit(
        FORMAT_VERSION, name, base_frame, poses, tuple(sensors), source, concatenation
    )


def _concatenation(
    value: object, sensors: list[m.Sensor] | None, problems: Problems
) -> tuple[tuple[str, object], ...]:
    """The ``concatenation`` block's pairs; ``inputs`` must name each of ``sensors`` once (None:
    a sensor was wrong, already reported). The values themselves are checked where they are
    used (``frame/time_sync.py``)."""
    given = mapping(value, "concatenation", problems, CONCATENATION_KEYS) or {}
    inputs = given.get("inputs")
    names = sorted(s.name for s in sensors or ())
    if sensors is None or inputs is None:
        return tuple(given.items())
    if not isinstance(inputs, list) or sorted(map(str, inputs)) != names:
        problems.add("concatenation.inputs", f"must list each sensor once: {', '.join(names)}")
    return tuple(given.items())


def _unique(values: list[str], what: str, problems: Problems) -> None:
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        problems.add("sensors", f"{what} given twice: {', '.join(repeated)}")


def _pose_source(value: object, folder: Path, problems: Problems) -> m.PoseSource | None:
    """The kit's one pose source; calibration files are read here, a bag is not."""
    given = mapping(value, "poses", problems, m.POSE_SOURCES)
    if given is None or len(given) != 1:
        if given is not None:
            problems.add("poses", f"give exactly one of {', '.join(m.POSE_SOURCES)}")
        return None
    [(kind, body)] = given.items()
    where = f"poses.{kind}"
    if kind == m.INLINE:
        joints = joints_from_mapping(body, where, problems, "the kit's inline poses")
        return m.PoseSource(kind, tuple(joints))
    if kind == m.AUTOWARE_CALIBRATION:
        if not isinstance(body, list) or not body or not all(isinstance(p, str) for p in body):
            problems.add(where, "must be a list of calibration file paths")
            return None
        files = tuple(resolve_path(p, folder) for p in body)
        joints = [read_into(problems, where, calibration_joints, path) or [] for path in files]
        return m.PoseSource(kind, tuple(j for found in joints for j in found), files=files)
    fields = mapping({} if body is None else body, where, problems, ("bag", "topic")) or {}
    topic = text(fields.get("topic", "/tf_static"), f"{where}.topic", problems)
    bag = None
    if "bag" in fields and text(fields["bag"], f"{where}.bag", problems):
        bag = resolve_path(fields["bag"], folder)
        if not bag.exists():
            problems.add(f"{where}.bag", f"{bag} does not exist")
    return m.PoseSource(kind, bag=bag, topic=topic or "/tf_static")


def _sensor(where: str, value: object, boxes: dict, declared: set, problems: Problems):
    """The sensor of ``sensors[i]``; ``boxes`` the kit's valid boxes, ``declared`` all names."""
    fields = mapping(value, where, problems, SENSOR_KEYS)
    if fields is None:
        return None
    before = len(problems)
    name = text(fields.get("name"), f"{where}.name", problems)
    if name is not None and not NAME.fullmatch(name):
        problems.add(f"{where}.name", "a sensor name is letters, digits and underscores")
    frame = text(fields.get("frame"), f"{where}.frame", problems)
    if frame is not None and frame.startswith("/"):
        problems.add(f"{where}.frame", "a tf2 frame id does not start with /")
    description = fields.get("description")
    if description is not None and description not in SENSOR_DESCRIPTIONS:
        known = ", ".join(SENSOR_DESCRIPTIONS)
        problems.add(f"{where}.description", f"unknown {description!r}; known: {known}")
    chosen = fields.get("crop_boxes", [])
    if not isinstance(chosen, list) or len(chosen) > MAX_CROP_BOXES:
        problems.add(f"{where}.crop_boxes", f"must be a list of at most {MAX_CROP_BOXES} names")
        chosen = []
    seen = set()
    for box in chosen:
        if not isinstance(box, str) or box not in declared:
            problems.add(f"{where}.crop_boxes", f"{box!r} is not a box of crop_boxes")
        elif box in seen:
            problems.add(f"{where}.crop_boxes", f"{box} listed twice")
        else:
            seen.add(box)
    source = _input(f"{where}.input", fields.get("input"), frame, problems)
    if len(problems) > before or source is None:
        return None
    return m.Sensor(name, frame, source, tuple(boxes[b] for b in chosen if b in boxes), description)


def _input(where: str, value: object, frame: str | None, problems: Problems):
    """The sensor's input: ``packets`` (with nebula's settings, checked as ``DecoderSettings``
    checks them) or ``points``."""
    given = mapping(value, where, problems, (m.PACKETS, m.POINTS))
    if given is None or len(given) != 1:
        if given is not None:
            problems.add(where, f"give exactly one of {m.PACKETS}, {m.POINTS}")
        return None
    [(kind, body)] = given.items()
    where = f"{where}.{kind}"
    allowed = ("topic",) if kind == m.POINTS else ("topic", "calibration", *DECODER_KEYS)
    fields = mapping(body, where, problems, allowed)
    if fields is None:
        return None
    topic = text(fields.get("topic"), f"{where}.topic", problems)
    if kind == m.POINTS:
        return None if topic is None else m.SensorInput(kind, topic)
    calibration = fields.get("calibration")
    if calibration is not None:
        calibration = text(calibration, f"{where}.calibration", problems)
    if "model" not in fields:
        problems.add(where, "model is missing (nebula's sensor_model: VLP16, VLS128, ...)")
        return None
    settings = {key: fields[key] for key in DECODER_KEYS if key in fields}
    try:
        # a missing frame is reported already; the settings are checked all the same
        decoder = DecoderSettings(frame_id=frame or "velodyne", **settings)
    except ValueError as error:  # DecoderSettingsError and an unknown model
        problems.add(where, str(error))
        return None
    return None if topic is None else m.SensorInput(kind, topic, decoder, calibration)
