"""The CPU twin of ``union_find`` on clouds of exact duplicates: work bounded by the distinct
positions, partitions equal to the float32 oracle's.

A sensor whose motor does not turn sends the same returns again and again: a VLP-32C sweep of
1 200 such packets is 461 000 points at 415 places. Searching every copy cost up to |A| x |B|
distance tests for each pair of neighbouring clique cells without a neighbour pair (1.7e9 in
all, 84 s); the twin now searches each distinct position once. Work is counted, not timed:
every distance test of the twin goes through ``union_find.squared_distance``, which the tests
wrap in a counter that stops the run as soon as it passes its bound.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.cpu.labelling import union_find
from gpu_euclidean_cluster.cpu.labelling.union_find import (
    distinct_positions,
    union_find_components,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne import (
    DecoderSettings,
    SweepDecoder,
    load_calibration,
)

from .._velodyne_helpers import packet_stamps, rotating_packets, stuck_packets
from .test_union_find import canonical, oracle_components

VLP32_CALIBRATION = Path(__file__).resolve().parents[2] / "config" / "velodyne" / "VLP32.yaml"
VLP32_PRODUCT = 0x28


class TooMuchWorkError(AssertionError):
    """The twin passed its bound on distance tests."""


def count_distance_tests(monkeypatch: pytest.MonkeyPatch, bound: int) -> dict[str, int]:
    """Wrap the twin's distance test in a counter (point pairs tested) that raises
    :class:`TooMuchWorkError` once it passes ``bound``."""
    counted = {"tests": 0}
    squared_distance = union_find.squared_distance

    def counting(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        counted["tests"] += math.prod(np.broadcast_shapes(np.shape(a), np.shape(b))[:-1])
        if counted["tests"] > bound:
            raise TooMuchWorkError(f"more than {bound} distance tests")
        return squared_distance(a, b)

    monkeypatch.setattr(union_find, "squared_distance", counting)
    return counted


def stuck_sweep() -> np.ndarray:
    """float32 (N, 3) points of 1 200 packets of a VLP-32C that does not turn, the sweep
    completed by a turning sensor's packets, as the node's decoder cuts it."""
    decoder = SweepDecoder(load_calibration(VLP32_CALIBRATION), DecoderSettings(model="VLP32"))
    assert decoder.feed(stuck_packets(1200, product=VLP32_PRODUCT), packet_stamps(1200)) == []
    sweeps = decoder.feed(rotating_packets(75, product=VLP32_PRODUCT), packet_stamps(75, 102.0))
    cloud = sweeps[0].points
    return np.stack((cloud["x"], cloud["y"], cloud["z"]), axis=1).astype(np.float32)


# ---- work -------------------------------------------------------------------------------------


def test_stuck_sensor_sweep_costs_one_test_per_pair_of_places(monkeypatch) -> None:
    """The stuck VLP-32C sweep: at most one distance test per pair of distinct places (the
    search over every copy made 1.7e9), and the oracle's partition of the places, every copy
    with its place."""
    points = stuck_sweep()
    places, place_of = np.unique(points, axis=0, return_inverse=True)
    assert len(points) > 460_000 and len(places) < 420
    counted = count_distance_tests(monkeypatch, len(places) * (len(places) - 1) // 2)
    got = union_find_components(points, 0.5)
    assert counted["tests"] > 0
    expected = oracle_components(places, 0.5)[place_of.reshape(-1)]
    assert np.array_equal(canonical(got), canonical(expected))


def _two_places(copies: int, offset: tuple[float, float, float]) -> np.ndarray:
    """Two places ``offset`` apart, ``copies`` copies each, interleaved."""
    first = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    places = np.stack((first, first + np.array(offset, dtype=np.float32)))
    return np.tile(places, (copies, 1))


@pytest.mark.parametrize("grid", ["clique", "gapped"])
@pytest.mark.parametrize(
    ("offset", "neighbours"),
    [((0.3, 0.3, 0.0), True), ((0.4, 0.4, 0.0), False), ((0.45, 0.45, 0.2), False)],
)
def test_neighbouring_cells_cost_one_test(monkeypatch, grid, offset, neighbours) -> None:
    """Two places in neighbouring cells (d_th = 0.5: cells of 0.289, each axis less than the
    reach 0.5 apart, so in one slab of the gapped grid too), 2 000 copies each: one distance
    test for the pair of places, whether they are neighbours or not (4 million without)."""
    if grid == "gapped":
        monkeypatch.setattr(union_find, "clique_cell_side", lambda thr: None)
    counted = count_distance_tests(monkeypatch, 1)
    got = union_find_components(_two_places(2000, offset), 0.5)
    assert len(np.unique(got)) == (1 if neighbours else 2)
    assert counted["tests"] == 1


def test_exhaustive_search_tests_pairs_of_positions(monkeypatch) -> None:
    """``search="exhaustive"``: at most k² tests for k distinct positions."""
    counted = count_distance_tests(monkeypatch, 4)
    got = union_find_components(_two_places(3000, (0.4, 0.4, 0.0)), 0.5, "exhaustive")
    assert len(np.unique(got)) == 2 and counted["tests"] <= 4


# ---- exactness --------------------------------------------------------------------------------


def _duplicated(places: np.ndarray, seed: int, most: int = 60) -> np.ndarray:
    """``places`` (float32) repeated 2 to ``most`` times each (heavy-tailed), shuffled."""
    rng = np.random.default_rng(seed)
    copies = np.clip(rng.zipf(1.6, len(places)) + 1, 2, most)
    points = np.repeat(places, copies, axis=0)
    return points[rng.permutation(len(points))]


def _random_places(seed: int) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(seed)
    d_th = float(rng.choice([0.1, 0.3, 0.5, 1.0]))
    places = rng.random((int(rng.integers(20, 120)), 3)) * 4 * d_th
    return _duplicated(places.astype(np.float32), seed), d_th


def _lattice_ties(seed: int) -> tuple[np.ndarray, float]:
    """Places exactly d_th apart (not neighbours) and one ulp closer (neighbours)."""
    spacing = np.float32(0.5)
    idx = np.indices((4, 4, 3)).reshape(3, -1).T.astype(np.float32) * spacing
    idx[::3, 0] = np.nextafter(idx[::3, 0], np.float32(0))
    return _duplicated(idx.astype(np.float32), seed), 0.5


def _signed_zeros(seed: int) -> tuple[np.ndarray, float]:
    """Copies of the origin written as +0.0 and -0.0, and places 0.2 away."""
    zeros = np.array([[0.0, 0.0, 0.0], [-0.0, -0.0, -0.0], [0.0, -0.0, 0.0]], dtype=np.float32)
    around = np.array([[0.2, 0.0, 0.0], [-0.0, 0.0, 0.25], [-0.3, -0.0, 0.0]], dtype=np.float32)
    return _duplicated(np.concatenate((zeros, around)), seed), 0.21


def _tiny_threshold(seed: int) -> tuple[np.ndarray, float]:
    """d_th = 1e-6: places a few ulps apart at 1.0, copies of each."""
    base = np.float32(1.0)
    xs = [base]
    for _ in range(30):
        xs.append(np.nextafter(xs[-1], np.float32(2)))
    places = np.zeros((31, 3), dtype=np.float32)
    places[:, 0] = xs
    places[::4, 1] = np.float32(2e-6)  # every fourth place out of reach
    return _duplicated(places, seed), 1e-6


def _subnormal_threshold(seed: int) -> tuple[np.ndarray, float]:
    """T = float32(1e-40), subnormal: no clique grid (the gapped grid), copies still neighbours."""
    x = np.arange(30, dtype=np.float64) * 7e-21
    x[15:] += 1e-19
    places = np.stack((x, np.zeros(30), np.zeros(30)), axis=1).astype(np.float32)
    return _duplicated(places, seed), 1e-20


def _zero_threshold(seed: int) -> tuple[np.ndarray, float]:
    """T = float32(1e-60) = 0: no pair is a neighbour, copies of one place included."""
    places = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], dtype=np.float32)
    return _duplicated(places, seed), 1e-30


def _infinite_threshold(seed: int) -> tuple[np.ndarray, float]:
    """T = inf: pairs are neighbours unless their squared distance overflows."""
    rng = np.random.default_rng(seed)
    places = rng.random((40, 3)) * 6e38 - 3e38
    return _duplicated(places.astype(np.float32), seed), 1e20


def _non_finite(seed: int) -> tuple[np.ndarray, float]:
    """Copies of NaN and infinite points: nobody's neighbours, not even each other's."""
    places = np.array(
        [[np.nan, 0.0, 0.0], [np.inf, 1.0, 1.0], [0.0, -np.inf, 0.0], [0.0, 0.0, 0.0]],
        dtype=np.float32,
    )
    return _duplicated(places, seed, most=8), 0.5


CLOUDS: dict[str, Callable[[], tuple[np.ndarray, float]]] = {
    **{f"random-{s}": (lambda s=s: _random_places(s)) for s in range(8)},
    **{f"lattice-ties-{s}": (lambda s=s: _lattice_ties(s)) for s in range(2)},
    "signed-zeros": lambda: _signed_zeros(1),
    "tiny-threshold": lambda: _tiny_threshold(2),
    "subnormal-threshold": lambda: _subnormal_threshold(3),
    "zero-threshold": lambda: _zero_threshold(4),
    "infinite-threshold": lambda: _infinite_threshold(5),
    "non-finite": lambda: _non_finite(6),
}


@pytest.mark.parametrize("search", ["range", "exhaustive"])
@pytest.mark.parametrize("grid", ["clique", "gapped"])
@pytest.mark.parametrize("name", list(CLOUDS))
def test_duplicate_heavy_clouds_match_oracle(name, grid, search, monkeypatch) -> None:
    """The oracle compares every pair of points, copies included."""
    points, d_th = CLOUDS[name]()
    copies = np.unique(points.view("V12").ravel(), return_counts=True)[1]
    assert copies.min() >= 2  # every point has a bitwise copy
    if grid == "gapped":
        monkeypatch.setattr(union_find, "clique_cell_side", lambda thr: None)
    with np.errstate(over="ignore", invalid="ignore"):  # the non-finite and infinite clouds
        got = union_find_components(points, d_th, search)
    assert got.dtype == np.int32 and got.shape == (len(points),)
    assert np.array_equal(canonical(got), canonical(oracle_components(points, d_th)))


def test_distinct_positions_group_value_equal_finite_points() -> None:
    """Copies and signed zeros share a position; copies of a NaN point do not."""
    points = np.array(
        [[1, 2, 3], [0, 0, 0], [1, 2, 3], [-0.0, 0, -0.0], [np.nan, 0, 0], [np.nan, 0, 0]],
        dtype=np.float32,
    )
    first, position = distinct_positions(points)
    assert len(first) == 4 and sorted(position[first].tolist()) == [0, 1, 2, 3]
    assert position[0] == position[2] and position[1] == position[3]
    assert len({position[0], position[1], position[4], position[5]}) == 4
    finite = np.isfinite(points).all(axis=1)
    assert np.array_equal(points[first][position][finite], points[finite])


def test_cluster_size_filter_counts_every_copy() -> None:
    """Through the clusterer (CPU backend): places of 5, 50 and 500 copies, sizes 10..100."""
    places = np.array([[0.0, 0.0, 0.0], [5.0, 0.0, 0.0], [10.0, 0.0, 0.0]], dtype=np.float32)
    points = np.repeat(places, [5, 50, 500], axis=0)
    config = ClusterConfig(d_th=0.5, min_cluster_size=10, max_cluster_size=100)
    result = EuclideanClusterer(config, backend="cpu").cluster(points)
    assert list(result.cluster_sizes) == [50]
    assert np.array_equal(result.labels, np.repeat([-1, 0, -1], [5, 50, 500]))
