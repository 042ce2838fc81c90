"""Headerless float32 record files: KITTI velodyne ``.bin`` and nuScenes ``.pcd.bin``.

Both are little-endian float32 records with no header: KITTI has 4 values per point
(x y z intensity), nuScenes LIDAR_TOP has 5 (x y z intensity ring).

The file is read in blocks of :data:`BLOCK_POINTS` points straight into the cloud's own arrays, so
reading takes the file's size in memory once (plus a block), not twice; with ``max_bytes`` a file
larger than that is refused with its size before anything is allocated (a sparse file can claim
terabytes it does not hold on disk).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cloud import Cloud, PointCloudFileError
from .files import check_memory, file_size

KITTI_COLUMNS = ("x", "y", "z", "intensity")
NUSCENES_COLUMNS = ("x", "y", "z", "intensity", "ring")

_RECORD_DTYPE = np.dtype("<f4")
#: Points read at once (1 MiB of KITTI records).
BLOCK_POINTS = 1 << 16


def read_kitti(path: str | Path, max_bytes: int | None = None) -> Cloud:
    """A KITTI velodyne scan: x y z and ``intensity`` (float32, 0..1).

    Args:
        path: the file.
        max_bytes: refuse a file whose points would take more memory than this (None: any).

    Raises:
        PointCloudFileError: the size is not a whole number of records, or over ``max_bytes``.
    """
    xyz, (intensity,) = _read_records(path, len(KITTI_COLUMNS), "KITTI", max_bytes)
    return Cloud(xyz=xyz, fields={"intensity": intensity})


def read_nuscenes(path: str | Path, max_bytes: int | None = None) -> Cloud:
    """A nuScenes LIDAR_TOP sweep: x y z, ``intensity`` (float32) and ``ring`` (uint16).

    Args:
        path: the file.
        max_bytes: refuse a file whose points would take more memory than this (None: any).

    Raises:
        PointCloudFileError: the ring column holds values that are not laser indices
            (integers in 0..65535), which means the file is not a nuScenes sweep; the size is
            not a whole number of records, or over ``max_bytes``.
    """
    xyz, (intensity, ring) = _read_records(path, len(NUSCENES_COLUMNS), "nuScenes", max_bytes)
    integral = np.isfinite(ring) & (ring == np.round(ring)) & (ring >= 0) & (ring <= 0xFFFF)
    if not integral.all():
        bad = int(np.flatnonzero(~integral)[0])
        raise PointCloudFileError(
            path,
            f"not a nuScenes sweep: ring of point {bad} is {float(ring[bad]):g}, not a laser index "
            "(is it a KITTI file? use format 'kitti')",
        )
    return Cloud(xyz=xyz, fields={"intensity": intensity, "ring": ring.astype(np.uint16)})


def _read_records(
    path: str | Path, columns: int, kind: str, max_bytes: int | None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The file's x y z as an (N, 3) array and each further column as an (N,) array, float32,
    after checking that its size fits the record and ``max_bytes``; read block by block."""
    size = file_size(path)
    record = columns * _RECORD_DTYPE.itemsize
    if size % record:
        raise PointCloudFileError(
            path,
            f"size {size} bytes is not a multiple of the {record}-byte {kind} record "
            f"({columns} float32 per point); truncated, or not a {kind} file",
        )
    points = size // record
    check_memory(path, size, f"reading {points} {kind} points", max_bytes)
    xyz = np.empty((points, 3), dtype=_RECORD_DTYPE)
    others = [np.empty(points, dtype=_RECORD_DTYPE) for _ in range(columns - 3)]
    try:
        with open(path, "rb") as stream:
            for start in range(0, points, BLOCK_POINTS):
                count = min(BLOCK_POINTS, points - start)
                block = np.fromfile(stream, dtype=_RECORD_DTYPE, count=count * columns)
                if block.size != count * columns:
                    raise PointCloudFileError(
                        path,
                        f"the file ended after {start * record + block.nbytes} of its "
                        f"{size} bytes while it was read (it shrank)",
                    )
                block = block.reshape(count, columns)
                xyz[start : start + count] = block[:, :3]
                for index, column in enumerate(others):
                    column[start : start + count] = block[:, 3 + index]
    except OSError as error:
        raise OSError(f"{path}: cannot read: {error.strerror or error}") from None
    return xyz, others
