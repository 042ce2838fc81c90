"""One entry point for every supported file: the format by name or from the file name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .cloud import Cloud, PointCloudFileError
from .npy import read_npy
from .pcd import read_pcd
from .raw_bin import read_kitti, read_nuscenes

#: format -> reader(path, max_bytes)
READERS: dict[str, Callable[[str | Path, int | None], Cloud]] = {
    "kitti": read_kitti,
    "nuscenes": read_nuscenes,
    "pcd": read_pcd,
    "npy": read_npy,
}
FORMATS: tuple[str, ...] = tuple(READERS)

#: File-name endings and their formats, longest first so ``.pcd.bin`` wins over ``.bin``.
_SUFFIXES = ((".pcd.bin", "nuscenes"), (".bin", "kitti"), (".pcd", "pcd"), (".npy", "npy"))


def detect_format(path: str | Path) -> str:
    """The format implied by the file name (``.pcd.bin``, ``.bin``, ``.pcd`` or ``.npy``).

    Raises:
        PointCloudFileError: the name has none of these endings.
    """
    name = Path(path).name.lower()
    for suffix, fmt in _SUFFIXES:
        if name.endswith(suffix):
            return fmt
    raise PointCloudFileError(
        path,
        "cannot tell the format from the file name (expected .bin, .pcd.bin, .pcd or .npy); "
        f"give the format explicitly: one of {', '.join(FORMATS)}",
    )


def load_points(
    path: str | Path, format: str | None = None, *, max_bytes: int | None = None
) -> Cloud:
    """Read a point cloud file into a :class:`Cloud`.

    Args:
        path: the file.
        format: ``kitti``, ``nuscenes``, ``pcd`` or ``npy``; ``None`` guesses from the name.
        max_bytes: refuse, before allocating them, points that would take more memory than this
            (the front ends pass their memory budget); None: no limit.

    Raises:
        PointCloudFileError (a ValueError): unknown format, a file that is not valid in it, or
            points over ``max_bytes``.
        FileNotFoundError, OSError: the file is missing or unreadable.
    """
    fmt = detect_format(path) if format is None else format
    reader = READERS.get(fmt)
    if reader is None:
        raise PointCloudFileError(
            path, f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}"
        )
    return reader(path, max_bytes)
