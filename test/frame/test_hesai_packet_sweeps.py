"""Hesai packets into frames: ``HesaiPacketSweeps`` cuts serialized ``PandarScan`` messages into
the Hesai decoder's sweeps, and refuses what is not one of its model's scans (one error each,
the stream going on)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.frame.packets import HesaiPacketSweeps
from gpu_euclidean_cluster.pointcloud_io import hesai, velodyne
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import read_fields
from gpu_euclidean_cluster.pointcloud_io.velodyne.cdr import scan_to_cdr as velodyne_scan_to_cdr

REPO = Path(__file__).resolve().parents[2]
XT32_CALIBRATION = REPO / "config" / "hesai" / "PandarXT32.csv"
#: nebula's settings of the XT32 bag (../shared/data/nebula_hesai/README.md)
XT32_SETTINGS = hesai.DecoderSettings(
    model="PandarXT32", return_mode="Dual", min_range=0.05, max_range=120.0
)
XT32_BAG = Path("nebula_hesai", "xt32", "1673400677802009732")
VLP32_BAG = Path("nebula", "vlp32", "1713492677464078412")


@pytest.fixture(scope="module")
def xt32_scans(lidar_data_dir: Path) -> list[hesai.PandarScanMessage]:
    bag = lidar_data_dir / XT32_BAG
    if not bag.is_dir():
        pytest.skip(f"{bag} is absent (nebula's Hesai bags)")
    return list(hesai.read_pandar_scans(bag))


def no_packets(scan: hesai.PandarScanMessage) -> hesai.PandarScanMessage:
    """``scan`` with an empty packet list."""
    none = np.zeros(0, np.int64)
    return replace(
        scan, packets=np.zeros((0, 1500), np.uint8), sizes=none, stamp_sec=none, stamp_nanosec=none
    )


def test_the_shipped_calibration_is_nebulas():
    shipped = XT32_CALIBRATION.read_bytes()
    assert shipped.startswith(b"Laser id") or shipped.startswith(b"Channel"), shipped[:40]
    assert (REPO / "config" / "hesai" / "LICENSE").is_file()
    assert "606ac41f1f136333915f0114736f2f828e9d2789" in (
        REPO / "config" / "hesai" / "NOTICE"
    ).read_text(encoding="utf-8")


def test_sweeps_are_the_hesai_decoders(xt32_scans):
    decoder = hesai.SweepDecoder(hesai.load_for_model(XT32_CALIBRATION, XT32_SETTINGS.sensor),
                                 XT32_SETTINGS)  # fmt: skip
    sweeps = HesaiPacketSweeps(XT32_CALIBRATION, XT32_SETTINGS)
    got, expected = [], []
    for scan in xt32_scans:
        got += sweeps.feed(hesai.scan_to_cdr(scan))
        expected += decoder.feed(scan.packets, scan.sizes)
    assert len(got) == len(expected) >= 2
    for cloud, sweep in zip(got, expected, strict=True):
        assert cloud.stamp_ns == sweep.stamp_ns
        assert cloud.frame_id == xt32_scans[0].frame_id
        fields = read_fields(cloud.cloud, ["x", "y", "z", "channel", "time_stamp"])
        for name in fields:
            assert fields[name].tobytes() == np.ascontiguousarray(sweep.points[name]).tobytes()
    assert got[-1].cloud.width == 63_021  # nebula's sweep of the bag (the README's table)


def test_refusals_leave_the_stream_going(lidar_data_dir, xt32_scans):
    """A Velodyne model's scan (not a PandarScan), a Velodyne model's packets in a PandarScan
    and an empty PandarScan are each refused; the bag's sweeps then come out as before."""
    velodyne_bag = lidar_data_dir / VLP32_BAG
    if not velodyne_bag.is_dir():
        pytest.skip(f"{velodyne_bag} is absent (nebula's Velodyne bags)")
    velodyne_scan = next(iter(velodyne.read_velodyne_scans(velodyne_bag)))
    count = len(velodyne_scan.packets)
    data = np.zeros((count, 1500), np.uint8)
    data[:, :1206] = velodyne_scan.packets
    zeros = np.zeros(count, np.int64)
    disguised = replace(
        xt32_scans[0], packets=data, sizes=np.full(count, 1206), stamp_sec=zeros,
        stamp_nanosec=zeros,
    )  # fmt: skip
    sweeps = HesaiPacketSweeps(XT32_CALIBRATION, XT32_SETTINGS)
    with pytest.raises(hesai.HesaiCdrError, match="packets need"):
        sweeps.feed(velodyne_scan_to_cdr(velodyne_scan))
    with pytest.raises(hesai.PacketsRefusedError, match="not PandarXT32 packets") as refused:
        sweeps.feed(hesai.scan_to_cdr(disguised))
    assert refused.value.kind == "other_model"
    with pytest.raises(hesai.PacketsRefusedError, match="without packets") as refused:
        sweeps.feed(hesai.scan_to_cdr(no_packets(xt32_scans[0])))
    assert refused.value.kind == "no_packets"
    completed = [s for scan in xt32_scans for s in sweeps.feed(hesai.scan_to_cdr(scan))]
    assert completed[-1].cloud.width == 63_021


def test_another_models_calibration_is_refused_at_start_up():
    with pytest.raises(hesai.CalibrationError, match="PandarXT32"):
        HesaiPacketSweeps(REPO / "config" / "hesai" / "Pandar64.csv", XT32_SETTINGS)
    with pytest.raises(hesai.CalibrationError):
        HesaiPacketSweeps(REPO / "config" / "velodyne" / "VLP32.yaml", XT32_SETTINGS)
