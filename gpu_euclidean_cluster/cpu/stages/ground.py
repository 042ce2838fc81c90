"""RANSAC ground-plane fit in NumPy: the CPU twin of ``cuda/stages/ground.py``.

    >>> fit = fit_ground(points, mask, GroundSettings())
    >>> fit.mask, fit.plane      # ground points (a subset of mask); (nx, ny, nz, d) or None

The rules (sampling, plane construction, scoring, tie-breaking) are ``core/ground.py``'s. Every
hypothesis's plane is built at once (vectorised over hypotheses); the hypotheses are scored in
batches of about :data:`BATCH_ELEMENTS` distance tests, each a (batch, M) float64 array. The work
is known before it is spent (:func:`estimate_work`: hypotheses x candidates at
:data:`TESTS_PER_SECOND`), for the frame stage's bound (``core/ground.py``, ``bounded_settings``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.ground import GroundFit, GroundSettings, sample_indices
from ...core.work import GroundWorkEstimate, ground_work

#: Distance tests per scoring batch (hypotheses x candidates): about 32 MB of float64 temporaries.
BATCH_ELEMENTS = 1 << 22
#: Distance tests this twin runs per second, hypothesis overhead included (``core/work.py``):
#: 6.1e7-3e8 measured on kitti_000001 (256-4096 hypotheses) and on flat floors of 10 to 120 268
#: points (every hypothesis accepted and scored, 256-750 000 hypotheses), one NumPy thread on a
#: busy 2-core host; below the slowest, so that the estimate errs long.
TESTS_PER_SECOND = 5e7


def estimate_work(points: Any, mask: Any, hypotheses: int) -> GroundWorkEstimate:
    """The work of :func:`fit_ground` with ``hypotheses`` on ``points`` (N, 3) and ``mask``, before
    any of it: every hypothesis scored against every candidate (the mask's points)."""
    n = int(np.asarray(points).size // 3)
    candidates = n if mask is None else int(np.count_nonzero(mask))
    return ground_work(hypotheses, candidates, candidates, "cpu", TESTS_PER_SECOND)


def plane_hypotheses(
    p0: np.ndarray, p1: np.ndarray, p2: np.ndarray, min_normal_z: float
) -> tuple[np.ndarray, np.ndarray]:
    """Planes through the rows of three (H, 3) float64 arrays (rules 3 and 4 of
    ``core/ground.py``): (H, 4) ``(nx, ny, nz, d)`` and (H,) bool accepted."""
    e1 = p1 - p0
    e2 = p2 - p0
    nx = e1[:, 1] * e2[:, 2] - e1[:, 2] * e2[:, 1]
    ny = e1[:, 2] * e2[:, 0] - e1[:, 0] * e2[:, 2]
    nz = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        length = np.sqrt(nx * nx + ny * ny + nz * nz)
        accepted = np.isfinite(length) & (length > 0)
        safe = np.where(accepted, length, 1.0)
        nx, ny, nz = nx / safe, ny / safe, nz / safe
    down = nz < 0
    nx, ny, nz = np.where(down, -nx, nx), np.where(down, -ny, ny), np.where(down, -nz, nz)
    d = -(nx * p0[:, 0] + ny * p0[:, 1] + nz * p0[:, 2])
    accepted &= nz >= min_normal_z
    return np.stack([nx, ny, nz, d], axis=1), accepted


def plane_distances(planes: np.ndarray, xyz: tuple[np.ndarray, ...]) -> np.ndarray:
    """(H, M) signed distances ``(nx*x + ny*y) + nz*z + d`` of float64 columns ``xyz``."""
    x, y, z = xyz
    nx, ny, nz, d = (planes[:, i : i + 1] for i in range(4))
    with np.errstate(over="ignore", invalid="ignore"):
        return nx * x + ny * y + nz * z + d


def fit_ground(points: Any, mask: Any, settings: GroundSettings) -> GroundFit:
    """The ground plane and ground points of ``points`` (N, 3, any real dtype) among the
    candidates ``mask`` ((N,) bool; None: every point), by ``core/ground.py``'s rules."""
    points = np.asarray(points).reshape(-1, 3)
    n = len(points)
    candidates = np.arange(n) if mask is None else np.flatnonzero(np.asarray(mask))
    ground = np.zeros(n, dtype=bool)
    m = len(candidates)
    if m < 3:
        return GroundFit(ground, None, 0, -1)
    cand = points[candidates].astype(np.float64)
    xyz = tuple(np.ascontiguousarray(cand[:, i]) for i in range(3))
    hypotheses = settings.iterations
    picks = sample_indices(settings.seed, 0, hypotheses, m)
    planes, accepted = plane_hypotheses(
        cand[picks[:, 0]], cand[picks[:, 1]], cand[picks[:, 2]], settings.min_normal_z
    )
    threshold = np.float64(settings.distance_threshold)
    scores = np.full(hypotheses, -1, dtype=np.int64)
    kept = np.flatnonzero(accepted)
    step = max(1, BATCH_ELEMENTS // m)
    for start in range(0, len(kept), step):
        rows = kept[start : start + step]
        inside = np.abs(plane_distances(planes[rows], xyz)) <= threshold
        scores[rows] = np.count_nonzero(inside, axis=1)
    best = int(np.argmax(scores))  # the first maximum: ties go to the lowest index
    if scores[best] < 0:
        return GroundFit(ground, None, 0, -1)
    inside = np.abs(plane_distances(planes[best : best + 1], xyz)[0]) <= threshold
    ground[candidates[inside]] = True
    plane = tuple(float(v) for v in planes[best])
    return GroundFit(ground, plane, int(scores[best]), best)  # type: ignore[arg-type]
