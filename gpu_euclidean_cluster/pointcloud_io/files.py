"""Opening files with errors that name the path and say what went wrong, on one line."""

from __future__ import annotations

import os
import stat as stat_kind
from pathlib import Path


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
