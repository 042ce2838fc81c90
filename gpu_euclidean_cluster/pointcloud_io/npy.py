"""NumPy ``.npy`` point arrays.

Two layouts are accepted:

- a plain numeric array of shape (N, C) or, organised, (H, W, C) with C >= 3: columns 0-2 are
  x y z; column 3, where present, is ``intensity`` and column 4 ``ring`` (the KITTI and nuScenes
  column order); further columns are named ``column5``, ``column6``, ...;
- a structured array of shape (N,) or, organised, (H, W) with fields ``x``, ``y``, ``z``; every
  other field is kept under its own name and dtype.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .cloud import Cloud, PointCloudFileError
from .files import file_size

_COLUMN_NAMES = ("x", "y", "z", "intensity", "ring")


def read_npy(path: str | Path) -> Cloud:
    """Read a ``.npy`` array of points (see the module docstring for the layouts).

    Raises:
        PointCloudFileError: not a readable ``.npy`` file, or an array of another layout.
    """
    file_size(path)
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as error:
        raise PointCloudFileError(path, f"not a readable .npy array: {error}") from None
    if not isinstance(array, np.ndarray):
        raise PointCloudFileError(path, "holds an .npz archive, not one .npy array")
    if array.dtype.names:
        return _structured_cloud(array, path)
    return _plain_cloud(array, path)


def _plain_cloud(array: np.ndarray, path: str | Path) -> Cloud:
    if array.ndim not in (2, 3) or array.shape[-1] < 3:
        raise PointCloudFileError(
            path, f"array of shape {array.shape} is not (N, C) or (H, W, C) with C >= 3 columns"
        )
    if array.dtype.kind not in "fiu":
        raise PointCloudFileError(path, f"array of dtype {array.dtype} is not numeric")
    height = array.shape[0] if array.ndim == 3 and array.size else 1
    table = array.reshape(-1, array.shape[-1])
    names = [*_COLUMN_NAMES, *(f"column{c}" for c in range(len(_COLUMN_NAMES), table.shape[1]))]
    fields = {names[c]: np.ascontiguousarray(table[:, c]) for c in range(3, table.shape[1])}
    xyz = np.ascontiguousarray(table[:, :3], dtype=np.float32)
    return Cloud(xyz=xyz, fields=fields, height=height)


def _structured_cloud(array: np.ndarray, path: str | Path) -> Cloud:
    names = array.dtype.names or ()
    missing = [axis for axis in "xyz" if axis not in names]
    if missing:
        raise PointCloudFileError(
            path, f"structured array has no {'/'.join(missing)} field (fields: {', '.join(names)})"
        )
    if array.ndim not in (1, 2):
        raise PointCloudFileError(
            path, f"structured array of shape {array.shape} is not (N,) or (H, W)"
        )
    for axis in "xyz":
        if array.dtype[axis].kind not in "fiu" or array.dtype[axis].shape:
            raise PointCloudFileError(
                path, f"field {axis} of dtype {array.dtype[axis]} is not one number per point"
            )
    height = array.shape[0] if array.ndim == 2 and array.size else 1
    flat = array.reshape(-1)
    xyz = np.empty((flat.shape[0], 3), dtype=np.float32)
    for index, axis in enumerate("xyz"):
        xyz[:, index] = flat[axis]
    fields = {}
    for name in names:
        if name in ("x", "y", "z"):
            continue
        values = np.ascontiguousarray(flat[name])
        if values.ndim > 2:
            values = values.reshape(values.shape[0], -1)
        fields[name] = values
    return Cloud(xyz=xyz, fields=fields, height=height)
