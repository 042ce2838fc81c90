"""Point cloud files: KITTI ``.bin``, nuScenes ``.pcd.bin``, PCD (any encoding) and ``.npy``.

    >>> cloud = load_points("kitti_000008.bin")        # format from the name, or format="kitti"
    >>> cloud.xyz.shape, cloud.fields["intensity"].dtype
    ((17238, 3), dtype('float32'))
    >>> write_pcd("frame.pcd", cloud, encoding="binary")

Readers are vectorised NumPy and keep non-finite points, so row ``i`` of ``cloud.xyz`` is the
file's point ``i``. Errors name the file and the reason in one line.
"""

from .cloud import Cloud, PointCloudFileError
from .loader import FORMATS, detect_format, load_points
from .npy import read_npy
from .pcd import read_pcd, write_pcd
from .raw_bin import read_kitti, read_nuscenes

__all__ = [
    "FORMATS",
    "Cloud",
    "PointCloudFileError",
    "detect_format",
    "load_points",
    "read_kitti",
    "read_npy",
    "read_nuscenes",
    "read_pcd",
    "write_pcd",
]
