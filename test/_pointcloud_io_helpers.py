"""Helpers shared by the point cloud I/O and ``cluster`` CLI tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Point counts of the real frames in $LIDAR_DATA_DIR.
FRAME_POINTS = {
    "kitti_000001.bin": 120268,
    "kitti_000008.bin": 17238,
    "nuscenes_lidar_top.pcd.bin": 34688,
}


def data_dir() -> Path:
    """$LIDAR_DATA_DIR, default ../shared/data beside the repository."""
    return Path(os.environ.get("LIDAR_DATA_DIR", REPO.parent / "shared" / "data"))


def data_file(name: str) -> Path:
    """A real LiDAR frame, or skip the test saying where it was looked for."""
    path = data_dir() / name
    if not path.is_file():
        pytest.skip(f"real LiDAR frame {path} not found (set LIDAR_DATA_DIR)")
    return path
