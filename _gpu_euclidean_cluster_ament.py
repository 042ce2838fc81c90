"""At interpreter start: this Python's prefix on ``AMENT_PREFIX_PATH`` when the package is there.

``pip install`` (plain or ``-e``) puts the package's ament index marker, launch and config files
under the interpreter's prefix, ``sys.prefix`` (the venv), and ``gpu_euclidean_cluster_ament.pth``
(written by ``setup.py``) into its site-packages. ``ros2 launch``, ``ros2 run`` and ``ros2 pkg``
find packages only through ``AMENT_PREFIX_PATH``, which a venv's ``activate`` does not set. At
every start of that interpreter the ``.pth`` file's one line calls :func:`add_this_prefix`, which
appends ``sys.prefix`` to the variable (sets it when unset) when the marker is there and the
prefix is not listed yet: prefixes set by the user or a sourced ROS 2 setup keep their order and
come first; other interpreters, and this one where the package is not installed in its prefix,
are left alone. The processes it starts inherit the variable.

A top-level module, not part of the ``gpu_euclidean_cluster`` package: importing the package
would import NumPy into every Python process of the venv. It imports only ``os`` and ``sys``.
"""

from __future__ import annotations

import os
import sys

VARIABLE = "AMENT_PREFIX_PATH"
#: the file, relative to an install prefix, that registers the package in the ament index
MARKER = os.path.join("share", "ament_index", "resource_index", "packages", "gpu_euclidean_cluster")


def with_prefix(value: str, prefix: str) -> str:
    """``value`` (an ``AMENT_PREFIX_PATH``) with ``prefix`` appended when ``prefix`` holds the
    package's :data:`MARKER` and is not among its entries; else ``value`` unchanged."""
    entries = {os.path.normpath(entry) for entry in value.split(os.pathsep) if entry}
    if os.path.normpath(prefix) in entries or not os.path.isfile(os.path.join(prefix, MARKER)):
        return value
    return f"{value}{os.pathsep}{prefix}" if value else prefix


def add_this_prefix() -> None:
    """``os.environ[AMENT_PREFIX_PATH]`` through :func:`with_prefix` with ``sys.prefix``. Never
    raises: it runs while the interpreter starts."""
    try:
        value = os.environ.get(VARIABLE, "")
        extended = with_prefix(value, sys.prefix)
        if extended != value:
            os.environ[VARIABLE] = extended
    except Exception:  # whatever happens, the interpreter starts
        pass
