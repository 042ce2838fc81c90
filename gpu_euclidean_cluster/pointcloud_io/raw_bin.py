"""Headerless float32 record files: KITTI velodyne ``.bin`` and nuScenes ``.pcd.bin``.

Both are little-endian float32 records with no header: KITTI has 4 values per point
(x y z intensity), nuScenes LIDAR_TOP has 5 (x y z intensity ring).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cloud import Cloud, PointCloudFileError
from .files import file_size

KITTI_COLUMNS = ("x", "y", "z", "intensity")
NUSCENES_COLUMNS = ("x", "y", "z", "intensity", "ring")

_RECORD_DTYPE = np.dtype("<f4")


def read_kitti(path: str | Path) -> Cloud:
    """A KITTI velodyne scan: x y z and ``intensity`` (float32, 0..1)."""
    table = _read_records(path, len(KITTI_COLUMNS), "KITTI")
    return Cloud(
        xyz=np.ascontiguousarray(table[:, :3]),
        fields={"intensity": np.ascontiguousarray(table[:, 3])},
    )


def read_nuscenes(path: str | Path) -> Cloud:
    """A nuScenes LIDAR_TOP sweep: x y z, ``intensity`` (float32) and ``ring`` (uint16).

    Raises:
        PointCloudFileError: the ring column holds values that are not laser indices
            (integers in 0..65535), which means the file is not a nuScenes sweep.
    """
    table = _read_records(path, len(NUSCENES_COLUMNS), "nuScenes")
    ring = table[:, 4]
    integral = np.isfinite(ring) & (ring == np.round(ring)) & (ring >= 0) & (ring <= 0xFFFF)
    if not integral.all():
        bad = int(np.flatnonzero(~integral)[0])
        raise PointCloudFileError(
            path,
            f"not a nuScenes sweep: ring of point {bad} is {float(ring[bad]):g}, not a laser index "
            "(is it a KITTI file? use format 'kitti')",
        )
    return Cloud(
        xyz=np.ascontiguousarray(table[:, :3]),
        fields={
            "intensity": np.ascontiguousarray(table[:, 3]),
            "ring": ring.astype(np.uint16),
        },
    )


def _read_records(path: str | Path, columns: int, kind: str) -> np.ndarray:
    """The file as an (N, columns) float32 table, after checking that its size fits."""
    size = file_size(path)
    record = columns * _RECORD_DTYPE.itemsize
    if size % record:
        raise PointCloudFileError(
            path,
            f"size {size} bytes is not a multiple of the {record}-byte {kind} record "
            f"({columns} float32 per point); truncated, or not a {kind} file",
        )
    return np.fromfile(path, dtype=_RECORD_DTYPE).reshape(-1, columns)
