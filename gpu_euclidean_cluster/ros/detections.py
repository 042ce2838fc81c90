"""vision_msgs/Detection3DArray of the clusters, when vision_msgs is installed (it is optional)."""

from __future__ import annotations

from typing import Any

import numpy as np
from std_msgs.msg import Header

try:
    from vision_msgs.msg import Detection3D, Detection3DArray
except ImportError:
    Detection3D = Detection3DArray = None

#: True when vision_msgs is importable and ``output/detections`` is published.
AVAILABLE = Detection3DArray is not None


def detections_message(table: np.ndarray, header: Header) -> Any:
    """One Detection3D per cluster row: id, and the axis-aligned box as ``bbox``.

    Raises:
        RuntimeError: vision_msgs is not installed (check :data:`AVAILABLE` first).
    """
    if not AVAILABLE:
        raise RuntimeError("vision_msgs is not installed")
    detections = []
    for row in table:
        detection = Detection3D(header=header, id=str(int(row["cluster_id"])))
        for axis in "xyz":
            low, high = float(row[f"min_{axis}"]), float(row[f"max_{axis}"])
            setattr(detection.bbox.center.position, axis, (low + high) / 2.0)
            setattr(detection.bbox.size, axis, high - low)
        detection.bbox.center.orientation.w = 1.0
        detections.append(detection)
    return Detection3DArray(header=header, detections=detections)
