"""Velodyne sweeps cut on the GPU: the packets decoded there stay there.

:class:`DeviceSweepDecoder` is the CPU twin's state machine, nebula's rules 1-3
(:class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps.SweepDecoder`), with its three
array steps done on the device, on the ``(N, 32)`` uint8 rows that
:meth:`~.velodyne.CudaPacketDecoder.decode` writes in ``POINT_DTYPE``'s layout:

- joining a sweep's parts: ``cupy.concatenate`` (one part, the VLS-128's usual sweep: no copy);
- the trailing points of rule 2: ``sweep_last_stay`` finds the last point that stays by
  ``sweeps.trailing_moves``' arithmetic, ``sweep_cut_words`` turns it into the kept count beside
  the overflow's first ``time_stamp``, and one 16-byte read-back brings both to the host: the
  cut's only synchronisation;
- rule 3's restamping: ``sweep_restamp``, ``sweeps.restamped_ns`` on the overflow's rows in place.

The kernels and their exactness rules: ``cuda/kernels/codecs/velodyne_sweeps.cu``.

A sweep's points are then CuPy rows, complete when the sweep is returned (the read-back came
after every kernel that wrote them), and a view of the decoder's output that no later call
writes: the frame codec takes them as a device payload (``frame/packets.py``'s
``sweep_cloud``). Identical bytes to the CPU twin's sweeps, tested side by side on every shared
recording (``test/frame/test_packet_sweeps.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cupy
import numpy as np

from ...pointcloud_io.velodyne.calibration import VelodyneCalibration
from ...pointcloud_io.velodyne.packets import POINT_DTYPE
from ...pointcloud_io.velodyne.sensors import DecoderSettings, Family
from ...pointcloud_io.velodyne.sweeps import Sweep, SweepDecoder
from ..module import KernelSource, get_kernel
from .velodyne import CudaPacketDecoder

ROW_BYTES = POINT_DTYPE.itemsize
#: Threads per block of the sweep kernels.
SWEEP_THREADS = 256
#: Blocks of ``sweep_last_stay`` (a grid-stride loop: a sweep of 200 k points, ~3 rows a thread).
SWEEP_BLOCKS = 264

SWEEP_SOURCE = KernelSource(
    "velodyne_sweeps",
    ("widen.cuh", "codecs/velodyne_sweeps.cu"),
    (
        ("SWEEP_ROW", ROW_BYTES),
        ("SWEEP_AZIMUTH", POINT_DTYPE.fields["azimuth"][1]),
        ("SWEEP_TIME_STAMP", POINT_DTYPE.fields["time_stamp"][1]),
        ("SWEEP_QUARTER_DEG", int(math.pi / 2 * 180.0 / math.pi)),  # the CPU twin's 90
    ),
)


@dataclass
class DeviceSweepDecoder(SweepDecoder):
    """The sweep decoder with its points on the GPU (see the module docstring); build it with
    :func:`device_sweep_decoder`. Work is queued on CuPy's current stream of device
    :attr:`device_id`."""

    device_id: int = 0

    def feed(self, packets: np.ndarray, packet_seconds: np.ndarray) -> list[Sweep]:
        with cupy.cuda.Device(self.device_id):
            return super().feed(packets, packet_seconds)

    def _join(self, parts: list[Any]) -> Any:
        if not parts:
            return cupy.empty((0, ROW_BYTES), cupy.uint8)
        return cupy.concatenate(parts)

    def _split_trailing(self, cloud: Any) -> tuple[Any, Any, int]:
        n = cloud.shape[0]
        if n == 0:
            return cloud, cloud[:0], 0
        words = cupy.full(2, -1, dtype=cupy.int64)
        phase = self.settings.phase_radians
        vlp32 = np.int32(self.settings.sensor.family is Family.VLP32)
        constants = (2 * math.pi, phase, math.pi / 2, math.pi)
        args = (cloud, np.int64(n), *(np.float64(c) for c in constants), vlp32, words)
        self._kernel("sweep_last_stay")((SWEEP_BLOCKS,), (SWEEP_THREADS,), args)
        self._kernel("sweep_cut_words")((1,), (1,), (cloud, np.int64(n), words))
        kept, first = (int(word) for word in words.get())
        return cloud[:kept], cloud[kept:].copy(), first

    def _restamp(self, overflow: Any, stamp: float, last: float) -> Any:
        m = overflow.shape[0]
        grid = ((m + SWEEP_THREADS - 1) // SWEEP_THREADS,)
        args = (overflow, np.int64(m), np.float64(stamp), np.float64(last))
        self._kernel("sweep_restamp")(grid, (SWEEP_THREADS,), args)
        return overflow

    def _kernel(self, name: str) -> Any:
        return get_kernel(SWEEP_SOURCE, name, self.device_id)


def device_sweep_decoder(
    calibration: VelodyneCalibration, settings: DecoderSettings, device_id: int = 0
) -> DeviceSweepDecoder:
    """A sweep decoder that decodes (``CudaPacketDecoder``) and cuts on device ``device_id``."""
    packets = CudaPacketDecoder(calibration, settings, device_id)

    def decode(
        batch: np.ndarray,
        packet_seconds: np.ndarray,
        scan_seconds: np.ndarray | float,
        calibration: VelodyneCalibration,
        settings: DecoderSettings,
    ) -> tuple[Any, Any]:
        return packets.decode(batch, packet_seconds, scan_seconds)

    return DeviceSweepDecoder(calibration, settings, decode=decode, device_id=device_id)
