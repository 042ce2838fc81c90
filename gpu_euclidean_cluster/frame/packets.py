"""Sensor packets into frames, ROS-free: ``VelodyneScan`` messages in, decoded sweeps out as clouds
the :class:`~.pipeline.FramePipeline` takes.

The node's ``input/packets`` subscription hands each serialized message to :meth:`PacketSweeps.feed`
in arrival order (a sweep may span messages; none may be skipped); each sweep it completes comes
back as a PointCloud2-layout cloud in Autoware's ``PointXYZIRCAEDT`` fields, with nebula's stamp.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..clusterer import Backend
from ..pointcloud_io.pointcloud2 import RawCloud, from_structured
from ..pointcloud_io.velodyne import (
    DecoderSettings,
    SweepDecoder,
    VelodyneScanMessage,
    decode_packets,
    load_calibration,
)
from ..pointcloud_io.velodyne.cdr import scan_from_cdr


@dataclass(frozen=True)
class SweepCloud:
    """One decoded sweep, ready for the frame pipeline.

    Attributes:
        cloud: the sweep's points, ``PointXYZIRCAEDT`` fields, one row.
        stamp_ns: nebula's sweep stamp (the header stamp of the published cloud).
        frame_id: the scan's ``header.frame_id``, or the settings' frame when it is empty.
    """

    cloud: RawCloud
    stamp_ns: int
    frame_id: str


class PacketSweeps:
    """Cuts a stream of serialized ``VelodyneScan`` messages into sweeps (nebula's rules)."""

    def __init__(
        self,
        calibration_file: str | Path,
        settings: DecoderSettings,
        backend: Backend | None = None,
    ) -> None:
        """Load the calibration now, so that a bad file fails at start-up.

        Args:
            calibration_file: nebula-format calibration YAML.
            settings: decoder settings.
            backend: where packets are decoded (``Backend.packet_decoder``: the GPU on the CUDA
                backend); None: NumPy. Sweeps are cut on the host either way.

        Raises:
            CalibrationError: the calibration file is missing or malformed.
        """
        self.settings = settings
        calibration = load_calibration(calibration_file)
        decode = (
            decode_packets if backend is None else backend.packet_decoder(calibration, settings)
        )
        self._decoder = SweepDecoder(calibration, settings, decode=decode)

    def feed(self, cdr: bytes | memoryview) -> list[SweepCloud]:
        """Decode one serialized message's packets; the sweeps they complete (often none).

        Raises:
            VelodyneCdrError: the bytes are not a ``VelodyneScan``.
        """
        return self.feed_scan(scan_from_cdr(cdr))

    def feed_scan(self, scan: VelodyneScanMessage) -> list[SweepCloud]:
        """:meth:`feed` for a scan already parsed."""
        frame_id = scan.frame_id or self.settings.frame_id
        return [
            SweepCloud(sweep_cloud(sweep.points), sweep.stamp_ns, frame_id)
            for sweep in self._decoder.feed(scan.packets, scan.packet_seconds)
        ]


def sweep_cloud(points: np.ndarray) -> RawCloud:
    """``from_structured(points, is_dense=True)`` without copying the points: a sweep's points are
    little-endian and the cloud's data are a view of them (6.7 MB for a VLS-128 sweep)."""
    points = np.ascontiguousarray(points)
    empty = from_structured(points[:0], is_dense=True)
    width = points.shape[0]
    return replace(
        empty,
        width=width,
        row_step=width * empty.point_step,
        data=points.view(np.uint8).reshape(-1),
    )
