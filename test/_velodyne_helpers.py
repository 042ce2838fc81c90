"""Test helpers for the Velodyne decoder: packets built from known returns, nebula's model of a
return's position evaluated independently in double precision, packets read from pcap captures,
and the hostile streams of the robustness round (a sensor that does not turn, another model's
packets, a message over the budget) as packets and as ``VelodyneScan`` messages."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from gpu_euclidean_cluster.pointcloud_io.velodyne.bags import VelodyneScanMessage
from gpu_euclidean_cluster.pointcloud_io.velodyne.calibration import VelodyneCalibration
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr

BLOCKS, SLOTS = 12, 32
PACKET_BYTES = 1206
#: Ethernet (14), IPv4 without options (20) and UDP (8) headers before a packet's payload.
UDP_PAYLOAD_OFFSET = 42


def encode_packets(
    rotation: np.ndarray,
    raw: np.ndarray,
    intensity: np.ndarray,
    header: np.ndarray,
    mode: int = 55,
    product: int = 0,
) -> np.ndarray:
    """(P, 1206) uint8 packets from (P, 12) rotations and headers and (P, 12, 32) raw distances
    and intensities (the inverse of the decoder's packet split); ``mode`` and ``product`` are the
    factory bytes (product 0: unset, which every model accepts)."""
    count = rotation.shape[0]
    packets = np.zeros((count, 1206), np.uint8)
    blocks = packets[:, :1200].reshape(count, BLOCKS, 100)
    blocks[:, :, 0] = header & 0xFF
    blocks[:, :, 1] = header >> 8
    blocks[:, :, 2] = rotation & 0xFF
    blocks[:, :, 3] = rotation >> 8
    data = blocks[:, :, 4:].reshape(count, BLOCKS, SLOTS, 3)
    data[..., 0] = raw & 0xFF
    data[..., 1] = raw >> 8
    data[..., 2] = intensity
    packets[:, :1200] = blocks.reshape(count, 1200)
    packets[:, 1204] = mode
    packets[:, 1205] = product
    return packets


def raw_for_distance(distance: np.ndarray, laser: np.ndarray, calibration: VelodyneCalibration):
    """The raw distance units that measure ``distance`` metres on ``laser``."""
    corrected = distance - calibration.dist_correction[laser].astype(np.float64)
    return np.round(corrected / float(calibration.distance_resolution)).astype(np.int64)


def expected_returns(
    rotation: np.ndarray,
    raw: np.ndarray,
    intensity: np.ndarray,
    laser: np.ndarray,
    calibration: VelodyneCalibration,
) -> dict[str, np.ndarray]:
    """nebula's VLP-32-family model (single return mode) in float64, per (P, 12, 32) slot:
    ``distance``, the corrected azimuth in centidegrees before rounding (``azimuth_cd``),
    ``x``/``y``/``z`` at the rounded azimuth, and the focal-corrected ``intensity``."""
    rot = rotation.astype(np.float64)
    diff = np.zeros_like(rot)
    diff[:, :-1] = np.mod(rot[:, 1:] - rot[:, :-1], 36000)  # the last block of a packet: 0
    slot = np.arange(SLOTS)[None, None, :]
    rot_deg100 = calibration.rot_correction[laser].astype(np.float64) * 18000.0 / math.pi
    azimuth_cd = rot[:, :, None] + diff[:, :, None] * slot * 2.304 / 55.296 - rot_deg100
    azimuth_cd = np.mod(azimuth_cd, 36000.0)
    heading = np.radians(np.mod(np.floor(azimuth_cd + 0.5), 36000.0) / 100.0)
    distance = raw * float(calibration.distance_resolution) + calibration.dist_correction[laser]
    vert = calibration.vert_correction[laser].astype(np.float64)
    v = calibration.vert_offset_correction[laser].astype(np.float64)
    h = calibration.horiz_offset_correction[laser].astype(np.float64)
    xy = distance * np.cos(vert) - v * np.sin(vert)
    sensor_x = xy * np.sin(heading) - h * np.cos(heading)
    sensor_y = xy * np.cos(heading) + h * np.sin(heading)
    z = distance * np.sin(vert) + v * np.cos(vert)
    focal = calibration.focal_distance[laser].astype(np.float64)
    offset = 256.0 * (1 - focal / 13100) ** 2
    boosted = intensity + calibration.focal_slope[laser] * np.abs(
        offset - 256.0 * (1 - raw / 65535.0) ** 2
    )
    # nebula stores the float sum in a uint8: on x86-64 the low byte of the truncated integer
    wrapped = np.mod(np.floor(boosted), 256)
    clamped = np.clip(wrapped, calibration.min_intensity[laser], calibration.max_intensity[laser])
    return {
        "distance": distance,
        "azimuth_cd": azimuth_cd,
        "x": sensor_y,
        "y": -sensor_x,
        "z": z,
        "intensity": clamped,
    }


def read_pcap_packets(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The Velodyne data packets of a classic pcap capture (Ethernet, IPv4, UDP): ``(P, 1206)``
    uint8 payloads of 1206 bytes and their (P,) capture times in seconds; other frames (position
    packets) are left out."""
    data = path.read_bytes()
    magic, _, _, _, _, _, link = struct.unpack_from("<IHHiIII", data)
    if magic != 0xA1B2C3D4 or link != 1:
        raise ValueError(f"{path}: not a little-endian microsecond Ethernet pcap")
    payloads, stamps = [], []
    offset = 24
    while offset + 16 <= len(data):
        seconds, micros, length, _ = struct.unpack_from("<IIII", data, offset)
        frame = data[offset + 16 : offset + 16 + length]
        offset += 16 + length
        payload = frame[UDP_PAYLOAD_OFFSET:]
        if len(payload) == PACKET_BYTES:
            payloads.append(np.frombuffer(payload, np.uint8))
            stamps.append(seconds + micros * 1e-6)
    return np.array(payloads, np.uint8).reshape(-1, PACKET_BYTES), np.array(stamps)


def rotating_packets(
    count: int, start: int = 0, step: int = 40, product: int = 0, header: int = 0xEEFF
) -> np.ndarray:
    """``count`` single-return packets of a turning sensor: block azimuths ``step`` centidegrees
    apart from ``start`` (wrapping at 36000: a sweep completes every ``36000 / (12 * step)``
    packets), every return 5 m away at a 0.002 m resolution (raw 2500)."""
    rotation = (start + step * np.arange(count * BLOCKS)).reshape(count, BLOCKS) % 36000
    raw = np.full((count, BLOCKS, SLOTS), 2500)
    intensity = np.full((count, BLOCKS, SLOTS), 100)
    headers = np.full((count, BLOCKS), header)
    return encode_packets(rotation, raw, intensity, headers, mode=55, product=product)


def stuck_packets(count: int, rotation: int = 9000, product: int = 0) -> np.ndarray:
    """``count`` packets of a sensor whose azimuth never moves (a stopped motor): every block at
    ``rotation``, so no packet ever completes a sweep."""
    return rotating_packets(count, start=rotation, step=0, product=product)


def packet_stamps(count: int, start_s: float = 100.0, period_s: float = 1e-3) -> np.ndarray:
    """(P,) float64 packet stamps ``period_s`` apart."""
    return start_s + period_s * np.arange(count)


def scan_message(packets: np.ndarray, start_s: float, frame_id: str = "velodyne") -> bytes:
    """A serialized ``VelodyneScan`` of ``packets`` stamped from ``start_s``, 1 ms apart."""
    stamps_ns = np.round(packet_stamps(len(packets), start_s) * 1e9).astype(np.int64)
    scan = VelodyneScanMessage(
        topic="",
        bag_time_ns=0,
        stamp_ns=int(stamps_ns[0]) if len(stamps_ns) else 0,
        frame_id=frame_id,
        packets=packets,
        stamp_sec=stamps_ns // 1_000_000_000,
        stamp_nanosec=stamps_ns % 1_000_000_000,
    )
    return scan_to_cdr(scan)


def hostile_messages(budget: int, product: int, other_product: int) -> list[tuple[str, bytes]]:
    """The hostile ``VelodyneScan`` messages a node of a model with this packet ``budget`` and
    ``product`` id refuses, named by the refusal's kind, in sending order: a message of
    ``budget + 1`` packets, one of another model's packets (``other_product``), then a stream
    that never completes a sweep, in messages of ``budget // 6 + 1`` packets: the first five
    are taken, the sixth would take the sweep past the budget (cut and dropped)."""
    size = budget // 6 + 1
    stream = [("", scan_message(stuck_packets(size, product=product), 20.0 + i)) for i in range(5)]
    return [
        ("message_over_budget", scan_message(stuck_packets(budget + 1, product=product), 10.0)),
        ("other_model", scan_message(rotating_packets(10, product=other_product), 11.0)),
        *stream,
        ("sweep_over_budget", scan_message(stuck_packets(size, product=product), 26.0)),
    ]
