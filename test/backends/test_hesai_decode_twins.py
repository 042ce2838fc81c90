"""The CUDA Hesai decoder (``cuda/codecs/hesai.py``) against its CPU twin, byte for byte.

Cases: the first messages of nebula's four shared bags (``$LIDAR_DATA_DIR/nebula_hesai``: the
Pandar40P, Pandar64 and PandarXT32 in dual last+strongest, the PandarQT128 in its own mode) and
synthetic packets of every GPU model and return mode (``test/_hesai_helpers.py``), each with a
scan-cutter verdict that drops some channels. The CUDA cases are marked ``gpu``; the CPU tests
check what the kernels lean on: the cases exercise what they claim, the firing-time table's
variants are the tail fields' offsets, and the AT128 is refused.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.cuda.codecs.hesai import (
    TIMING_RETURNS,
    CudaHesaiDecoder,
    hesai_sweep_decoder,
    timing_table,
)
from gpu_euclidean_cluster.pointcloud_io.hesai import (
    DecoderSettings,
    SweepDecoder,
    load_for_model,
    read_pandar_scans,
    sensor_model,
)
from gpu_euclidean_cluster.pointcloud_io.hesai.angles import corrector_for
from gpu_euclidean_cluster.pointcloud_io.hesai.packets import (
    BlockGroups,
    DecodedReturns,
    block_groups,
    decode_returns,
    parse_packets,
)
from gpu_euclidean_cluster.pointcloud_io.hesai.timing import point_time_offsets

from .._hesai_helpers import synthetic_stream
from ..conftest import LIDAR_DATA_DIR, cuda_only

NEBULA_HESAI = LIDAR_DATA_DIR / "nebula_hesai"
CALIBRATION = NEBULA_HESAI / "calibration"

#: folder -> (bag, model, return_mode, min_range, max_range): nebula's test settings.
BAGS = {
    "40p": ("1673400149412331409", "Pandar40P", "Dual", 0.3, 200.0),
    "64": ("1673403880599376836", "Pandar64", "Dual", 0.3, 200.0),
    "xt32": ("1673400677802009732", "PandarXT32", "Dual", 0.05, 120.0),
    "qt128": ("1730273789074637152", "PandarQT128", "LastStrongest", 0.3, 300.0),
}
#: Messages of each bag compared.
BAG_MESSAGES = 3

#: (model, return-mode byte, tail fields) of the synthetic cases.
SYNTHETIC = [
    ("Pandar40P", 0x39, {}),
    ("Pandar40M", 0x37, {}),
    ("Pandar64", 0x38, {}),
    ("Pandar64", 0x3C, {}),
    ("PandarQT64", 0x3B, {}),
    ("PandarQT128", 0x39, {"mode_flag": 1}),
    ("PandarQT128", 0x3C, {"mode_flag": 0}),
    ("PandarQT128", 0x33, {}),
    ("PandarXT16", 0x3B, {}),
    ("PandarXT32", 0x3C, {}),
    ("PandarXT32", 0x3B, {}),
    ("PandarXT32", 0x3A, {}),
    ("PandarXT32", 0x3E, {}),
    ("PandarXT32", 0x34, {}),
    ("PandarXT32M", 0x3D, {}),
    ("PandarXT32M", 0x3A, {}),
    ("Pandar128E4X", 0x3E, {"operational_state": 0, "azimuth_state": 0x4000}),
    ("Pandar128E4X", 0x33, {"operational_state": 0, "azimuth_state": 0x1000}),
    ("Pandar128E4X", 0x38, {"operational_state": 1}),
]

needs_calibration = pytest.mark.skipif(
    not CALIBRATION.is_dir(),
    reason=f"nebula's Hesai calibration files not found at {CALIBRATION} (set LIDAR_DATA_DIR)",
)


@dataclass(frozen=True)
class Case:
    """One batch: the packets, what the decoders take besides them, and the CPU twin's result."""

    packets: np.ndarray
    groups: BlockGroups
    keep_channel: np.ndarray
    calibration: object
    settings: DecoderSettings
    expected: DecodedReturns


def calibration_path(model: str) -> Path:
    """nebula's calibration CSV of ``model`` (the 40M has the 40P's)."""
    return CALIBRATION / ("Pandar40P.csv" if model == "Pandar40M" else f"{model}.csv")


def make_case(packets: np.ndarray, sizes: np.ndarray, settings: DecoderSettings) -> Case:
    """Parse ``packets`` as the sweep decoder does, drop a tenth of the (group, channel) pairs
    as a scan cutter would, and decode them with the CPU twin."""
    calibration = load_for_model(calibration_path(settings.model), settings.sensor)
    corrector = corrector_for(calibration)
    fields = parse_packets(packets, sizes, settings, corrector)
    groups = block_groups(fields, settings.sensor.packet.blocks)
    rng = np.random.default_rng(7)
    keep_channel = rng.random((groups.count, settings.sensor.packet.channels)) >= 0.1
    expected = decode_returns(fields, groups, keep_channel, settings, corrector)
    return Case(packets, groups, keep_channel, calibration, settings, expected)


def bag_cases(folder: str) -> list[Case]:
    """The first :data:`BAG_MESSAGES` messages of ``folder``'s bag."""
    bag, model, mode, low, high = BAGS[folder]
    settings = DecoderSettings(
        model, mode, "hesai", float(np.float32(low)), float(np.float32(high)), 0, 360, 0.0, 0
    )
    scans = read_pandar_scans(NEBULA_HESAI / folder / bag)
    return [
        make_case(scan.packets, scan.sizes, settings)
        for scan in itertools.islice(scans, BAG_MESSAGES)
    ]


def synthetic_case(model: str, mode: int, tail: dict) -> Case:
    """Twelve synthetic packets of ``model`` in return mode ``mode``, crossing the turn's end."""
    settings = DecoderSettings.for_model(model, dual_return_distance_threshold=0.1)
    packets, sizes = synthetic_stream(model, 12, 137, mode, seed=5, first=35000, **tail)
    return make_case(packets, sizes, settings)


def bag_params() -> list:
    return [
        pytest.param(
            folder,
            marks=pytest.mark.skipif(
                not (NEBULA_HESAI / folder / BAGS[folder][0]).is_dir(),
                reason=f"nebula's {folder} bag not found in {NEBULA_HESAI} (set LIDAR_DATA_DIR)",
            ),
        )
        for folder in BAGS
    ]


SYNTHETIC_IDS = [f"{model}-{mode:#x}" for model, mode, _ in SYNTHETIC]


def assert_same_returns(got: DecodedReturns, expected: DecodedReturns) -> None:
    """Every byte of the points, the group index and the offsets equal."""
    assert got.points.dtype == expected.points.dtype
    assert got.points.shape == expected.points.shape
    for name in expected.points.dtype.names:
        differ = np.flatnonzero(got.points[name] != expected.points[name])
        assert differ.size == 0, f"{name} differs at {differ.size} points (first {differ[:5]})"
    assert got.points.tobytes() == expected.points.tobytes()
    np.testing.assert_array_equal(got.group, expected.group)
    np.testing.assert_array_equal(got.offset_ns, expected.offset_ns)


# ---------------------------------------------------------------------------------------------
# CPU side


@needs_calibration
@pytest.mark.parametrize("folder", bag_params())
def test_bag_cases_keep_some_returns_and_drop_others(folder: str):
    for case in bag_cases(folder):
        returns = case.groups.returns.sum() * case.settings.sensor.packet.channels
        assert 0 < case.expected.points.shape[0] < returns
        assert len(np.unique(case.expected.points["return_type"])) >= 2
        assert not case.keep_channel.all()


@needs_calibration
@pytest.mark.parametrize(("model", "mode", "tail"), SYNTHETIC, ids=SYNTHETIC_IDS)
def test_synthetic_cases_hold_dropped_duplicates(model: str, mode: int, tail: dict):
    case = synthetic_case(model, mode, tail)
    assert case.expected.points.shape[0] > 0
    kinds = set(np.unique(case.expected.points["return_type"]).tolist())
    if case.groups.returns[0] > 1:
        assert 6 in kinds  # identical returns kept once, as the group's last
    assert not case.keep_channel.all()


@pytest.mark.parametrize("model", ["Pandar64", "PandarXT32M", "PandarQT128", "Pandar128E4X"])
def test_timing_table_variants_are_the_tail_fields_offsets(model: str):
    sensor = sensor_model(model)
    fmt = sensor.packet
    table = timing_table(sensor).reshape(-1, TIMING_RETURNS, fmt.blocks, fmt.channels)
    rng = np.random.default_rng(3)
    for _ in range(64):
        mode_flag, operational_state = int(rng.integers(0, 256)), int(rng.integers(0, 2))
        azimuth_state = int(rng.integers(0, 1 << 16))
        returns = int(rng.integers(1, fmt.max_returns + 1))
        block = int(rng.integers(0, fmt.blocks))
        channel = np.arange(fmt.channels)
        # hesai.cu's hs_timing_variant
        if fmt.mode_flag_at >= 0:
            variant = mode_flag & 1
        elif fmt.operational_state_at >= 0:
            state = (azimuth_state >> (14 - 2 * block)) & 3
            variant = 0 if operational_state != 0 else (1 if state == 0 else 2)
        else:
            variant = 0
        expected = point_time_offsets(
            model, block, channel, returns, mode_flag, operational_state, azimuth_state
        )
        np.testing.assert_array_equal(table[variant, returns - 1, block], expected)


def test_the_at128_is_unsupported_on_the_gpu():
    settings = DecoderSettings.for_model("PandarAT128")
    with pytest.raises(ValueError, match="unsupported on the GPU: PandarAT128"):
        CudaHesaiDecoder(None, settings)


# ---------------------------------------------------------------------------------------------
# CUDA against CPU


@cuda_only
@needs_calibration
@pytest.mark.parametrize("folder", bag_params())
def test_bags_cuda_equals_cpu(folder: str):
    import cupy

    cases = bag_cases(folder)
    decoder = CudaHesaiDecoder(cases[0].calibration, cases[0].settings)
    for case in cases:
        got = decoder.decode_to_host(case.packets, case.groups, case.keep_channel)
        assert_same_returns(got, case.expected)
        on_device = decoder.decode_to_host(
            cupy.asarray(case.packets), case.groups, cupy.asarray(case.keep_channel)
        )
        assert_same_returns(on_device, case.expected)


@cuda_only
@needs_calibration
@pytest.mark.parametrize(("model", "mode", "tail"), SYNTHETIC, ids=SYNTHETIC_IDS)
def test_synthetic_cuda_equals_cpu(model: str, mode: int, tail: dict):
    case = synthetic_case(model, mode, tail)
    decoder = CudaHesaiDecoder(case.calibration, case.settings)
    assert_same_returns(
        decoder.decode_to_host(case.packets, case.groups, case.keep_channel), case.expected
    )


@cuda_only
@needs_calibration
def test_no_groups_decode_to_no_points():
    case = synthetic_case("PandarXT32", 0x39, {})
    decoder = CudaHesaiDecoder(case.calibration, case.settings)
    none = BlockGroups(*(np.zeros(0, np.int64) for _ in range(3)))
    got = decoder.decode_to_host(case.packets, none, np.zeros((0, 32), bool))
    assert got.points.shape == (0,) and got.group.shape == (0,) and got.offset_ns.shape == (0,)


@cuda_only
@needs_calibration
@pytest.mark.parametrize("folder", bag_params())
def test_sweeps_decoded_on_the_gpu_are_the_cpu_twins(folder: str):
    """The whole bag through the sweep decoder with its returns decoded on the GPU
    (``hesai_sweep_decoder``): the CPU twin's sweeps, every field, every stamp."""
    bag, model, mode, low, high = BAGS[folder]
    settings = DecoderSettings(
        model, mode, "hesai", float(np.float32(low)), float(np.float32(high)), 0, 360, 0.0, 0
    )
    calibration = load_for_model(calibration_path(model), settings.sensor)
    cpu, gpu = SweepDecoder(calibration, settings), hesai_sweep_decoder(calibration, settings)
    count = 0
    for scan in read_pandar_scans(NEBULA_HESAI / folder / bag):
        expected = cpu.feed(scan.packets, scan.sizes)
        got = gpu.feed(scan.packets, scan.sizes)
        assert [s.stamp_ns for s in got] == [s.stamp_ns for s in expected]
        for one, other in zip(got, expected, strict=True):
            assert one.points.tobytes() == other.points.tobytes()
        count += len(got)
    assert count >= 1
