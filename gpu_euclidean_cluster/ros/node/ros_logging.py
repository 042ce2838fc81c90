"""Python ``logging`` records of the package sent to a ROS logger, so that a node's every message
(the library's CPU-fallback notice among them) goes where ``ros2 launch`` and ``/rosout`` look."""

from __future__ import annotations

import logging
from typing import Any

#: The package's Python loggers, all children of this one.
PACKAGE_LOGGER = "gpu_euclidean_cluster"


class RosLogHandler(logging.Handler):
    """Forwards each record to an rclpy logger at the matching severity."""

    def __init__(self, ros_logger: Any) -> None:
        super().__init__()
        self._ros_logger = ros_logger

    def emit(self, record: logging.LogRecord) -> None:
        message = self.format(record)
        if record.levelno >= logging.ERROR:
            self._ros_logger.error(message)
        elif record.levelno >= logging.WARNING:
            self._ros_logger.warning(message)
        elif record.levelno >= logging.INFO:
            self._ros_logger.info(message)
        else:
            self._ros_logger.debug(message)


def forward_package_logging(ros_logger: Any) -> RosLogHandler:
    """Send the package's Python log records to ``ros_logger`` (and no longer to Python's root
    handlers); returns the handler, for :func:`stop_forwarding`."""
    handler = RosLogHandler(ros_logger)
    package = logging.getLogger(PACKAGE_LOGGER)
    package.addHandler(handler)
    package.setLevel(logging.INFO)
    package.propagate = False
    return handler


def stop_forwarding(handler: RosLogHandler) -> None:
    """Undo :func:`forward_package_logging`."""
    package = logging.getLogger(PACKAGE_LOGGER)
    package.removeHandler(handler)
    package.propagate = True
