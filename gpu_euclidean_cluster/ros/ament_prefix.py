"""The package's ament index entry in this Python's prefix, and packages' share folders.

``pip install`` (plain or ``-e``) puts the package's ament index marker (:data:`MARKER`), its
launch and config files under the interpreter's prefix, ``sys.prefix`` (the venv; ``setup.py``,
``data_files``). ``ros2 launch`` and ``ament_index_python`` find them only through
``AMENT_PREFIX_PATH``, which a venv's ``activate`` does not set: the ``.pth`` file the install
puts into site-packages adds the prefix to it whenever that Python starts
(``_gpu_euclidean_cluster_ament.py``, at the top of the checkout). :func:`ament_environment`
gives the package's child processes the variable at ``sys.prefix`` where it is still unset or
empty (the ``.pth`` file did not run: ``python -S``, an install from before it); a set variable
is left as it is. :func:`package_share` looks a package's share folder up the way
``ament_index_python`` does, without importing it: the one lookup of the package.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

PACKAGE = "gpu_euclidean_cluster"
VARIABLE = "AMENT_PREFIX_PATH"
#: the folder, relative to an install prefix, of the ament index's package markers
PACKAGE_INDEX = Path("share", "ament_index", "resource_index", "packages")
#: the file, relative to an install prefix, that registers the package in the ament index
MARKER = PACKAGE_INDEX / PACKAGE


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


def package_share(environ: Mapping[str, str] | None = None, package: str = PACKAGE) -> Path | None:
    """``<prefix>/share/<package>`` of the first prefix of ``AMENT_PREFIX_PATH`` in ``environ``
    (default ``os.environ``) that registers ``package`` in the ament index (the search of
    ``ament_index_python``'s ``get_package_share_directory``), or None when none does or the
    variable is unset."""
    environ = os.environ if environ is None else environ
    for entry in environ.get(VARIABLE, "").split(os.pathsep):
        if entry and (Path(entry) / PACKAGE_INDEX / package).is_file():
            return Path(entry) / "share" / package
    return None
