"""Sensor packets into frames, ROS-free: ``VelodyneScan`` messages in, decoded sweeps out as clouds
the :class:`~.pipeline.FramePipeline` takes.

The node's ``input/packets`` subscription hands each serialized message to :meth:`PacketSweeps.feed`
in arrival order (a sweep may span messages; none may be skipped); each sweep it completes comes
back as a PointCloud2-layout cloud in Autoware's ``PointXYZIRCAEDT`` fields, with nebula's stamp.
On the CUDA backend the sweep is decoded and cut on the GPU and its cloud's payload is the device
array itself (``cuda/codecs/velodyne_sweeps.py``): the frame codec reads it there, and only the
outputs that copy input records bring it to the host (``pointcloud2.on_host``).

What a message may cost is the decoder's budget (``pointcloud_io/velodyne/sweeps.py``): a
message of more packets than two rotations of the model at 300 RPM, packets of another model
(their product id), and a sweep that would grow past that budget are refused before any work
(``PacketsRefusedError``); a message that is not a ``VelodyneScan`` is refused by its CDR parse,
which never copies the packets.

Hesai packets (``pandar_msgs/msg/PandarScan``) go through :class:`HesaiPacketSweeps` the same
way, decoded by the CPU :class:`~..pointcloud_io.hesai.SweepDecoder` on every backend for now:
with the CUDA backend its sweep is a host payload that the frame codec copies to the device, as
a received cloud's. Its refusals are the Hesai decoder's (``pointcloud_io/hesai/packets.py``:
another model's or a wrong-sized packet, a scan without packets, over the budget), and a message
that is not a ``PandarScan`` is refused by its CDR parse (``HesaiCdrError``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..clusterer import Backend
from ..pointcloud_io import hesai
from ..pointcloud_io.pointcloud2 import RawCloud, from_structured
from ..pointcloud_io.velodyne import (
    POINT_DTYPE,
    DecoderSettings,
    SweepDecoder,
    VelodyneScanMessage,
    load_calibration,
)
from ..pointcloud_io.velodyne.calibration import check_calibration_model
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
            backend: where packets are decoded and sweeps cut (``Backend.sweep_decoder``: on the
                GPU with the CUDA backend, the sweeps left there); None: NumPy.

        Raises:
            CalibrationError: the calibration file is missing, malformed, or not the model's
                (another laser count or ids: ``check_calibration_model``).
        """
        self.settings = settings
        calibration = load_calibration(calibration_file)
        check_calibration_model(calibration, settings.sensor)  # before any device work
        self._decoder = (
            SweepDecoder(calibration, settings)
            if backend is None
            else backend.sweep_decoder(calibration, settings)
        )

    def feed(self, cdr: bytes | memoryview) -> list[SweepCloud]:
        """Decode one serialized message's packets; the sweeps they complete (often none).

        Raises:
            VelodyneCdrError: the bytes are not a ``VelodyneScan``.
            PacketsRefusedError: over the budget, or another model's packets (see the module
                docstring); nothing decoded.
        """
        return self.feed_scan(scan_from_cdr(cdr))

    def feed_scan(self, scan: VelodyneScanMessage) -> list[SweepCloud]:
        """:meth:`feed` for a scan already parsed."""
        frame_id = scan.frame_id or self.settings.frame_id
        return [
            SweepCloud(sweep_cloud(sweep.points), sweep.stamp_ns, frame_id)
            for sweep in self._decoder.feed(scan.packets, scan.packet_seconds)
        ]


class HesaiPacketSweeps:
    """Cuts a stream of serialized ``PandarScan`` messages into sweeps (nebula's rules), on the
    CPU whatever the backend (see the module docstring)."""

    def __init__(self, calibration_file: str | Path, settings: hesai.DecoderSettings) -> None:
        """Load the calibration now, so that a bad file fails at start-up.

        Args:
            calibration_file: nebula's calibration of the model (a CSV; the AT128's ``.dat``).
            settings: Hesai decoder settings.

        Raises:
            hesai.CalibrationError: the calibration file is missing, malformed, or not the
                model's (another kind or channel count).
        """
        self.settings = settings
        calibration = hesai.load_for_model(calibration_file, settings.sensor)
        self._decoder = hesai.SweepDecoder(calibration, settings)

    def feed(self, cdr: bytes | memoryview) -> list[SweepCloud]:
        """Decode one serialized message's packets; the sweeps they complete (often none).

        Raises:
            hesai.HesaiCdrError: the bytes are not a ``PandarScan``.
            hesai.PacketsRefusedError: see the module docstring; nothing decoded.
        """
        return self.feed_scan(hesai.scan_from_cdr(cdr))

    def feed_scan(self, scan: hesai.PandarScanMessage) -> list[SweepCloud]:
        """:meth:`feed` for a scan already parsed."""
        frame_id = scan.frame_id or self.settings.frame_id
        return [
            SweepCloud(sweep_cloud(sweep.points), sweep.stamp_ns, frame_id)
            for sweep in self._decoder.feed(scan.packets, scan.sizes)
        ]


def sweep_cloud(points: Any) -> RawCloud:
    """``from_structured(points, is_dense=True)`` without copying the points: a sweep's points are
    little-endian and the cloud's data are a view of them (6.7 MB for a VLS-128 sweep). ``points``
    are :data:`POINT_DTYPE` points, or the GPU sweep decoder's ``(N, 32)`` uint8 CuPy rows (the
    payload then stays on the device)."""
    empty = from_structured(np.zeros(0, POINT_DTYPE), is_dense=True)
    width = points.shape[0]
    if isinstance(points, np.ndarray):
        data = np.ascontiguousarray(points).view(np.uint8).reshape(-1)
    else:
        data = points.reshape(-1)
    return replace(empty, width=width, row_step=width * empty.point_step, data=data)
