"""Sub-commands of the ``gpu-euclidean-cluster`` CLI (see ``cli.py``)."""

from __future__ import annotations


class CommandError(Exception):
    """An expected failure; its message is shown to the user as one line."""


from . import bench, cluster, demo, make_bag, replay, simulate  # noqa: E402

COMMANDS = (cluster, simulate, make_bag, replay, demo, bench)
