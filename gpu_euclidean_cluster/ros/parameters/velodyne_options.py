"""How ``replay`` decodes Velodyne packet topics: sensor model, calibration and decoder settings.

Free of ROS. The settings come from nebula's sensor parameter file (``--sensor-params``, the
``*.param.yaml`` format of nebula's ``config/`` folder: ``/**: ros__parameters: {sensor_model,
return_mode, frame_id, min_range, max_range, scan_phase, cloud_min_angle, cloud_max_angle,
calibration_file, ...}``), then the explicit options, which override it; what neither gives has
nebula's default (:class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.DecoderSettings`). The
azimuth timing (``--azimuth-timing``: ``nebula``, the default, or ``sensor``) is this decoder's
setting, not nebula's, and comes from the options only.

The values are held to the node's parameter table: each option given when the options are built,
and each value of the parameter file when :meth:`VelodyneOptions.resolve` reads it, must lie in
the range of the node parameter that sets the same decoder setting (:data:`SETTING_PARAMETERS`
names it, :data:`~.specs.SPECS` holds its range); then the settings together are checked by
:class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.DecoderSettings` (settings that keep no
return), as the node's are, its refusal worded with the replay's names (:data:`SETTING_OPTIONS`).
The parameter file and the calibration file are read as the node reads its calibration: regular
files of at most
:data:`~gpu_euclidean_cluster.pointcloud_io.velodyne.calibration.MAX_CALIBRATION_BYTES` (a FIFO,
a device or a huge file is refused, not read).

A Hesai ``--sensor-model`` (nebula's names: :func:`~.hesai_options.is_hesai_model`) decodes
``pandar_msgs/msg/PandarScan`` topics instead, with nebula's default settings of that model
(``pointcloud_io/hesai/sensors.py``: ``COMMON_DEFAULTS``, ``PARAM_DEFAULTS``) overridden by the
options given (``--return-mode``, ``--frame-id``, ``--min-range``, ``--max-range``,
``--cloud-min-angle``, ``--cloud-max-angle``; ``--scan-phase``, ``--azimuth-timing`` and
``--sensor-params`` are Velodyne's and refused), and ``--calibration`` or the model's file shipped
in ``config/hesai/``.

The calibration file is ``--calibration`` if given, else the parameter file's ``calibration_file``
(when the file names the same model), else the model's file among nebula's calibration files
shipped in ``config/velodyne/`` (see :func:`calibration_dirs`). A ``$(find-pkg-share PKG)``
substitution in ``calibration_file`` is resolved through the ament index when that package is
installed, otherwise the file's name is looked up beside the parameter file and then among the
shipped files, so nebula's own parameter files work without nebula.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ...pointcloud_io import hesai
from ...pointcloud_io.hesai.sensors import COMMON_DEFAULTS, PARAM_DEFAULTS
from ...pointcloud_io.sensor_kit import Sensor, SensorKit
from ...pointcloud_io.velodyne.calibration import CalibrationError, read_calibration_text
from ...pointcloud_io.velodyne.sensors import (
    AZIMUTH_TIMINGS,
    RETURN_MODES,
    SENSOR_MODELS,
    DecoderSettings,
    DecoderSettingsError,
    sensor_model,
)
from ..ament_prefix import package_share
from .hesai_options import CHECKOUT_HESAI_DIR, is_hesai_model, shipped_hesai_calibration
from .option_values import frame_id_problem
from .specs import SPECS

PACKAGE = "gpu_euclidean_cluster"
#: The options of Velodyne settings that a Hesai model refuses.
VELODYNE_ONLY = ("scan_phase", "azimuth_timing")
#: nebula's calibration files in a checkout (and an editable install) of this package.
CHECKOUT_CALIBRATION_DIR = Path(__file__).resolve().parents[3] / "config" / "velodyne"
#: where ``setup.py`` installs them, below the installation prefix.
SHARE_CALIBRATION_DIR = Path("share") / PACKAGE / "config" / "velodyne"
#: The calibration file of each model among those shipped; HDL64 has two (S2, S3), no default.
DEFAULT_CALIBRATION = {
    "VLP16": "VLP16.yaml",
    "VLP32": "VLP32.yaml",
    "VLS128": "VLS128.yaml",
    "HDL32": "HDL32.yaml",
}
HDL64_CALIBRATIONS = ("HDL64e_s2.yaml", "HDL64e_s3.yaml")
MODEL_CHOICES = "{" + ",".join(SENSOR_MODELS) + "}"
RETURN_MODE_CHOICES = "{" + ",".join(RETURN_MODES) + "}"
AZIMUTH_TIMING_CHOICES = "{" + ",".join(AZIMUTH_TIMINGS) + "}"

#: The parameters of a nebula sensor parameter file that the decoder reads.
FLOAT_PARAMS = ("min_range", "max_range", "scan_phase")
INT_PARAMS = ("cloud_min_angle", "cloud_max_angle")
TEXT_PARAMS = ("sensor_model", "return_mode", "frame_id", "calibration_file")
#: The decoder settings an option or the parameter file gives (all ``DecoderSettings`` fields
#: but the model, checked by :func:`sensor_model`, and the view, which nebula never reads).
DECODER_SETTINGS = ("return_mode", "frame_id", *FLOAT_PARAMS, *INT_PARAMS, "azimuth_timing")
_SUBSTITUTION = re.compile(r"\$\(find-pkg-share\s+([\w-]+)\)")
#: The node parameter that sets each ``DecoderSettings`` field: its spec's range (or choices) is
#: the one the node enforces, and the one the replay's option and parameter file are held to.
SETTING_PARAMETERS = {
    "model": "sensor_model",
    "return_mode": "return_mode",
    "min_range": "sensor_min_range",
    "max_range": "sensor_max_range",
    "scan_phase": "scan_phase",
    "cloud_min_angle": "cloud_min_angle",
    "cloud_max_angle": "cloud_max_angle",
    "azimuth_timing": "azimuth_timing",
}
#: The replay option that sets each ``DecoderSettings`` field.
SETTING_OPTIONS = {
    "model": "--sensor-model",
    "return_mode": "--return-mode",
    "frame_id": "--frame-id",
    "min_range": "--min-range",
    "max_range": "--max-range",
    "scan_phase": "--scan-phase",
    "cloud_min_angle": "--cloud-min-angle",
    "cloud_max_angle": "--cloud-max-angle",
    "azimuth_timing": "--azimuth-timing",
}


def calibration_dirs() -> list[Path]:
    """Folders holding the shipped calibration files, in search order: the checkout's
    ``config/velodyne``, then ``<prefix>/share/gpu_euclidean_cluster/config/velodyne`` of this
    Python's prefix and of the ament index (a ROS 2 workspace)."""
    found = [CHECKOUT_CALIBRATION_DIR, Path(sys.prefix) / SHARE_CALIBRATION_DIR]
    share = package_share(package=PACKAGE)
    if share is not None:
        found.append(share / "config" / "velodyne")
    return [d for d in dict.fromkeys(found) if d.is_dir()]


def shipped_calibration(name: str) -> Path | None:
    """The shipped calibration file called ``name``, or None."""
    for folder in calibration_dirs():
        if (folder / name).is_file():
            return folder / name
    return None


def kit_calibration(kit: SensorKit, sensor: Sensor) -> Path:
    """The calibration file of a sensor kit's packets sensor: its ``calibration`` beside the kit
    file (or as given, when absolute), else a shipped file of that name; without one, the
    model's shipped file.

    Raises:
        ValueError: not found, or a model without a shipped file (HDL64: an S2 and an S3).
    """
    model = sensor.input.decoder.model
    name = sensor.input.calibration or DEFAULT_CALIBRATION.get(model)
    if name is None:
        raise ValueError(f"sensor {sensor.name}: a {model} needs its calibration named in the kit")
    path = Path(name).expanduser()
    folder = kit.source.parent if kit.source is not None else Path.cwd()
    beside = path if path.is_absolute() else folder / path
    if beside.is_file():
        return beside
    found = shipped_calibration(name) if path.name == name else None
    if found is None:
        raise ValueError(
            f"sensor {sensor.name}: calibration {name} not found beside the kit ({folder}) or "
            "shipped"
        )
    return found


def setting_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be the decoder setting ``name`` (a ``DecoderSettings`` field other than
    ``model``), or None when it can on its own: outside the range or the choices of the node
    parameter that sets it (:data:`SETTING_PARAMETERS`, the node's table), a fraction for whole
    degrees, a return mode nebula does not name, an empty frame id. Settings that contradict each
    other are ``DecoderSettings``' to refuse."""
    if name == "frame_id":
        return frame_id_problem(value) if isinstance(value, str) else "must be a string"
    if name == "return_mode":  # the node's return_mode lists no choices: nebula's names
        return None if value in RETURN_MODES else f"must be one of {', '.join(RETURN_MODES)}"
    spec = SPECS[SETTING_PARAMETERS[name]]
    if spec.choices:
        return None if value in spec.choices else f"must be one of {spec.constraints}"
    if not spec.in_range(value):
        return f"must be in {spec.constraints}"
    if type(spec.default) is int and not float(value).is_integer():  # in range: a number
        return "must be whole degrees"
    return None


def read_sensor_params(path: Path) -> dict[str, object]:
    """The decoder's parameters of a nebula sensor parameter file (other keys are ignored), each
    checked on its own (:func:`setting_problem`).

    Every ``ros__parameters`` section of the file applies, in file order (``/**`` and node
    names alike); a file without one is read as a plain map of parameters. The file is read as a
    calibration file is (``read_calibration_text``): a regular file, not too large.

    Raises:
        ValueError: missing file, not a regular file, too large, not YAML, no parameters, or a
            value of the wrong type or out of its range; one line naming the file.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    if not path.exists():
        raise ValueError(f"sensor parameter file not found: {path} (--sensor-params)")
    try:
        text = read_calibration_text(path)
    except CalibrationError as error:
        raise ValueError(f"sensor parameter file {error} (--sensor-params)") from None
    try:
        document = YAML(typ="safe", pure=True).load(text)
    except (YAMLError, ValueError, RecursionError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(f"sensor parameter file {path}: not YAML ({reason[:300]})") from None
    if not isinstance(document, dict):
        raise ValueError(f"sensor parameter file {path}: not a map of parameters")
    sections = [
        value["ros__parameters"]
        for value in document.values()
        if isinstance(value, dict) and isinstance(value.get("ros__parameters"), dict)
    ]
    if not sections:
        sections = [document]
    merged: dict[str, object] = {}
    for section in sections:
        merged.update(section)
    params = {k: merged[k] for k in (*TEXT_PARAMS, *FLOAT_PARAMS, *INT_PARAMS) if k in merged}
    if not params:
        raise ValueError(f"sensor parameter file {path}: no sensor_model or decoder parameter")
    for key, value in params.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in FLOAT_PARAMS and not number:
            raise ValueError(f"sensor parameter file {path}: {key} is not a number: {value!r}")
        if key in INT_PARAMS and not (number and (isinstance(value, int) or value.is_integer())):
            raise ValueError(f"sensor parameter file {path}: {key} is not whole degrees: {value!r}")
        if key in TEXT_PARAMS and not isinstance(value, str):
            raise ValueError(f"sensor parameter file {path}: {key} is not a string: {value!r}")
        if key in DECODER_SETTINGS and (problem := setting_problem(key, value)):
            raise ValueError(f"sensor parameter file {path}: {key} {problem}, got {value!r}")
    return params


def _param_calibration(text: str, params_file: Path) -> Path:
    """The file a parameter file's ``calibration_file`` names (see the module docstring)."""
    candidates: list[Path] = []
    match = _SUBSTITUTION.search(text)
    if match:
        share = package_share(package=match.group(1))
        if share is not None:
            candidates.append(Path(_SUBSTITUTION.sub(str(share), text)))
    else:
        path = Path(text).expanduser()
        candidates += [path] if path.is_absolute() else [path, params_file.parent / path]
    name = Path(_SUBSTITUTION.sub("", text)).name
    candidates.append(params_file.parent / name)
    found = next((c for c in candidates if c.is_file()), None) or shipped_calibration(name)
    if found is None:
        raise ValueError(
            f"calibration file not found: {text} (calibration_file of {params_file}); "
            "give --calibration FILE"
        )
    return found


@dataclass(frozen=True)
class PacketDecoding:
    """Resolved decoding of packet topics: decoder settings (Velodyne's or Hesai's) and
    calibration file."""

    settings: DecoderSettings | hesai.DecoderSettings
    calibration_file: Path

    @property
    def is_hesai(self) -> bool:
        """Whether the settings are a Hesai model's (``PandarScan`` topics)."""
        return isinstance(self.settings, hesai.DecoderSettings)

    def describe(self) -> str:
        """One line for the start-up message."""
        s = self.settings
        if isinstance(s, hesai.DecoderSettings):
            return (
                f"{s.model}, calibration {self.calibration_file}, return mode {s.return_mode}, "
                f"frame {s.frame_id}, range {s.min_range:g}-{s.max_range:g} m, cut angle "
                f"{s.cut_angle:g} deg, cloud angles {s.cloud_min_angle}-{s.cloud_max_angle} deg"
            )
        return (
            f"{s.model}, calibration {self.calibration_file}, return mode {s.return_mode}, "
            f"frame {s.frame_id}, range {s.min_range:g}-{s.max_range:g} m, scan phase "
            f"{s.scan_phase:g} deg, cloud angles {s.cloud_min_angle}-{s.cloud_max_angle} deg, "
            f"azimuth timing {s.azimuth_timing}"
        )


@dataclass(frozen=True)
class VelodyneOptions:
    """The replay options for Velodyne packet topics (None: not given).

    ``sensor_model`` is checked and written in nebula's spelling on construction, by the sensor
    table's rule (:func:`~gpu_euclidean_cluster.pointcloud_io.velodyne.sensors.sensor_model`),
    and every other option given on its own (:func:`setting_problem`: the node's ranges); the
    settings together, the parameter file and the calibration file by :meth:`resolve`, which
    only a bag with packet topics calls.

    Raises:
        ValueError: an unknown model, or an option out of its range; one line naming the option.
    """

    sensor_model: str | None = None
    calibration: Path | None = None
    sensor_params: Path | None = None
    return_mode: str | None = None
    frame_id: str | None = None
    min_range: float | None = None
    max_range: float | None = None
    scan_phase: float | None = None
    cloud_min_angle: int | None = None
    cloud_max_angle: int | None = None
    azimuth_timing: str | None = None

    def __post_init__(self) -> None:
        hesai_model = self.sensor_model is not None and is_hesai_model(self.sensor_model)
        if hesai_model:
            model = hesai.sensor_model(self.sensor_model, SETTING_OPTIONS["model"]).name
            object.__setattr__(self, "sensor_model", model)
        elif self.sensor_model is not None:
            model = sensor_model(self.sensor_model, SETTING_OPTIONS["model"]).name
            object.__setattr__(self, "sensor_model", model)
        for name in DECODER_SETTINGS:
            value = getattr(self, name)
            if value is None or (hesai_model and name == "return_mode"):  # the model's own
                continue
            if problem := setting_problem(name, value):
                raise ValueError(f"{SETTING_OPTIONS[name]} {problem}, got {value!r}")

    def resolve(self) -> PacketDecoding:
        """The decoder settings and calibration file for packet topics.

        Raises:
            ValueError: no sensor model, an unknown model, a missing calibration or parameter
                file, a bad parameter file, or settings that keep no return; the message is one
                line naming the option (or the parameter file's key).
        """
        if self.sensor_model is not None and is_hesai_model(self.sensor_model):
            return self._resolve_hesai(self.sensor_model)
        params = read_sensor_params(self.sensor_params) if self.sensor_params else {}
        file_model = None
        if "sensor_model" in params:
            given_as = f"sensor_model in {self.sensor_params}"
            file_model = sensor_model(str(params["sensor_model"]), given_as).name
        model = self.sensor_model or file_model
        if model is None:
            raise ValueError(
                f"Velodyne packets need the sensor model: give --sensor-model {MODEL_CHOICES} "
                "or --sensor-params FILE (nebula's *.param.yaml)"
            )
        values = {key: params[key] for key in DECODER_SETTINGS if key in params}
        names = {key: f"{key} of {self.sensor_params}" for key in values}
        for key in DECODER_SETTINGS:
            if getattr(self, key) is not None:
                values[key] = getattr(self, key)
                names[key] = SETTING_OPTIONS[key]
        for key in FLOAT_PARAMS:
            if key in values:
                values[key] = float(values[key])
        for key in INT_PARAMS:
            if key in values:
                values[key] = int(values[key])
        try:
            settings = DecoderSettings(model=model, **values)
        except DecoderSettingsError as error:
            raise ValueError(
                f"Velodyne decoder settings: {error.naming(_default_names(names))}"
            ) from None
        return PacketDecoding(settings, self._calibration_file(model, params, file_model))

    def _resolve_hesai(self, model: str) -> PacketDecoding:
        """:meth:`resolve` for a Hesai model (see the module docstring)."""
        refused = [SETTING_OPTIONS[key] for key in VELODYNE_ONLY if getattr(self, key) is not None]
        if self.sensor_params is not None:
            refused.append("--sensor-params")
        if refused:
            raise ValueError(
                f"--sensor-model {model} is a Hesai model: {', '.join(refused)} apply to "
                "Velodyne models only (give a Hesai model's settings as options)"
            )
        values = {**COMMON_DEFAULTS, **PARAM_DEFAULTS.get(model, {})}
        names: dict[str, str] = {}
        for key in DECODER_SETTINGS:
            if key not in VELODYNE_ONLY and getattr(self, key) is not None:
                values[key] = getattr(self, key)
                names[key] = SETTING_OPTIONS[key]
        try:
            settings = hesai.DecoderSettings(model=model, **values)
        except hesai.DecoderSettingsError as error:
            defaults = {key: f"nebula's default {key}" for key in values}
            raise ValueError(
                f"Hesai decoder settings: {error.naming({**defaults, **names})}"
            ) from None
        if self.calibration is not None:
            path = self.calibration.expanduser()
            if not path.exists():
                raise ValueError(f"calibration file not found: {path} (--calibration)")
            return PacketDecoding(settings, path)
        found = shipped_hesai_calibration(model)
        if found is None:
            raise ValueError(
                f"calibration file of {model} not found (looked in {CHECKOUT_HESAI_DIR} and "
                "<prefix>/share/gpu_euclidean_cluster/config/hesai): give --calibration FILE"
            )
        return PacketDecoding(settings, found)

    def _calibration_file(
        self, model: str, params: dict[str, object], file_model: str | None
    ) -> Path:
        if self.calibration is not None:
            path = self.calibration.expanduser()
            if path.exists():  # any kind: reading it refuses what is no regular file, by name
                return path
            shipped = shipped_calibration(path.name) if path.name == str(path) else None
            if shipped is None:
                raise ValueError(f"calibration file not found: {path} (--calibration)")
            return shipped
        if "calibration_file" in params and file_model in (None, model):
            assert self.sensor_params is not None
            return _param_calibration(str(params["calibration_file"]), self.sensor_params)
        if model not in DEFAULT_CALIBRATION:
            raise ValueError(
                f"--sensor-model {model} has no default calibration (nebula ships "
                f"{' and '.join(HDL64_CALIBRATIONS)}): give --calibration FILE"
            )
        name = DEFAULT_CALIBRATION[model]
        found = shipped_calibration(name)
        if found is None:
            raise ValueError(
                f"calibration file {name} of {model} not found (looked in "
                f"{CHECKOUT_CALIBRATION_DIR} and <prefix>/{SHARE_CALIBRATION_DIR}): "
                "give --calibration FILE"
            )
        return found


def _default_names(names: Mapping[str, str]) -> dict[str, str]:
    """``names`` for the settings given, and "the default --option" for the others."""
    return {key: names.get(key, f"the default {option}") for key, option in SETTING_OPTIONS.items()}
