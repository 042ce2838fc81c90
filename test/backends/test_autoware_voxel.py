"""The ``voxel_grid`` algorithm (Autoware's ``voxel_grid_based_euclidean_cluster``), both twins.

Against Autoware's own library (the peer ``../shared/peers/autoware_ec``, built against PCL):
digests of its output on the real frames are committed in ``test/data/autoware_ec_reference.json``
(so CI without PCL checks them), and where the peer's binary is found the frames are run through
it live. Regenerate the reference with the peer built::

    .venv/bin/python test/backends/test_autoware_voxel.py --regenerate [PEER_BINARY]

Compared: the voxel numbering (``.voxel``: exactly), the pieces before thinning of the clusters
that survive (``.prethin``: as partitions, both relabelled canonically, since Autoware's cluster
order is not meaningful), the cluster count and the labelled-point count; live, also the points
kept per voxel of a thinned piece (Autoware keeps ``min(n_v, cap)``, we choose which ones).

The rules, one by one, run on both backends (``backend`` fixture); the CUDA twin also equals the
CPU twin label for label on real frames with several parameter sets and on random and adversarial
clouds, and its split equals the core rule (skipped without a CUDA device).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster import EuclideanClusterer
from gpu_euclidean_cluster.core.config import ClusterConfig, ConfigError
from gpu_euclidean_cluster.core.numbering import canonical_labels
from gpu_euclidean_cluster.core.timing import StageClock
from gpu_euclidean_cluster.core.units import INT32_MAX
from gpu_euclidean_cluster.core.voxel_split import (
    HASH_INV_1,
    HASH_INV_2,
    SPLIT_LEAF,
    fixed_sums,
    rounds_needed,
    split_oversized,
)
from gpu_euclidean_cluster.cpu.backend import CpuBackend, centroid_config
from gpu_euclidean_cluster.cpu.labelling.autoware_voxel import (
    hash32,
    linear_index,
    voxel_grid,
    voxel_grid_components,
)

from ..conftest import cuda_only

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "test" / "data" / "autoware_ec_reference.json"
PEER_DIR = REPO.parent / "shared" / "peers" / "autoware_ec"
#: Where the peer's binary is looked for: $AUTOWARE_EC_PEER, then its usual build folders.
PEER_CANDIDATES = (
    os.environ.get("AUTOWARE_EC_PEER", ""),
    str(PEER_DIR / "build" / "autoware_ec"),
    "/tmp/aw_build/autoware_ec",
)

#: Frames and their float32 values per point.
FRAMES = {"kitti_000001.bin": 4, "kitti_000008.bin": 4, "nuscenes_lidar_top.pcd.bin": 5}

#: Autoware's defaults (config/voxel_grid_based_euclidean_cluster.param.yaml) and variants.
DEFAULTS = {
    "tolerance": 0.7,
    "voxel_leaf_size": 0.3,
    "min_points_per_voxel": 1,
    "min_points_per_cluster": 10,
    "max_voxels_per_cluster": 800,
    "large_cluster_voxel_count_threshold": 65,
    "large_cluster_max_points_per_voxel": 10,
}
VARIANTS = {
    "defaults": DEFAULTS,
    "no_split": {**DEFAULTS, "max_voxels_per_cluster": INT32_MAX},
    "min_points_per_voxel_3": {**DEFAULTS, "min_points_per_voxel": 3},
    "split_100_cap_3": {
        **DEFAULTS,
        "max_voxels_per_cluster": 100,
        "large_cluster_voxel_count_threshold": 20,
        "large_cluster_max_points_per_voxel": 3,
    },
}


def config_of(params: dict, **changes: object) -> ClusterConfig:
    """Our ClusterConfig for Autoware's parameters."""
    return ClusterConfig(
        d_th=params["tolerance"],
        algorithm="voxel_grid",
        voxel_leaf_size=params["voxel_leaf_size"],
        min_points_per_voxel=params["min_points_per_voxel"],
        min_cluster_size=params["min_points_per_cluster"],
        max_voxels_per_cluster=params["max_voxels_per_cluster"],
        large_cluster_voxel_count_threshold=params["large_cluster_voxel_count_threshold"],
        large_cluster_max_points_per_voxel=params["large_cluster_max_points_per_voxel"],
        **changes,
    )


def canonical(labels: np.ndarray) -> np.ndarray:
    """int32 labels renumbered by first appearance (point order); -1 stays -1."""
    labels = np.asarray(labels)
    out = np.full(labels.shape, -1, dtype=np.int32)
    member = labels >= 0
    _, first, inverse = np.unique(labels[member], return_index=True, return_inverse=True)
    rank = np.empty(first.shape[0], dtype=np.int32)
    rank[np.argsort(first)] = np.arange(first.shape[0], dtype=np.int32)
    out[member] = rank[inverse.reshape(-1)]
    return out


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<i4").tobytes()).hexdigest()


def ours(points: np.ndarray, params: dict) -> dict:
    """Our voxel numbering, surviving pieces before thinning, and final labels (CPU twin)."""
    config = config_of(params)
    backend = CpuBackend()
    grid = voxel_grid(points, config.voxel_leaf_size, config.min_points_per_voxel)

    def label(flat: np.ndarray) -> np.ndarray:
        return backend.label(flat, centroid_config(config), StageClock(lambda: None)).components

    prethin = voxel_grid_components(
        points,
        config.voxel_leaf_size,
        config.min_points_per_voxel,
        config.max_voxels_per_cluster,
        INT32_MAX,
        config.large_cluster_max_points_per_voxel,
        label,
    )
    labels = EuclideanClusterer(config, "cpu").cluster(points).labels
    survives = np.zeros(int(prethin.max()) + 2, dtype=bool)
    survives[prethin[labels >= 0]] = True
    prethin = np.where(prethin >= 0, prethin, -1)
    prethin = np.where(survives[prethin], prethin, -1)
    return {"voxel": grid.voxel_of_points(), "prethin": prethin, "labels": labels}


def digest(voxel: np.ndarray, prethin: np.ndarray, labels: np.ndarray) -> dict:
    return {
        "points": int(voxel.shape[0]),
        "voxels": int(voxel.max()) + 1,
        "voxel_sha256": sha256(voxel),
        "prethin_sha256": sha256(canonical(prethin)),
        "clusters": int(labels.max()) + 1,
        "labelled": int((labels >= 0).sum()),
    }


def find_peer() -> str | None:
    for candidate in PEER_CANDIDATES:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def run_peer(peer: str, frame: Path, fields: int, params: dict, out: Path) -> dict:
    """The peer's labels, ``.voxel`` and ``.prethin`` for one frame."""
    p = params
    max_voxels = "max" if p["max_voxels_per_cluster"] >= INT32_MAX else p["max_voxels_per_cluster"]
    args = [
        peer,
        str(frame),
        str(fields),
        "voxel",
        str(p["tolerance"]),
        str(p["voxel_leaf_size"]),
        str(p["min_points_per_voxel"]),
        str(p["min_points_per_cluster"]),
        str(max_voxels),
        str(p["large_cluster_voxel_count_threshold"]),
        str(p["large_cluster_max_points_per_voxel"]),
        "0",
        "1",
        str(out),
    ]
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=300)
    read = lambda suffix: np.fromfile(f"{out}{suffix}", dtype=np.int32)  # noqa: E731
    return {"labels": read(""), "voxel": read(".voxel"), "prethin": read(".prethin")}


def _provenance() -> dict:
    source = PEER_DIR / "upstream" / "current" / "lib" / "voxel_grid_based_euclidean_cluster.cpp"
    sha = hashlib.sha256(source.read_bytes()).hexdigest() if source.is_file() else None
    return {
        "peer": "shared/peers/autoware_ec (Autoware Universe autoware_euclidean_cluster on PCL)",
        "upstream_file": "lib/voxel_grid_based_euclidean_cluster.cpp",
        "upstream_index_id": 57740691972,
        "upstream_sha256": sha,
        "node_path_identical_to_commit": "443528d5d12f240dabe483d324c5bdcf889d09e4",
        "harness": "autoware_ec FILE K voxel TOL LEAF MINV MINC MAXV LARGE CAP 0 1 OUT",
    }


def regenerate(peer: str, data_dir: Path) -> dict:
    """The reference: the peer's digests per frame and variant."""
    frames: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, fields in FRAMES.items():
            for variant, params in VARIANTS.items():
                out = run_peer(peer, data_dir / name, fields, params, Path(tmp) / "labels.i32")
                frames.setdefault(name, {})[variant] = digest(
                    out["voxel"], out["prethin"], out["labels"]
                )
    return {"provenance": _provenance(), "variants": VARIANTS, "frames": frames}


# ---- against the committed reference (no PCL needed) -------------------------------------


def _reference() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("name", list(FRAMES))
def test_matches_autoware_reference(load_frame, name: str, variant: str) -> None:
    expected = _reference()["frames"][name][variant]
    found = ours(load_frame(name), VARIANTS[variant])
    assert digest(found["voxel"], found["prethin"], found["labels"]) == expected


def test_reference_records_the_peer_and_parameters() -> None:
    reference = _reference()
    assert reference["variants"] == json.loads(json.dumps(VARIANTS))
    assert reference["provenance"]["upstream_sha256"]


# ---- live against the peer's binary (skips without it) -------------------------------------


def test_live_against_peer(load_frame, lidar_data_dir: Path, tmp_path: Path) -> None:
    peer = find_peer()
    if peer is None:
        pytest.skip(
            "Autoware peer binary not found (build ../shared/peers/autoware_ec, or set "
            "AUTOWARE_EC_PEER); the committed reference is checked instead"
        )
    for name, fields in FRAMES.items():
        points = load_frame(name)
        for variant in ("defaults", "split_100_cap_3"):
            params = VARIANTS[variant]
            theirs = run_peer(peer, lidar_data_dir / name, fields, params, tmp_path / "l.i32")
            found = ours(points, params)
            assert np.array_equal(found["voxel"], theirs["voxel"]), (name, variant)
            assert np.array_equal(canonical(found["prethin"]), canonical(theirs["prethin"]))
            mine, peers = found["labels"], theirs["labels"]
            assert mine.max() == peers.max() and (mine >= 0).sum() == (peers >= 0).sum()
            # Kept points per voxel and piece agree (which points: ours is a chosen rule).
            voxel = found["voxel"]
            for labels in (mine, peers):
                assert (labels[voxel < 0] < 0).all()
            kept_mine = np.bincount(voxel[mine >= 0], minlength=voxel.max() + 1)
            kept_peer = np.bincount(voxel[peers >= 0], minlength=voxel.max() + 1)
            assert np.array_equal(kept_mine, kept_peer), (name, variant)


# ---- the rules, one by one --------------------------------------------------------------


def _components(backend: str, points, **params) -> np.ndarray:
    """The ``backend`` twin's labels of ``points`` with Autoware's parameters ``params``."""
    p = {**DEFAULTS, **params}
    clusterer = EuclideanClusterer(config_of(p), backend)
    return clusterer.cluster(np.asarray(points, np.float32)).labels


def test_two_z_layers_split_at_zero() -> None:
    points = np.array([[0.1, 0.1, -0.5], [0.1, 0.1, 0.5], [0.12, 0.1, 0.7]], np.float32)
    grid = voxel_grid(points, 0.3, 1)
    assert grid.voxel_of_points().tolist() == [0, 1, 1]
    assert grid.counts.tolist() == [1, 2]


def test_float32_inverse_leaf_rule() -> None:
    # x = float32(3.3): float32(x * float32(1 / 0.3)) is 11.0, double x / 0.3 is 10.99999...
    x = np.float32(3.3)
    assert np.floor(x * (np.float32(1) / np.float32(0.3))) == 11
    assert np.floor(np.float64(x) / 0.3) == 10
    points = np.array([[0.0, 0.0, 0.0], [x, 0.0, 0.0]], np.float32)
    assert linear_index(points, 0.3)[1] == 11


def test_min_points_per_voxel_drops_voxel(backend: str) -> None:
    points = np.array([[0.1, 0.1, 1], [0.12, 0.1, 1], [0.5, 0.1, 1]], np.float32)
    labels = _components(backend, points, min_points_per_voxel=2, min_points_per_cluster=1)
    assert labels.tolist() == [0, 0, -1]
    grid = voxel_grid(points, 0.3, 2)
    assert grid.voxel_of_points().tolist() == [0, 0, -1]


def test_nan_points_get_minus_one(backend: str) -> None:
    points = np.array([[0.1, 0.1, 1], [np.nan, 0, 0], [0.2, 0.1, 1]], np.float32)
    assert _components(backend, points, min_points_per_cluster=1).tolist() == [0, -1, 0]


def test_split_long_line_pieces_within_bound() -> None:
    x = np.arange(1000, dtype=np.float32) * 0.3
    pieces = split_oversized(np.zeros(1000, int), x, np.zeros(1000, np.float32), 100)
    sizes = np.bincount(pieces)
    assert sizes.max() <= 100 and sizes.sum() == 1000
    # Bisection by rank: contiguous runs along the line.
    assert (np.diff(pieces) != 0).sum() == len(sizes) - 1
    assert sorted(sizes.tolist()) == sorted([62] * 8 + [63] * 8)


def test_split_tie_axis_and_index_order() -> None:
    # A square: c_xy = 0, c_xx = c_yy: x wins; equal projections order by voxel number.
    cx = np.array([0, 1, 0, 1], np.float32)
    cy = np.array([0, 0, 1, 1], np.float32)
    pieces = split_oversized(np.zeros(4, int), cx, cy, 2)
    assert pieces[0] == pieces[2] and pieces[1] == pieces[3] and pieces[0] != pieces[1]
    # Autoware treats a bound below 1 as 1.
    assert np.bincount(split_oversized(np.zeros(4, int), cx, cy, 0)).max() == 1


def _fixed_sum(values: list[float]) -> float:
    """The split's fixed-order sum of one group, one addition at a time (the definition)."""
    leaves = []
    for first in range(0, len(values), SPLIT_LEAF):
        total = 0.0
        for value in values[first : first + SPLIT_LEAF]:
            total = total + value
        leaves.append(total)
    while len(leaves) > 1:
        leaves = [sum(leaves[i : i + 2]) if i + 1 < len(leaves) else leaves[i]
                  for i in range(0, len(leaves), 2)]  # fmt: skip
    return leaves[0]


def recursive_split(components, cx, cy, max_voxels: int) -> np.ndarray:
    """Autoware's ``splitOversizedClusters`` (a stack of groups, each sorted by projection and cut
    at the median rank) with the split's fixed-order sums: the definition, group by group."""
    bound = max(1, max_voxels)
    x = [float(value) for value in np.asarray(cx, np.float32)]
    y = [float(value) for value in np.asarray(cy, np.float32)]
    groups: dict[int, list[int]] = {}
    for voxel, component in enumerate(np.asarray(components).tolist()):
        groups.setdefault(component, []).append(voxel)
    stack, done = list(groups.values()), []
    while stack:
        group = stack.pop()
        n = len(group)
        if n <= bound:
            done.append(group)
            continue
        mean_x = _fixed_sum([x[i] for i in group]) / n
        mean_y = _fixed_sum([y[i] for i in group]) / n
        dx = [x[i] - mean_x for i in group]
        dy = [y[i] - mean_y for i in group]
        cxx = _fixed_sum([a * a for a in dx])
        cxy = _fixed_sum([a * b for a, b in zip(dx, dy, strict=True)])
        cyy = _fixed_sum([b * b for b in dy])
        trace, det = cxx + cyy, cxx * cyy - cxy * cxy
        disc = trace * trace / 4.0 - det
        lam = trace / 2.0 + math.sqrt(max(0.0, disc))
        if abs(cxy) > 1e-9:
            ax, ay = lam - cyy, cxy
        else:
            ax, ay = (1.0, 0.0) if cxx >= cyy else (0.0, 1.0)
        norm = math.sqrt(ax * ax + ay * ay)
        ax, ay = ax / norm, ay / norm
        group = sorted(group, key=lambda i: (x[i] * ax + y[i] * ay, i))
        stack += [group[: n // 2], group[n // 2 :]]
    pieces = np.empty(len(x), dtype=np.int64)
    for number, group in enumerate(done):
        pieces[group] = number
    return pieces


def split_clouds() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(components, cx, cy) with many oversized components: random, tied projections (values
    on a 0.1 grid, and pairs of voxels with one centroid, as two z layers give), lines."""
    rng = np.random.default_rng(3)
    clouds = {}
    n = 4000
    cx = rng.normal(0, 5, n).astype(np.float32)
    cy = rng.normal(0, 2, n).astype(np.float32)
    clouds["random"] = (rng.integers(0, 40, n), cx, cy)
    tied_x = np.round(rng.normal(0, 5, n), 1).astype(np.float32)
    tied_y = np.round(rng.normal(0, 2, n), 1).astype(np.float32)
    clouds["ties"] = (rng.integers(0, 25, n), tied_x, tied_y)
    twins = rng.uniform(-20, 20, (n // 2, 2)).astype(np.float32)
    twin = np.repeat(twins, 2, axis=0)
    clouds["twin_centroids"] = (rng.integers(0, 10, n), twin[:, 0], twin[:, 1])
    along = np.arange(3000, dtype=np.float32) * np.float32(0.3)
    clouds["lines"] = (np.arange(3000) // 700, along, np.float32(0.5) * along)
    grid = np.stack(np.meshgrid(np.arange(30), np.arange(30)), -1).reshape(-1, 2)
    clouds["grid"] = (
        np.zeros(900, int),
        grid[:, 0].astype(np.float32),
        grid[:, 1].astype(np.float32),
    )
    return clouds


@pytest.mark.parametrize("bound", [0, 1, 7, 100, 800])
@pytest.mark.parametrize("cloud", list(split_clouds()))
def test_split_equals_recursive_definition(cloud: str, bound: int) -> None:
    components, cx, cy = split_clouds()[cloud]
    found = split_oversized(components, cx, cy, bound)
    assert np.array_equal(canonical(found), canonical(recursive_split(components, cx, cy, bound)))
    assert np.bincount(found).max() <= max(1, bound)
    # Components within the bound are kept whole; no piece straddles two components.
    assert (np.bincount(found, weights=components) / np.bincount(found) % 1 == 0).all()


def test_split_diagonal_covariance_threshold() -> None:
    # Three rows of two voxels, x = 0 or 1e-10: 0 < |c_xy| <= 1e-9, so the axis is y (c_yy >
    # c_xx), and the voxels of a row tie: the lower number goes first.
    eps = 1e-10
    cx = np.array([0, eps, eps, 0, 0, 0], np.float32)
    cy = np.array([0, 0, 1, 1, 2, 2], np.float32)
    dx = cx.astype(np.float64) - cx.astype(np.float64).mean()
    dy = cy.astype(np.float64) - cy.astype(np.float64).mean()
    assert 0 < abs((dx * dy).sum()) <= 1e-9
    pieces = split_oversized(np.zeros(6, int), cx, cy, 3)
    assert canonical(pieces).tolist() == [0, 0, 0, 1, 1, 1]
    assert np.array_equal(canonical(pieces), canonical(recursive_split(np.zeros(6), cx, cy, 3)))
    # The same rows rotated: y spread below x's, so the x axis; ties order by number.
    pieces = split_oversized(np.zeros(6, int), cy, cx, 3)
    assert canonical(pieces).tolist() == [0, 0, 0, 1, 1, 1]


def test_fixed_sums_order() -> None:
    rng = np.random.default_rng(2)
    counts = np.array([1, 63, 64, 65, 200, 1000, 4097])
    values = rng.normal(0, 1e3, (int(counts.sum()), 2)) * 10.0 ** rng.integers(-8, 8, (1, 2))
    found = fixed_sums(values, counts)
    starts = np.cumsum(counts) - counts
    for g, (first, count) in enumerate(zip(starts, counts, strict=True)):
        for k in range(2):
            assert found[g, k] == _fixed_sum(values[first : first + count, k].tolist())


def test_rounds_and_hash_inverse() -> None:
    assert [rounds_needed(n, 800) for n in (1, 800, 801, 1600, 1601, 8636)] == [0, 0, 1, 1, 2, 4]
    assert rounds_needed(5, 0) == 3
    index = np.arange(0, 2**32, 7919, dtype=np.uint64).astype(np.uint32)
    x = hash32(index)
    x ^= x >> np.uint32(16)
    x *= np.uint32(HASH_INV_2)
    x ^= (x >> np.uint32(15)) ^ (x >> np.uint32(30))
    x *= np.uint32(HASH_INV_1)
    x ^= x >> np.uint32(16)
    assert np.array_equal(x, index)


def test_split_in_the_pipeline(backend: str) -> None:
    line = np.stack([np.arange(300) * 0.3 + 0.15, np.full(300, 0.15), np.ones(300)], 1)
    labels = _components(backend, line, max_voxels_per_cluster=100, min_points_per_cluster=1)
    assert np.bincount(labels).tolist() == [75, 75, 75, 75]


def _column(n_per_voxel: int, voxels: int) -> np.ndarray:
    xs = np.repeat(np.arange(voxels) * 0.3 + 0.15, n_per_voxel)
    jitter = np.tile(np.linspace(-0.1, 0.1, n_per_voxel), voxels)
    return np.stack([xs + jitter * 0.1, np.full(xs.shape, 0.15), np.ones(xs.shape)], 1)


def test_thinning_threshold_is_strict_and_caps(backend: str) -> None:
    # 65 voxels: not large (strict >); 66: large, each voxel keeps 10 of its 15.
    small = _components(backend, _column(15, 65), min_points_per_cluster=1)
    assert (small >= 0).sum() == 65 * 15
    large = _components(backend, _column(15, 66), min_points_per_cluster=1)
    assert (large >= 0).sum() == 66 * 10
    voxel = voxel_grid(_column(15, 66).astype(np.float32), 0.3, 1).voxel_of_points()
    assert np.bincount(voxel[large >= 0]).tolist() == [10] * 66


def test_thinning_keeps_smallest_hashes_not_scan_order(backend: str) -> None:
    points = _column(15, 66).astype(np.float32)
    labels = _components(backend, points, min_points_per_cluster=1)
    first_voxel = np.arange(15)
    kept = first_voxel[labels[:15] >= 0]
    expected = first_voxel[np.argsort(hash32(first_voxel), kind="stable")[:10]]
    assert sorted(kept.tolist()) == sorted(expected.tolist())
    assert kept.tolist() != list(range(10))


def test_min_size_counts_points_after_thinning(backend: str) -> None:
    # 66 voxels of 15 points: 990 before thinning, 660 after.
    points = _column(15, 66)
    assert (_components(backend, points, min_points_per_cluster=660) >= 0).sum() == 660
    assert (_components(backend, points, min_points_per_cluster=661) >= 0).sum() == 0


def test_overflow_guard_one_voxel_per_point(backend: str) -> None:
    # 20 km x 20 km at 0.3 m: over INT32_MAX cells; PCL returns the cloud unchanged.
    points = np.array([[0, 0, 1], [20000, 20000, 1], [0.1, 0, 1]], np.float32)
    assert linear_index(points, 0.3) is None
    assert voxel_grid(points, 0.3, 5).voxel_of_points().tolist() == [0, 1, 2]
    assert _components(backend, points, min_points_per_cluster=1).tolist() == [0, 1, 0]


def test_numbering_minus_one() -> None:
    labels, sizes, count = canonical_labels(np.array([4, -1, 4, 2, -1, 2, 2]), 1, 10)
    assert labels.tolist() == [1, -1, 1, 0, -1, 0, 0]
    assert sizes.tolist() == [3, 2] and count == 2
    labels, sizes, count = canonical_labels(np.array([-1, -1]), 1, 10)
    assert labels.tolist() == [-1, -1] and count == 0


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="voxel_leaf_size"):
        ClusterConfig(voxel_leaf_size=0)
    with pytest.raises(ConfigError, match="voxel_leaf_size"):
        ClusterConfig(voxel_leaf_size=float("nan"))
    for name in (
        "min_points_per_voxel",
        "max_voxels_per_cluster",
        "large_cluster_voxel_count_threshold",
        "large_cluster_max_points_per_voxel",
    ):
        with pytest.raises(ConfigError, match=name):
            ClusterConfig(**{name: 0})
    with pytest.raises(ConfigError, match="algorithm"):
        ClusterConfig(algorithm="voxel")  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["union_find", "edge", "vertex"])
def test_any_centroid_method_same_labels(backend: str, method: str) -> None:
    rng = np.random.default_rng(5)
    points = rng.uniform(-20, 20, (5000, 3)).astype(np.float32)
    base = _components(backend, points, min_points_per_cluster=1)
    config = config_of({**DEFAULTS, "min_points_per_cluster": 1}, method=method)
    result = EuclideanClusterer(config, backend).cluster(points)
    assert np.array_equal(result.labels, base) and result.method == method


# ---- CUDA only: the CUDA twin against the CPU twin, label for label -----------------------------

CUDA_FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")
PARAMS = {
    "defaults": {},
    "no_split": {"max_voxels_per_cluster": 2**31 - 1},
    "min_points_per_voxel_3": {"min_points_per_voxel": 3},
    "tight": {
        "max_voxels_per_cluster": 50,
        "large_cluster_voxel_count_threshold": 5,
        "large_cluster_max_points_per_voxel": 2,
        "min_cluster_size": 3,
    },
    "leaf_0.5_edge": {"voxel_leaf_size": 0.5, "method": "edge", "d_th": 1.0},
    "split_7": {"max_voxels_per_cluster": 7},
    "split_1": {"max_voxels_per_cluster": 1, "large_cluster_voxel_count_threshold": 1},
}


def _config(**changes: object) -> ClusterConfig:
    base = {"d_th": 0.7, "algorithm": "voxel_grid", "min_cluster_size": 10}
    return ClusterConfig(**{**base, **changes})


def _both(points: np.ndarray, config: ClusterConfig) -> tuple[np.ndarray, np.ndarray]:
    cpu = EuclideanClusterer(config, "cpu").cluster(points)
    gpu = EuclideanClusterer(config, "cuda").cluster(points)
    assert np.array_equal(cpu.cluster_sizes, gpu.cluster_sizes)
    return cpu.labels, gpu.labels


@cuda_only
@pytest.mark.parametrize("params", list(PARAMS))
@pytest.mark.parametrize("name", CUDA_FRAMES)
def test_frames_cuda_equals_cpu(load_frame, name: str, params: str) -> None:
    cpu, gpu = _both(load_frame(name), _config(**PARAMS[params]))
    assert np.array_equal(cpu, gpu)


def _clouds() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    blobs = (rng.uniform(-30, 30, (30, 1, 3)) + rng.normal(0, 1.0, (30, 500, 3))).reshape(-1, 3)
    grid = np.stack(np.meshgrid(*[np.arange(40) * 0.3] * 2, [0.0]), -1).reshape(-1, 3)
    boundaries = np.concatenate([grid, grid + np.float32(1e-7), grid - 1e-7, -grid])
    dense = rng.normal(0, 0.05, (20000, 3))  # few voxels with thousands of points
    line = np.stack([np.arange(20000) * 0.05, np.zeros(20000), rng.uniform(-1, 1, 20000)], 1)
    nan = rng.uniform(-10, 10, (3000, 3))
    nan[::7] = np.nan
    far = np.concatenate([rng.uniform(-5, 5, (1000, 3)), [[30000.0, 30000.0, 0.0]]])
    return {
        "blobs": blobs,
        "boundaries": boundaries,
        "dense": dense,
        "line": line,
        "nan": nan,
        "overflow_guard": far,
        "one_point": np.array([[1.0, 2.0, 3.0]]),
    }


@cuda_only
@pytest.mark.parametrize("params", list(PARAMS))
@pytest.mark.parametrize("cloud", list(_clouds()))
def test_clouds_cuda_equals_cpu(cloud: str, params: str) -> None:
    points = _clouds()[cloud].astype(np.float32)
    config = _config(**{**PARAMS[params], "min_cluster_size": 1})
    cpu, gpu = _both(points, config)
    assert np.array_equal(cpu, gpu)


def test_empty_and_all_dropped(backend: str) -> None:
    config = _config(min_points_per_voxel=5, min_cluster_size=1)
    for points in (np.empty((0, 3), np.float32), np.array([[0, 0, 0], [5, 5, 5]], np.float32)):
        result = EuclideanClusterer(config, backend).cluster(points)
        assert result.labels.shape == (len(points),) and (result.labels < 0).all()
        assert len(result.cluster_sizes) == 0


@cuda_only
@pytest.mark.parametrize("bound", [0, 1, 7, 100, 800])
@pytest.mark.parametrize("cloud", list(split_clouds()))
def test_split_cuda_equals_cpu(cloud: str, bound: int) -> None:
    """The split alone: every round of many oversized pieces at once, ties, twin centroids."""
    import cupy

    from gpu_euclidean_cluster.cuda.labelling.autoware_voxel import _pieces

    components, cx, cy = split_clouds()[cloud]
    flat = np.stack((cx, cy, np.zeros_like(cx)), axis=1).astype(np.float32)
    ids = np.unique(components, return_inverse=True)[1].reshape(-1).astype(np.int32)
    with cupy.cuda.Device(0):
        piece, piece_voxels = _pieces(0, cupy.asarray(flat), cupy.asarray(ids), bound)
        piece, piece_voxels = piece.get(), piece_voxels.get()
    want = split_oversized(components, cx, cy, bound)
    assert np.array_equal(canonical(piece), canonical(want))
    assert np.array_equal(piece_voxels[piece], np.bincount(piece)[piece])


if __name__ == "__main__":
    if sys.argv[1:2] != ["--regenerate"]:
        sys.exit("usage: test_autoware_voxel.py --regenerate [PEER_BINARY]")
    binary = sys.argv[2] if len(sys.argv) > 2 else find_peer()
    if binary is None:
        sys.exit("no peer binary: build ../shared/peers/autoware_ec or pass its path")
    data = Path(os.environ.get("LIDAR_DATA_DIR", REPO.parent / "shared" / "data"))
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps(regenerate(binary, data), indent=1) + "\n")
    print(f"wrote {REFERENCE}")
