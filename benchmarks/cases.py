"""Benchmark cases: the synthetic sweeps of the paper's Table 2 and the real LiDAR frames.

A case is one point of a sweep (one synthetic cloud, or one frame at one ``d_th``); it loads its
cloud lazily so that a run holds one cloud at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from gpu_euclidean_cluster.tools.synthetic import (
    FACTORS,
    TABLE2_EXPERIMENTS,
    Table2Experiment,
    synthetic_cloud,
)

#: ``--quick``: the four experiments of Table 2 on clouds small enough for a CPU-only CI run.
QUICK_TABLE2: Mapping[str, Table2Experiment] = MappingProxyType(
    {
        "size": Table2Experiment(
            "Size variation",
            "size",
            (512, 1024, 2048),
            {"clusters": 16, "degree": 8, "distance": 4},
        ),
        "cluster_number": Table2Experiment(
            "Cluster number variation",
            "clusters",
            (8, 32),
            {"size": 2048, "degree": 8, "distance": 4},
        ),
        "point_degree": Table2Experiment(
            "Point degree variation",
            "degree",
            (2, 16),
            {"size": 2048, "clusters": 16, "distance": 4},
        ),
        "point_distance": Table2Experiment(
            "Point distance variation",
            "distance",
            (1, 8),
            {"size": 2048, "clusters": 32, "degree": 8},
        ),
    }
)

EXPERIMENTS: tuple[str, ...] = tuple(TABLE2_EXPERIMENTS)

#: Synthetic clouds are built for this threshold (the generator scales its geometry to it).
SYNTHETIC_D_TH = 1.0

#: The paper's real-frame thresholds (metres).
FRAME_THRESHOLDS: tuple[float, ...] = (0.3, 0.5, 1.0)

#: Real frames looked for in $LIDAR_DATA_DIR, smallest first.
FRAME_FILES: tuple[str, ...] = (
    "kitti_000008.bin",
    "nuscenes_lidar_top.pcd.bin",
    "kitti_000001.bin",
)


@dataclass
class CaseData:
    """A loaded case: the cloud, its threshold and, where known, the true partition.

    Attributes:
        truth: the exact partition (synthetic clouds, known answers), else None.
        rings: each point's laser ring where the cloud has them (the scan search's bins), else
            None.
        truth_name: what ``truth`` is, written as the rows' ``oracle`` (default ``ground-truth``).
        extra: facts measured on the cloud (e.g. its mean degree), written with every row (its
            keys are fields of :class:`~.rows.ResultRow`).
    """

    points: np.ndarray
    d_th: float
    truth: np.ndarray | None = None
    truth_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    rings: np.ndarray | None = None


@dataclass
class Case:
    """One point of a sweep.

    Attributes:
        key: unique name within a run (used to resume an interrupted run).
        experiment: a Table 2 experiment (``size``, ``cluster_number``, ``point_degree``,
            ``point_distance``), ``frames`` or ``stress``.
        variable: the swept quantity (``size``, ``clusters``, ``degree``, ``distance``, ``d_th``).
        value: its value in this case.
        params: everything else that defines the case, written with each result row (its keys
            are fields of :class:`~.rows.ResultRow`: the synthetic factors, the frame, the
            stress case).
        expected_pairs: neighbour pairs expected (for the CPU skip rule), None when unknown.
        load: builds the cloud.
        skip: implementations not run on this case, with the reason (recorded as ``skipped``).
    """

    key: str
    experiment: str
    variable: str
    value: float
    params: dict[str, Any]
    expected_pairs: int | None
    load: Callable[[], CaseData] = field(repr=False)
    skip: dict[str, str] = field(default_factory=dict)


def synthetic_cases(experiments: list[str], quick: bool, seed: int) -> list[Case]:
    """The cases of the chosen Table 2 experiments (:data:`QUICK_TABLE2` when ``quick``)."""
    table = QUICK_TABLE2 if quick else TABLE2_EXPERIMENTS
    unknown = sorted(set(experiments) - set(table))
    if unknown:
        raise ValueError(
            f"unknown experiment(s) {', '.join(unknown)}; expected some of {', '.join(table)}"
        )
    return [
        _synthetic_case(name, table[name], value, seed)
        for name in experiments
        for value in table[name].values
    ]


def _synthetic_case(name: str, experiment: Table2Experiment, value: int, seed: int) -> Case:
    factors = experiment.parameters(value)
    key = f"{name}:" + ",".join(f"{k}={factors[k]}" for k in FACTORS)

    def load() -> CaseData:
        cloud = synthetic_cloud(**factors, seed=seed, d_th=SYNTHETIC_D_TH)
        return CaseData(points=cloud.points, d_th=cloud.d_th, truth=cloud.labels)

    return Case(
        key=key,
        experiment=name,
        variable=experiment.factor,
        value=value,
        params={**factors, "seed": seed},
        expected_pairs=int(factors["size"] * (factors["degree"] - 1) // 2),
        load=load,
    )


def data_dir() -> Path:
    """``$LIDAR_DATA_DIR``, or ``../shared/data`` relative to the working directory."""
    return Path(os.environ.get("LIDAR_DATA_DIR", "../shared/data"))


def frame_cases(
    directory: Path, quick: bool, thresholds: tuple[float, ...] = FRAME_THRESHOLDS
) -> list[Case]:
    """Each real frame found in ``directory`` at each threshold.

    ``quick`` keeps only the smallest frame. Raises FileNotFoundError when none is there.
    """
    frames = [directory / name for name in FRAME_FILES if (directory / name).is_file()]
    if not frames:
        raise FileNotFoundError(
            f"no LiDAR frames ({', '.join(FRAME_FILES)}) in {directory}; "
            "set LIDAR_DATA_DIR to the folder that holds them"
        )
    if quick:
        frames = frames[:1]
    return [_frame_case(path, d_th) for path in frames for d_th in thresholds]


def _frame_case(path: Path, d_th: float) -> Case:
    def load() -> CaseData:
        points, rings = read_frame_with_rings(path)
        return CaseData(points=points, d_th=d_th, rings=rings)

    return Case(
        key=f"frames:{path.name},d_th={d_th}",
        experiment="frames",
        variable="d_th",
        value=d_th,
        params={"frame": path.name},
        expected_pairs=None,
        load=load,
    )


def read_frame(path: Path) -> np.ndarray:
    """The (N, 3) float32 points of a frame file (format from its name, see ``pointcloud_io``)."""
    from gpu_euclidean_cluster.pointcloud_io import load_points

    return load_points(path).xyz


def read_frame_with_rings(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A frame's points and rings: its ``ring``/``channel`` field (nuScenes' ring index), else
    the ring each point's elevation gives on an HDL-64E (KITTI's sensor), as ``make-bag``
    assigns them."""
    from gpu_euclidean_cluster.pointcloud_io import load_points
    from gpu_euclidean_cluster.pointcloud_io.bags import ring_from_elevation
    from gpu_euclidean_cluster.tools.simulation import get_sensor

    cloud = load_points(path)
    rings = cloud.fields.get("ring", cloud.fields.get("channel"))
    if rings is None:
        rings = ring_from_elevation(cloud.xyz, get_sensor("hdl64e").elevations_deg)
    return cloud.xyz, rings.astype(np.int32)
