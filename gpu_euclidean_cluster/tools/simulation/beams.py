"""Beam tables of rotating multi-beam LiDARs: Velodyne VLP-16, HDL-32E and HDL-64E.

Elevation angles are listed in laser-id (firing) order, as the sensors report them. The ring of a
laser is its rank by elevation (ring 0 = lowest beam), as in the ``velodyne_pointcloud`` driver.

Sources: VLP-16 and HDL-32E user manuals (vertical angle tables, 600 rpm azimuth resolution,
range and accuracy); HDL-64E S2 datasheet: upper block of 32 lasers from +2.0 deg to -8.33 deg at
1/3 deg spacing, lower block of 32 from -8.83 deg to -24.33 deg at 1/2 deg spacing (per-unit
calibration files differ by fractions of a degree; these are the nominal values).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BeamModel:
    """A rotating LiDAR: beam elevations, azimuth step per firing and range characteristics.

    Attributes:
        name: sensor name used on the command line.
        elevations_deg: elevation of each laser in laser-id order (degrees, up positive).
        azimuth_step_deg: horizontal angle between firings at 10 Hz rotation.
        min_range_m / max_range_m: returns outside this range are lost.
        range_noise_m: standard deviation of the Gaussian range error.
        dropout: probability that a return is lost (dark or specular surfaces, noise).
    """

    name: str
    elevations_deg: tuple[float, ...]
    azimuth_step_deg: float
    min_range_m: float
    max_range_m: float
    range_noise_m: float
    dropout: float

    def __post_init__(self) -> None:
        if not self.elevations_deg:
            raise ValueError(f"{self.name}: a beam model needs at least one beam")
        if not 0 < self.azimuth_step_deg <= 360:
            raise ValueError(f"{self.name}: azimuth step must be in (0, 360] degrees")
        if not 0 <= self.min_range_m < self.max_range_m:
            raise ValueError(f"{self.name}: need 0 <= min_range_m < max_range_m")
        if self.range_noise_m < 0 or not 0 <= self.dropout < 1:
            raise ValueError(f"{self.name}: need range_noise_m >= 0 and 0 <= dropout < 1")

    @property
    def num_beams(self) -> int:
        return len(self.elevations_deg)

    @property
    def rings(self) -> np.ndarray:
        """Ring index of each laser (rank of its elevation, 0 = lowest), uint16."""
        order = np.argsort(np.asarray(self.elevations_deg), kind="stable")
        rings = np.empty(self.num_beams, dtype=np.uint16)
        rings[order] = np.arange(self.num_beams, dtype=np.uint16)
        return rings

    @property
    def azimuths_per_sweep(self) -> int:
        """Firings per revolution."""
        return round(360.0 / self.azimuth_step_deg)


VLP16 = BeamModel(
    name="vlp16",
    elevations_deg=(-15, 1, -13, 3, -11, 5, -9, 7, -7, 9, -5, 11, -3, 13, -1, 15),
    azimuth_step_deg=0.2,
    min_range_m=0.5,
    max_range_m=100.0,
    range_noise_m=0.03,
    dropout=0.01,
)

# fmt: off
HDL32E_ELEVATIONS_DEG = (
    -30.67, -9.33, -29.33, -8.00, -28.00, -6.67, -26.67, -5.33,
    -25.33, -4.00, -24.00, -2.67, -22.67, -1.33, -21.33, 0.00,
    -20.00, 1.33, -18.67, 2.67, -17.33, 4.00, -16.00, 5.33,
    -14.67, 6.67, -13.33, 8.00, -12.00, 9.33, -10.67, 10.67,
)
# fmt: on

HDL32E = BeamModel(
    name="hdl32e",
    elevations_deg=HDL32E_ELEVATIONS_DEG,
    azimuth_step_deg=0.16,
    min_range_m=1.0,
    max_range_m=100.0,
    range_noise_m=0.02,
    dropout=0.01,
)

HDL64E = BeamModel(
    name="hdl64e",
    elevations_deg=tuple(
        np.round(
            np.concatenate([np.linspace(2.0, -8.33, 32), np.linspace(-8.83, -24.33, 32)]), 3
        ).tolist()
    ),
    azimuth_step_deg=0.1728,
    min_range_m=0.9,
    max_range_m=120.0,
    range_noise_m=0.02,
    dropout=0.02,
)

SENSORS: dict[str, BeamModel] = {model.name: model for model in (VLP16, HDL32E, HDL64E)}


def get_sensor(name: str) -> BeamModel:
    """The beam model called ``name`` (``vlp16``, ``hdl32e`` or ``hdl64e``)."""
    try:
        return SENSORS[name]
    except KeyError:
        raise ValueError(f"unknown sensor {name!r}; choose one of {', '.join(SENSORS)}") from None
