"""The GPU Velodyne decoder (``cuda/velodyne.py``) against the CPU twin ``decode_packets``, byte
for byte: same points, same order, same bits of every field, same packet index.

Without CuPy (CI) three things run against ``decode_packets`` on the three real bags, the
HDL-32E/HDL-64E synthetic packets and random packets (every filter and branch, dual pairs, a
calibration with the two-point correction on, one with subnormal ``sin_vert`` values):

- the host side (tables, kernel parameter order, staging, the point rows);
- :func:`kernel_model`, a NumPy transcription of ``cuda/kernels/velodyne.cu`` (float32
  operations as double operations rounded to float32, the uploaded tables, flag-then-rank);
- the kernel source itself, built as host C++ with g++ (:func:`host_kernels`; skipped without
  g++), its blocks and threads looped over.

With a GPU (``-m gpu``): the kernels on the device on the same inputs, from host memory and from
packets already on the device, and the sweeps of the real bags cut with the GPU decoding in
place of ``decode_packets``. A failure prints the first mismatching point, field by field, with
both sides' values and float bits, and how many points differ in each field.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster.cuda.velodyne import (
    F64_TABLES,
    FAMILY_CODES,
    I32_TABLES,
    KERNELS,
    PACKET_THREADS,
    RETURN_KINDS,
    SCALAR_PARAMS,
    VelodyneTables,
    build_tables,
    packet_deltas,
    points_to_host,
    scalar_args,
    stage_batch,
    staging_layout,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    POINT_DTYPE,
    DecoderSettings,
    SweepDecoder,
    decode_packets,
    load_calibration,
    read_velodyne_scans,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne import packets as packets_module
from gpu_euclidean_cluster.pointcloud_io.velodyne.sensors import Family

from ._velodyne_helpers import encode_packets
from .conftest import requires_cuda
from .test_velodyne_decoder import CALIBRATION, CASES, NEBULA, _hdl_packets, needs_nebula

KERNEL_FILE = Path(__file__).resolve().parents[1] / "gpu_euclidean_cluster/cuda/kernels/velodyne.cu"
HDL_CASES = [("HDL32", "HDL32.yaml"), ("HDL64", "HDL64e_s2.yaml"), ("HDL64", "HDL64e_s3.yaml")]
#: Random-packet cases: label -> (model, calibration file, variant). ``two_pt`` turns on the
#: two-point correction (no shipped calibration does); ``subnormal`` gives lasers 0-3 float32
#: subnormal ``sin_vert`` values (subnormal ``z`` and ``elevation``: CuPy's ``-ftz=true`` would
#: flush them in float arithmetic).
SENSORS = {
    "VLP16": ("VLP16", "VLP16.yaml", None),
    "VLP16-subnormal": ("VLP16", "VLP16.yaml", "subnormal"),
    "VLP32": ("VLP32", "VLP32.yaml", None),
    "VLP32-two-pt": ("VLP32", "VLP32.yaml", "two_pt"),
    "VLS128": ("VLS128", "VLS128.yaml", None),
    "HDL32": ("HDL32", "HDL32.yaml", None),
    "HDL64": ("HDL64", "HDL64e_s2.yaml", None),
    "HDL64-two-pt": ("HDL64", "HDL64e_s3.yaml", "two_pt"),
}


# ---------------------------------------------------------------------------------------------
# Inputs and the comparison


def _calibration(name: str):
    path = CALIBRATION / name
    if not path.is_file():
        pytest.skip(f"nebula calibration {path} not found (set LIDAR_DATA_DIR)")
    return load_calibration(path)


def _variant(label: str):
    """``(calibration, model)`` of a :data:`SENSORS` label."""
    model, name, variant = SENSORS[label]
    calibration = _calibration(name)
    if variant == "two_pt":
        size = calibration.size
        rng = np.random.default_rng(size)
        calibration = dataclasses.replace(
            calibration,
            two_pt_correction=np.arange(size) % 3 != 0,
            dist_correction_x=(calibration.dist_correction + rng.uniform(-0.05, 0.05, size)).astype(
                np.float32
            ),
            dist_correction_y=(calibration.dist_correction + rng.uniform(-0.05, 0.05, size)).astype(
                np.float32
            ),
        )
    elif variant == "subnormal":
        sin_vert = calibration.sin_vert.copy()
        sin_vert[:4] = np.array([1, 0x7FFFFF, 0x80000123, 0x00400000], np.uint32).view(np.float32)
        calibration = dataclasses.replace(calibration, sin_vert=sin_vert)
    return calibration, model


def _bag(folder: str):
    """``(packets, whole-second stamps, calibration, settings)`` of a real bag, all messages."""
    bag, _, settings, calibration = CASES[folder]
    scans = list(read_velodyne_scans(NEBULA / folder / bag))
    packets = np.concatenate([s.packets for s in scans])
    seconds = np.concatenate([s.packet_whole_seconds for s in scans])
    return packets, seconds, _calibration(calibration), settings


def _random_packets(count: int, seed: int, family: Family) -> np.ndarray:
    """Packets with random returns, rotations (some past 36000), headers (mostly valid) and
    return modes (mostly 55/56/57): every branch of the decoding, dual pairs included."""
    rng = np.random.default_rng(seed)
    headers = {
        Family.VLP16: [0xEEFF],
        Family.VLP32: [0xEEFF, 0xDDFF],
        Family.VLS128: [0xEEFF, 0xDDFF, 0xCCFF, 0xBBFF],
    }[family]
    header = rng.choice(headers, (count, 12))
    header[rng.random((count, 12)) < 0.02] = 0x1234
    rotation = rng.integers(0, 36000, (count, 12))
    rotation[rng.random((count, 12)) < 0.05] = rng.integers(36000, 65536)
    raw = rng.integers(0, 65536, (count, 12, 32))
    raw[rng.random(raw.shape) < 0.1] = 0
    near = rng.random(raw.shape) < 0.5
    raw[near] = rng.integers(1, 3000, int(near.sum()))
    intensity = rng.integers(0, 256, (count, 12, 32))
    packets = encode_packets(rotation, raw, intensity, header, mode=55)
    # dual-mode pairs: odd blocks repeat some of the even blocks' returns
    packets[:, 1204] = rng.choice([55, 56, 57, 57, 57, 0], count)
    blocks = packets[:, :1200].reshape(count, 12, 100)
    same = rng.random((count, 6, 32)) < 0.3
    for pair in range(6):
        even, odd = blocks[:, 2 * pair, 4:], blocks[:, 2 * pair + 1, 4:]
        mask = np.repeat(same[:, pair, :], 3, axis=1)
        odd[mask] = even[mask]
    packets[:, :1200] = blocks.reshape(count, 1200)
    return packets


def _describe(points: np.ndarray, i: int) -> str:
    row = points[i]
    parts = []
    for name in POINT_DTYPE.names:
        value = row[name]
        bits = f" (0x{np.asarray(value).view(np.uint32):08x})" if value.dtype.kind == "f" else ""
        parts.append(f"{name}={value!r}{bits}")
    return ", ".join(parts)


def assert_same_points(got, want, label: str = "") -> None:
    """``(points, packet_index)`` equal byte for byte; else the first differing point, field by
    field, and how many points differ in each field."""
    got_points, got_index = got
    want_points, want_index = want
    assert got_points.dtype == POINT_DTYPE, f"{label}: dtype {got_points.dtype}"
    assert got_index.dtype == np.int64, f"{label}: packet_index dtype {got_index.dtype}"
    if got_points.shape != want_points.shape:
        shown = min(got_points.shape[0], want_points.shape[0])
        first = np.flatnonzero(got_index[:shown] != want_index[:shown])
        at = int(first[0]) if first.size else shown
        pytest.fail(
            f"{label}: {got_points.shape[0]} points on the GPU, {want_points.shape[0]} on the CPU; "
            f"packet_index first differs at {at} (GPU packet "
            f"{got_index[at] if at < got_index.size else None}, CPU packet "
            f"{want_index[at] if at < want_index.size else None})"
        )
    if got_points.tobytes() == want_points.tobytes() and np.array_equal(got_index, want_index):
        return
    rows = got_points.view(np.uint8).reshape(-1, 32) != want_points.view(np.uint8).reshape(-1, 32)
    bad = np.flatnonzero(rows.any(axis=1) | (got_index != want_index))
    i = int(bad[0])
    counts = {
        name: int(
            np.sum(
                got_points[name].view(f"u{got_points[name].itemsize}")
                != want_points[name].view(f"u{want_points[name].itemsize}")
            )
        )
        for name in POINT_DTYPE.names
    }
    pytest.fail(
        f"{label}: {bad.size} of {want_points.shape[0]} points differ; fields differing "
        f"{ {k: v for k, v in counts.items() if v} }; first at {i} (packet GPU {got_index[i]} "
        f"CPU {want_index[i]}):\n  GPU {_describe(got_points, i)}\n"
        f"  CPU {_describe(want_points, i)}"
    )


# ---------------------------------------------------------------------------------------------
# The kernel, transcribed to NumPy


def _f32(x):
    """velo_f32: a double rounded to float32, back as a double."""
    return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)


def _mul(a, b):
    return _f32(np.multiply(a, b, dtype=np.float64))


def _div(a, b):
    return _f32(np.divide(a, b, dtype=np.float64))


def _add(a, b):
    return _f32(np.add(a, b, dtype=np.float64))


def _sub(a, b):
    return _f32(np.subtract(a, b, dtype=np.float64))


def _angle_ok(value, low, high):
    if low < high:
        return (value >= low) & (value <= high)
    if low > high:
        return (value <= high) | (value >= low)
    return np.zeros(value.shape, bool)


def kernel_model(
    tables: VelodyneTables, packets: np.ndarray, deltas: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``velo_flags``, the inclusive scan and ``velo_points`` over all slots at once, with the
    kernels' arguments (:func:`scalar_args`, the tables) and their arithmetic."""
    a = scalar_args(tables)
    i32, f64 = tables.i32, tables.f64
    family = int(a["family"])
    vlp16, vlp32, vls128 = (FAMILY_CODES[f] == family for f in Family)
    count = packets.shape[0]
    t = np.arange(count * PACKET_THREADS)
    p, bs = t // PACKET_THREADS, t % PACKET_THREADS
    b, s = bs // 32, bs % 32
    pk = packets.astype(np.int64)

    def u16(offset):
        return pk[p, offset] | (pk[p, offset + 1] << 8)

    def rotation_of(block):
        return u16(block * 100 + 2)

    mode = pk[p, 1204]
    dual = (mode == a["mode_dual"]).astype(np.int64)
    keep = np.ones(t.shape, bool)
    origin = np.zeros(t.shape, np.int64)
    if vlp16:
        for k in range(12):
            keep &= (k > b) | (u16(k * 100) == a["upper_bank"])
    elif vls128:
        for k in range(12):
            header = u16(k * 100)
            bank = np.full(t.shape, -1)
            for i in (3, 2, 1, 0):
                bank = np.where(header == i32["vls_banks"][i], i, bank)
            good = (bank >= 0) & ~((dual == 1) & (k >= 12 - 4))
            keep &= (k > b) | good
            origin = np.where(k == b, np.where(bank >= 0, 32 * bank, 0), origin)
    else:
        origin = np.where(u16(b * 100) == a["lower_bank"], 32, 0)
    laser = s % 16 if vlp16 else origin + s
    keep &= laser < a["laser_count"]
    laser = np.where(keep, laser, 0)  # table lookups of dropped slots read laser 0 (unused)
    ret = b * 100 + 4 + 3 * s
    partner = (b ^ 1) * 100 + 4 + 3 * s
    raw, partner_raw = u16(ret), u16(partner)
    keep &= (raw != 0) & ~((dual == 1) & (b % 2 == 1) & (partner_raw == raw))
    rec = i32["recurrence"].reshape(2, 3, 12)
    azimuth = rotation_of(rec[dual, 0, b])
    low, high = int(a["window_low"]), int(a["window_high"])
    if not vlp32:
        keep &= ((azimuth >= low) & (azimuth <= high)) if low < high else low > high

    distance = _mul(raw.astype(np.float64), a["resolution"])
    distance = np.where(distance > 1e-6, _add(distance, f64["dist_correction"][laser]), distance)
    keep &= (distance > a["min_range"]) & (distance < a["max_range"])

    copy = rec[dual, 2, b]
    k = np.where(copy >= 0, copy, b)
    nxt = rec[dual, 1, k]
    difference = np.fmod(
        36000 + rotation_of(np.maximum(nxt, 0)) - rotation_of(rec[dual, 0, k]), 36000
    )
    diff = np.where((copy == -2) | (nxt < 0), 0, difference).astype(np.float64)
    if vlp16:
        turn = _div(_mul(diff, f64["slot_turn"][s]), a["turn_div"])
    elif vlp32:
        turn = _mul(_div(_mul(diff, a["turn_mul"]), a["turn_div"]), s.astype(np.float64))
    else:
        turn = _mul(diff, f64["group_turn"][laser // 8])
    partial = _add(azimuth.astype(np.float64), turn)
    corrected = _f32(partial - f64["rot_term"][laser])
    corrected = np.where(corrected < 0.0, _f32(corrected + 36000.0), corrected)
    index = (np.floor(corrected + 0.5).astype(np.int64) & 0xFFFF) % 36000
    rotation = rotation_of(b)
    keep &= _angle_ok(rotation if vlp32 else index, low, high)

    rank = np.cumsum(keep.astype(np.int32), dtype=np.int32)  # what cupy.cumsum gives
    kept = np.flatnonzero(keep)
    assert np.array_equal(rank[kept] - 1, np.arange(kept.size))
    p, b, s, laser, raw, partner_raw = (v[kept] for v in (p, b, s, laser, raw, partner_raw))
    ret, partner, mode, dual = ret[kept], partner[kept], mode[kept], dual[kept]
    distance, index, rotation = distance[kept], index[kept], rotation[kept]

    cos_rot, sin_rot = f64["cos_table"][index], f64["sin_table"][index]
    cv, sv = f64["cos_vert"][laser], f64["sin_vert"][laser]
    raw_intensity, partner_intensity = pk[p, ret + 2], pk[p, partner + 2]
    if vlp32:
        h, v = f64["horiz"][laser], f64["vert"][laser]
        dx = dy = distance
        two_pt = i32["two_pt"][laser] != 0
        if two_pt.any():
            dc = f64["dist_correction"][laser]
            xy = _sub(_mul(distance, cv), _mul(v, sv))
            xx = np.abs(_sub(_mul(xy, sin_rot), _mul(h, cos_rot)))
            yy = np.abs(_add(_mul(xy, cos_rot), _mul(h, sin_rot)))

            def two_pt_axis(dcxy, r, near):
                scaled = (_sub(dc, dcxy) * (r - near)) / (25.04 - near)
                return _sub(_f32(scaled + dcxy), dc)

            dx = np.where(two_pt, _add(distance, two_pt_axis(f64["dist_x"][laser], xx, 2.4)), dx)
            dy = np.where(two_pt, _add(distance, two_pt_axis(f64["dist_y"][laser], yy, 1.93)), dy)
        big_x = _sub(_mul(_sub(_mul(dx, cv), _mul(v, sv)), sin_rot), _mul(h, cos_rot))
        big_y = _add(_mul(_sub(_mul(dy, cv), _mul(v, sv)), cos_rot), _mul(h, sin_rot))
        x, y, z = big_y, -big_x, _add(_mul(dy, sv), _mul(v, cv))
        u = _sub(1.0, _div(raw.astype(np.float64), 65535.0))
        sqr = _mul(u, u)
        boost = _mul(
            f64["focal_slope"][laser], np.abs(_sub(f64["focal_offset"][laser], _mul(256.0, sqr)))
        )
        value = np.trunc(_add(raw_intensity.astype(np.float64), boost)).astype(np.int64) & 0xFF
        value = np.where(value < i32["min_intensity"][laser], i32["min_intensity"][laser], value)
        value = np.where(value > i32["max_intensity"][laser], i32["max_intensity"][laser], value)
        intensity = value & 0xFF
        azimuth_out = f64["radians"][rotation % 36000]
    else:
        xy = _mul(distance, cv)
        x, y, z = _mul(xy, cos_rot), -_mul(xy, sin_rot), _mul(distance, sv)
        intensity = raw_intensity
        azimuth_out = f64["radians"][index]

    first = raw > partner_raw if vlp16 else partner_raw >= raw
    strongest = np.where(intensity == partner_intensity, ~first, intensity > partner_intensity)
    kind = np.where(first, np.where(strongest, 4, 5), np.where(strongest, 6, 7))
    kind = np.where((partner_raw == 0) | (partner_raw == raw), 3, kind)
    kind = np.where(dual == 1, kind, 0)
    kind = np.where(mode == a["mode_last"], 1, kind)
    kind = np.where(mode == a["mode_strongest"], 2, kind)

    columns = int(a["time_columns"])
    cell = (b // 4) * columns + laser // 8 + laser // 64 if vls128 else b * columns + s
    seconds = deltas[p] + f64["time_table"][cell]
    seconds = np.where(seconds < 0.0, 0.0, seconds)
    stamp = np.trunc(seconds * 1e9).astype(np.int64).astype(np.uint32)

    words = np.zeros((kept.size, 8), np.uint32)
    for column, value in ((0, x), (1, y), (2, z), (4, azimuth_out), (5, sv), (6, distance)):
        words[:, column] = value.astype(np.float32).view(np.uint32)
    words[:, 3] = (
        intensity.astype(np.uint32)
        | ((i32["return_codes"][kind] & 0xFF).astype(np.uint32) << 8)
        | ((i32["ring"][laser] & 0xFFFF).astype(np.uint32) << 16)
    )
    words[:, 7] = stamp
    return points_to_host(words.view(np.uint8)), p.astype(np.int64)


# ---------------------------------------------------------------------------------------------
# CPU: host side and the kernel model


def _kernel_parameters(macro: str) -> list[str]:
    source = KERNEL_FILE.read_text()
    match = re.search(rf"#define {macro}\s*\\\n(.*?)\n\n", source, re.S)
    assert match, f"{macro} not found in {KERNEL_FILE}"
    text = match.group(1).replace("\\\n", " ")
    return [re.findall(r"\w+", part)[-1] for part in text.split(",")]


def test_kernel_parameters_are_passed_in_their_order():
    expected = ["packets", "delta", "count", *SCALAR_PARAMS, *I32_TABLES, *F64_TABLES]
    expected += ["rank", "points", "packet_index"]
    assert _kernel_parameters("VELO_PARAMS") == expected
    assert _kernel_parameters("VELO_ARGS") == expected
    source = KERNEL_FILE.read_text()
    for name in KERNELS:
        assert f'extern "C" __global__ void {name}(VELO_PARAMS)' in source


def test_return_kinds_follow_the_kernel_indices():
    source = KERNEL_FILE.read_text()
    kinds = dict(re.findall(r"#define VELO_KIND_(\w+) (\d+)", source))
    assert len(kinds) == len(RETURN_KINDS)
    for name, index in kinds.items():
        assert RETURN_KINDS[int(index)] == getattr(packets_module, f"RETURN_{name}"), name


@pytest.mark.parametrize("label", sorted(SENSORS))
def test_tables_hold_the_cpu_twins_values(label: str):
    calibration, model = _variant(label)
    settings = DecoderSettings(model, "Dual", "v", 0.3, 200.0, 0.0, 10, 350)
    tables = build_tables(calibration, settings)
    radians, cos_table, sin_table = packets_module.rotation_tables()
    assert np.array_equal(tables.f64["cos_table"].astype(np.float32), cos_table)
    assert np.array_equal(tables.f64["sin_table"].astype(np.float32), sin_table)
    assert np.array_equal(tables.f64["radians"].astype(np.float32), radians)
    family = settings.sensor.family
    time = packets_module.time_offsets(family)
    assert tables.time_columns == time.shape[1]
    assert np.array_equal(tables.f64["time_table"], time.reshape(-1).astype(np.float64))
    for name in F64_TABLES:
        values = tables.f64[name]
        if name != "rot_term":  # every other table holds float32 values exactly
            assert np.array_equal(values.astype(np.float32).astype(np.float64), values), name
    assert tables.laser_count == calibration.size
    assert (tables.window_low, tables.window_high) == (1000, 35000)
    assert tables.i32["recurrence"].shape == (2 * 3 * 12,)
    for dual in (False, True):
        block = np.arange(12)
        azimuth_from = tables.i32["recurrence"].reshape(2, 3, 12)[int(dual), 0]
        rotation = np.tile(1000 + 100 * block, (1, 1))
        azimuth, _ = packets_module.block_azimuths(rotation, np.array([dual]), family)
        assert np.array_equal(azimuth[0], rotation[0, azimuth_from])


def test_staging_holds_deltas_then_packets():
    rng = np.random.default_rng(0)
    packets = rng.integers(0, 256, (5, 1206), dtype=np.uint8)
    seconds = 100.0 + rng.random(5)
    deltas = packet_deltas(seconds, 100.25, 5)
    assert np.array_equal(deltas, seconds - np.float64(100.25))
    assert np.array_equal(packet_deltas(3.0, seconds, 5), np.float64(3.0) - seconds)
    offset, total = staging_layout(5)
    assert (offset, total) == (40, 40 + 5 * 1206)
    staging = np.zeros(total + 64, np.uint8)
    assert stage_batch(staging, packets, deltas) == total
    assert np.array_equal(staging[:offset].view(np.float64), deltas)
    assert np.array_equal(staging[offset:total].reshape(5, 1206), packets)


def test_points_to_host_views_rows_as_the_point_dtype():
    points = np.zeros(3, POINT_DTYPE)
    points["x"] = [1.5, -0.0, 2.0]
    points["channel"] = [1, 2, 65535]
    points["time_stamp"] = [7, 8, 2**32 - 1]
    rows = points.view(np.uint8).reshape(3, 32)
    assert points_to_host(rows).tobytes() == points.tobytes()
    assert points_to_host(np.zeros((0, 32), np.uint8)).shape == (0,)


@needs_nebula
@pytest.mark.parametrize("folder", sorted(CASES))
def test_kernel_model_equals_the_cpu_twin_on_the_real_bags(folder: str):
    packets, seconds, calibration, settings = _bag(folder)
    scan = np.repeat(seconds[::50], 50)[: seconds.size] - 0.05  # some negative times
    want = decode_packets(packets, seconds, scan, calibration, settings)
    assert want[0].shape[0] > 10000
    got = kernel_model(
        build_tables(calibration, settings), packets, packet_deltas(seconds, scan, len(seconds))
    )
    assert_same_points(got, want, folder)


@pytest.mark.parametrize(("model", "calibration_name"), HDL_CASES)
def test_kernel_model_equals_the_cpu_twin_on_hdl_packets(model: str, calibration_name: str):
    calibration = _calibration(calibration_name)
    settings = DecoderSettings(model, "SingleStrongest", "velodyne", 0.4, 130.0, 0.0, 0, 360)
    packets, *_ = _hdl_packets(settings.sensor.lasers, calibration, seed=settings.sensor.lasers)
    stamps = np.array([10.0, 10.0005, 10.001])
    want = decode_packets(packets, stamps, 10.0, calibration, settings)
    got = kernel_model(build_tables(calibration, settings), packets, packet_deltas(stamps, 10.0, 3))
    assert_same_points(got, want, model)


def _random_cases():
    windows = [(0, 360), (0, 359), (270, 90), (100, 100), (359, 1)]
    for label in sorted(SENSORS):
        for seed, (low, high) in enumerate(windows):
            yield label, seed, low, high


@pytest.mark.parametrize(("label", "seed", "low", "high"), list(_random_cases()))
def test_kernel_model_equals_the_cpu_twin_on_random_packets(label, seed, low, high):
    calibration, model = _variant(label)
    settings = DecoderSettings(model, "Dual", "v", 0.3, 100.0, 0.0, low, high)
    packets = _random_packets(40, seed, settings.sensor.family)
    seconds = 5.0 + 1e-4 * np.arange(40)
    want = decode_packets(packets, seconds, 5.001, calibration, settings)
    got = kernel_model(
        build_tables(calibration, settings), packets, packet_deltas(seconds, 5.001, 40)
    )
    assert_same_points(got, want, f"{label} seed {seed} window {low}-{high}")


# ---------------------------------------------------------------------------------------------
# GPU: the kernels


def _decoder(calibration, settings):
    from gpu_euclidean_cluster.cuda.velodyne import CudaPacketDecoder

    return CudaPacketDecoder(calibration, settings, device_id=0)


def _both_paths(decoder, packets, seconds, scan, label):
    """The CPU twin's result, checked against the GPU's from host memory and from the device."""
    import cupy

    want = decode_packets(packets, seconds, scan, decoder.calibration, decoder.settings)
    assert_same_points(decoder.decode_to_host(packets, seconds, scan), want, f"{label}, host")
    device_packets = cupy.asarray(packets)
    got = decoder.decode_to_host(device_packets, seconds, scan)
    assert_same_points(got, want, f"{label}, packets on the device")
    scan_device = cupy.asarray(
        np.ascontiguousarray(np.broadcast_to(np.asarray(scan, np.float64), seconds.shape))
    )
    got = decoder.decode_to_host(device_packets, cupy.asarray(seconds), scan_device)
    assert_same_points(got, want, f"{label}, packets and stamps on the device")
    points, index = decoder.decode(packets, seconds, scan)
    assert points.dtype == cupy.uint8 and points.shape == (want[0].shape[0], 32)
    assert index.dtype == cupy.int64
    return want


@pytest.mark.gpu
@requires_cuda
@needs_nebula
@pytest.mark.parametrize("folder", sorted(CASES))
def test_gpu_equals_the_cpu_twin_on_the_real_bags(folder: str):
    packets, seconds, calibration, settings = _bag(folder)
    decoder = _decoder(calibration, settings)
    want = _both_paths(decoder, packets, seconds, seconds[0], f"{folder}, one scan stamp")
    assert want[0].shape[0] > 10000
    scan = np.repeat(seconds[::50], 50)[: seconds.size] - 0.05  # some negative times
    _both_paths(decoder, packets, seconds, scan, f"{folder}, scan stamp per packet")
    # a batch of one packet, and batches reusing the grown buffers with fewer packets
    for start, stop in ((0, 1), (7, 8), (10, 300), (0, len(packets)), (3, 5)):
        _both_paths(decoder, packets[start:stop], seconds[start:stop], seconds[start],
                    f"{folder}, packets {start}:{stop}")  # fmt: skip


@pytest.mark.gpu
@requires_cuda
@needs_nebula
@pytest.mark.parametrize("folder", sorted(CASES))
def test_gpu_sweeps_equal_the_cpu_sweeps(folder: str):
    """``SweepDecoder`` with the GPU decoding in place of ``decode_packets``: the same sweeps."""
    bag, _, settings, calibration_name = CASES[folder]
    calibration = _calibration(calibration_name)
    scans = list(read_velodyne_scans(NEBULA / folder / bag))
    cpu = SweepDecoder(calibration, settings)
    want = [s for scan in scans for s in cpu.feed(scan.packets, scan.packet_whole_seconds)]
    gpu = SweepDecoder(calibration, settings, decode=_decoder(calibration, settings).decode_with)
    got = [s for scan in scans for s in gpu.feed(scan.packets, scan.packet_whole_seconds)]
    assert len(got) == len(want) > 0
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert (mine.stamp, mine.packet_count) == (theirs.stamp, theirs.packet_count)
        index = np.zeros(mine.points.shape[0], np.int64)
        want_index = np.zeros(theirs.points.shape[0], np.int64)
        assert_same_points((mine.points, index), (theirs.points, want_index), f"sweep {i}")


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize(("model", "calibration_name"), HDL_CASES)
def test_gpu_equals_the_cpu_twin_on_hdl_packets(model: str, calibration_name: str):
    calibration = _calibration(calibration_name)
    settings = DecoderSettings(model, "SingleStrongest", "velodyne", 0.4, 130.0, 0.0, 0, 360)
    packets, *_ = _hdl_packets(settings.sensor.lasers, calibration, seed=settings.sensor.lasers)
    want = _both_paths(_decoder(calibration, settings), packets, np.array([10.0, 10.0005, 10.001]),
                       10.0, model)  # fmt: skip
    assert want[0].shape[0] == packets.shape[0] * 384


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize(("label", "seed", "low", "high"), list(_random_cases()))
def test_gpu_equals_the_cpu_twin_on_random_packets(label, seed, low, high):
    calibration, model = _variant(label)
    settings = DecoderSettings(model, "Dual", "v", 0.3, 100.0, 0.0, low, high)
    packets = _random_packets(40, seed, settings.sensor.family)
    seconds = 5.0 + 1e-4 * np.arange(40)
    _both_paths(_decoder(calibration, settings), packets, seconds, 5.001,
                f"{label} seed {seed} window {low}-{high}")  # fmt: skip


@pytest.mark.gpu
@requires_cuda
def test_gpu_edge_cases():
    import cupy

    calibration = _calibration("VLP16.yaml")
    settings = DecoderSettings("VLP16", "Dual", "v", 0.3, 100.0, 0.0, 0, 360)
    decoder = _decoder(calibration, settings)
    # empty batch, from host and device memory
    for empty in (np.zeros((0, 1206), np.uint8), cupy.zeros((0, 1206), cupy.uint8)):
        points, index = decoder.decode_to_host(empty, np.zeros(0), 0.0)
        assert points.dtype == POINT_DTYPE and points.shape == (0,) and index.shape == (0,)
    with pytest.raises(ValueError, match="1206"):
        decoder.decode(np.zeros((2, 1200), np.uint8), np.zeros(2), 0.0)
    packets = _random_packets(3, 11, Family.VLP16)
    _both_paths(decoder, packets[:1], np.array([1.0]), 0.5, "one packet")
    # everything filtered: empty range, empty window (min == max), headers all bad
    for nothing in (
        DecoderSettings("VLP16", "Dual", "v", 50.0, 10.0, 0.0, 0, 360),
        DecoderSettings("VLP16", "Dual", "v", 0.3, 100.0, 0.0, 90, 90),
    ):
        points, index = _decoder(calibration, nothing).decode_to_host(packets, np.ones(3), 0.0)
        assert points.shape == (0,) and index.shape == (0,)
        assert decode_packets(packets, np.ones(3), 0.0, calibration, nothing)[0].shape == (0,)
    bad = packets.copy()
    bad[:, 0] = 0
    points, index = decoder.decode_to_host(bad, np.ones(3), 0.0)
    assert points.shape == (0,) and index.shape == (0,)


# ---------------------------------------------------------------------------------------------
# CPU: the kernel source itself, compiled as host C++ (thread and block indices looped over)

HOST_SHIM = r"""
#include <math.h>
#include <string.h>
#define __device__
#define __global__
#define __forceinline__ inline
struct velo_dim3 { unsigned x, y, z; };
static velo_dim3 blockIdx, threadIdx, blockDim;
struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) {
    return uint4{a, b, c, d};
}
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline float __double2float_rn(double x) { return (float)x; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
"""

HOST_DRIVER = r"""
extern "C" void velo_host_run(int write, VELO_PARAMS) {
    blockDim.x = VELO_BLOCKS * VELO_SLOTS;
    for (int p = 0; p < count; ++p) {
        for (unsigned i = 0; i < blockDim.x; ++i) {
            blockIdx.x = p;
            threadIdx.x = i;
            if (write) velo_points(VELO_ARGS); else velo_flags(VELO_ARGS);
        }
    }
}
"""


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory: pytest.TempPathFactory):
    """``cuda/kernels/velodyne.cu`` built for the host with g++ (x86-64 SSE doubles, no
    contraction), as a ctypes function ``velo_host_run(write, VELO_PARAMS)``."""
    import ctypes
    import shutil
    import subprocess

    from gpu_euclidean_cluster.cuda.module import KernelSource
    from gpu_euclidean_cluster.cuda.velodyne import VELODYNE_CONSTANTS, VELODYNE_FILES

    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found: the kernel source is not run on the host")
    source = KernelSource("velodyne", VELODYNE_FILES, VELODYNE_CONSTANTS)
    folder = tmp_path_factory.mktemp("velodyne_host")
    (folder / "velodyne_host.cpp").write_text(HOST_SHIM + source.code() + HOST_DRIVER)
    defines = [option for option in source.options() if option.startswith("-D")]
    library = folder / "velodyne_host.so"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-shared",
         "-fPIC", *defines, str(folder / "velodyne_host.cpp"), "-o", str(library)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    function = ctypes.CDLL(str(library)).velo_host_run
    kinds = []
    text = re.search(r"#define VELO_PARAMS\s*\\\n(.*?)\n\n", KERNEL_FILE.read_text(), re.S)
    for declaration in text.group(1).replace("\\\n", " ").split(","):
        kinds.append(
            ctypes.c_void_p if "*" in declaration
            else ctypes.c_double if declaration.split()[0] == "double"
            else ctypes.c_int
        )  # fmt: skip
    function.argtypes = [ctypes.c_int, *kinds]
    function.restype = None
    return function


def host_decode(run, tables: VelodyneTables, packets: np.ndarray, deltas: np.ndarray):
    """``CudaPacketDecoder.decode``'s steps with the host-built kernels."""
    count = packets.shape[0]
    packets = np.ascontiguousarray(packets)
    deltas = np.ascontiguousarray(deltas, np.float64)
    scalars = scalar_args(tables)
    keep_alive = [np.ascontiguousarray(tables.i32[k]) for k in I32_TABLES]
    keep_alive += [np.ascontiguousarray(tables.f64[k]) for k in F64_TABLES]
    head = [packets.ctypes.data, deltas.ctypes.data, count]
    head += [scalars[name].item() for name in SCALAR_PARAMS]
    head += [array.ctypes.data for array in keep_alive]
    flags = np.full(count * PACKET_THREADS, -1, np.int32)
    dummy_points, dummy_index = np.zeros(8, np.uint32), np.zeros(1, np.int64)
    run(0, *head, flags.ctypes.data, dummy_points.ctypes.data, dummy_index.ctypes.data)
    assert np.isin(flags, (0, 1)).all(), "velo_flags left a slot unwritten"
    rank = np.cumsum(flags, dtype=np.int32)
    total = int(rank[-1]) if rank.size else 0
    points = np.zeros((total, 8), np.uint32)
    index = np.full(total, -1, np.int64)
    if total:
        run(1, *head, rank.ctypes.data, points.ctypes.data, index.ctypes.data)
    return points_to_host(points.view(np.uint8)), index


@needs_nebula
@pytest.mark.parametrize("folder", sorted(CASES))
def test_kernel_source_on_the_host_equals_the_cpu_twin_on_the_real_bags(folder, host_kernels):
    packets, seconds, calibration, settings = _bag(folder)
    scan = np.repeat(seconds[::50], 50)[: seconds.size] - 0.05
    want = decode_packets(packets, seconds, scan, calibration, settings)
    deltas = packet_deltas(seconds, scan, len(seconds))
    got = host_decode(host_kernels, build_tables(calibration, settings), packets, deltas)
    assert_same_points(got, want, f"{folder} (kernel source on the host)")


@pytest.mark.parametrize(("model", "calibration_name"), HDL_CASES)
def test_kernel_source_on_the_host_equals_the_cpu_twin_on_hdl_packets(
    model, calibration_name, host_kernels
):
    calibration = _calibration(calibration_name)
    settings = DecoderSettings(model, "SingleStrongest", "velodyne", 0.4, 130.0, 0.0, 0, 360)
    packets, *_ = _hdl_packets(settings.sensor.lasers, calibration, seed=settings.sensor.lasers)
    stamps = np.array([10.0, 10.0005, 10.001])
    want = decode_packets(packets, stamps, 10.0, calibration, settings)
    tables = build_tables(calibration, settings)
    got = host_decode(host_kernels, tables, packets, packet_deltas(stamps, 10.0, 3))
    assert_same_points(got, want, f"{model} (kernel source on the host)")


@pytest.mark.parametrize(("label", "seed", "low", "high"), list(_random_cases()))
def test_kernel_source_on_the_host_equals_the_cpu_twin_on_random_packets(
    label, seed, low, high, host_kernels
):
    calibration, model = _variant(label)
    settings = DecoderSettings(model, "Dual", "v", 0.3, 100.0, 0.0, low, high)
    packets = _random_packets(40, seed, settings.sensor.family)
    seconds = 5.0 + 1e-4 * np.arange(40)
    want = decode_packets(packets, seconds, 5.001, calibration, settings)
    tables = build_tables(calibration, settings)
    got = host_decode(host_kernels, tables, packets, packet_deltas(seconds, 5.001, 40))
    assert_same_points(got, want, f"{label} seed {seed} window {low}-{high} (host)")
