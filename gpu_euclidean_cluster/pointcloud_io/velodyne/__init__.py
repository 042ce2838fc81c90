"""Velodyne packet decoding as Autoware's LiDAR driver (nebula) does it, ROS-free.

    >>> calibration = load_calibration("VLP16.yaml")
    >>> decoder = SweepDecoder(calibration, DecoderSettings(model="VLP16", return_mode="Dual"))
    >>> for scan in read_velodyne_scans("bag_dir"):
    ...     for sweep in decoder.feed(scan.packets, scan.packet_seconds):
    ...         sweep.points["x"], sweep.stamp

Modules: :mod:`.calibration` (nebula's calibration YAML), :mod:`.sensors` (models, settings),
:mod:`.packets` (the pure per-packet decoder and its arithmetic), :mod:`.sweeps` (sweep cutting),
:mod:`.libm` (glibc's ``sinf``/``cosf``), :mod:`.bags` (``VelodyneScan`` bags).
"""

from .bags import VelodyneBagError, VelodyneScanMessage, read_velodyne_scans, velodyne_typestore
from .calibration import CalibrationError, VelodyneCalibration, load_calibration
from .packets import POINT_DTYPE, decode_packets
from .sensors import SENSOR_MODELS, DecoderSettings, SensorModel, sensor_model
from .sweeps import Sweep, SweepDecoder

__all__ = [
    "POINT_DTYPE",
    "SENSOR_MODELS",
    "CalibrationError",
    "DecoderSettings",
    "SensorModel",
    "Sweep",
    "SweepDecoder",
    "VelodyneBagError",
    "VelodyneCalibration",
    "VelodyneScanMessage",
    "decode_packets",
    "load_calibration",
    "read_velodyne_scans",
    "sensor_model",
    "velodyne_typestore",
]
