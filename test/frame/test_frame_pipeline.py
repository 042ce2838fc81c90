"""The frame layer's twin codecs (``cpu/codecs/frame.py``, ``cuda/codecs/frame.py``) against each
other, byte for byte.

CPU-only tests check the layout planning against ``read_xyz``/``append_fields``, the NumPy models
of the kernels' rules (mask, colour, payload words, the cluster table's summation tree and its
threads), the cluster table against a plain-Python reading of its spec, the float64 window of
``clip_mask``, ``FramePipeline`` driven by a codec made of those models, and ``read_xyz`` against
``sensor_msgs_py``'s reader. GPU tests (marked ``gpu``, skipped without CUDA) run
``FramePipeline`` on the CUDA backend and compare every output byte with the CPU backend on the
real frames and odd layouts.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_euclidean_cluster import EuclideanClusterer
from gpu_euclidean_cluster.core.cluster_stats import (
    SUM_LEAF,
    _hsv_to_rgb,
    cluster_rgb,
    cluster_sums,
    cluster_table,
    pack_rgb,
)
from gpu_euclidean_cluster.core.config import ClusterConfig
from gpu_euclidean_cluster.core.frame import (
    FrameCodec,
    GroupedRecords,
    Unsupported,
    flatten_heights,
)
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.codecs.frame import CpuFrameCodec, clip_mask, cluster_mask
from gpu_euclidean_cluster.cuda.codecs.frame_steps import cluster_threads
from gpu_euclidean_cluster.frame import (
    DecodedFrame,
    EncodedFrame,
    FrameOutput,
    FramePipeline,
    FrameWindow,
)
from gpu_euclidean_cluster.pointcloud_io import pointcloud2 as pc
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import (
    DATATYPES,
    FLOAT32,
    FLOAT64,
    Field,
    PointCloud2Error,
    RawCloud,
    append_fields,
    from_structured,
    keep_fields,
    read_fields,
    read_xyz,
)
from gpu_euclidean_cluster.pointcloud_io.pointcloud2_plan import (
    compact_layout,
    layout_key,
    output_layout,
    plan_xyz,
)
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

from ..conftest import FRAME_FIELDS, requires_cuda

SETTINGS = {
    "default": NodeSettings(),
    "window": NodeSettings(min_range=2.5, max_range=40.0, min_z=-1.6, max_z=1.5),
    "flat": NodeSettings(use_height=False),
    "window_flat": NodeSettings(use_height=False, min_range=3.0, max_range=30.0, max_z=0.5),
    "implausible": NodeSettings(max_coordinate=25.0),
    "no_limit": NodeSettings(max_coordinate=float("inf"), max_range=1e200),
    "lanes": NodeSettings(
        keep_lanes=True, keep_lane_left_distance=4.0, keep_lane_right_distance=2.5
    ),
}
BASE_POINTS = 16000


def run(pipeline: FramePipeline, cloud: RawCloud, settings: NodeSettings) -> FrameOutput:
    """``pipeline`` on ``cloud`` with the node's ``settings``."""
    return pipeline.process(cloud, settings.cluster, settings.window)


# ---------------------------------------------------------------------------------------------
# Clouds


def xyzi_cloud(xyz: np.ndarray) -> RawCloud:
    """A frame as a driver publishes it: x, y, z, intensity float32 (16-byte points)."""
    array = np.zeros(len(xyz), dtype=[(n, "<f4") for n in ("x", "y", "z", "intensity")])
    for axis, name in enumerate("xyz"):
        array[name] = xyz[:, axis]
    array["intensity"] = np.arange(len(xyz)) % 97
    return from_structured(array)


@pytest.fixture(scope="module")
def base(load_frame: Callable[[str], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return base_points(load_frame)


def base_points(load_frame: Callable[[str], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """16000 points of kitti_000008 (float32) with NaN/±Inf, signed zeros, subnormals and
    implausible coordinates mixed in, and an intensity column (the ``base`` fixture)."""
    xyz = load_frame("kitti_000008.bin")[:BASE_POINTS].copy()
    rng = np.random.default_rng(7)
    bad = rng.choice(len(xyz), 60, replace=False)
    values = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)
    xyz[bad, rng.integers(0, 3, 60)] = values[rng.integers(0, 3, 60)]
    zeros = rng.choice(len(xyz), 300, replace=False)
    xyz[zeros, rng.integers(0, 3, 300)] = np.where(rng.random(300) < 0.5, 0.0, -0.0)
    tiny = rng.choice(len(xyz), 20, replace=False)
    xyz[tiny, rng.integers(0, 3, 20)] = np.float32(1e-45) * rng.integers(1, 9, 20)
    far = rng.choice(len(xyz), 30, replace=False)
    xyz[far, rng.integers(0, 3, 30)] = rng.choice([-1.0, 1.0], 30) * 10.0 ** rng.uniform(6, 38, 30)
    intensity = (np.arange(len(xyz)) % 251).astype(np.float32)
    return xyz, intensity


def structured_cloud(
    spec: dict[str, Any], values: dict[str, np.ndarray], height: int = 1, big: bool = False
) -> RawCloud:
    """A cloud of the numpy dtype ``spec`` filled from ``values``."""
    dtype = np.dtype(spec)
    array = np.zeros(len(next(iter(values.values()))), dtype=dtype)
    for name in dtype.names:
        array[name] = values[name]
    return from_structured(array, height=height, is_bigendian=big)


def padded_rows(cloud: RawCloud, height: int, row_pad: int, trailing: int = 0) -> RawCloud:
    """``cloud`` organised in ``height`` rows, each padded with ``row_pad`` bytes (0xAB)."""
    data = np.frombuffer(cloud.data, dtype=np.uint8)
    width = cloud.num_points // height
    rows = data[: height * width * cloud.point_step].reshape(height, width * cloud.point_step)
    row_step = width * cloud.point_step + row_pad
    out = np.full((height, row_step), 0xAB, dtype=np.uint8)
    out[:, : rows.shape[1]] = rows
    payload = np.concatenate([out.reshape(-1), np.full(trailing, 0xCD, np.uint8)])
    return RawCloud(
        cloud.fields, height, width, cloud.point_step, row_step, payload.tobytes(),
        cloud.is_bigendian, cloud.is_dense,
    )  # fmt: skip


def _wide(column: np.ndarray, seed: int) -> np.ndarray:
    """A float64 column with values float32 cannot hold: huge, tiny (subnormal) and 1e300."""
    out = column.astype(np.float64)
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(out), 12, replace=False)
    out[rows] = [1e300, -1e300, 1e-310, -5e-324, 3e38 * 4, 1e200, 2.5e6, -2.5e6, 1e-200, 7, 8, 9]
    return out


def odd_layouts(base: tuple[np.ndarray, np.ndarray]) -> dict[str, Callable[[], RawCloud]]:
    """Named builders of the base points in unusual PointCloud2 layouts."""
    xyz, intensity = base
    n = len(xyz)

    def columns(wide: bool = False, **extra: np.ndarray) -> dict[str, np.ndarray]:
        x, y, z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        if wide:
            x, y = _wide(x, 1), _wide(y, 2)
        return {"x": x, "y": y, "z": z, "intensity": intensity, **extra}

    f4 = {"names": ["x", "y", "z", "intensity"], "formats": ["<f4"] * 4}
    f8 = {"names": ["x", "y", "z", "intensity"], "formats": ["<f8", "<f8", "<f8", "<f4"]}
    padded = {**f4, "offsets": [4, 8, 12, 20], "itemsize": 32}
    zyx = {"names": ["z", "y", "x", "intensity"], "formats": ["<f4"] * 4}
    scattered = {
        "names": ["x", "intensity", "y", "z"],
        "formats": ["<f4"] * 4,
        "offsets": [0, 4, 12, 24],
        "itemsize": 28,
    }
    unaligned = {  # z first, an unaligned uint16, float64 x/y at odd offsets, step 29
        "names": ["z", "ring", "x", "y", "intensity"],
        "formats": ["<f4", "<u2", "<f8", "<f8", "<f4"],
        "offsets": [0, 4, 7, 15, 23],
        "itemsize": 29,
    }
    step13 = {"names": ["x", "y", "z", "ring"], "formats": ["<f4", "<f4", "<f4", "<u1"]}
    with_outputs = {
        "names": ["x", "y", "z", "rgb", "cluster_id", "intensity"],
        "formats": ["<f4", "<f4", "<f4", "<f4", "<i4", "<f4"],
    }
    ring = np.arange(n, dtype=np.uint16) % 64

    def ints(kind: str, scale: float) -> RawCloud:
        info = np.iinfo(np.dtype(kind))
        scaled = np.nan_to_num(xyz.astype(np.float64) * scale, posinf=0.0, neginf=0.0)
        scaled = np.clip(np.round(scaled), info.min, info.max).astype(kind)
        spec = {"names": ["x", "y", "z"], "formats": [kind] * 3}
        return structured_cloud(spec, {"x": scaled[:, 0], "y": scaled[:, 1], "z": scaled[:, 2]})

    def mixed() -> RawCloud:
        spec = {"names": ["x", "y", "z"], "formats": ["<f8", "<f4", "<i2"]}
        z = np.nan_to_num(xyz[:, 2].astype(np.float64) * 100, posinf=0, neginf=0)
        z = np.clip(np.round(z), -3e4, 3e4)
        values = {"x": _wide(xyz[:, 0], 3), "y": xyz[:, 1], "z": z.astype("<i2")}
        return structured_cloud(spec, values)

    return {
        "packed_f32": lambda: structured_cloud(f4, columns()),
        "float64": lambda: structured_cloud(f8, columns(wide=True)),
        "big_endian_f32": lambda: structured_cloud(f4, columns(), big=True),
        "big_endian_f64": lambda: structured_cloud(f8, columns(wide=True), big=True),
        "padding_inside_point": lambda: structured_cloud(padded, columns()),
        "order_zyx": lambda: structured_cloud(zyx, columns()),
        "scattered_fields": lambda: structured_cloud(scattered, columns()),
        "unaligned_step29_big": lambda: structured_cloud(
            unaligned, columns(wide=True, ring=ring), big=True
        ),
        "step13": lambda: structured_cloud(step13, columns(ring=ring.astype(np.uint8))),
        "existing_rgb_cluster_id": lambda: structured_cloud(
            with_outputs, columns(rgb=np.full(n, 7.5, np.float32), cluster_id=ring)
        ),
        "organised": lambda: structured_cloud(f4, columns(), height=16),
        "organised_row_padding": lambda: padded_rows(structured_cloud(f4, columns()), 16, 20),
        "organised_row_padding_step13_big": lambda: padded_rows(
            structured_cloud(step13, columns(ring=ring.astype(np.uint8)), big=True), 32, 7, 33
        ),
        "trailing_bytes": lambda: padded_rows(structured_cloud(f4, columns()), 1, 0, 100),
        "int16_cm": lambda: ints("<i2", 100.0),
        "int32_mm_big": lambda: ints(">i4", 1000.0),
        "uint8": lambda: ints("u1", 1.0),
        "mixed_f64_f32_i16": mixed,
    }


LAYOUT_NAMES = [
    "packed_f32", "float64", "big_endian_f32", "big_endian_f64", "padding_inside_point",
    "order_zyx", "scattered_fields", "unaligned_step29_big", "step13", "existing_rgb_cluster_id",
    "organised", "organised_row_padding", "organised_row_padding_step13_big", "trailing_bytes",
    "int16_cm", "int32_mm_big", "uint8", "mixed_f64_f32_i16",
]  # fmt: skip

EMPTY_CLOUDS = {
    "width0": RawCloud(tuple(Field(n, 4 * i, FLOAT32) for i, n in enumerate("xyz")), 1, 0, 12, 0,
                       b""),
    "height0": RawCloud(tuple(Field(n, 8 * i, FLOAT64) for i, n in enumerate("xyz")), 0, 5, 24,
                        120, b""),
}  # fmt: skip


def layout_cloud(base: tuple[np.ndarray, np.ndarray], name: str) -> RawCloud:
    """The base points in the layout called ``name`` (or an empty cloud)."""
    if name in EMPTY_CLOUDS:
        return EMPTY_CLOUDS[name]
    return odd_layouts(base)[name]()


def test_layout_names_are_complete(base):
    assert sorted(odd_layouts(base)) == sorted(LAYOUT_NAMES)


# ---------------------------------------------------------------------------------------------
# NumPy models of the kernels' rules


def emulate_decode(cloud: RawCloud) -> np.ndarray:
    """x, y, z read at the plan's offsets and datatypes, in the plan's dtype."""
    plan = plan_xyz(cloud)
    n = plan.num_points
    if n == 0:
        return np.empty((0, 3), dtype=plan.dtype)
    raw = np.frombuffer(cloud.data, dtype=np.uint8, count=plan.nbytes)
    rows = raw.reshape(plan.height, plan.row_step)[:, : plan.width * plan.point_step]
    points = rows.reshape(n, plan.point_step)
    out = np.empty((n, 3), dtype=plan.dtype)
    for axis, (offset, datatype) in enumerate(zip(plan.offsets, plan.datatypes, strict=True)):
        dtype = DATATYPES[datatype].newbyteorder(">" if plan.big_endian else "<")
        column = np.ascontiguousarray(points[:, offset : offset + dtype.itemsize])
        out[:, axis] = column.view(dtype).reshape(-1)
    return out


def emulate_mask(xyz: np.ndarray, window: FrameWindow) -> tuple[np.ndarray, int]:
    """pc2_decode's mask and implausible count: float64 values, the window always applied."""
    v = np.asarray(xyz, dtype=np.float64)
    low, high = window.range_bounds_sq()
    with np.errstate(invalid="ignore", over="ignore"):
        plausible = (np.abs(v) <= window.max_coordinate).all(axis=1)
        r2 = v[:, 0] * v[:, 0] + v[:, 1] * v[:, 1]
        inside = (r2 >= low) & (r2 <= high) & (v[:, 2] >= window.min_z) & (v[:, 2] <= window.max_z)
        inside &= (v[:, 1] >= window.min_y) & (v[:, 1] <= window.max_y)
    finite = np.isfinite(v).all(axis=1)
    return plausible & inside, int(np.count_nonzero(~plausible & finite))


def emulate_rgb(labels: np.ndarray) -> np.ndarray:
    """pc2_packed_rgb: the colour of each label with the kernel's float64 operations."""
    labels = np.asarray(labels, dtype=np.int64)
    hue = np.fmod(labels * 0.618033988749895, 1.0)
    h6 = hue * 6.0
    sector = np.floor(h6)
    f = h6 - sector
    v = np.ones_like(f)
    p = np.full_like(f, 1.0 * (1.0 - 0.85))
    q = 1.0 * (1.0 - 0.85 * f)
    t = 1.0 * (1.0 - 0.85 * (1.0 - f))
    table = np.stack(
        [
            np.stack(c, axis=-1)
            for c in ((v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q))
        ]
    )
    rgb = table[sector.astype(np.int64) % 6, np.arange(len(labels))]
    channels = np.rint(rgb * 255.0).astype(np.uint32)
    packed = (channels[:, 0] << 16) | (channels[:, 1] << 8) | channels[:, 2]
    return np.where(labels < 0, (128 << 16) | (128 << 8) | 128, packed).astype(np.uint32)


def emulate_payload(cloud: RawCloud, labels: np.ndarray) -> np.ndarray:
    """pc2_encode's word rule: input bytes below point_step, cluster_id and rgb words, zeros."""
    plan = plan_xyz(cloud)
    return _emulate_words(cloud, labels, output_layout(cloud), list(range(plan.point_step)))


def emulate_compact_payload(cloud: RawCloud, labels: np.ndarray) -> np.ndarray:
    """pc2_encode_compact's word rule: output byte b below the x, y, z sizes' sum is byte b of
    x, then y, then z (at their input offsets), the cluster_id word, zeros."""
    plan = plan_xyz(cloud)
    sources = [
        offset + b
        for offset, datatype in zip(plan.offsets, plan.datatypes, strict=True)
        for b in range(DATATYPES[datatype].itemsize)
    ]
    return _emulate_words(cloud, labels, compact_layout(plan), sources)


def _emulate_words(
    cloud: RawCloud, labels: np.ndarray, layout: Any, sources: list[int]
) -> np.ndarray:
    """The encode kernels' word rule for ``layout``: the cluster_id word and (where the layout
    has one) the rgb word in the cloud's byte order; output byte b below ``len(sources)`` is the
    point's input byte ``sources[b]``; zeros elsewhere."""
    plan = plan_xyz(cloud)
    n = plan.num_points
    words = layout.point_step // 4
    out = np.zeros((n, words, 4), dtype=np.uint8)
    if n == 0:
        return out.reshape(-1)
    raw = np.frombuffer(cloud.data, dtype=np.uint8, count=plan.nbytes)
    rows = raw.reshape(plan.height, plan.row_step)[:, : plan.width * plan.point_step]
    points = rows.reshape(n, plan.point_step)
    order = ">" if plan.big_endian else "<"
    cid = np.asarray(labels, dtype=np.int32).astype(order + "i4").view(np.uint8).reshape(n, 4)
    rgb = emulate_rgb(labels).astype(order + "u4").view(np.uint8).reshape(n, 4)
    for w in range(words):
        if w == layout.cluster_id_offset // 4:
            out[:, w] = cid
        elif layout.rgb_offset >= 0 and w == layout.rgb_offset // 4:
            out[:, w] = rgb
        else:
            for k in range(4):
                if 4 * w + k < len(sources):
                    out[:, w, k] = points[:, sources[4 * w + k]]
    return out.reshape(-1)


def emulate_grouping(cloud: RawCloud, labels: np.ndarray, sizes: Any) -> GroupedRecords:
    """pc2_group_records' rule: the sorted ``(label + 1) << 32 | index`` keys after the
    unlabelled points, each record read at ``row * row_step + column * point_step``."""
    plan = plan_xyz(cloud)
    sizes = np.asarray(sizes, dtype=np.int64)
    n, count = plan.num_points, int(sizes.sum())
    keys = np.sort(
        ((np.asarray(labels, np.int64) + 1) << 32 | np.arange(n, dtype=np.int64)).astype(np.uint64)
    )
    index = (keys[n - count :] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    starts = (index // max(plan.width, 1)) * plan.row_step + (index % max(plan.width, 1)) * (
        plan.point_step
    )
    raw = np.frombuffer(cloud.data, dtype=np.uint8, count=plan.nbytes)
    records = raw[starts[:, None] + np.arange(plan.point_step)] if count else raw[:0]
    return GroupedRecords(sizes.copy(), records.reshape(count, plan.point_step))


def spec_sum(values: list[float]) -> float:
    """One coordinate's sum by the words of ``cluster_table``'s spec, in plain Python: leaves of
    SUM_LEAF values summed left to right, then leaf sums added pairwise level by level."""
    level = []
    for start in range(0, len(values), SUM_LEAF):
        total = values[start]
        for value in values[start + 1 : start + SUM_LEAF]:
            total += value
        level.append(total)
    while len(level) > 1:
        pairs = range(0, len(level), 2)
        level = [level[i] + level[i + 1] if i + 1 < len(level) else level[i] for i in pairs]
    return level[0]


def spec_extreme(values: list[float], minimum: bool) -> float:
    """IEEE 754-2019 minimum or maximum of finite values: -0 below +0."""
    key = [(v, math.copysign(1.0, v)) for v in values]
    return (min if minimum else max)(key)[0]


def emulate_table(xyz: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """``cluster_table`` by its spec, one cluster and one coordinate at a time."""
    table = np.zeros(k, dtype=cluster_table(xyz, labels, 0).dtype)
    points = np.asarray(xyz, dtype=np.float64)
    for c in range(k):
        members = points[np.flatnonzero(labels == c)]
        table[c]["cluster_id"], table[c]["num_points"] = c, len(members)
        for axis, name in enumerate("xyz"):
            column = members[:, axis].tolist()
            table[c][name] = spec_sum(column) / len(column)
            table[c][f"min_{name}"] = spec_extreme(column, True)
            table[c][f"max_{name}"] = spec_extreme(column, False)
    return table


def kernel_tree(leaves: int, arrival: list[int]) -> str:
    """The sum the table kernel's threads build for a cluster of ``leaves`` leaves, as an
    expression over leaf numbers, with the threads reaching each node in ``arrival`` order (the
    kernel's climb: the second child to arrive at a node combines left + right)."""
    partial = {leaf: str(leaf) for leaf in range(leaves)}
    slots: dict[int, dict[bool, str]] = {}
    pending = {leaf: 0 for leaf in range(leaves)}  # thread -> level it is at
    done: list[str] = []
    order = list(arrival)
    while order:
        leaf = order.pop(0)
        d = pending[leaf]
        if (1 << d) >= leaves:
            done.append(partial[leaf])
            continue
        group = leaf >> d
        left = group % 2 == 0
        split = (group + 1 if left else group) << d
        pending[leaf] = d + 1
        if left and split >= leaves:  # no right sibling: up unchanged
            order.insert(0, leaf)
            continue
        slot = slots.setdefault(split, {})
        slot[left] = partial[leaf]
        if len(slot) == 1:
            continue  # first to arrive: this thread ends
        partial[leaf] = f"({slot[True]}+{slot[False]})"
        order.insert(0, leaf)
    assert len(done) == 1, done
    return done[0]


def spec_tree(leaves: int) -> str:
    """The spec's pairwise tree over leaf numbers, as an expression."""
    level = [str(leaf) for leaf in range(leaves)]
    while len(level) > 1:
        pairs = range(0, len(level), 2)
        level = [f"({level[i]}+{level[i + 1]})" if i + 1 < len(level) else level[i] for i in pairs]
    return level[0]


def synthetic_labels(n: int, finite: np.ndarray, sizes: list[int], seed: int) -> np.ndarray:
    """Labels 0..K-1 with the given sizes on random finite points, -1 elsewhere."""
    rng = np.random.default_rng(seed)
    labels = np.full(n, -1, dtype=np.int32)
    chosen = rng.permutation(np.flatnonzero(finite))[: sum(sizes)]
    labels[chosen] = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
    return labels


class ModelCodec:
    """The GPU codec's contract with its kernels replaced by the NumPy models above: lets the
    CPU tests drive ``FramePipeline`` through a codec computed the kernels' way."""

    warm_up_points = 64

    def __init__(self) -> None:
        self.cloud: RawCloud | None = None
        self.xyz = np.empty((0, 3))
        self.implausible = 0

    def process_whole(self, *args: Any) -> Unsupported:
        """The model runs every frame step by step (``test_frame_graph.py`` models the graph)."""
        return Unsupported("the model runs every frame step by step")

    def decode(self, cloud: RawCloud, window: FrameWindow) -> DecodedFrame:
        self.cloud = cloud
        self.xyz = emulate_decode(cloud)
        mask, self.implausible = emulate_mask(self.xyz, window)
        points = self.xyz if window.use_height else flatten_heights(self.xyz)
        with np.errstate(over="ignore"):  # beyond float32: inf, as the clusterer converts
            return DecodedFrame(np.ascontiguousarray(points, dtype=np.float32), mask)

    def encode(
        self,
        labels: np.ndarray,
        sizes: np.ndarray,
        copy: bool = True,
        group: bool = False,
        layout: str = "full",
    ) -> EncodedFrame:
        assert self.cloud is not None
        labels = np.asarray(labels, dtype=np.int32)
        if layout == "compact":
            out, payload = compact_layout(plan_xyz(self.cloud)), emulate_compact_payload
        else:
            out, payload = output_layout(self.cloud), emulate_payload
        labeled = RawCloud(
            out.fields, self.cloud.height, self.cloud.width, out.point_step,
            self.cloud.width * out.point_step, payload(self.cloud, labels),
            self.cloud.is_bigendian, self.cloud.is_dense,
        )  # fmt: skip
        grouped = emulate_grouping(self.cloud, labels, sizes) if group else None
        return EncodedFrame(
            labeled, emulate_table(self.xyz, labels, len(sizes)), self.implausible, grouped
        )


class ModelBackend(CpuBackend):
    """The CPU backend with :class:`ModelCodec` as its frame codec."""

    def frame_codec(self) -> ModelCodec:
        return ModelCodec()


def as_bytes(data: Any) -> bytes:
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8).tobytes()


def assert_same_output(got: FrameOutput, expected: FrameOutput) -> None:
    """Two frames' outputs are equal: clouds (layout and bytes), table, labels, counts."""
    for name in ("labeled", "clusters"):
        a, b = getattr(got, name), getattr(expected, name)
        layout = ("fields", "height", "width", "point_step", "row_step", "is_bigendian", "is_dense")
        assert [getattr(a, f) for f in layout] == [getattr(b, f) for f in layout], name
        assert as_bytes(a.data) == as_bytes(b.data), name
    assert got.table.dtype == expected.table.dtype
    assert got.table.tobytes() == expected.table.tobytes()
    assert got.implausible_points == expected.implausible_points
    labels = got.result.labels
    labels = labels.get() if hasattr(labels, "get") else np.asarray(labels)
    assert np.array_equal(labels, expected.result.labels)
    assert np.array_equal(got.result.cluster_sizes, expected.result.cluster_sizes)
    assert (got.grouped is None) == (expected.grouped is None)
    if got.grouped is not None and expected.grouped is not None:
        assert_same_grouping(got.grouped, expected.grouped)


def assert_same_grouping(got: GroupedRecords, expected: GroupedRecords) -> None:
    """Two groupings are equal: counts, and records (shape, dtype, C order and bytes)."""
    assert np.array_equal(got.counts, expected.counts)
    assert got.counts.dtype == expected.counts.dtype == np.int64
    for records in (got.records, expected.records):
        assert isinstance(records, np.ndarray) and records.dtype == np.uint8
        assert records.flags.c_contiguous
    assert got.records.shape == expected.records.shape
    assert got.records.tobytes() == expected.records.tobytes()


# ---------------------------------------------------------------------------------------------
# CPU-only tests: planning


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_plan_decodes_like_read_xyz(base, name):
    cloud = layout_cloud(base, name)
    expected = read_xyz(cloud)
    got = emulate_decode(cloud)
    assert got.dtype == expected.dtype == plan_xyz(cloud).dtype
    assert got.tobytes() == expected.tobytes()


@pytest.mark.parametrize("name", LAYOUT_NAMES + list(EMPTY_CLOUDS))
def test_output_layout_and_word_rule_match_append_fields(base, name):
    cloud = layout_cloud(base, name)
    labels = np.arange(cloud.num_points, dtype=np.int32) % 37 - 1
    expected = append_fields(cloud, {"cluster_id": labels, "rgb": pack_rgb(cluster_rgb(labels))})
    layout = output_layout(cloud)
    assert layout.fields == expected.fields
    assert layout.point_step == expected.point_step
    assert emulate_payload(cloud, labels).tobytes() == np.asarray(expected.data).tobytes()


@pytest.mark.parametrize("name", LAYOUT_NAMES + list(EMPTY_CLOUDS))
def test_compact_layout_and_word_rule_match_keep_fields(base, name):
    cloud = layout_cloud(base, name)
    labels = np.arange(cloud.num_points, dtype=np.int32) % 37 - 1
    expected = append_fields(keep_fields(cloud, ("x", "y", "z")), {"cluster_id": labels})
    layout = compact_layout(plan_xyz(cloud))
    assert layout.fields == expected.fields
    assert layout.point_step == expected.point_step
    assert emulate_compact_payload(cloud, labels).tobytes() == np.asarray(expected.data).tobytes()
    if cloud.num_points:  # the coordinates pass through bit for bit, in the input's byte order
        assert read_xyz(expected).tobytes() == read_xyz(cloud).tobytes()
        assert np.array_equal(read_fields(expected, ["cluster_id"])["cluster_id"], labels)


def contract(codec: type) -> dict[str, list[tuple[str, Any]]]:
    """The parameters (names and defaults) of a codec's ``decode``, ``encode`` and
    ``process_whole``."""
    methods = ("decode", "encode", "process_whole")
    return {
        name: [
            (p.name, p.default) for p in inspect.signature(getattr(codec, name)).parameters.values()
        ]
        for name in methods
    }


def test_the_cpu_codec_keeps_the_frame_codec_contract(base):
    """``core.frame.FrameCodec``'s parameters, and an explicit answer for whole frames."""
    assert contract(CpuFrameCodec) == contract(FrameCodec)
    assert CpuFrameCodec.warm_up_points > 0
    cloud = layout_cloud(base, "packed_f32")
    whole = CpuFrameCodec().process_whole(cloud, ClusterConfig(d_th=0.5), FrameWindow())
    assert isinstance(whole, Unsupported) and "step by step" in whole.reason


@pytest.mark.parametrize(
    "name", ["packed_f32", "float64", "big_endian_f64", "organised_row_padding"]
)
def test_the_cpu_codec_encodes_the_compact_layout(base, name):
    cloud = layout_cloud(base, name)
    settings = SETTINGS["default"]
    full = run(FramePipeline("cpu"), cloud, settings)
    compact = FramePipeline("cpu").process(
        cloud, settings.cluster, settings.window, labeled_layout="compact"
    )
    labels = np.asarray(full.result.labels)
    expected = append_fields(keep_fields(cloud, ("x", "y", "z")), {"cluster_id": labels})
    assert compact.labeled.fields == expected.fields
    assert as_bytes(compact.labeled.data) == as_bytes(expected.data)
    assert compact.labeled.point_step < full.labeled.point_step
    assert compact.table.tobytes() == full.table.tobytes()


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_clouds_of_one_layout_key_have_one_plan(base, name):
    """The codec plans a layout once (``layout_key``): every change of what the plan reads
    changes the key."""
    cloud = layout_cloud(base, name)
    replace = dataclasses.replace
    step, half, rows = cloud.point_step, cloud.width // 2, cloud.height
    shifted = tuple(replace(f, offset=f.offset + 1) for f in cloud.fields)
    wide, wider = cloud.width * (step + 1), cloud.width * (step + 4)
    variants = [
        replace(cloud, is_bigendian=not cloud.is_bigendian),
        replace(cloud, point_step=step + 4, row_step=wider, data=bytes(rows * wider)),
        replace(cloud, fields=cloud.fields[::-1]),
        replace(cloud, fields=shifted, point_step=step + 1, row_step=wide, data=bytes(rows * wide)),
        replace(cloud, height=1, width=half, row_step=half * step, data=bytes(half * step)),
        replace(cloud, height=1, row_step=cloud.row_step + 4, data=bytes(cloud.row_step + 4)),
    ]
    plan = (plan_xyz(cloud), output_layout(cloud))
    same = dataclasses.replace(cloud, data=bytes(memoryview(cloud.data).cast("B")))
    assert layout_key(same) == layout_key(cloud)
    for variant in variants:
        try:
            other = (plan_xyz(variant), output_layout(variant))
        except PointCloud2Error:
            continue
        assert other == plan or layout_key(variant) != layout_key(cloud)
    padded = replace(cloud, row_step=wider, data=bytes(rows * wider))  # room for a longer point
    longer = replace(padded, point_step=step + 4)
    assert output_layout(longer) != output_layout(padded)
    assert layout_key(longer) != layout_key(padded)


def test_colour_formula_matches_cluster_rgb():
    labels = np.arange(-1, 300_000, dtype=np.int32)
    expected = pack_rgb(cluster_rgb(labels)).view(np.uint32)
    assert np.array_equal(emulate_rgb(labels), expected)
    # Large ids (cluster_rgb would build a palette up to the largest): its per-id formula.
    ids = np.array([2**31 - 1, 123_456_789, 99_999_999, 2**24 + 1], dtype=np.int64)
    rgb = _hsv_to_rgb((ids * 0.618033988749895) % 1.0, saturation=0.85, value=1.0)
    assert np.array_equal(emulate_rgb(ids), pack_rgb(rgb).view(np.uint32))


def _malformed() -> dict[str, RawCloud]:
    xyz = tuple(Field(n, 4 * i, FLOAT32) for i, n in enumerate("xyz"))
    data = bytes(120)
    return {
        "missing_z": RawCloud(xyz[:2], 1, 10, 12, 120, data),
        "short_data": RawCloud(xyz, 1, 10, 12, 120, bytes(100)),
        "row_step_small": RawCloud(xyz, 1, 10, 12, 100, data),
        "zero_step": RawCloud(xyz, 1, 10, 0, 120, data),
        "negative_size": RawCloud(xyz, -1, 10, 12, 120, data),
        "duplicate": RawCloud((*xyz, Field("x", 0, FLOAT32)), 1, 10, 12, 120, data),
        "unknown_type": RawCloud((xyz[0], xyz[1], Field("z", 8, 9)), 1, 10, 12, 120, data),
        "count0": RawCloud((xyz[0], xyz[1], Field("z", 8, FLOAT32, 0)), 1, 10, 12, 120, data),
        "count2": RawCloud(
            (Field("z", 0, FLOAT32), Field("x", 4, FLOAT32, 2), Field("y", 12, FLOAT32)),
            1, 5, 24, 120, data,
        ),
        "outside_step": RawCloud((xyz[0], xyz[1], Field("z", 10, FLOAT32)), 1, 10, 12, 120, data),
        "other_field_outside_step": RawCloud((*xyz, Field("i", 12, FLOAT32)), 1, 10, 12, 120,
                                             data),
        "negative_offset": RawCloud((Field("x", -4, FLOAT64), xyz[1], xyz[2]), 1, 10, 12, 120,
                                    data),
        "empty_count2": RawCloud((xyz[0], Field("y", 4, FLOAT32, 2), xyz[2]), 1, 0, 12, 0, b""),
        "empty_count0": RawCloud((xyz[0], Field("y", 4, FLOAT32, 0), xyz[2]), 1, 0, 12, 0, b""),
    }  # fmt: skip


@pytest.mark.parametrize("name", list(_malformed()))
def test_plan_raises_what_read_xyz_raises(name):
    cloud = _malformed()[name]
    with pytest.raises(PointCloud2Error) as expected:
        read_xyz(cloud)
    with pytest.raises(PointCloud2Error) as got:
        plan_xyz(cloud)
    assert (got.value.kind, str(got.value)) == (expected.value.kind, str(expected.value))


_fields = st.builds(
    Field,
    name=st.sampled_from(("x", "y", "z", "intensity", "rgb")),
    offset=st.integers(-4, 40),
    datatype=st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
    count=st.integers(-1, 3),
)


@st.composite
def _clouds(draw: st.DrawFn) -> RawCloud:
    """Any layout, often a plausible one, often broken somewhere."""
    if draw(st.booleans()):
        layout = tuple(draw(st.lists(_fields, max_size=6)))
    else:
        size, code = draw(st.sampled_from([(4, FLOAT32), (8, FLOAT64), (2, pc.INT16)]))
        start = draw(st.integers(0, 8))
        layout = tuple(Field(n, start + i * size, code) for i, n in enumerate("xyz"))
        layout += tuple(draw(st.lists(_fields, max_size=2)))
    width, height = draw(st.integers(0, 6)), draw(st.integers(-1, 3))
    point_step = draw(st.integers(-1, 40))
    row_step = max(0, width * point_step) + draw(st.integers(-4, 8))
    need = max(0, row_step * height)
    length = draw(st.integers(0, need + 8)) if draw(st.booleans()) else need
    return RawCloud(layout, height, width, point_step, row_step, bytes(length),
                    draw(st.booleans()), draw(st.booleans()))  # fmt: skip


@settings(max_examples=600, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(cloud=_clouds())
def test_plan_agrees_with_read_xyz_on_any_layout(cloud):
    try:
        expected = read_xyz(cloud)
    except PointCloud2Error as error:
        with pytest.raises(PointCloud2Error) as got:
            plan_xyz(cloud)
        assert (got.value.kind, str(got.value)) == (error.kind, str(error))
        return
    plan = plan_xyz(cloud)
    assert plan.dtype == expected.dtype and plan.num_points == len(expected)
    assert emulate_decode(cloud).tobytes() == expected.tobytes()


def test_table_threads_build_the_spec_tree_in_any_arrival_order():
    rng = np.random.default_rng(5)
    for leaves in [*range(1, 70), 127, 128, 129, 1000]:
        threads = int(cluster_threads(np.array([SUM_LEAF * leaves]))[0])
        assert threads == leaves == int(cluster_threads(np.array([SUM_LEAF * leaves - 63]))[0])
        want = spec_tree(leaves)
        for arrival in (list(range(leaves)), list(range(leaves))[::-1]):
            assert kernel_tree(leaves, arrival) == want, leaves
        assert kernel_tree(leaves, rng.permutation(leaves).tolist()) == want, leaves


def test_cluster_table_follows_its_spec(base):
    xyz, _ = base
    finite = np.isfinite(xyz).all(axis=1)
    sizes = [1, 2, 7, 63, 64, 65, 128, 129, 130, 200, 257, 1000, 3000, 4100]
    labels = synthetic_labels(len(xyz), finite, sizes, seed=2)
    rng = np.random.default_rng(4)
    zeros = rng.random(xyz.shape) < 0.3
    signed = np.where(zeros, np.where(xyz < 0, -0.0, 0.0).astype(np.float32), xyz)
    # Magnitudes over 13 decades: float64 sums round, so the order of additions shows.
    with np.errstate(over="ignore", invalid="ignore"):  # the base's non-finite points
        spread = (xyz * 10.0 ** rng.uniform(-9, 4, xyz.shape)).astype(np.float32)
    for points in (xyz, signed, spread):
        expected = emulate_table(points, labels, len(sizes))
        assert cluster_table(points, labels, len(sizes)).tobytes() == expected.tobytes()
        sums = cluster_sums(points, labels, len(sizes))
        for c, size in enumerate(sizes):
            members = np.asarray(points, dtype=np.float64)[labels == c]
            assert [spec_sum(members[:, k].tolist()) for k in range(3)] == sums[c].tolist()
            assert len(members) == size


def test_cluster_table_orders_minus_zero_below_plus_zero():
    xyz = np.array([[0.0, -0.0, 0.0], [-0.0, 0.0, 0.0], [0.0, 0.0, -0.0]])
    table = cluster_table(xyz, np.array([0, 0, 0]), 1)
    assert [math.copysign(1.0, table[0][f"min_{a}"]) for a in "xyz"] == [-1.0, -1.0, -1.0]
    assert [math.copysign(1.0, table[0][f"max_{a}"]) for a in "xyz"] == [1.0, 1.0, 1.0]


# ---------------------------------------------------------------------------------------------
# CPU-only tests: the float64 window and the plausibility mask


def boundary_points(dtype: Any) -> np.ndarray:
    """Points on, just inside and just outside the window of :data:`EDGE_SETTINGS`, plus
    non-finite, subnormal and huge ones."""
    a = np.float64(0.625)  # 0.375² + 0.5² = 0.625² exactly in binary
    xy = [
        (0.375, 0.5), (0.5, 0.375), (-0.375, -0.5), (a, 0.0), (0.0, -a), (2.5, 0.0), (-2.5, 0.0),
        (1.5, 2.0), (3.0, 4.0),
    ]  # fmt: skip
    rows = []
    for x, y in xy:
        for dx in (-1, 0, 1):
            px = np.nextafter(dtype(x), dtype(np.copysign(np.inf, dx))) if dx else dtype(x)
            rows.append((px, y, 0.0))
    for z in (-1.25, 1.5):
        for dz in (-np.inf, np.inf):
            rows.append((1.0, 0.0, np.nextafter(dtype(z), dtype(dz))))
        rows.append((1.0, 0.0, z))
    special = [np.nan, np.inf, -np.inf, 1e-45, -0.0, 3e38, 1e6, 1e6 + 64, -1e6 - 64]
    for value in special:
        rows += [(value, 1.0, 0.0), (1.0, value, 0.0), (1.0, 0.0, value)]
    with np.errstate(over="ignore"):
        return np.array(rows, dtype=np.float64).astype(dtype)


EDGE_SETTINGS = {
    "edges": NodeSettings(min_range=0.625, max_range=2.5, min_z=-1.25, max_z=1.5),
    "edges_plausible_1e6": NodeSettings(min_range=0.625, max_range=5.0, max_coordinate=1e6),
    "default": NodeSettings(),
    "unbounded": NodeSettings(max_coordinate=float("inf")),
    "huge_range": NodeSettings(max_range=1e200, max_coordinate=1e300),
    "float32_inexact": NodeSettings(min_range=0.1, max_range=30.000001, min_z=-1.7, max_z=0.3),
    "lanes": NodeSettings(
        keep_lanes=True, keep_lane_left_distance=1.0, keep_lane_right_distance=0.5
    ),
}


def test_clip_mask_boundaries_are_inclusive_in_float64():
    settings = EDGE_SETTINGS["edges"]
    for dtype in (np.float32, np.float64):
        xyz = np.array([[0.375, 0.5, 0.0], [2.5, 0.0, 1.5], [1.5, 2.0, -1.25]], dtype=dtype)
        assert clip_mask(xyz, settings.window).tolist() == [True, True, True]
        out = np.nextafter(xyz, dtype(np.inf)) * np.array([1, 1, 0], dtype=dtype)
        out[:, 2] = xyz[:, 2]
        assert clip_mask(out, settings.window).tolist() == [True, False, False]
        low = np.array([[np.nextafter(dtype(0.625), dtype(0)), 0.0, 0.0]], dtype=dtype)
        assert not clip_mask(low, settings.window)[0]
    lanes = EDGE_SETTINGS["lanes"].window  # keep_lanes: -right <= y <= left, inclusive
    ys = np.array([-0.5, np.nextafter(-0.5, -1), 1.0, np.nextafter(1.0, 2), 0.0])
    side = np.stack([np.zeros(5), ys, np.zeros(5)], axis=1)
    assert clip_mask(side, lanes).tolist() == [True, False, True, False, True]
    # r2 is float64's x*x + y*y: (3, 4) is exactly at max_range 5.
    assert clip_mask(np.array([[3.0, 4.0, 0.0]]), NodeSettings(max_range=5.0).window)[0]
    # A square beyond float64's range is inf (no OverflowError): max_range 1e200 bounds nothing,
    # not even an infinite coordinate (which plausibility and the clusterer exclude anyway).
    far = np.array([[1e150, 1e150, 0.0], [np.inf, 0.0, 0.0], [np.nan, 0.0, 0.0]])
    assert clip_mask(far, EDGE_SETTINGS["huge_range"].window).tolist() == [True, True, False]
    assert not clip_mask(far[1:2], NodeSettings(max_range=1e150).window)[0]


@pytest.mark.parametrize("key", list(EDGE_SETTINGS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_mask_model_matches_cluster_mask(key, dtype):
    settings = EDGE_SETTINGS[key]
    rng = np.random.default_rng(3)
    random = rng.uniform(-8, 8, (2000, 3)).astype(dtype)
    xyz = np.concatenate([boundary_points(dtype), random])
    mask, implausible = cluster_mask(xyz, settings.window)
    model_mask, model_implausible = emulate_mask(xyz, settings.window)
    assert np.array_equal(mask, model_mask)
    assert implausible == model_implausible


def test_cluster_mask_counts_finite_implausible_points():
    xyz = np.array([[1e7, 0, 0], [0, -2e6, 0], [np.inf, 1e7, 0], [np.nan, 0, 0], [1, 2, 3]])
    mask, implausible = cluster_mask(xyz, NodeSettings().window)
    assert mask.tolist() == [False, False, False, False, True]
    assert implausible == 2


def test_frame_window_carries_the_settings():
    settings = NodeSettings(
        use_height=False, min_range=1.0, max_range=9.0, min_z=-2.0, max_z=3.0, max_coordinate=5e3
    )
    assert settings.window == FrameWindow(1.0, 9.0, -2.0, 3.0, 5e3, False)
    assert FrameWindow(min_range=3.0, max_range=1e200).range_bounds_sq() == (9.0, float("inf"))


# ---------------------------------------------------------------------------------------------
# CPU-only tests: FramePipeline with the NumPy models of the kernels as its codec


@pytest.mark.parametrize("layout", ["full", "compact"])
@pytest.mark.parametrize("key", ["default", "window_flat", "implausible", "no_limit"])
@pytest.mark.parametrize("name", ["packed_f32", "float64", "organised_row_padding", "width0"])
def test_model_codec_matches_the_cpu_codec(base, name, key, layout):
    cloud = layout_cloud(base, name)
    settings = SETTINGS[key]
    cluster, window = settings.cluster, settings.window
    expected = FramePipeline("cpu").process(cloud, cluster, window, labeled_layout=layout)
    got = FramePipeline(ModelBackend()).process(cloud, cluster, window, labeled_layout=layout)
    assert got.fallback_reason is None
    assert_same_output(got, expected)


def test_pipeline_falls_back_to_the_cpu_on_out_of_memory(base):
    error = type("OutOfMemoryError", (MemoryError,), {"__module__": "cupy.cuda.memory"})

    class FailingCodec(ModelCodec):
        def encode(self, *args: Any, **kwargs: Any) -> EncodedFrame:
            raise error("out of memory allocating 512 bytes")

    class FailingBackend(ModelBackend):
        def frame_codec(self) -> ModelCodec:
            return FailingCodec()

    cloud = layout_cloud(base, "packed_f32")
    settings = SETTINGS["window"]
    got = run(FramePipeline(FailingBackend()), cloud, settings)
    assert got.result.backend == "cpu" and "out of memory" in (got.fallback_reason or "")
    assert_same_output(got, run(FramePipeline("cpu"), cloud, settings))


def test_pipeline_lets_decode_errors_through():
    with pytest.raises(PointCloud2Error, match="missing field"):
        run(FramePipeline(ModelBackend()), _malformed()["missing_z"], NodeSettings())


class ClearEveryOther:
    """A stage that leaves every other point out of the clustering."""

    name = "clear_every_other"

    def apply(self, frame: DecodedFrame) -> DecodedFrame:
        keep = frame.mask.copy()
        keep[1::2] = False
        return DecodedFrame(frame.points, keep)


def test_stages_run_in_order_before_clustering(base):
    cloud = layout_cloud(base, "packed_f32")
    settings = SETTINGS["default"]
    staged = FramePipeline("cpu", stages=[ClearEveryOther()])
    assert [stage.name for stage in staged.stages] == ["clear_every_other"]
    labels = to_labels(run(staged, cloud, settings))
    assert (labels[1::2] == -1).all()
    xyz = read_xyz(cloud)
    mask = cluster_mask(xyz, settings.window)[0]
    mask[1::2] = False
    expected = EuclideanClusterer(settings.cluster, "cpu").cluster(xyz, mask).labels
    assert np.array_equal(labels, expected)
    model = run(FramePipeline(ModelBackend(), stages=[ClearEveryOther()]), cloud, settings)
    assert_same_output(model, run(staged, cloud, settings))


def to_labels(output: FrameOutput) -> np.ndarray:
    return np.asarray(pc.read_fields(output.labeled, ["cluster_id"])["cluster_id"])


# ---------------------------------------------------------------------------------------------
# sensor_msgs_py's reader, the reference decoder of the ROS ecosystem


def read_points_xyz(cloud: RawCloud) -> np.ndarray:
    """x, y, z of ``cloud`` by ``sensor_msgs_py.point_cloud2.read_points``, as float64; clouds
    with padded rows (which read_points does not support) are read row by row."""
    point_cloud2 = pytest.importorskip(
        "sensor_msgs_py.point_cloud2", reason="sensor_msgs_py is not installed"
    )
    std_msgs = pytest.importorskip("std_msgs.msg", reason="std_msgs is not installed")
    from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message

    data = np.frombuffer(cloud.data, dtype=np.uint8)
    row_bytes = cloud.width * cloud.point_step
    parts = []
    for row in range(cloud.height):
        start = row * cloud.row_step
        one_row = dataclasses.replace(
            cloud, height=1, row_step=row_bytes, data=data[start : start + row_bytes].copy()
        )
        points = point_cloud2.read_points(
            cloud_to_message(one_row, std_msgs.Header()), field_names=["x", "y", "z"]
        )
        parts.append(np.stack([points[n].astype(np.float64) for n in "xyz"], axis=1))
    return np.concatenate(parts) if parts else np.empty((0, 3))


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_read_xyz_agrees_with_sensor_msgs_py(base, name):
    cloud = layout_cloud(base, name)
    expected = read_points_xyz(cloud)
    got = read_xyz(cloud).astype(np.float64)
    assert got.view(np.uint64).tobytes() == expected.view(np.uint64).tobytes()


# ---------------------------------------------------------------------------------------------
# GPU tests


@pytest.fixture(scope="module")
def gpu_processor() -> FramePipeline:
    return FramePipeline("cuda")


@pytest.fixture(scope="module")
def pipeline(gpu_processor: FramePipeline) -> Any:
    """The CUDA frame codec of ``gpu_processor``."""
    return gpu_processor._codec


@pytest.mark.parametrize("key", list(SETTINGS))
@pytest.mark.parametrize("frame", list(FRAME_FIELDS))
@pytest.mark.gpu
@requires_cuda
def test_real_frames_match_the_cpu_backend(gpu_processor, load_frame, frame, key):
    cloud = xyzi_cloud(load_frame(frame))
    settings = SETTINGS[key]
    expected = run(FramePipeline("cpu"), cloud, settings)
    got = run(gpu_processor, cloud, settings)
    assert got.result.backend == "cuda" and got.fallback_reason is None
    assert_same_output(got, expected)
    if key == "implausible":
        assert got.implausible_points > 0


@pytest.mark.parametrize("key", ["default", "window_flat", "implausible", "no_limit"])
@pytest.mark.parametrize("name", LAYOUT_NAMES + list(EMPTY_CLOUDS))
@pytest.mark.gpu
@requires_cuda
def test_odd_layouts_match_the_cpu_backend(gpu_processor, base, name, key):
    cloud = layout_cloud(base, name)
    settings = SETTINGS[key]
    expected = run(FramePipeline("cpu"), cloud, settings)
    got = run(gpu_processor, cloud, settings)
    assert got.fallback_reason is None
    assert_same_output(got, expected)


@pytest.mark.parametrize("name", LAYOUT_NAMES + list(EMPTY_CLOUDS))
@pytest.mark.gpu
@requires_cuda
def test_the_compact_layout_matches_the_cpu_backend(gpu_processor, base, name):
    cloud = layout_cloud(base, name)
    settings = SETTINGS["default"]
    expected = FramePipeline("cpu").process(
        cloud, settings.cluster, settings.window, labeled_layout="compact", group_records=True
    )
    got = gpu_processor.process(
        cloud, settings.cluster, settings.window, labeled_layout="compact", group_records=True
    )
    assert got.fallback_reason is None
    assert_same_output(got, expected)
    # and the next frame in the full layout is unchanged by it
    assert_same_output(
        run(gpu_processor, cloud, settings), run(FramePipeline("cpu"), cloud, settings)
    )


@pytest.mark.gpu
@requires_cuda
def test_a_planned_layout_still_checks_the_data_size(base):
    """The second cloud of a layout is not planned again, but data shorter than row_step *
    height is still refused as read_xyz refuses it, and the next good cloud decodes."""
    codec = FramePipeline("cuda")._codec
    cloud = layout_cloud(base, "organised_row_padding")
    window = SETTINGS["default"].window
    codec.decode(cloud, window)
    short = dataclasses.replace(cloud, data=bytes(memoryview(cloud.data).cast("B"))[:-1])
    with pytest.raises(PointCloud2Error) as got:
        codec.decode(short, window)
    with pytest.raises(PointCloud2Error) as expected:
        read_xyz(short)
    assert (got.value.kind, str(got.value)) == (expected.value.kind, str(expected.value))
    decoded = codec.decode(cloud, window)
    assert decoded.points.get().tobytes() == emulate_decode(cloud).astype(np.float32).tobytes()


@pytest.mark.gpu
@requires_cuda
def test_buffers_hand_out_the_last_view_again_until_it_changes():
    from gpu_euclidean_cluster.cuda.buffers import GrowOnlyBuffers

    buffers = GrowOnlyBuffers()
    first = buffers.device("a", 100, np.int32)
    assert buffers.device("a", 100, np.int32) is first
    other = buffers.device("a", 50, np.int32)
    assert other is not first and other.shape == (50,)
    assert buffers.device("a", 50, np.uint32).dtype == np.uint32
    grown = buffers.device("a", 1 << 20, np.int32)  # a larger buffer: new memory
    assert grown.shape == (1 << 20,) and grown.data.ptr != first.data.ptr
    assert buffers.device("a", 100, np.int32).data.ptr == grown.data.ptr


@pytest.mark.parametrize("frame", list(FRAME_FIELDS))
@pytest.mark.gpu
@requires_cuda
def test_real_frames_in_the_compact_layout_match_the_cpu_backend(gpu_processor, load_frame, frame):
    cloud = xyzi_cloud(load_frame(frame))
    settings = SETTINGS["default"]
    expected = FramePipeline("cpu").process(
        cloud, settings.cluster, settings.window, labeled_layout="compact"
    )
    got = gpu_processor.process(cloud, settings.cluster, settings.window, labeled_layout="compact")
    assert got.result.backend == "cuda" and got.fallback_reason is None
    assert got.labeled.point_step == 16
    assert_same_output(got, expected)


@pytest.mark.parametrize("name", LAYOUT_NAMES)
@pytest.mark.gpu
@requires_cuda
def test_decode_matches_read_xyz_and_sensor_msgs_py(pipeline, base, name):
    cloud = layout_cloud(base, name)
    settings = SETTINGS["window_flat"]
    frame = pipeline.decode(cloud, settings.window)
    xyz = read_xyz(cloud)
    with np.errstate(over="ignore"):
        expected = np.ascontiguousarray(flatten_heights(xyz), dtype=np.float32)
    assert frame.points.get().tobytes() == expected.tobytes()
    assert np.array_equal(frame.mask.get(), cluster_mask(xyz, settings.window)[0])
    try:
        reference = read_points_xyz(cloud)
    except pytest.skip.Exception:
        return  # no sensor_msgs_py on this machine: read_xyz is checked against it elsewhere
    with np.errstate(over="ignore"):
        flat = np.ascontiguousarray(flatten_heights(reference), dtype=np.float32)
    assert frame.points.get().tobytes() == flat.tobytes()


@pytest.mark.parametrize("key", list(EDGE_SETTINGS))
@pytest.mark.parametrize("dtype", ["<f4", ">f8"])
@pytest.mark.gpu
@requires_cuda
def test_window_and_plausibility_edges_on_the_gpu(pipeline, key, dtype):
    settings = EDGE_SETTINGS[key]
    xyz = boundary_points(np.dtype(dtype).type)
    spec = {"names": ["x", "y", "z"], "formats": [dtype] * 3}
    cloud = structured_cloud(spec, {"x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2]})
    frame = pipeline.decode(cloud, settings.window)
    mask, implausible = cluster_mask(read_xyz(cloud), settings.window)
    assert np.array_equal(frame.mask.get(), mask)
    labels = np.full(cloud.num_points, -1, dtype=np.int32)
    assert pipeline.encode(labels, np.empty(0, np.int64)).implausible_points == implausible


def check_encode(pipeline: Any, cloud: RawCloud, labels: np.ndarray, sizes: np.ndarray) -> None:
    """The last decoded frame (``cloud``) encoded with ``labels`` equals the CPU functions."""
    import cupy

    xyz = read_xyz(cloud)
    expected = append_fields(cloud, {"cluster_id": labels, "rgb": pack_rgb(cluster_rgb(labels))})
    table = cluster_table(xyz, labels, len(sizes))
    encoded = pipeline.encode(cupy.asarray(labels), sizes)
    assert as_bytes(encoded.labeled.data) == as_bytes(expected.data)
    assert encoded.table.dtype == table.dtype
    assert encoded.table.tobytes() == table.tobytes()
    sums = cluster_sums(xyz, labels, len(sizes))  # the float64 sums before the division
    assert pipeline.cluster_sums().tobytes() == sums.tobytes()


@pytest.mark.parametrize("coords", ["float32", "float64"])
@pytest.mark.gpu
@requires_cuda
def test_synthetic_labels_deep_trees_and_signed_zeros(pipeline, load_frame, coords):
    frame = load_frame("kitti_000001.bin")
    rng = np.random.default_rng(9)
    # Magnitudes spread over 13 decades: float64 sums of these values round, so the summation
    # order shows (real frames' coordinates mostly sum exactly in any order).
    xyz = (frame * 10.0 ** rng.uniform(-9, 4, frame.shape)).astype("f4")
    zeros = rng.random(xyz.shape) < 0.2
    xyz = np.where(zeros, np.where(rng.random(xyz.shape) < 0.5, -0.0, 0.0), xyz).astype(coords)
    cloud = from_structured(
        np.ascontiguousarray(xyz).view([(n, xyz.dtype) for n in "xyz"]).reshape(-1)
    )
    n = cloud.num_points
    finite = np.ones(n, dtype=bool)
    cases = [
        ([n], 0),
        ([1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 130, 131, 191, 192, 193, 255, 256,
          257, 1000, 4096, 8191, 8192, 8193, 20000, 40000], 1),
        ([50000, 30000, 129, 1], 2),
    ]  # fmt: skip
    for sizes, seed in cases:
        for use_height in (True, False):
            pipeline.decode(cloud, FrameWindow(use_height=use_height))
            labels = synthetic_labels(n, finite, sizes, seed)
            check_encode(pipeline, cloud, labels, np.array(sizes, dtype=np.int64))


def signed_zero_cloud(coords: str) -> tuple[RawCloud, np.ndarray, list[int]]:
    """Coordinates that are mostly +0 or -0 (so box bounds tie), in clusters of many sizes."""
    rng = np.random.default_rng(21)
    sizes = [1, 2, 2, 3, 3, 5, 7, 8, 9, 16, 20, 129, 300, 1000]
    n = sum(sizes) + 50
    xyz = np.where(rng.random((n, 3)) < 0.5, -0.0, 0.0)
    xyz[rng.random((n, 3)) < 0.05] = 1.0
    spec = {"names": ["x", "y", "z"], "formats": [coords] * 3}
    cloud = structured_cloud(spec, {"x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2]})
    return cloud, synthetic_labels(n, np.ones(n, dtype=bool), sizes, seed=22), sizes


@pytest.mark.parametrize("coords", ["<f4", ">f8"])
@pytest.mark.gpu
@requires_cuda
def test_clusters_of_signed_zeros(pipeline, coords):
    cloud, labels, sizes = signed_zero_cloud(coords)
    pipeline.decode(cloud, FrameWindow())
    check_encode(pipeline, cloud, labels, np.array(sizes, dtype=np.int64))


@pytest.mark.gpu
@requires_cuda
def test_bad_labels_raise(pipeline, base):
    cloud = layout_cloud(base, "packed_f32")
    pipeline.decode(cloud, FrameWindow())
    finite = np.isfinite(read_xyz(cloud)).all(axis=1)
    labels = synthetic_labels(cloud.num_points, finite, [300, 200], seed=3)
    with pytest.raises(ValueError, match="non-empty clusters"):
        pipeline.encode(labels, np.array([200, 300]))  # sizes not the counts
    with pytest.raises(ValueError, match="non-empty clusters"):
        pipeline.encode(labels, np.array([300]))  # a label >= K
    bad = labels.copy()
    bad[0] = -2
    with pytest.raises(ValueError, match="below -1"):
        pipeline.encode(bad, np.array([300, 200]))
    check_encode(pipeline, cloud, labels, np.array([300, 200]))  # still fine afterwards


@pytest.mark.gpu
@requires_cuda
def test_buffers_are_reused_across_frames(pipeline, load_frame, base):
    big = xyzi_cloud(load_frame("kitti_000001.bin"))
    small = layout_cloud(base, "step13")
    pipeline.decode(big, FrameWindow())
    device = {name: buf.data.ptr for name, buf in pipeline._buffers.device_arrays.items()}
    pinned = {name: buf.ctypes.data for name, buf in pipeline._buffers.pinned_arrays.items()}
    for cloud in (small, big, small):
        pipeline.decode(cloud, FrameWindow())
    assert {
        n: b.data.ptr for n, b in pipeline._buffers.device_arrays.items() if n in device
    } == device
    assert {
        n: b.ctypes.data for n, b in pipeline._buffers.pinned_arrays.items() if n in pinned
    } == pinned


@pytest.mark.gpu
@requires_cuda
def test_outputs_outlive_the_next_frame_unless_told_otherwise(load_frame, base):
    first, second = xyzi_cloud(load_frame("kitti_000008.bin")), layout_cloud(base, "packed_f32")
    expected = run(FramePipeline("cpu"), first, NodeSettings())
    kept = FramePipeline("cuda")
    output = run(kept, first, NodeSettings())
    run(kept, second, NodeSettings())
    assert_same_output(output, expected)  # copies: still the first frame's bytes
    reused = FramePipeline("cuda", copy_output=False)
    output = run(reused, first, NodeSettings())
    assert as_bytes(output.labeled.data) == as_bytes(expected.labeled.data)
    assert output.table.tobytes() == expected.table.tobytes()


@pytest.mark.gpu
@requires_cuda
def test_out_of_memory_on_the_gpu_pipeline_falls_back_to_the_cpu(load_frame, monkeypatch):
    error = type("OutOfMemoryError", (MemoryError,), {"__module__": "cupy.cuda.memory"})
    processor = FramePipeline("cuda")

    def fail(*args: Any, **kwargs: Any) -> None:
        raise error("out of memory allocating 512 bytes")

    monkeypatch.setattr(processor._codec, "encode", fail)
    monkeypatch.setattr(processor._codec, "process_whole", fail)  # the frame graph's path
    cloud = xyzi_cloud(load_frame("kitti_000008.bin"))
    got = run(processor, cloud, SETTINGS["window"])
    assert got.result.backend == "cpu" and "out of memory" in (got.fallback_reason or "")
    assert_same_output(got, run(FramePipeline("cpu"), cloud, SETTINGS["window"]))
    monkeypatch.undo()
    again = run(processor, cloud, SETTINGS["window"])  # the next frame is on the GPU again
    assert again.result.backend == "cuda" and again.fallback_reason is None
    assert_same_output(again, got)


@pytest.mark.gpu
@requires_cuda
def test_the_cuda_codec_keeps_the_frame_codec_contract(pipeline, base):
    """``core.frame.FrameCodec``'s parameters; a configuration the frame graphs do not cover
    gets an explicit answer (and runs step by step in the pipeline)."""
    assert contract(type(pipeline)) == contract(FrameCodec)
    cloud = layout_cloud(base, "unaligned_step29_big")  # runs whole (test_frame_graph.py)
    config, window = SETTINGS["default"].cluster, SETTINGS["default"].window
    whole = pipeline.process_whole(cloud, config.with_changes(method="edge"), window)
    assert isinstance(whole, Unsupported) and whole.reason
    assert isinstance(pipeline.process_whole(cloud, config, window), tuple)


@pytest.mark.gpu
@requires_cuda
def test_warm_up_runs_the_gpu_codec():
    processor = FramePipeline("cuda")
    processor.warm_up(NodeSettings().cluster, NodeSettings().window)
    assert processor._codec._frame.plan.num_points > 0


def test_warm_up_of_every_stage_runs_boxes_merging_and_the_stages(monkeypatch):
    """A node warms up what it may switch on live: the stages, the boxes and the merging."""
    from gpu_euclidean_cluster.frame import DiffNormalsFilter, GroundRemoval

    calls: list[str] = []
    pipeline = FramePipeline("cpu", stages=[GroundRemoval(), DiffNormalsFilter()])
    backend = pipeline.backend
    for name in ("oriented_boxes", "merge_components"):
        original = getattr(backend, name)
        monkeypatch.setattr(
            backend, name, lambda *a, _o=original, _n=name, **k: calls.append(_n) or _o(*a, **k)
        )
    for stage in pipeline.stages:
        original = stage.apply
        monkeypatch.setattr(
            stage, "apply", lambda f, _o=original, _n=stage.name: calls.append(_n) or _o(f)
        )
    pipeline.warm_up(ClusterConfig(d_th=0.5), FrameWindow())
    assert calls == ["ground_removal", "diffnormals"]
    calls.clear()
    pipeline.warm_up(ClusterConfig(d_th=0.5), FrameWindow(), every_stage=True)
    assert {"ground_removal", "diffnormals", "oriented_boxes", "merge_components"} <= set(calls)
