"""NumPy ``.npy`` point arrays.

Two layouts are accepted:

- a plain numeric array of shape (N, C) or, organised, (H, W, C) with C >= 3: columns 0-2 are
  x y z; column 3, where present, is ``intensity`` and column 4 ``ring`` (the KITTI and nuScenes
  column order); further columns are named ``column5``, ``column6``, ...;
- a structured array of shape (N,) or, organised, (H, W) with fields ``x``, ``y``, ``z``; every
  other field is kept under its own name and dtype.

The header's shape and dtype are checked against the bytes the file holds before the array is
allocated: a 1 kB file cannot ask for terabytes.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from .cloud import Cloud, PointCloudFileError
from .files import check_memory, file_size

_COLUMN_NAMES = ("x", "y", "z", "intensity", "ring")


def read_npy(path: str | Path, max_bytes: int | None = None) -> Cloud:
    """Read a ``.npy`` array of points (see the module docstring for the layouts).

    Args:
        path: the file.
        max_bytes: refuse an array whose reading would take more memory than this (None: any).

    Raises:
        PointCloudFileError: not a readable ``.npy`` file, a header declaring more data than the
            file holds, an array over ``max_bytes``, or an array of another layout.
    """
    size = file_size(path)
    array_bytes, points = _declared_size(path, size)
    # the array, then the float32 x y z the cloud keeps beside its other fields
    check_memory(path, array_bytes + 12 * points, f"an array of {points} points", max_bytes)
    try:
        array = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, OSError) as error:
        raise PointCloudFileError(path, f"not a readable .npy array: {error}") from None
    if not isinstance(array, np.ndarray):
        raise PointCloudFileError(path, "holds an .npz archive, not one .npy array")
    if array.dtype.names:
        return _structured_cloud(array, path)
    return _plain_cloud(array, path)


def _declared_size(path: str | Path, size: int) -> tuple[int, int]:
    """The bytes of the array the header declares and its number of rows (points), after
    checking that the file holds them."""
    try:
        with open(path, "rb") as stream:
            version = npy_format.read_magic(stream)
            # version 3.0 differs from 2.0 in the header's text encoding only (UTF-8 names)
            read_header = (
                npy_format.read_array_header_1_0
                if version == (1, 0)
                else npy_format.read_array_header_2_0
            )
            shape, _, dtype = read_header(stream)
            offset = stream.tell()
    except (ValueError, EOFError, SyntaxError) as error:
        raise PointCloudFileError(path, f"not a readable .npy array: {error}") from None
    except OSError as error:
        raise OSError(f"{path}: cannot read: {error.strerror or error}") from None
    count = math.prod(shape)
    need = count * dtype.itemsize
    have = size - offset
    if need > have:
        raise PointCloudFileError(
            path,
            f"truncated .npy data: the header declares shape {shape} of {dtype} "
            f"({need} bytes), the file holds {have} after its header",
        )
    points = count // shape[-1] if len(shape) >= 2 and shape[-1] and not dtype.names else count
    return need, points


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
