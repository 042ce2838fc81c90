"""Test helpers for the Velodyne decoder: packets built from known returns, and nebula's model
of a return's position evaluated independently in double precision."""

from __future__ import annotations

import math

import numpy as np

from gpu_euclidean_cluster.pointcloud_io.velodyne.calibration import VelodyneCalibration

BLOCKS, SLOTS = 12, 32


def encode_packets(
    rotation: np.ndarray,
    raw: np.ndarray,
    intensity: np.ndarray,
    header: np.ndarray,
    mode: int = 55,
    product: int = 0x21,
) -> np.ndarray:
    """(P, 1206) uint8 packets from (P, 12) rotations and headers and (P, 12, 32) raw distances
    and intensities (the inverse of the decoder's packet split)."""
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
