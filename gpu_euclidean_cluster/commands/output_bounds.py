"""Bounds on what ``make-bag`` and ``simulate`` write, checked before the first byte and while
writing.

Before writing, the output's size is estimated (frames x bytes a frame + the container's
overhead) and refused, one line and exit status 2, when it is over ``--max-output-gb`` (default
:data:`DEFAULT_MAX_OUTPUT_GB`) or over the space free on the output's file system less a reserve
(:func:`free_space`: 1 % of the file system, at most :data:`MAX_DISK_RESERVE_BYTES`).

While writing, :class:`DiskWatch` checks each frame against the space still free (the free space
now, and the free space at the start less what was handed to the writer, which may not have
reached the disk yet): when the next frame would eat into the reserve, the command stops after
the frames written so far, which are kept complete, with one line and exit status 2. A write
that fails on a full disk all the same (another process filled it) is one line and exit status 2
as well (:func:`is_disk_full` tells that failure from others).
"""

from __future__ import annotations

import argparse
import errno
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..ros.parameters.option_values import argument, number
from .errors import CommandError

if TYPE_CHECKING:
    import numpy as np

#: Bytes in a GB of ``--max-output-gb`` (decimal, as disks are sold).
GB = 10**9
#: Default bound on one command's output: minutes of a 64-beam LiDAR at 10 Hz.
DEFAULT_MAX_OUTPUT_GB = 4.0
#: Largest ``--max-output-gb``: a petabyte.
MAX_OUTPUT_GB = 1e6
#: Share of its file system an output leaves free, and the most it leaves.
DISK_RESERVE_SHARE = 0.01
MAX_DISK_RESERVE_BYTES = 256 * 2**20
#: SQLite's result code for a full disk (``SQLITE_FULL``).
SQLITE_FULL = 13


def output_gigabytes(text: str) -> float:
    """An output bound in GB, in (0, :data:`MAX_OUTPUT_GB`]."""
    return number(text, 0.0, MAX_OUTPUT_GB, "the output bound in GB", low_open=True)


def add_max_output_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-output-gb``, shared by ``make-bag`` and ``simulate``."""
    parser.add_argument(
        "--max-output-gb",
        type=argument(output_gigabytes),
        default=DEFAULT_MAX_OUTPUT_GB,
        metavar="GB",
        help=f"refuse to write more than this (estimated before writing; default "
        f"{DEFAULT_MAX_OUTPUT_GB:g} GB); the free disk is checked too, before and while writing",
    )


def size_text(nbytes: float) -> str:
    """``nbytes`` for people: ``12.3 MB``, ``4.56 GB``, ``2,940 TB`` (decimal units)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.3g} {unit}" if value < 999.5 else f"{value:,.0f} {unit}"
    return f"{nbytes:.0f} bytes"


def existing_folder(path: Path) -> Path:
    """The nearest existing folder at or above ``path``: where its file system is."""
    path = path.absolute()
    return next(folder for folder in (path, *path.parents) if folder.is_dir())


def free_space(folder: Path) -> tuple[int, int]:
    """``(free, reserve)`` bytes of ``folder``'s file system: the space free to this user, and the
    space an output leaves free (:data:`DISK_RESERVE_SHARE` of the file system, at most
    :data:`MAX_DISK_RESERVE_BYTES`)."""
    usage = shutil.disk_usage(folder)
    return usage.free, min(MAX_DISK_RESERVE_BYTES, int(usage.total * DISK_RESERVE_SHARE))


def check_output_size(target: Path, estimate: int, max_output_gb: float, what: str) -> None:
    """Refuse, before writing, an output of about ``estimate`` bytes (``what``: its frames in
    words) that is over ``max_output_gb`` or over the free space of ``target``'s file system
    less its reserve.

    Raises:
        CommandError: either; one line with the estimate, the bound and the remedies.
    """
    if estimate > max_output_gb * GB:
        raise CommandError(
            f"{what} would take about {size_text(estimate)}, over the --max-output-gb bound of "
            f"{max_output_gb:g} GB: write fewer frames, or raise --max-output-gb"
        )
    folder = existing_folder(target)
    free, reserve = free_space(folder)
    if estimate + reserve > free:
        raise CommandError(
            f"{what} would take about {size_text(estimate)}, but {folder} has "
            f"{size_text(free)} free, of which {size_text(reserve)} is left free: write fewer "
            "frames, or free some space"
        )


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` is a write refused for a full disk or an exhausted quota (``ENOSPC``,
    ``EDQUOT``; SQLite's ``SQLITE_FULL``)."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(error, sqlite3.Error) and (
        getattr(error, "sqlite_errorcode", None) == SQLITE_FULL
    )


class DiskWatch:
    """Watches the free space of ``target``'s file system while an output is written.

    :meth:`room_for` says whether one more frame fits above the reserve; :meth:`frames` passes
    frames on while they do and then ends, so that a writer consuming it closes its output
    complete; :attr:`stopped` then says that it ended early.
    """

    def __init__(self, target: Path) -> None:
        self.folder = existing_folder(target)
        self.start_free, self.reserve = free_space(self.folder)
        self.handed = 0  # bytes handed to the writer so far
        self.stopped = False

    def room_for(self, nbytes: int) -> bool:
        """Whether ``nbytes`` more fit above the reserve (counted as handed over when they do).

        The space left is the smaller of what is free now and what was free at the start less
        what was handed over: a writer may hold data that has not reached the disk yet."""
        free, _ = free_space(self.folder)
        left = min(free, self.start_free - self.handed)
        if left - nbytes < self.reserve:
            self.stopped = True
            return False
        self.handed += nbytes
        return True

    def frames(
        self, frames: Iterable[tuple[int, np.ndarray]], overhead: int
    ) -> Iterator[tuple[int, np.ndarray]]:
        """``frames`` while each (its points and ``overhead`` bytes) fits above the reserve."""
        for stamp_ns, points in frames:
            if not self.room_for(points.nbytes + overhead):
                return
            yield stamp_ns, points

    def describe(self) -> str:
        """The space now, for the line that says why writing stopped."""
        free, _ = free_space(self.folder)
        return f"{self.folder} has {size_text(free)} free, {size_text(self.reserve)} left free"
