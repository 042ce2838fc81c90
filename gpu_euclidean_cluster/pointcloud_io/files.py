"""Opening files with errors that name the path and say what went wrong, on one line, and the
memory check every reader makes before it allocates what a file declares."""

from __future__ import annotations

import os
import stat as stat_kind
from pathlib import Path

from .cloud import PointCloudFileError


def file_size(path: str | Path) -> int:
    """Size in bytes of the regular file at ``path``.

    Only regular files are read: a device or a pipe (``/dev/zero``, ``/dev/stdin``) has no size to
    bound the read by.

    Raises:
        FileNotFoundError: nothing at ``path``.
        OSError: ``path`` is a directory, not a regular file, or cannot be accessed.
    """
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as error:
        raise OSError(f"{path}: cannot access: {error.strerror or error}") from None
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory, not a point cloud file")
    if not stat_kind.S_ISREG(stat.st_mode):
        raise OSError(f"{path}: not a regular file (a device or a pipe cannot be read as a cloud)")
    return stat.st_size


def read_bytes(path: str | Path) -> bytes:
    """The whole content of ``path``, at most its size at opening (errors as :func:`file_size`)."""
    size = file_size(path)
    try:
        with open(path, "rb") as stream:
            return stream.read(size)
    except OSError as error:
        raise OSError(f"{path}: cannot read: {error.strerror or error}") from None


def check_memory(path: str | Path, need_bytes: int, what: str, max_bytes: int | None) -> None:
    """Refuse a read that would allocate more than ``max_bytes`` (None: no limit).

    Readers call it with what the file declares (its point count, its decompressed size) before
    allocating, so that a file is refused with the size it asks for instead of failing in the
    middle of an allocation.

    Raises:
        PointCloudFileError: ``need_bytes`` is over ``max_bytes``.
    """
    if max_bytes is not None and need_bytes > max_bytes:
        raise PointCloudFileError(
            path,
            f"{what} needs {_gib(need_bytes)} of memory, over the budget of {_gib(max_bytes)}",
        )


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB ({size} bytes)"
