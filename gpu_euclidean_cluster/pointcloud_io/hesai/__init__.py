"""Hesai packet decoding as Autoware's LiDAR driver (nebula) does it, ROS-free.

    >>> settings = DecoderSettings(model="PandarXT32", return_mode="Dual", min_range=0.05)
    >>> decoder = SweepDecoder(load_for_model("PandarXT32.csv", settings.sensor), settings)
    >>> for scan in read_pandar_scans("bag_dir"):
    ...     for sweep in decoder.feed(scan.packets, scan.sizes):
    ...         sweep.points["x"], sweep.stamp_ns

Modules: :mod:`.sensors` (models, packet formats, settings), :mod:`.calibration` (the CSV and
the AT128's ``.dat``), :mod:`.angles` (the two angle correctors), :mod:`.timing` (firing
times), :mod:`.packets` (packet checks and the returns kept), :mod:`.scan_cutter` (nebula's
two-buffer cutter), :mod:`.sweeps` (the stateful sweep decoder), :mod:`.bags` (``PandarScan``
bags), :mod:`.cdr` (``PandarScan`` CDR bytes). The points are Velodyne's
:data:`~..velodyne.packets.POINT_DTYPE` (``PointXYZIRCAEDT``).
"""

from .bags import HesaiBagError, PandarScanMessage, pandar_typestore, read_pandar_scans
from .calibration import (
    CalibrationError,
    HesaiCalibration,
    HesaiCorrection,
    load_calibration,
    load_correction,
    load_for_model,
)
from .cdr import HesaiCdrError, scan_from_cdr, scan_to_cdr
from .packets import POINT_DTYPE, PacketsRefusedError
from .sensors import SENSOR_MODELS, DecoderSettings, DecoderSettingsError, HesaiModel, sensor_model
from .sweeps import Sweep, SweepDecoder

__all__ = [
    "POINT_DTYPE",
    "SENSOR_MODELS",
    "CalibrationError",
    "DecoderSettings",
    "DecoderSettingsError",
    "HesaiBagError",
    "HesaiCalibration",
    "HesaiCdrError",
    "HesaiCorrection",
    "HesaiModel",
    "PacketsRefusedError",
    "PandarScanMessage",
    "Sweep",
    "SweepDecoder",
    "load_calibration",
    "load_correction",
    "load_for_model",
    "pandar_typestore",
    "read_pandar_scans",
    "scan_from_cdr",
    "scan_to_cdr",
    "sensor_model",
]
