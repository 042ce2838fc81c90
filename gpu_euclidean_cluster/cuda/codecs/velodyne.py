"""Velodyne packets decoded on the GPU, bit for bit what the CPU twin
:func:`~gpu_euclidean_cluster.pointcloud_io.velodyne.packets.decode_packets` returns.

    >>> decoder = CudaPacketDecoder(calibration, settings, device_id=0)
    >>> points, packet_index = decoder.decode(packets, packet_seconds, scan_seconds)  # CuPy
    >>> points, packet_index = decoder.decode_to_host(packets, packet_seconds, scan_seconds)
    >>> # == decode_packets(packets, packet_seconds, scan_seconds, calibration, settings)

``packets`` are ``(P, 1206)`` uint8, in host memory (copied once into a reused pinned staging
buffer together with the per-packet times, then once to the device) or already on the device (a
CuPy array). :meth:`CudaPacketDecoder.decode` returns CuPy arrays: the points as ``(N, 32)``
uint8 rows in :data:`~gpu_euclidean_cluster.pointcloud_io.velodyne.packets.POINT_DTYPE`'s layout
(:func:`points_to_host` views them as that dtype) and the ``(N,)`` int64 packet index.

How (``cuda/kernels/codecs/velodyne.cu``): one CUDA block per packet and one thread per (block,
slot) return. ``velo_flags`` writes each slot's keep flag (every filter of the CPU twin: bad
headers, lasers outside the calibration, zero returns, dual-return duplicates, the block and angle
windows, the range), ``cupy.cumsum`` turns the flags into ranks, the host reads the total (the one
synchronisation of :meth:`~CudaPacketDecoder.decode`), and ``velo_points`` recomputes each kept
slot with the same code and writes its point at its rank: the CPU twin's order (packet, block,
slot). The CPU twin's float32 arithmetic is replayed in double with one rounding to float32 per
operation (exact, and immune to CuPy's ``-ftz=true``); the trigonometric, calibration and time
tables are the CPU twin's own values (:func:`build_tables`), uploaded once, and so are the block
recurrence and the firing-time shares of the settings' ``azimuth_timing`` (``nebula`` or
``sensor``: both rules decode byte for byte as the CPU twin).

Sweeps: :class:`~gpu_euclidean_cluster.pointcloud_io.velodyne.sweeps.SweepDecoder` cuts the stream
on the host and needs decoded points only to concatenate and split them; its decoding call has
the signature of :meth:`CudaPacketDecoder.decode_with`, so a GPU sweep decoder is the same state
machine with that call swapped in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...pointcloud_io.velodyne.calibration import VelodyneCalibration
from ...pointcloud_io.velodyne.packets import (
    BLOCK_SIZE,
    BLOCKS,
    LOWER_BANK,
    MODE_DUAL,
    MODE_LAST,
    MODE_STRONGEST,
    PACKET_SIZE,
    POINT_DTYPE,
    RETURN_FIRST_STRONGEST,
    RETURN_FIRST_WEAK,
    RETURN_IDENTICAL,
    RETURN_LAST,
    RETURN_LAST_STRONGEST,
    RETURN_LAST_WEAK,
    RETURN_MODE_OFFSET,
    RETURN_STRONGEST,
    RETURN_UNKNOWN,
    ROTATION_UNITS,
    SLOTS,
    UPPER_BANK,
    VLS128_BANKS,
    VLS128_DISTANCE_RESOLUTION,
    block_recurrence,
    rotation_tables,
    sensor_turns,
    time_offsets,
)
from ...pointcloud_io.velodyne.sensors import DecoderSettings, Family
from ..buffers import GrowOnlyBuffers

#: The kernels' ``family`` argument.
VLP16_FAMILY = 0
VLP32_FAMILY = 1
VLS128_FAMILY = 2
FAMILY_CODES = {
    Family.VLP16: VLP16_FAMILY,
    Family.VLP32: VLP32_FAMILY,
    Family.VLS128: VLS128_FAMILY,
}
#: The kernels' ``azimuth_timing`` argument.
NEBULA_TIMING = 0
SENSOR_TIMING = 1
TIMING_CODES = {"nebula": NEBULA_TIMING, "sensor": SENSOR_TIMING}

#: Threads per CUDA block: one per (block, slot) return of a packet.
PACKET_THREADS = BLOCKS * SLOTS

#: nebula's return types in the order of the kernel's ``VELO_KIND_*`` indices.
RETURN_KINDS = (
    RETURN_UNKNOWN,
    RETURN_LAST,
    RETURN_STRONGEST,
    RETURN_IDENTICAL,
    RETURN_FIRST_STRONGEST,
    RETURN_FIRST_WEAK,
    RETURN_LAST_STRONGEST,
    RETURN_LAST_WEAK,
)

#: The int32 and float64 tables, in the order of the kernels' parameters.
#: The kernels' scalar parameters after the batch (``packets``, ``delta``, ``count``), in order;
#: then come the int32 tables, the float64 tables and the outputs (``rank``, ``points``,
#: ``packet_index``): ``VELO_PARAMS`` of ``cuda/kernels/codecs/velodyne.cu`` lists the same names.
SCALAR_PARAMS = (
    "family", "azimuth_timing", "laser_count", "mode_strongest", "mode_last", "mode_dual",
    "upper_bank", "lower_bank", "time_columns", "window_low", "window_high", "resolution",
    "turn_mul", "turn_div", "min_range", "max_range",
)  # fmt: skip
I32_TABLES = (
    "recurrence", "vls_banks", "return_codes", "ring", "two_pt", "min_intensity", "max_intensity",
)  # fmt: skip
F64_TABLES = (
    "radians", "cos_table", "sin_table", "time_table", "slot_turn", "group_turn", "sensor_turn",
    "dist_correction", "rot_term", "cos_vert", "sin_vert", "horiz", "vert", "dist_x", "dist_y",
    "focal_offset", "focal_slope",
)  # fmt: skip

VELODYNE_FILES = ("codecs/velodyne.cu",)
VELODYNE_CONSTANTS = (
    ("VELO_PACKET_SIZE", PACKET_SIZE),
    ("VELO_BLOCKS", BLOCKS),
    ("VELO_SLOTS", SLOTS),
    ("VELO_BLOCK_SIZE", BLOCK_SIZE),
    ("VELO_MODE_OFFSET", RETURN_MODE_OFFSET),
    ("VELO_ROTATION_UNITS", ROTATION_UNITS),
    ("VELO_VLP16", VLP16_FAMILY),
    ("VELO_VLP32", VLP32_FAMILY),
    ("VELO_VLS128", VLS128_FAMILY),
    ("VELO_NEBULA_TIMING", NEBULA_TIMING),
    ("VELO_SENSOR_TIMING", SENSOR_TIMING),
)
KERNELS = ("velo_flags", "velo_points")

_F = np.float32
_H2D = 1  # cudaMemcpyHostToDevice


# ---------------------------------------------------------------------------------------------
# Host-side tables and batches (NumPy only)


@dataclass(frozen=True)
class VelodyneTables:
    """Everything the kernels read besides the packets: scalars and tables.

    Attributes:
        family: the kernels' family code (:data:`FAMILY_CODES`).
        azimuth_timing: the kernels' code of the settings' ``azimuth_timing``
            (:data:`TIMING_CODES`).
        laser_count: entries of the per-laser tables (``calibration.size``).
        time_columns: columns of the time table (32, or 17 for VLS-128).
        window_low, window_high: ``cloud_min_angle * 100``, ``cloud_max_angle * 100``.
        resolution: metres per distance unit (float32 value).
        turn_mul, turn_div: float32 factors of step 3's ``nebula`` rule (VLP-32: ``2.304f``
            and ``55.296f``; VLP-16: divisor ``110.592f``; 1 where unused).
        min_range, max_range: the settings' range, compared in double.
        i32: int32 tables by name (:data:`I32_TABLES`); f64: float64 tables (:data:`F64_TABLES`),
            every one of them float32 values widened except ``rot_term``, a double.
    """

    family: int
    azimuth_timing: int
    laser_count: int
    time_columns: int
    window_low: int
    window_high: int
    resolution: float
    turn_mul: float
    turn_div: float
    min_range: float
    max_range: float
    i32: dict[str, np.ndarray]
    f64: dict[str, np.ndarray]


def build_tables(calibration: VelodyneCalibration, settings: DecoderSettings) -> VelodyneTables:
    """The kernels' tables, with the CPU twin's expressions (``packets.py``, steps 1-10); the
    recurrence and ``sensor_turn`` are the CPU twin's own tables for the settings' model and
    ``azimuth_timing``."""
    family = settings.sensor.family
    radians, cos_table, sin_table = rotation_tables()
    time_table = time_offsets(family)
    slot = np.arange(SLOTS)
    slot_turn = np.zeros(SLOTS, np.float32)
    group_turn = np.zeros(16, np.float32)
    turn_mul, turn_div = _F(1), _F(1)
    if family is Family.VLP16:
        firing = (slot // 16).astype(np.float32)
        dsr = (slot % 16).astype(np.float32)
        slot_turn = dsr * _F(2.304) + firing * _F(55.296)
        turn_div = _F(110.592)
    elif family is Family.VLP32:
        turn_mul, turn_div = _F(2.304), _F(55.296)
    else:
        group = np.arange(16)
        group_turn = (_F(2.665) / _F(53.3)) * (group + group // 8).astype(np.float32)
    resolution = (
        VLS128_DISTANCE_RESOLUTION if family is Family.VLS128 else calibration.distance_resolution
    )
    focal = calibration.focal_distance
    a = _F(1) - focal / _F(13100)
    focal_offset = (_F(256) * a) * a
    rot_term = ((calibration.rot_correction.astype(np.float64) * 180.0) / np.pi) * 100.0
    recurrence = np.stack(
        [np.stack(block_recurrence(settings, dual)) for dual in (False, True)]
    )  # (dual, [azimuth_from, next_from, copy_from], block)
    i32 = {
        "recurrence": recurrence,
        "vls_banks": np.array(VLS128_BANKS),
        "return_codes": np.array(RETURN_KINDS),
        "ring": calibration.laser_ring,
        "two_pt": calibration.two_pt_correction,
        "min_intensity": calibration.min_intensity,
        "max_intensity": calibration.max_intensity,
    }
    f64 = {
        "radians": radians,
        "cos_table": cos_table,
        "sin_table": sin_table,
        "time_table": time_table,
        "slot_turn": slot_turn,
        "group_turn": group_turn,
        "sensor_turn": sensor_turns(settings.model),
        "dist_correction": calibration.dist_correction,
        "rot_term": rot_term,
        "cos_vert": calibration.cos_vert,
        "sin_vert": calibration.sin_vert,
        "horiz": calibration.horiz_offset_correction,
        "vert": calibration.vert_offset_correction,
        "dist_x": calibration.dist_correction_x,
        "dist_y": calibration.dist_correction_y,
        "focal_offset": focal_offset,
        "focal_slope": calibration.focal_slope,
    }
    for name, array in f64.items():
        if name != "rot_term" and array.dtype != np.float32:
            raise TypeError(f"table {name} is {array.dtype}, not the float32 the CPU twin uses")
    return VelodyneTables(
        family=FAMILY_CODES[family],
        azimuth_timing=TIMING_CODES[settings.azimuth_timing],
        laser_count=calibration.size,
        time_columns=int(time_table.shape[1]),
        window_low=int(settings.cloud_min_angle) * 100,
        window_high=int(settings.cloud_max_angle) * 100,
        resolution=float(np.float32(resolution)),
        turn_mul=float(turn_mul),
        turn_div=float(turn_div),
        min_range=float(settings.min_range),
        max_range=float(settings.max_range),
        i32={k: np.ascontiguousarray(v, dtype=np.int32).reshape(-1) for k, v in i32.items()},
        f64={k: np.ascontiguousarray(v, dtype=np.float64).reshape(-1) for k, v in f64.items()},
    )


def scalar_args(tables: VelodyneTables) -> dict[str, np.int32 | np.float64]:
    """The kernels' scalar arguments by name (:data:`SCALAR_PARAMS`), typed as the kernels take
    them."""
    return {
        "family": np.int32(tables.family),
        "azimuth_timing": np.int32(tables.azimuth_timing),
        "laser_count": np.int32(tables.laser_count),
        "mode_strongest": np.int32(MODE_STRONGEST),
        "mode_last": np.int32(MODE_LAST),
        "mode_dual": np.int32(MODE_DUAL),
        "upper_bank": np.int32(UPPER_BANK),
        "lower_bank": np.int32(LOWER_BANK),
        "time_columns": np.int32(tables.time_columns),
        "window_low": np.int32(tables.window_low),
        "window_high": np.int32(tables.window_high),
        "resolution": np.float64(tables.resolution),
        "turn_mul": np.float64(tables.turn_mul),
        "turn_div": np.float64(tables.turn_div),
        "min_range": np.float64(tables.min_range),
        "max_range": np.float64(tables.max_range),
    }


def packet_deltas(packet_seconds: Any, scan_seconds: Any, count: int, xp: Any = np) -> Any:
    """(P,) float64 ``packet_seconds - scan_seconds`` (each broadcast to ``count``), the first
    operation of step 10, computed as ``decode_packets`` computes it (``xp``: NumPy or CuPy)."""
    packet = xp.broadcast_to(xp.asarray(packet_seconds, dtype=xp.float64), (count,))
    scan = xp.broadcast_to(xp.asarray(scan_seconds, dtype=xp.float64), (count,))
    return packet - scan


def check_packets(packets: Any) -> int:
    """The packet count of ``(P, 1206)`` uint8 packets (NumPy or CuPy), else ValueError."""
    if packets.ndim != 2 or packets.shape[1] != PACKET_SIZE or packets.dtype != np.uint8:
        raise ValueError(
            f"packets must be (P, {PACKET_SIZE}) uint8, got {packets.shape} {packets.dtype}"
        )
    return int(packets.shape[0])


def staging_layout(count: int) -> tuple[int, int]:
    """``(packet offset, total bytes)`` of the staging buffer of ``count`` packets: the float64
    deltas first (8-byte aligned), then the packets."""
    offset = 8 * count
    return offset, offset + PACKET_SIZE * count


def stage_batch(staging: np.ndarray, packets: np.ndarray, deltas: np.ndarray) -> int:
    """Write ``deltas`` then ``packets`` into the uint8 ``staging`` buffer; return bytes written."""
    count = packets.shape[0]
    offset, total = staging_layout(count)
    staging[:offset].view(np.float64)[:] = deltas
    staging[offset:total].reshape(count, PACKET_SIZE)[:] = packets
    return total


def points_to_host(points: Any) -> np.ndarray:
    """(N,) :data:`POINT_DTYPE` points from the ``(N, 32)`` uint8 rows of :meth:`decode`
    (CuPy or NumPy; a copy)."""
    if hasattr(points, "get"):  # a new host array already: no second copy of 6.7 MB
        rows = np.ascontiguousarray(points.get(), dtype=np.uint8)
    else:
        rows = np.array(points, dtype=np.uint8, order="C")
    return rows.reshape(-1, POINT_DTYPE.itemsize).view(POINT_DTYPE).reshape(-1)


# ---------------------------------------------------------------------------------------------
# The GPU decoder


class CudaPacketDecoder:
    """``decode_packets`` on one CUDA device, for one calibration and settings.

    The tables are uploaded once; the pinned staging buffer and the flag buffer are kept between
    calls and only grow. Work is queued on CuPy's current stream. One decoder serves one thread.
    """

    def __init__(
        self, calibration: VelodyneCalibration, settings: DecoderSettings, device_id: int = 0
    ) -> None:
        """Build and upload the tables, fetch the kernels (compiled once per device)."""
        import cupy

        from ..module import KernelSource, get_kernel

        self._cp = cupy
        self.calibration = calibration
        self.settings = settings
        self.device_id = device_id
        self.tables = build_tables(calibration, settings)
        self._device = cupy.cuda.Device(device_id)
        source = KernelSource("velodyne", VELODYNE_FILES, VELODYNE_CONSTANTS)
        with self._device:
            self._kernels = {name: get_kernel(source, name, device_id) for name in KERNELS}
            self._input_done = cupy.cuda.Event(block=False, disable_timing=True)
            tables = self.tables
            i32 = cupy.asarray(np.concatenate([tables.i32[k] for k in I32_TABLES]))
            f64 = cupy.asarray(np.concatenate([tables.f64[k] for k in F64_TABLES]))
        views = []
        for names, host, device in ((I32_TABLES, tables.i32, i32), (F64_TABLES, tables.f64, f64)):
            start = 0
            for name in names:
                size = host[name].shape[0]
                views.append(device[start : start + size])
                start += size
        self._table_args = tuple(views)
        scalars = scalar_args(tables)
        self._scalar_args = tuple(scalars[name] for name in SCALAR_PARAMS)
        self._buffers = GrowOnlyBuffers()

    def decode(self, packets: Any, packet_seconds: Any, scan_seconds: Any) -> tuple[Any, Any]:
        """Decode a batch of packets on the GPU (arguments as ``decode_packets``'s).

        Args:
            packets: (P, 1206) uint8, NumPy (host) or CuPy (device).
            packet_seconds: (P,) float64 or a scalar, NumPy or CuPy.
            scan_seconds: (P,) float64 or a scalar, NumPy or CuPy.

        Returns:
            ``(points, packet_index)`` on the device: ``(N, 32)`` uint8 rows in
            :data:`POINT_DTYPE`'s layout and the ``(N,)`` int64 packet index, new arrays.
        """
        cupy = self._cp
        with self._device:
            on_device = isinstance(packets, cupy.ndarray)
            if not on_device:
                packets = np.asarray(packets)
            count = check_packets(packets)
            if count == 0:
                return cupy.empty((0, POINT_DTYPE.itemsize), cupy.uint8), cupy.empty(0, cupy.int64)
            stream = cupy.cuda.get_current_stream()
            seconds_on_device = isinstance(packet_seconds, cupy.ndarray) or isinstance(
                scan_seconds, cupy.ndarray
            )
            if seconds_on_device:
                deltas = packet_deltas(packet_seconds, scan_seconds, count, cupy)
            else:
                deltas = packet_deltas(packet_seconds, scan_seconds, count)
            if on_device:
                device_packets = cupy.ascontiguousarray(packets)
                if not seconds_on_device:
                    deltas = self._upload("deltas", np.ascontiguousarray(deltas), stream)
            else:
                offset, total = staging_layout(count)
                self._input_done.synchronize()  # the staging buffer is free again
                staging = self._buffers.pinned("input", total)
                stage_batch(staging, packets, deltas)
                raw = self._buffers.device("input", total, np.uint8)
                cupy.cuda.runtime.memcpyAsync(
                    raw.data.ptr, staging.ctypes.data, total, _H2D, stream.ptr
                )
                self._input_done.record(stream)
                deltas = raw[:offset].view(cupy.float64)
                device_packets = raw[offset:total]
            deltas = cupy.ascontiguousarray(deltas, dtype=cupy.float64)
            slots = count * PACKET_THREADS
            flags = self._buffers.device("flags", slots, np.int32)
            empty_points = self._buffers.device("no_points", 8, np.uint32)
            empty_index = self._buffers.device("no_index", 1, np.int64)
            head = (device_packets, deltas, np.int32(count), *self._scalar_args, *self._table_args)
            grid, block = (count,), (PACKET_THREADS,)
            self._kernels["velo_flags"](grid, block, (*head, flags, empty_points, empty_index))
            rank = cupy.cumsum(flags, dtype=cupy.int32)
            total_points = int(rank[-1])  # synchronises
            points = cupy.empty((total_points, 8), cupy.uint32)
            packet_index = cupy.empty(total_points, cupy.int64)
            if total_points:
                self._kernels["velo_points"](grid, block, (*head, rank, points, packet_index))
            return points.view(cupy.uint8), packet_index

    def decode_to_host(
        self, packets: Any, packet_seconds: Any, scan_seconds: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`decode`, brought to the host: the tuple ``decode_packets`` returns."""
        points, packet_index = self.decode(packets, packet_seconds, scan_seconds)
        return points_to_host(points), packet_index.get()

    def decode_with(
        self,
        packets: np.ndarray,
        packet_seconds: np.ndarray,
        scan_seconds: np.ndarray | float,
        calibration: VelodyneCalibration,
        settings: DecoderSettings,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`decode_to_host` with ``decode_packets``' signature (a drop-in replacement for a
        sweep decoder); the calibration and settings must be the decoder's own."""
        if calibration is not self.calibration or settings != self.settings:
            raise ValueError("this CudaPacketDecoder was built for another calibration/settings")
        return self.decode_to_host(packets, packet_seconds, scan_seconds)

    # -- buffers -------------------------------------------------------------------------------

    def _upload(self, name: str, host: np.ndarray, stream: Any) -> Any:
        """``host`` copied through a pinned buffer to a device buffer (queued on ``stream``)."""
        self._input_done.synchronize()
        staging = self._buffers.pinned(name, host.nbytes)
        staging[:] = host.view(np.uint8).reshape(-1)
        device = self._buffers.device(name, host.nbytes, np.uint8)
        self._cp.cuda.runtime.memcpyAsync(
            device.data.ptr, staging.ctypes.data, host.nbytes, _H2D, stream.ptr
        )
        self._input_done.record(stream)
        return device.view(host.dtype)
