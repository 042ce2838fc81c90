"""Autoware's ring outlier filter: ``core/ring_outlier.py``'s rules, ``cpu/stages/ring_outlier.py``.

The NumPy twin is checked against :func:`autoware_loop`, a straight per-point transcription of
Autoware's ``ring_outlier_filter_node`` loop (rings filled in input order, one walk at a time,
``is_cluster`` at every break and once after the loop) in NumPy float32 scalars: the same kept
points in the same output order, on synthetic rings built for each edge case (a spike, the
azimuth wrap, the ring's end, rings of 0-2 points, more points than ``max_points_num_per_ring``,
channels outside the rings, NaN ranges, azimuths that are not radians), on random clouds, and on
nebula's decoded VLP-16 sweep (14 831 points: 12 706 kept with the sample kit's settings, 11 285
with Autoware's newer rule). While writing this module the loop was also compiled as C++ (g++
-O2, x86-64) on 400 random clouds and gave the same output as both.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_euclidean_cluster.core.config import ConfigError
from gpu_euclidean_cluster.core.ring_outlier import RingOutlierSettings, ring_outlier_problems
from gpu_euclidean_cluster.cpu.stages.ring_outlier import filter_rings
from gpu_euclidean_cluster.pointcloud_io.pcd import read_pcd
from gpu_euclidean_cluster.pointcloud_io.velodyne.packets import POINT_DTYPE

from ..conftest import LIDAR_DATA_DIR

F32 = np.float32
NEWER = RingOutlierSettings(object_length_threshold=0.05, num_points_threshold=None)


def autoware_loop(points: np.ndarray, settings: RingOutlierSettings) -> list[int]:
    """Autoware's loop, point by point: the indices it writes, in the order it writes them."""
    rings: list[list[int]] = [[] for _ in range(settings.max_rings_num)]
    for i, channel in enumerate(points["channel"]):
        if channel < settings.max_rings_num:
            rings[int(channel)].append(i)

    def is_cluster(first: int, last: int, size: int) -> bool:
        if settings.num_points_threshold is not None and size > settings.num_points_threshold:
            return True
        dx, dy, dz = (F32(points[a][first]) - F32(points[a][last]) for a in "xyz")
        with np.errstate(over="ignore", invalid="ignore"):
            squared = dx * dx + dy * dy + dz * dz
        threshold = settings.object_length_threshold
        return float(squared) >= threshold * threshold

    written: list[int] = []
    for indices in rings:
        if len(indices) < 2:
            continue
        walk_first, walk_last = 0, -1
        for idx in range(len(indices) - 1):
            current, following = indices[idx], indices[idx + 1]
            walk_last = idx
            step = F32(points["azimuth"][following]) - F32(points["azimuth"][current])
            if step < 0:
                step = F32(float(step) + 2 * math.pi)
            c, n = F32(points["distance"][current]), F32(points["distance"][following])
            high, low = (n if c < n else c), (n if n < c else c)
            if float(high) < float(low) * settings.distance_ratio and float(step) < 180 / math.pi:
                continue
            if is_cluster(indices[walk_first], indices[walk_last], walk_last - walk_first + 1):
                written.extend(indices[walk_first : walk_last + 1])
            walk_first = idx + 1
        if walk_first > walk_last:
            continue
        if is_cluster(indices[walk_first], indices[walk_last], walk_last - walk_first + 1):
            written.extend(indices[walk_first : walk_last + 1])
    return written


def ring(ranges, channel=0, start=0.0, step=0.01, z=0.0) -> np.ndarray:
    """Points on one ring at ``ranges`` (m), azimuths from ``start`` by ``step`` (rad)."""
    points = np.zeros(len(ranges), POINT_DTYPE)
    azimuth = np.mod(start + step * np.arange(len(ranges)), 2 * np.pi)
    points["channel"] = channel
    points["azimuth"] = azimuth
    points["distance"] = ranges
    points["x"] = np.asarray(ranges) * np.cos(azimuth)
    points["y"] = np.asarray(ranges) * np.sin(azimuth)
    points["z"] = z
    return points


def check(points: np.ndarray, settings: RingOutlierSettings) -> np.ndarray:
    """The twin's mask, after checking it and its order against Autoware's loop."""
    result = filter_rings(points, settings)
    expected = autoware_loop(points, settings)
    assert result.order.tolist() == expected
    assert sorted(np.flatnonzero(result.mask).tolist()) == sorted(expected)
    return result.mask


@pytest.mark.parametrize("settings", [RingOutlierSettings(), NEWER])
def test_a_short_spike_is_dropped_and_the_ring_end_too(settings):
    ranges = [10.0] * 20
    ranges[8:10] = [4.0, 4.0]  # two points jumping 6 m in
    mask = check(ring(ranges), settings)
    assert not mask[8:10].any()
    assert mask[:8].all() and mask[10:19].all()
    assert not mask[19]  # rule 4: the ring's last point is in no walk


def test_the_azimuth_wrap_does_not_cut_a_walk_but_the_ring_is_not_closed():
    points = ring([10.0] * 12, start=2 * np.pi - 0.05)  # azimuths 6.233 .. 0.06, wrapping
    assert (np.diff(points["azimuth"]) < 0).any()
    assert check(points, RingOutlierSettings())[:11].all()
    # a ring cut by spikes at both ends: its first and last walks are not joined across the end
    ranges = [10.0, 10.0, 30.0] + [20.0] * 10 + [30.0, 10.0, 10.0, 10.0]
    mask = check(ring(ranges, step=0.005), RingOutlierSettings())
    assert mask[3:13].all()
    # 2 points at its start, 3 at its end (the last in no walk): 5 cm walks, both dropped,
    # though closed they would be one walk of 4 points
    assert not mask[:2].any() and not mask[14:].any()


@pytest.mark.parametrize("settings", [RingOutlierSettings(), NEWER])
def test_the_last_walk_ends_before_the_rings_last_point(settings):
    joined = check(ring([10.0] * 8), settings)
    assert joined[:7].all() and not joined[7]
    broken = check(ring([10.0] * 7 + [3.0]), settings)  # the last link breaks: same result
    assert broken[:7].all() and not broken[7]


def test_rings_of_few_points():
    empty = ring([])
    assert filter_rings(empty, RingOutlierSettings()).mask.shape == (0,)
    assert not check(ring([10.0]), RingOutlierSettings()).any()
    # two points: one walk of one point (length 0), kept only by a zero threshold
    assert not check(ring([10.0, 10.0]), RingOutlierSettings()).any()
    zero = RingOutlierSettings(object_length_threshold=0.0)
    assert check(ring([10.0, 10.0]), zero).tolist() == [True, False]


def test_more_points_than_max_points_num_per_ring_are_all_walked():
    points = ring([10.0] * 50 + [3.0] * 3 + [10.0] * 50)
    small = RingOutlierSettings(max_points_num_per_ring=3)
    assert (check(points, small) == check(points, RingOutlierSettings())).all()
    assert check(points, small)[:50].all()


def test_the_point_count_rule_of_the_older_generation():
    # six points 1 mm apart: a walk of 5 (> num_points_threshold 4) but 5 mm long
    points = ring([10.0] * 6, step=1e-4)
    assert check(points, RingOutlierSettings())[:5].all()
    assert not check(points, NEWER).any()
    assert not check(points, RingOutlierSettings(num_points_threshold=5)).any()


def test_channels_outside_the_rings_are_counted_and_dropped():
    points = np.concatenate([ring([10.0] * 5, channel=0), ring([10.0] * 5, channel=130)])
    settings = RingOutlierSettings()
    result = filter_rings(points, settings)
    assert result.out_of_range == 5 and not result.mask[5:].any()
    assert "5 points have a channel >= max_rings_num 128" in result.warning(settings)
    assert filter_rings(ring([10.0] * 3), settings).warning(settings) is None
    with pytest.raises(ValueError, match="integer column"):
        filter_rings({"channel": np.zeros(3)}, settings)


def test_nan_ranges_and_azimuths_follow_std_max_and_min():
    # 12 points 0.1 m apart; a walk is kept from 0.35 m. A NaN range after a finite one joins
    # (std::max and std::min both return the finite one), so 0..4 is one 0.4 m walk; the link
    # after it breaks. An azimuth of 60 (not radians) breaks the link before it: 5..7 and 8..10
    # are 0.2 m walks, where one walk 5..10 would have been kept.
    points = ring([10.0] * 12)
    points["distance"][4] = np.nan
    points["azimuth"][8] = 60.0
    settings = RingOutlierSettings(object_length_threshold=0.35, num_points_threshold=None)
    mask = check(points, settings)
    assert mask[:5].all() and not mask[5:].any()
    # a step of -60 is still negative after adding 2 pi, so below the limit: it joins
    points["azimuth"][8:] = ring([10.0] * 12)["azimuth"][8:] - 60.0
    assert check(points, settings)[5:11].all()


@pytest.mark.parametrize("seed", range(40))
def test_random_clouds_equal_autowares_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    points = np.zeros(n, POINT_DTYPE)
    points["channel"] = rng.integers(0, 6, n)
    odd = rng.choice([np.nan, -60.0, 60.0, 100.0], n)  # not radians: rule 3b's edges
    points["azimuth"] = np.where(rng.random(n) < 0.05, odd, rng.uniform(0, 2 * np.pi, n))
    near = np.nextafter(F32(5.0 * 1.03), F32(rng.choice([-np.inf, np.inf])))
    points["distance"] = rng.choice([5.0, 5.0, 5.0, near, 5.2, 12.0, np.nan, 0.0], n)
    for axis in "xyz":
        points[axis] = rng.normal(0, 0.06, n)
    settings = RingOutlierSettings(
        distance_ratio=float(rng.choice([1.03, 1.0, 1.5])),
        object_length_threshold=float(rng.choice([0.1, 0.05, 0.0])),
        num_points_threshold=[None, 0, 4][seed % 3],
        max_rings_num=int(rng.integers(1, 6)),
    )
    check(points, settings)


@pytest.mark.parametrize("settings", [RingOutlierSettings(), NEWER])
def test_a_real_velodyne_sweep_equals_autowares_loop(settings):
    path = LIDAR_DATA_DIR / "nebula" / "vlp16" / "1673400472138016708.pcd"
    if not path.exists():
        pytest.skip(f"{path} not found (set LIDAR_DATA_DIR to the data folder)")
    cloud = read_pcd(path)
    points = np.zeros(len(cloud.xyz), POINT_DTYPE)
    for axis, name in enumerate("xyz"):
        points[name] = cloud.xyz[:, axis]
    for name in ("channel", "azimuth", "distance"):
        points[name] = cloud.fields[name]
    mask = check(points, settings)
    assert mask.sum() == (12706 if settings.num_points_threshold else 11285)


def test_settings_are_validated_and_read_from_autowares_file():
    assert ring_outlier_problems(RingOutlierSettings()) == []
    bad = {
        "distance_ratio": 0.0,
        "object_length_threshold": -1.0,
        "num_points_threshold": 2.5,
        "max_rings_num": 70000,
        "max_points_num_per_ring": -1,
    }
    for name, value in bad.items():
        with pytest.raises(ConfigError, match=name):
            RingOutlierSettings(**{name: value})
    assert (
        RingOutlierSettings.from_autoware_parameters(
            {"distance_ratio": 1.03, "object_length_threshold": 0.05, "max_rings_num": 128}
        )
        == NEWER
    )
    yaml = pytest.importorskip("yaml")
    path = LIDAR_DATA_DIR / "sample_sensor_kit" / "ring_outlier_filter_node.param.yaml"
    if not path.exists():
        pytest.skip(f"{path} not found")
    parameters = yaml.safe_load(path.read_text())["/**"]["ros__parameters"]
    assert RingOutlierSettings.from_autoware_parameters(parameters) == RingOutlierSettings()
