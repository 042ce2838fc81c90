"""LiDAR scene simulator: rotating multi-beam sensors ray-cast against simple street scenes.

    >>> sim = LidarSimulator(get_sensor("hdl64e"), seed=0)
    >>> scan = sim.scan(street_scene(seed=0))
    >>> scan.xyz.shape, scan.object_id[:5]        # every point knows its ground-truth object

Everything is vectorised NumPy; an HDL-64E sweep (about 130 000 rays) takes a fraction of a second.
"""

from .beams import HDL32E, HDL64E, SENSORS, VLP16, BeamModel, get_sensor
from .lidar import LidarSimulator, Scan
from .raycast import RayGrid, cast
from .scene import GROUND_ID, Box, Cylinder, Scene, SceneBuilder, SceneObject, street_scene

__all__ = [
    "GROUND_ID",
    "HDL32E",
    "HDL64E",
    "SENSORS",
    "VLP16",
    "BeamModel",
    "Box",
    "Cylinder",
    "LidarSimulator",
    "RayGrid",
    "Scan",
    "Scene",
    "SceneBuilder",
    "SceneObject",
    "cast",
    "get_sensor",
    "street_scene",
]
