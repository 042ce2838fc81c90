"""Hesai packet input: which models are Hesai's, their shipped calibration files, and the node
parameters that set the Hesai decoder's settings.

Free of ROS. ``sensor_model`` names a Velodyne model or a Hesai one (nebula's names, matched
without regard to case: :func:`is_hesai_model`); a Hesai model's packets arrive as
``pandar_msgs/msg/PandarScan`` and are decoded by
:class:`~gpu_euclidean_cluster.pointcloud_io.hesai.SweepDecoder`. Its calibration defaults to the
model's file among nebula's calibration files shipped in ``config/hesai/`` (a CSV; the AT128's
``.dat`` correction).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ...pointcloud_io.hesai import SENSOR_MODELS as HESAI_MODELS
from ..ament_prefix import package_share

PACKAGE = "gpu_euclidean_cluster"

#: nebula's Hesai calibration files in a checkout (and an editable install) of this package.
CHECKOUT_HESAI_DIR = Path(__file__).resolve().parents[3] / "config" / "hesai"
#: where ``setup.py`` installs them, below the installation prefix.
SHARE_HESAI_DIR = Path("share") / PACKAGE / "config" / "hesai"
#: The shipped calibration file of each Hesai model (the Pandar40M has none: nebula ships none).
DEFAULT_HESAI_CALIBRATION = {
    name: ("PandarAT128.dat" if model.corrector == "correction" else f"{name}.csv")
    for name, model in HESAI_MODELS.items()
    if name != "Pandar40M"
}
#: The node parameter that sets each Hesai ``DecoderSettings`` field (the frame id is the scan's,
#: or nebula's ``hesai``; ``sync_angle`` is the sensor's own and never read by the decoder).
HESAI_SETTING_PARAMETERS = {
    "model": "sensor_model",
    "return_mode": "return_mode",
    "min_range": "sensor_min_range",
    "max_range": "sensor_max_range",
    "cloud_min_angle": "cloud_min_angle",
    "cloud_max_angle": "cloud_max_angle",
    "cut_angle": "cut_angle",
    "dual_return_distance_threshold": "dual_return_distance_threshold",
}


def is_hesai_model(name: str) -> bool:
    """Whether ``name`` is one of nebula's Hesai ``sensor_model`` names (any case, blanks
    around ignored)."""
    wanted = str(name).strip().lower()
    return any(model.lower() == wanted for model in HESAI_MODELS)


def hesai_calibration_dirs() -> list[Path]:
    """Folders holding the shipped Hesai calibration files, in search order: the checkout's
    ``config/hesai``, then ``<prefix>/share/gpu_euclidean_cluster/config/hesai`` of this
    Python's prefix and of the ament index."""
    found = [CHECKOUT_HESAI_DIR, Path(sys.prefix) / SHARE_HESAI_DIR]
    share = package_share(package=PACKAGE)
    if share is not None:
        found.append(share / "config" / "hesai")
    return [d for d in dict.fromkeys(found) if d.is_dir()]


def shipped_hesai_calibration(model: str) -> Path | None:
    """The shipped calibration file of Hesai ``model`` (nebula's spelling), or None."""
    name = DEFAULT_HESAI_CALIBRATION.get(model)
    if name is None:
        return None
    for folder in hesai_calibration_dirs():
        if (folder / name).is_file():
            return folder / name
    return None
