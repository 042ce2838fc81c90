"""The stress set of the ``stress`` sub-command: clouds where the neighbour pairs, not the points,
set the cost, and clouds too large or too dense for the paper's graph structures.

Cases, in the order they run (the two degree regimes first: under a time limit they matter most;
``--quick`` builds tiny versions of each for a CPU-only CI run):

- ``room-vlp16``: a VLP-16 sweep at 20 Hz (0.4 deg azimuth step) from the middle of a 2.6 m x 2.6 m
  room, 1 m above the floor: ~14 k points at mean degree ~1 000 (0.5 m);
- ``cabin-hdl64e``: an HDL-64E sweep at 0.32 deg azimuth step in a 1.7 m x 1.7 m cabin, 0.8 m
  above the floor, every return packed around the sensor: ~70 k points at mean degree ~10 000;
- ``identical``: 100 000 identical points at 0.5 m (one cluster: the known answer);
- ``cube``: 200 000 points uniform in a 2 m cube at 0.5 m (mean degree ~ 10 000);
- ``tiled``: kitti_000001 tiled 17x at 200 m spacing along x (2 044 556 points) at 0.3 and 0.5 m;
- ``tiled-8m``: the same tiled 68x (8 178 224 points) at 0.3 and 0.5 m;
- ``kitti``: kitti_000001 at d_th 5, 20 and 100 m (at 100 m every point neighbours almost every
  other one).

Every cloud is generated deterministically (fixed seeds); the mean degree actually achieved is
measured on each cloud (:func:`mean_degree`) and written with its rows. Where
``$LIDAR_DATA_DIR/kitti_000001.bin`` is absent, the ``kitti`` and ``tiled`` cases use a simulated
HDL-64E street sweep instead and say so in their ``cloud`` column.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .cases import Case, CaseData, read_frame

log = logging.getLogger(__name__)

#: The frame the ``kitti`` and ``tiled`` cases are made of.
STRESS_FRAME = "kitti_000001.bin"

#: The stress regimes, each with its own time target (see :mod:`.targets`).
REGIME_DENSE = "dense"  # identical points, the 2 m cube, kitti_000001 at 100 m: <= 20 ms
REGIME_LARGE = "large"  # 2 M points: <= 15 ms
REGIME_HUGE = "huge"  # 8 M points: no time target here
REGIME_DEGREE_1K = "degree-1k"  # ~15 k points at mean degree ~1 000: <= 1 ms
REGIME_DEGREE_10K = "degree-10k"  # ~70 k points at mean degree ~10 000: <= 3 ms
REGIME_THRESHOLD = "large-threshold"  # kitti_000001 at 5 and 20 m: correct, no time target

#: The untimed oracle (the CPU backend's union_find twin) runs on clouds up to this size: all of
#: the stress set (the 2 M-point cloud takes a few seconds, the 8 M-point one four times that).
STRESS_ORACLE_MAX_POINTS = 9_000_000

#: Clouds of at most this many points get an exact mean degree (kd-tree pair count); larger
#: ones a sampled estimate.
EXACT_DEGREE_MAX_POINTS = 100_000
DEGREE_SAMPLE = 4096

#: Methods known to be hopeless on a case within a benchmark run (measured on the H100):
#: recorded as ``skipped`` with this reason instead of being run.
_MATRIX_2M = (
    "the matrix method takes 2.8 s at 0.5 m and more than a minute at 0.3 m on these 2 M points "
    "on the H100; beyond a benchmark run"
)


@dataclass(frozen=True)
class StressSpec:
    """One stress cloud and the thresholds it is clustered at."""

    name: str
    thresholds: tuple[float, ...]
    regime: Callable[[float], str]
    description: str
    build: Callable[[bool, Path], tuple[np.ndarray, dict[str, object]]]
    known_single_cluster: bool = False
    skip: Callable[[float], dict[str, str]] = lambda d_th: {}


def identical_points(quick: bool, _: Path) -> tuple[np.ndarray, dict[str, object]]:
    """100 000 copies of one point (1 000 with ``quick``)."""
    n = 1_000 if quick else 100_000
    return np.tile(np.float32([12.5, -3.25, 1.0]), (n, 1)), {"cloud": f"identical-{n}"}


def cube_points(quick: bool, _: Path) -> tuple[np.ndarray, dict[str, object]]:
    """200 000 points uniform in a 2 m cube (2 000 with ``quick``), seed 0."""
    n = 2_000 if quick else 200_000
    points = np.random.default_rng(0).uniform(0.0, 2.0, (n, 3)).astype(np.float32)
    return points, {"cloud": f"cube-2m-{n}"}


def stress_frame(quick: bool, directory: Path) -> tuple[np.ndarray, str]:
    """kitti_000001 (every 80th point with ``quick``), or a simulated HDL-64E sweep without it."""
    path = directory / STRESS_FRAME
    if path.is_file():
        points, name = read_frame(path), STRESS_FRAME
    else:
        from gpu_euclidean_cluster.tools.simulation import HDL64E, LidarSimulator, street_scene

        log.warning("%s not in %s: the stress set uses a simulated HDL-64E sweep", STRESS_FRAME,
                    directory)  # fmt: skip
        points, name = LidarSimulator(HDL64E, seed=0).scan(street_scene(seed=0)).xyz, "sim-hdl64e"
    if quick:
        return points[::80].copy(), f"{name}[::80]"
    return points, name


def frame_points(quick: bool, directory: Path) -> tuple[np.ndarray, dict[str, object]]:
    points, name = stress_frame(quick, directory)
    return points, {"cloud": name}


TILES = 17
TILES_8M = 68
TILE_SPACING_M = 200.0


def tiled_points(quick: bool, directory: Path) -> tuple[np.ndarray, dict[str, object]]:
    """The frame tiled 17x at 200 m spacing along x (every 400th point with ``quick``)."""
    return _tiled(TILES, quick, directory)


def tiled_8m_points(quick: bool, directory: Path) -> tuple[np.ndarray, dict[str, object]]:
    """The frame tiled 68x at 200 m spacing along x (every 1600th point with ``quick``)."""
    return _tiled(TILES_8M, quick, directory)


def _tiled(tiles: int, quick: bool, directory: Path) -> tuple[np.ndarray, dict[str, object]]:
    """The frame tiled ``tiles`` times at 200 m spacing along x (``quick``: every
    ``25 * tiles``-th point, so that the quick cloud keeps ~1/400 of the 17x one's size)."""
    points, name = stress_frame(False, directory)
    if quick:
        stride = 400 * tiles // TILES
        points, name = points[::stride], f"{name}[::{stride}]"
    offsets = np.zeros((tiles, 1, 3))
    offsets[:, 0, 0] = TILE_SPACING_M * np.arange(tiles)
    tiled = (points.astype(np.float64)[None] + offsets).reshape(-1, 3).astype(np.float32)
    return tiled, {"cloud": f"{name} x{tiles} at {TILE_SPACING_M:g} m"}


def room_scene(half_m: float, floor_m: float) -> object:
    """Four walls around the sensor, ``half_m`` from it, on a floor ``floor_m`` below it."""
    from gpu_euclidean_cluster.tools.simulation import SceneBuilder

    scene = SceneBuilder(ground_z=-floor_m)
    t = 0.3
    for sign in (1.0, -1.0):
        scene.box("wall", 0.0, sign * (half_m + t / 2), (2 * half_m + 2 * t, t, 3.0))
        scene.box("wall", sign * (half_m + t / 2), 0.0, (t, 2 * half_m, 3.0))
    return scene.build()


def _simulated(sensor_name: str, step_deg: float, half_m: float, floor_m: float) -> np.ndarray:
    from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor

    sensor = dataclasses.replace(get_sensor(sensor_name), azimuth_step_deg=step_deg,
                                 min_range_m=0.3)  # fmt: skip
    return LidarSimulator(sensor, seed=0).scan(room_scene(half_m, floor_m)).xyz  # type: ignore[arg-type]


def room_vlp16_points(quick: bool, _: Path) -> tuple[np.ndarray, dict[str, object]]:
    """A VLP-16 at 20 Hz in a 2.6 m square room, 1 m above the floor (4 deg steps with quick)."""
    step = 4.0 if quick else 0.4
    return _simulated("vlp16", step, 1.3, 1.0), {"cloud": f"vlp16 {step:g} deg, 2.6 m room"}


def cabin_hdl64e_points(quick: bool, _: Path) -> tuple[np.ndarray, dict[str, object]]:
    """An HDL-64E (0.32 deg steps) in a 1.7 m square cabin, 0.8 m above the floor."""
    step = 6.4 if quick else 0.32
    return _simulated("hdl64e", step, 0.85, 0.8), {"cloud": f"hdl64e {step:g} deg, 1.7 m cabin"}


STRESS_SPECS: tuple[StressSpec, ...] = (
    StressSpec(
        "room-vlp16",
        (0.5,),
        lambda _: REGIME_DEGREE_1K,
        "VLP-16 sweep in a small room",
        room_vlp16_points,
    ),
    StressSpec(
        "cabin-hdl64e",
        (0.5,),
        lambda _: REGIME_DEGREE_10K,
        "HDL-64E sweep in a small cabin (points packed around the sensor)",
        cabin_hdl64e_points,
    ),
    StressSpec(
        "identical",
        (0.5,),
        lambda _: REGIME_DENSE,
        "identical points (known answer: one cluster)",
        identical_points,
        known_single_cluster=True,
    ),
    StressSpec("cube", (0.5,), lambda _: REGIME_DENSE, "uniform in a 2 m cube", cube_points),
    StressSpec(
        "tiled",
        (0.3, 0.5),
        lambda _: REGIME_LARGE,
        "kitti_000001 tiled 17x at 200 m spacing",
        tiled_points,
        skip=lambda _: {"RS-matrix": _MATRIX_2M, "ES-matrix": _MATRIX_2M},
    ),
    StressSpec(
        "tiled-8m",
        (0.3, 0.5),
        lambda _: REGIME_HUGE,
        "kitti_000001 tiled 68x at 200 m spacing",
        tiled_8m_points,
        skip=lambda _: {"RS-matrix": _MATRIX_2M, "ES-matrix": _MATRIX_2M},
    ),
    StressSpec(
        "kitti",
        (5.0, 20.0, 100.0),
        lambda d: REGIME_DENSE if d >= 100 else REGIME_THRESHOLD,
        "kitti_000001 at large thresholds",
        frame_points,
    ),
)

STRESS_NAMES: tuple[str, ...] = tuple(spec.name for spec in STRESS_SPECS)


def stress_cases(names: list[str], quick: bool, directory: Path) -> list[Case]:
    """The cases of the chosen stress clouds, each at each of its thresholds.

    Cases of one cloud share one build (the cloud is made once, on the first case's load).
    Raises ValueError on an unknown name.
    """
    unknown = sorted(set(names) - set(STRESS_NAMES))
    if unknown:
        raise ValueError(
            f"unknown stress case(s) {', '.join(unknown)}; expected some of "
            f"{', '.join(STRESS_NAMES)}"
        )
    cases = []
    for spec in STRESS_SPECS:
        if spec.name not in names:
            continue
        cloud = _CloudCache(spec, quick, directory)
        cases += [_stress_case(spec, d_th, cloud) for d_th in spec.thresholds]
    return cases


class _CloudCache:
    """Builds a stress cloud once for all its thresholds; forgets it after the last one."""

    def __init__(self, spec: StressSpec, quick: bool, directory: Path) -> None:
        self.spec, self.quick, self.directory = spec, quick, directory
        self.remaining = len(spec.thresholds)
        self.value: tuple[np.ndarray, dict[str, object]] | None = None

    def get(self) -> tuple[np.ndarray, dict[str, object]]:
        value = self.value
        if value is None:
            start = time.perf_counter()
            points, info = self.spec.build(self.quick, self.directory)
            info["build_s"] = round(time.perf_counter() - start, 3)
            value = (np.ascontiguousarray(points, dtype=np.float32), info)
        self.remaining -= 1
        self.value = value if self.remaining > 0 else None
        return value


def _stress_case(spec: StressSpec, d_th: float, cloud: _CloudCache) -> Case:
    def load() -> CaseData:
        points, info = cloud.get()
        degree, how = mean_degree(points, d_th)
        extra = {**info, "mean_degree": round(degree, 1), "mean_degree_method": how}
        truth, truth_name = None, None
        if spec.known_single_cluster:
            truth, truth_name = np.zeros(len(points), dtype=np.int32), "known answer: one cluster"
        return CaseData(points=points, d_th=d_th, truth=truth, truth_name=truth_name, extra=extra)

    return Case(
        key=f"stress:{spec.name},d_th={d_th:g}",
        experiment="stress",
        variable="d_th",
        value=d_th,
        params={
            "stress_case": spec.name,
            "regime": spec.regime(d_th),
            "description": spec.description,
        },
        expected_pairs=None,
        load=load,
        skip=spec.skip(d_th),
    )


def mean_degree(points: np.ndarray, d_th: float, seed: int = 0) -> tuple[float, str]:
    """Mean number of neighbours per finite point (itself excluded), and how it was measured.

    Distances in float64 with ``<= d_th`` (a kd-tree count; the clustering rule is float32
    ``d^2 < d_th^2``, which differs only on pairs at the boundary): exact (a dual-tree pair count)
    up to :data:`EXACT_DEGREE_MAX_POINTS` points, else the mean over :data:`DEGREE_SAMPLE` points
    drawn with ``seed``.
    """
    from scipy.spatial import cKDTree

    cloud = points[np.isfinite(points).all(axis=1)].astype(np.float64)
    n = len(cloud)
    if n < 2:
        return 0.0, "exact"
    tree = cKDTree(cloud)
    if n <= EXACT_DEGREE_MAX_POINTS:
        pairs = int(tree.count_neighbors(tree, d_th))  # ordered pairs, each point with itself
        return (pairs - n) / n, "exact"
    sample = np.random.default_rng(seed).choice(n, DEGREE_SAMPLE, replace=False)
    counts = tree.query_ball_point(cloud[sample], d_th, return_length=True)
    return float(np.mean(counts)) - 1.0, f"sampled ({DEGREE_SAMPLE} points)"
