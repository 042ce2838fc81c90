"""Fast DDS transport default for processes that publish large point clouds.

Fast DDS's default transports (UDPv4 + shared memory) give each participant a 512 KB shared-memory
segment. A sample larger than that (a 120 k-point PointCloud2 is ~2 MB) does not fit: between two
processes on one host, best-effort samples are then (nearly) all lost and reliable ones arrive only
through repairs (~30 ms). The size of the segment is set by the *publishing* process: twice its
socket buffer size. ``FASTDDS_BUILTIN_TRANSPORTS=DEFAULT?sockets_size=8MB`` keeps the default
transports and locators (so the process still talks to every other ROS 2 process, the ros2 CLI
and RViz included) and gives it a 16 MB segment.

The node cannot set its *publishers'* segment: a driver or ``ros2 bag play`` in another process
needs the same setting, by this variable or by the profile file the package installs
(:data:`PROFILE_FILE`, :func:`installed_profile`); ``ros/node/loss_monitor.py`` warns when frames
are lost on the way.

``LARGE_DATA`` is not used: a LARGE_DATA participant announces TCP-only metatraffic locators, so it
cannot discover endpoints of (or be discovered by) participants with the default transports.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from .ament_prefix import package_share

ENV = "FASTDDS_BUILTIN_TRANSPORTS"
LARGE_CLOUD_TRANSPORTS = "DEFAULT?sockets_size=8MB"
#: how a user configures Fast DDS; when any is set, Fast DDS is left as the user set it
USER_SETTINGS = (
    ENV,
    "FASTDDS_DEFAULT_PROFILES_FILE",
    "FASTRTPS_DEFAULT_PROFILES_FILE",
    "FASTDDS_ENVIRONMENT_FILE",
)
#: profile files Fast DDS loads from the working directory unless SKIP_DEFAULT_XML=1
DEFAULT_PROFILE_FILES = ("DEFAULT_FASTDDS_PROFILES.xml", "DEFAULT_FASTRTPS_PROFILES.xml")
#: the Fast DDS XML profile equivalent to LARGE_CLOUD_TRANSPORTS, in the package's share/config
PROFILE_FILE = "fastdds_large_clouds.xml"
PACKAGE = "gpu_euclidean_cluster"
FASTDDS_RMWS = ("rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp")
#: discovery ranges for which rmw_fastrtps keeps Fast DDS's builtin transports
BUILTIN_TRANSPORT_RANGES = ("", "SUBNET", "SYSTEM_DEFAULT")


def configure_transport(
    environ: MutableMapping[str, str] | None = None,
    rmw: str | None = None,
    cwd: Path | None = None,
) -> str:
    """Choose Fast DDS's transports for large clouds unless the user configured them.

    Call it before the process creates its first ROS node (Fast DDS reads the variable when the
    participant is created; call it before ``rclpy.init()`` to be safe). Child processes inherit
    the choice. Returns one line for the log.
    """
    environ = os.environ if environ is None else environ
    if rmw is None:
        import rclpy

        rmw = rclpy.get_rmw_implementation_identifier()
    if rmw not in FASTDDS_RMWS:
        return f"transport: {rmw} as configured (the large-cloud default is for Fast DDS only)"
    for name in USER_SETTINGS:
        value = environ.get(name)
        if value:
            how = "inherited" if (name, value) == (ENV, LARGE_CLOUD_TRANSPORTS) else "as set"
            return f"transport: Fast DDS with {name}={value} ({how})"
    if environ.get("SKIP_DEFAULT_XML") != "1":
        for name in DEFAULT_PROFILE_FILES:
            if ((cwd or Path.cwd()) / name).is_file():
                return f"transport: Fast DDS with ./{name} (as set)"
    discovery = environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "")
    if environ.get("ROS_LOCALHOST_ONLY") == "1" or discovery not in BUILTIN_TRANSPORT_RANGES:
        return (
            "transport: Fast DDS transports set by rmw_fastrtps for "
            f"ROS_AUTOMATIC_DISCOVERY_RANGE={discovery or 'LOCALHOST'}; clouds over 512 KB may be "
            "lost between processes (see README, 'Large clouds between processes')"
        )
    environ[ENV] = LARGE_CLOUD_TRANSPORTS
    return (
        f"transport: Fast DDS with {ENV}={LARGE_CLOUD_TRANSPORTS} (default transports, 16 MB "
        f"shared-memory segment for large clouds; set {ENV} yourself to choose another)"
    )


def installed_profile() -> str | None:
    """The path of the installed :data:`PROFILE_FILE` (for ``FASTDDS_DEFAULT_PROFILES_FILE``);
    None when no prefix of ``AMENT_PREFIX_PATH`` holds the package (``ament_prefix``) or the file
    is not installed there."""
    share = package_share()
    if share is None:
        return None
    path = share / "config" / PROFILE_FILE
    return str(path) if path.is_file() else None
