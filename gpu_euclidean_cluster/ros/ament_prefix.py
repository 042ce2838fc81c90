"""The package's ament index entry in this Python's prefix, for the processes it starts itself.

``pip install`` (plain or ``-e``) puts the package's ament index marker (:data:`MARKER`), its
launch and config files under the interpreter's prefix, ``sys.prefix`` (the venv; ``setup.py``,
``data_files``). ``ros2 launch`` and ``ament_index_python`` find them only through
``AMENT_PREFIX_PATH``, which a venv's ``activate`` does not set. :func:`ament_environment` gives
the package's child processes that variable at ``sys.prefix`` when the user did not set it (a set
variable is left as it is); :func:`package_share` looks the share directory up the way
``ament_index_python`` does, in such an environment.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

PACKAGE = "gpu_euclidean_cluster"
VARIABLE = "AMENT_PREFIX_PATH"
#: the file, relative to an install prefix, that registers the package in the ament index
MARKER = Path("share", "ament_index", "resource_index", "packages", PACKAGE)


def installed_prefix(prefix: Path | None = None) -> Path | None:
    """``prefix`` (default ``sys.prefix``) when the package's ament index marker is under it."""
    prefix = Path(sys.prefix) if prefix is None else prefix
    return prefix if (prefix / MARKER).is_file() else None


def ament_environment(
    environ: Mapping[str, str] | None = None, prefix: Path | None = None
) -> dict[str, str]:
    """A copy of ``environ`` (default ``os.environ``) for a child process, with
    ``AMENT_PREFIX_PATH`` at :func:`installed_prefix` when it is unset or empty there."""
    env = dict(os.environ if environ is None else environ)
    if not env.get(VARIABLE):
        found = installed_prefix(prefix)
        if found is not None:
            env[VARIABLE] = str(found)
    return env


def package_share(environ: Mapping[str, str]) -> Path | None:
    """``<prefix>/share/gpu_euclidean_cluster`` of the first prefix of ``AMENT_PREFIX_PATH`` in
    ``environ`` that holds the package's marker (``get_package_share_directory``'s search), or
    None when none does or the variable is unset."""
    for entry in environ.get(VARIABLE, "").split(os.pathsep):
        if entry and installed_prefix(Path(entry)) is not None:
            return Path(entry) / "share" / PACKAGE
    return None
