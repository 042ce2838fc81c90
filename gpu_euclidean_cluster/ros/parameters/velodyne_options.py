"""How ``replay`` decodes Velodyne packet topics: sensor model, calibration and decoder settings.

Free of ROS. The settings come from nebula's sensor parameter file (``--sensor-params``, the
``*.param.yaml`` format of nebula's ``config/`` folder: ``/**: ros__parameters: {sensor_model,
return_mode, frame_id, min_range, max_range, scan_phase, cloud_min_angle, cloud_max_angle,
calibration_file, ...}``), then the explicit options, which override it; what neither gives has
nebula's default (:class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.DecoderSettings`). The
azimuth timing (``--azimuth-timing``: ``nebula``, the default, or ``sensor``) is this decoder's
setting, not nebula's, and comes from the options only.

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
from dataclasses import dataclass
from pathlib import Path

from ...pointcloud_io.velodyne.sensors import (
    AZIMUTH_TIMINGS,
    RETURN_MODES,
    SENSOR_MODELS,
    DecoderSettings,
    sensor_model,
)
from ..ament_prefix import package_share

PACKAGE = "gpu_euclidean_cluster"
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
_SUBSTITUTION = re.compile(r"\$\(find-pkg-share\s+([\w-]+)\)")


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


def read_sensor_params(path: Path) -> dict[str, object]:
    """The decoder's parameters of a nebula sensor parameter file (other keys are ignored).

    Every ``ros__parameters`` section of the file applies, in file order (``/**`` and node
    names alike); a file without one is read as a plain map of parameters.

    Raises:
        ValueError: missing file, not YAML, no parameters, or a value of the wrong type.
    """
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    if not path.is_file():
        raise ValueError(f"sensor parameter file not found: {path} (--sensor-params)")
    try:
        document = YAML(typ="safe", pure=True).load(path.read_text())
    except (OSError, YAMLError, UnicodeDecodeError) as error:
        reason = " ".join(str(error).split())
        raise ValueError(f"sensor parameter file {path}: not YAML ({reason})") from None
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
        if key in INT_PARAMS and not (number and float(value).is_integer()):
            raise ValueError(f"sensor parameter file {path}: {key} is not whole degrees: {value!r}")
        if key in TEXT_PARAMS and not isinstance(value, str):
            raise ValueError(f"sensor parameter file {path}: {key} is not a string: {value!r}")
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
    """Resolved decoding of Velodyne packet topics: decoder settings and calibration file."""

    settings: DecoderSettings
    calibration_file: Path

    def describe(self) -> str:
        """One line for the start-up message."""
        s = self.settings
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
    table's rule (:func:`~gpu_euclidean_cluster.pointcloud_io.velodyne.sensors.sensor_model`);
    everything else is checked by :meth:`resolve`, which only a bag with packet topics calls.
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
        if self.sensor_model is not None:
            model = sensor_model(self.sensor_model, "--sensor-model").name
            object.__setattr__(self, "sensor_model", model)

    def resolve(self) -> PacketDecoding:
        """The decoder settings and calibration file for packet topics.

        Raises:
            ValueError: no sensor model, an unknown model, a missing calibration or parameter
                file, or a bad setting; the message is one line naming the option.
        """
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
        values: dict[str, object] = {
            key: params[key]
            for key in ("return_mode", "frame_id", *FLOAT_PARAMS, *INT_PARAMS)
            if key in params
        }
        for key in ("return_mode", "frame_id", *FLOAT_PARAMS, *INT_PARAMS, "azimuth_timing"):
            if getattr(self, key) is not None:
                values[key] = getattr(self, key)
        for key in FLOAT_PARAMS:
            if key in values:
                values[key] = float(values[key])
        for key in INT_PARAMS:
            if key in values:
                values[key] = int(values[key])
        try:
            settings = DecoderSettings(model=model, **values)
        except ValueError as error:
            raise ValueError(f"Velodyne decoder settings: {error}") from None
        return PacketDecoding(settings, self._calibration_file(model, params, file_model))

    def _calibration_file(
        self, model: str, params: dict[str, object], file_model: str | None
    ) -> Path:
        if self.calibration is not None:
            path = self.calibration.expanduser()
            if path.is_file():
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
