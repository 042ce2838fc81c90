"""What every launch file of the package does to fail loudly (``launch/*.launch.py``).

- :func:`find_params_file`: a params file given by name, as a shipped preset
  (``params_file:=hdl64e`` or ``hdl64e.param.yaml``: a name without ``/`` that is no file in the
  working directory), is the package's file of that name (its installed share ``config/``, then
  the checkout's); a name that matches none stops the launch with one line listing the shipped
  ones.
- :func:`check_params_file`: a params file that is missing, not a file or unreadable stops the
  launch before any node starts, with one line naming the argument and the path (launch_ros
  itself only warns, "Parameter file path is not a file", and starts the node with defaults).
- :func:`fail_when_node_fails`: when a node exits with a non-zero status (a bad params file, a
  bad parameter value, a crash), the launch shuts down with the reason and ``ros2 launch`` exits
  with status 1 (launch alone would carry on, and exit 0, once nothing is left running). Nodes
  that exit while the launch is already shutting down (Ctrl-C, another node's failure) were
  stopped by it and are not reported again. The
  reason is raised as :class:`LaunchError` from the event handler: launch logs it as one line,
  ``Caught exception in launch (see debug for traceback): <reason>``, shuts down with it as the
  reason and returns 1.

The ``launch`` API is imported inside the functions: the package imports without it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: how a shipped params file's name ends; optional in ``params_file:=hdl64e``
PARAMS_SUFFIX = ".param.yaml"
#: the checkout's ``config/`` (an editable install's), searched after the installed share's
CHECKOUT_CONFIG_DIR = Path(__file__).resolve().parents[3] / "config"


class LaunchError(RuntimeError):
    """Why the launch stops; one line for the log."""


def params_file_problem(path: str) -> str | None:
    """Why ``path`` cannot be used as a params file (missing, not a file, unreadable), or None."""
    if not path:
        return "no params file given"
    if not os.path.exists(path):
        return f"{path}: no such file"
    if not os.path.isfile(path):
        return f"{path}: not a file"
    if not os.access(path, os.R_OK):
        return f"{path}: not readable"
    return None


def check_params_file(argument: str, path: str) -> None:
    """Raise :class:`LaunchError` when the params file ``path`` of launch argument
    ``argument`` cannot be read (:func:`params_file_problem`)."""
    problem = params_file_problem(path)
    if problem:
        raise LaunchError(f"{argument}:={path} cannot be used: {problem}")


def find_params_file(argument: str, value: str, share_dir: str) -> str:
    """The params file that launch argument ``argument`` names, checked
    (:func:`check_params_file`): ``value`` itself, or for a bare name (no ``/``) that is no
    existing file, the package's shipped file of that name, :data:`PARAMS_SUFFIX` optional, from
    ``<share_dir>/config`` (the package's share directory) or else :data:`CHECKOUT_CONFIG_DIR`.

    Raises:
        LaunchError: a bare name of no shipped file (the line lists the shipped ones), or a file
            that is missing, not a file or unreadable.
    """
    if value and "/" not in value and not os.path.exists(value):
        folders = list(dict.fromkeys([Path(share_dir) / "config", CHECKOUT_CONFIG_DIR]))
        for folder in folders:
            for name in (value, value + PARAMS_SUFFIX):
                if (folder / name).is_file():
                    return str(folder / name)
        shipped = {
            p.name.removesuffix(PARAMS_SUFFIX) for d in folders for p in d.glob("*" + PARAMS_SUFFIX)
        }
        raise LaunchError(
            f"{argument}:={value} cannot be used: no such file, nor a params file of the package "
            f"(by name, {PARAMS_SUFFIX} optional: {', '.join(sorted(shipped))})"
        )
    check_params_file(argument, value)
    return value


def fail_when_node_fails(node: Any) -> Any:
    """A ``RegisterEventHandler`` that ends the launch with an error when ``node`` (a
    ``launch_ros.actions.Node``) exits with a non-zero status."""
    from launch.actions import RegisterEventHandler
    from launch.event_handlers import OnProcessExit

    def on_exit(event: Any, context: Any) -> None:
        if event.returncode != 0 and not context.is_shutdown:
            raise LaunchError(
                f"{event.process_name} exited with status {event.returncode}; "
                "stopping the launch (its log above says why)"
            )

    return RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit))
