"""Hesai packets decoded on the GPU, byte for byte what the CPU twin
:func:`~gpu_euclidean_cluster.pointcloud_io.hesai.packets.decode_returns` returns.

    >>> decoder = CudaHesaiDecoder(calibration, settings, device_id=0)
    >>> fields = parse_packets(packets, sizes, settings, corrector)  # the host checks
    >>> groups = block_groups(fields, settings.sensor.packet.blocks)
    >>> points, group, offset_ns = decoder.decode(packets, groups, keep_channel)  # CuPy
    >>> decoded = decoder.decode_to_host(packets, groups, keep_channel)
    >>> # == decode_returns(fields, groups, keep_channel, settings, corrector)

``packets`` are the ``(P, W)`` uint8 packets
:func:`~gpu_euclidean_cluster.pointcloud_io.hesai.packets.parse_packets` accepted (its checks
are the host's: sizes, model, return modes, azimuths), in host memory or already on the device
(a CuPy array); ``groups`` and ``keep_channel`` are the host's block groups and scan-cutter
verdict, as the CPU twin takes them. :meth:`CudaHesaiDecoder.decode` returns CuPy arrays: the
points as ``(N, 32)`` uint8 rows in :data:`~gpu_euclidean_cluster.pointcloud_io.hesai.POINT_DTYPE`'s
layout (``time_stamp`` 0, as the CPU twin's), the ``(N,)`` int64 group index and the ``(N,)``
int64 firing offsets.

How (``cuda/kernels/codecs/hesai.cu``): one CUDA block per block group and one thread per
(channel, return) of the group. ``hs_flags`` writes each return's keep flag (steps 1-2 of
``packets.py``), ``cupy.cumsum`` turns the flags into ranks, the host reads the total (the one
synchronisation of :meth:`~CudaHesaiDecoder.decode`), and ``hs_points`` recomputes each kept
return with the same code and writes its point at its rank: nebula's order (group, channel,
return), the CPU twin's. float32 operations are ``ieee32.cuh``'s (one rounding each, never
fused, immune to CuPy's ``-ftz=true``). The angles of every encoder azimuth and channel and the
firing-time offsets are tables of the CPU twin's own corrector and
:func:`~gpu_euclidean_cluster.pointcloud_io.hesai.timing.point_time_offsets`
(:func:`build_tables`), uploaded once.

Models: every calibration-based (CSV) model. The AT128's ``.dat`` correction (an encoder of
9 216 000 units a turn, too many for the angle tables) is refused: ``unsupported on the GPU``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...pointcloud_io.hesai.angles import CalibrationAngles
from ...pointcloud_io.hesai.calibration import HesaiCalibration, HesaiCorrection
from ...pointcloud_io.hesai.packets import POINT_DTYPE, BlockGroups, DecodedReturns
from ...pointcloud_io.hesai.sensors import DecoderSettings, HesaiModel
from ...pointcloud_io.hesai.sweeps import SweepDecoder
from ...pointcloud_io.hesai.timing import point_time_offsets
from ..buffers import GrowOnlyBuffers

HESAI_FILES = ("widen.cuh", "ieee32.cuh", "codecs/hesai.cu")
KERNELS = ("hs_flags", "hs_points")

#: Variants of the firing-time table: the QT128's mode-flag bit (2) and the OT128's standard,
#: high-resolution azimuth state 0 and other states (3); see ``hs_timing_variant``.
TIMING_VARIANTS = 3
#: Returns per firing the timing table covers (``n`` 1 to 3).
TIMING_RETURNS = 3

#: The float32 angle tables and the other tables, in the order of the kernels' parameters
#: (``HS_PARAMS`` of ``cuda/kernels/codecs/hesai.cu``).
ANGLE_TABLES = (
    "azimuth", "sin_azimuth", "cos_azimuth", "elevation", "sin_elevation", "cos_elevation",
)  # fmt: skip


def check_gpu_model(model: HesaiModel) -> None:
    """ValueError ``unsupported on the GPU: <model>`` for a model this decoder does not cover."""
    if model.corrector != "calibration" or model.packet.fine_azimuth:
        raise ValueError(
            f"unsupported on the GPU: {model.name} (its .dat angle correction is decoded on the "
            "CPU only)"
        )


def kernel_source(model: HesaiModel) -> Any:
    """The ``KernelSource`` of ``hesai.cu`` for ``model``'s packet format (its ``-D``
    constants)."""
    from ..module import KernelSource

    fmt = model.packet
    return KernelSource(
        f"hesai_{fmt.name}",
        HESAI_FILES,
        {
            "HS_HEADER": int(fmt.header),
            "HS_BLOCKS": int(fmt.blocks),
            "HS_CHANNELS": int(fmt.channels),
            "HS_MAX_RETURNS": int(fmt.max_returns),
            "HS_BLOCK_SIZE": int(fmt.block_size),
            "HS_AZIMUTH_AT": int(fmt.azimuth_at),
            "HS_UNITS_AT": int(fmt.units_at),
            "HS_UNIT_SIZE": int(fmt.unit_size),
            "HS_MODE_AT": int(fmt.return_mode_at),
            "HS_DIS_UNIT_AT": int(fmt.dis_unit_at),
            "HS_MODE_FLAG_AT": int(fmt.mode_flag_at),
            "HS_AZIMUTH_STATE_AT": int(fmt.azimuth_state_at),
            "HS_OPERATIONAL_STATE_AT": int(fmt.operational_state_at),
            "HS_SWAPS_FIRST_LAST": int(model.swaps_first_last),
        },
    )


@dataclass(frozen=True)
class HesaiTables:
    """Everything the kernels read besides the packets and the batch's groups.

    Attributes:
        dis_units: (256,) float64 metres per raw unit of each ``dis_unit`` byte (``b / 1000.``;
            the 40P: every entry ``4 / 1000.``).
        angles: float32 tables by name (:data:`ANGLE_TABLES`): the azimuth ones
            ``(full_turn * C,)``, index ``encoder * C + channel``, the elevation ones ``(C,)``.
        time_offsets: (TIMING_VARIANTS * TIMING_RETURNS * blocks * C,) int64 firing offsets.
    """

    dis_units: np.ndarray
    angles: dict[str, np.ndarray]
    time_offsets: np.ndarray


def timing_table(model: HesaiModel) -> np.ndarray:
    """:func:`point_time_offsets` of every (variant, returns - 1, block, channel), int64."""
    fmt = model.packet
    variant = np.arange(TIMING_VARIANTS)[:, None, None, None]
    returns = np.arange(1, TIMING_RETURNS + 1)[None, :, None, None]
    block = np.arange(fmt.blocks)[None, None, :, None]
    channel = np.arange(fmt.channels)[None, None, None, :]
    mode_flag = variant & 1  # QT128: bit 0 of the mode flag
    operational_state = np.where(variant == 0, 1, 0)  # OT128: 0 is high resolution
    azimuth_state = np.where(variant == 2, 0xFFFF, 0)  # every block's state 0, or 3
    shape = (TIMING_VARIANTS, TIMING_RETURNS, fmt.blocks, fmt.channels)
    table = point_time_offsets(
        model.name, block, channel, returns, mode_flag, operational_state, azimuth_state
    )
    return np.ascontiguousarray(np.broadcast_to(table, shape), dtype=np.int64).reshape(-1)


def build_tables(calibration: HesaiCalibration, settings: DecoderSettings) -> HesaiTables:
    """The kernels' tables, from the CPU twin's own corrector and timing functions."""
    model = settings.sensor
    check_gpu_model(model)
    fmt = model.packet
    corrector = CalibrationAngles(calibration)
    channels = fmt.channels
    encoder = np.repeat(np.arange(fmt.full_turn, dtype=np.int64), channels)
    channel = np.tile(np.arange(channels, dtype=np.int64), fmt.full_turn)
    angles = corrector.return_angles(encoder, channel)
    if fmt.dis_unit_at < 0:
        dis_units = np.full(256, 4 / 1000.0)
    else:
        dis_units = np.arange(256, dtype=np.float64) / 1000.0
    tables = {
        "azimuth": angles.azimuth,
        "sin_azimuth": angles.sin_azimuth,
        "cos_azimuth": angles.cos_azimuth,
        "elevation": corrector.elevation,
        "sin_elevation": corrector.sin_elevation,
        "cos_elevation": corrector.cos_elevation,
    }
    for name, array in tables.items():
        if array.dtype != np.float32:
            raise TypeError(f"table {name} is {array.dtype}, not the float32 the CPU twin uses")
    return HesaiTables(
        dis_units=dis_units,
        angles={k: np.ascontiguousarray(v).reshape(-1) for k, v in tables.items()},
        time_offsets=timing_table(model),
    )


def points_to_host(points: Any) -> np.ndarray:
    """(N,) :data:`POINT_DTYPE` points from the ``(N, 32)`` uint8 rows of :meth:`decode`."""
    rows = points.get() if hasattr(points, "get") else np.asarray(points)
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    return rows.reshape(-1, POINT_DTYPE.itemsize).view(POINT_DTYPE).reshape(-1)


class CudaHesaiDecoder:
    """``decode_returns`` on one CUDA device, for one calibration and settings.

    The tables are uploaded once; the flag buffer is kept between calls and only grows. Work is
    queued on CuPy's current stream. One decoder serves one thread.
    """

    def __init__(
        self,
        calibration: HesaiCalibration | HesaiCorrection,
        settings: DecoderSettings,
        device_id: int = 0,
    ) -> None:
        """Build and upload the tables, fetch the kernels (compiled once per device).

        Raises:
            ValueError: ``unsupported on the GPU: <model>`` (the AT128), or a ``.dat``
                correction given for a calibration-based model.
        """
        check_gpu_model(settings.sensor)
        if not isinstance(calibration, HesaiCalibration):
            raise ValueError(
                f"a {settings.sensor.name} needs a CSV calibration, not "
                f"{type(calibration).__name__}"
            )
        import cupy

        from ..module import get_kernel

        self._cp = cupy
        self.calibration = calibration
        self.settings = settings
        self.device_id = device_id
        self.tables = build_tables(calibration, settings)
        model = settings.sensor
        self._model = model
        self._device = cupy.cuda.Device(device_id)
        source = kernel_source(model)
        with self._device:
            self._kernels = {name: get_kernel(source, name, device_id) for name in KERNELS}
            tables = self.tables
            self._dis_units = cupy.asarray(tables.dis_units)
            self._angles = tuple(cupy.asarray(tables.angles[name]) for name in ANGLE_TABLES)
            self._time_offsets = cupy.asarray(tables.time_offsets)
        self._scalars = (
            np.float64(model.min_range),
            np.float64(model.max_range),
            np.float64(settings.min_range),
            np.float64(settings.max_range),
            np.float64(settings.dual_return_distance_threshold),
        )
        self._threads = model.packet.channels * model.packet.max_returns
        self._buffers = GrowOnlyBuffers()

    def decode(self, packets: Any, groups: BlockGroups, keep_channel: Any) -> tuple[Any, Any, Any]:
        """Decode the returns of ``groups`` on the GPU (arguments as ``decode_returns``').

        Args:
            packets: (P, W) uint8 packets
                :func:`~gpu_euclidean_cluster.pointcloud_io.hesai.packets.parse_packets`
                accepted, NumPy or CuPy.
            groups: their block groups
                (:func:`~gpu_euclidean_cluster.pointcloud_io.hesai.packets.block_groups`, or
                a cut's subset).
            keep_channel: (G, C) bool, the scan cutter's verdict, NumPy or CuPy.

        Returns:
            ``(points, group, offset_ns)`` on the device: ``(N, 32)`` uint8 rows in
            :data:`POINT_DTYPE`'s layout, the ``(N,)`` int64 group index and firing offsets.
        """
        cupy = self._cp
        fmt = self._model.packet
        with self._device:
            device_packets = cupy.ascontiguousarray(cupy.asarray(packets, dtype=cupy.uint8))
            if device_packets.ndim != 2 or device_packets.shape[1] < fmt.size:
                raise ValueError(
                    f"packets must be (P, >= {fmt.size}) uint8, got {device_packets.shape}"
                )
            count = groups.count
            keep = cupy.ascontiguousarray(cupy.asarray(keep_channel, dtype=cupy.uint8))
            if keep.shape != (count, fmt.channels):
                raise ValueError(
                    f"keep_channel must be ({count}, {fmt.channels}) bool, got {keep.shape}"
                )
            if count == 0:
                return (
                    cupy.empty((0, POINT_DTYPE.itemsize), cupy.uint8),
                    cupy.empty(0, cupy.int64),
                    cupy.empty(0, cupy.int64),
                )
            group_arrays = tuple(
                cupy.asarray(np.ascontiguousarray(a, dtype=np.int32))
                for a in (groups.packet, groups.block, groups.returns)
            )
            head = (
                device_packets,
                np.int64(device_packets.shape[1]),
                *group_arrays,
                keep,
                np.int32(count),
                *self._scalars,
                self._dis_units,
                *self._angles,
                self._time_offsets,
            )
            flags = self._buffers.device("flags", count * self._threads, np.int32)
            no_points = self._buffers.device("no_points", 8, np.uint32)
            no_index = self._buffers.device("no_index", 1, np.int64)
            grid, block = (count,), (self._threads,)
            self._kernels["hs_flags"](grid, block, (*head, flags, no_points, no_index, no_index))
            rank = cupy.cumsum(flags, dtype=cupy.int32)
            total = int(rank[-1])  # synchronises
            points = cupy.empty((total, 8), cupy.uint32)
            group_index = cupy.empty(total, cupy.int64)
            offset_ns = cupy.empty(total, cupy.int64)
            if total:
                self._kernels["hs_points"](
                    grid, block, (*head, rank, points, group_index, offset_ns)
                )
            return points.view(cupy.uint8), group_index, offset_ns

    def decode_to_host(
        self, packets: Any, groups: BlockGroups, keep_channel: Any
    ) -> DecodedReturns:
        """:meth:`decode`, brought to the host: what ``decode_returns`` returns."""
        points, group, offset_ns = self.decode(packets, groups, keep_channel)
        return DecodedReturns(points_to_host(points), group.get(), offset_ns.get())


def hesai_sweep_decoder(
    calibration: HesaiCalibration, settings: DecoderSettings, device_id: int = 0
) -> SweepDecoder:
    """A Hesai sweep decoder whose returns are decoded on device ``device_id``
    (:meth:`CudaHesaiDecoder.decode_to_host`); the cutting and the sweeps stay on the host, as
    the CPU twin's."""
    decoder = CudaHesaiDecoder(calibration, settings, device_id)

    def decode_with(packets: Any, fields: Any, groups: BlockGroups, keep: Any) -> Any:
        return decoder.decode_to_host(packets, groups, keep)

    return SweepDecoder(calibration, settings, decode_with=decode_with)
