"""RANSAC ground-plane removal: the settings, the rules both twins follow, the result.

Autoware.ai's ``lidar_euclidean_cluster_detect`` (``remove_ground: true``) removed the ground
plane with PCL's RANSAC plane segmentation before clustering. This is that step, made exactly
reproducible: ``cpu/stages/ground.py`` (NumPy) and ``cuda/stages/ground.py``
(``cuda/kernels/stages/ground.cu``) follow the rules below and return the same mask and the same
plane, bit for bit.

Rules:

1. **Candidates**: the points where the frame's mask is True (finite, plausible, inside the
   window, not cleared by an earlier stage), numbered ``0..M-1`` in input order. Coordinates are
   taken as float64 (the exact values of float32 input).
2. **Hypotheses**: ``h = 0..iterations-1``; hypothesis ``h`` takes the candidates
   ``draw(seed, h, k) % M`` for ``k = 0, 1, 2``, where :func:`draw` is a counter-based integer
   hash (SplitMix64's finaliser, uint64 arithmetic wrapping) of ``(seed, 3 * h + k)``: no RNG
   state, so any hypothesis can be drawn alone, on the CPU or by its own GPU thread.
3. **Plane of three points** ``p0, p1, p2`` (float64, each operation rounded once, never fused):
   ``e1 = p1 - p0``, ``e2 = p2 - p0``, ``n = e1 x e2`` (``nx = e1y*e2z - e1z*e2y``, ...),
   ``length = sqrt((nx*nx + ny*ny) + nz*nz)``; degenerate (rejected) unless ``length`` is finite
   and > 0 (repeated or collinear points). ``n /= length``; when ``nz < 0``, ``n = -n``;
   ``d = -((nx*p0x + ny*p0y) + nz*p0z)``. The plane is ``n . p + d = 0`` with ``n`` pointing up,
   so ``d`` is the sensor's height above the plane.
4. **Slope**: a plane with ``nz < cos(max_slope_deg)`` (the float64 value of Python's
   ``math.cos(math.radians(max_slope_deg))``) is rejected: its normal is too far from +z.
5. **Score**: the number of candidates with ``|(nx*x + ny*y) + nz*z + d| <= distance_threshold``
   (float64, left to right, each operation rounded once). Rejected hypotheses score -1.
6. **Best**: the most inliers; ties go to the lowest hypothesis index. When every hypothesis is
   rejected (or there are fewer than 3 candidates) there is no ground: the mask is all False
   and the plane is None.
7. **No refit**: the plane is the best hypothesis's own (PCL's ``optimize_coefficients`` least
   squares refit is not done); the ground is the candidates within the threshold of it, i.e.
   exactly the best hypothesis's inliers (so ``inliers`` equals its score).

Ground points are not clustered: a stage clears them from the frame's mask, so they get label -1
like every other unclustered point, and the ground output tells them apart.

Work bound: the fit tests up to ``iterations x points`` distances (``core/work.py``'s
:class:`~.work.GroundWorkEstimate`, at the rate its twin declares). Where that is estimated over
``max_work_s``, :func:`bounded_settings` keeps the first hypotheses that fit in it (rule 2 draws
hypothesis ``h`` alone, so the fit of the first ``K`` is exactly the fit with ``iterations = K``,
on either twin) and says so in one line: the frame is still fitted and published, its plane the
best of fewer hypotheses. The cap follows the backend's rate, so a GPU keeps more hypotheses than
the CPU under the same bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .config import DEFAULT_MAX_WORK_S, ConfigError
from .work import GroundWorkEstimate, affordable_hypotheses

#: SplitMix64's constants (Steele, Lea & Flood, OOPSLA'14): the golden-ratio increment and the
#: two multipliers of its finaliser. Passed to ``cuda/kernels/stages/ground.cu`` with ``-D``.
MIX_INCREMENT = 0x9E3779B97F4A7C15
MIX_MULTIPLIER_1 = 0xBF58476D1CE4E5B9
MIX_MULTIPLIER_2 = 0x94D049BB133111EB

#: Largest ``iterations``: hypothesis counters ``3 * h + k`` stay far inside uint32.
MAX_ITERATIONS = 1 << 20


@dataclass(frozen=True)
class GroundSettings:
    """RANSAC ground removal settings (validated on creation: :class:`ConfigError`).

    Attributes:
        distance_threshold: a point within this distance of the plane (m, inclusive) is ground.
        max_slope_deg: planes whose normal is more than this from +z (degrees, in [0, 90)) are
            not ground.
        iterations: plane hypotheses drawn.
        seed: the hash's seed (an integer in [0, 2**64)); another seed draws other hypotheses.
        max_work_s: seconds the fit may be estimated to take (``core/work.py``: hypotheses x
            points at the twin's declared rate, known before any hypothesis is drawn); over it
            only the first hypotheses that fit are drawn, with a reason
            (:func:`bounded_settings`). None: no bound. The node's ``ground_max_work_s``.
    """

    distance_threshold: float = 0.2
    max_slope_deg: float = 10.0
    iterations: int = 256
    seed: int = 0
    max_work_s: float | None = DEFAULT_MAX_WORK_S

    def __post_init__(self) -> None:
        for problem in ground_problems(self):
            raise ConfigError(problem)

    @property
    def min_normal_z(self) -> float:
        """The smallest ``nz`` of a ground plane's unit normal (rule 4)."""
        return math.cos(math.radians(self.max_slope_deg))


def ground_problems(settings: GroundSettings) -> list[str]:
    """Every reason ``settings`` is invalid, as human-readable sentences (empty when valid)."""
    problems = []
    threshold = settings.distance_threshold
    if not _is_real(threshold) or not math.isfinite(threshold):
        problems.append(f"distance_threshold must be a finite number of metres, got {threshold!r}")
    elif threshold <= 0:
        problems.append(f"distance_threshold must be > 0 m, got {threshold}")
    slope = settings.max_slope_deg
    if not _is_real(slope) or not math.isfinite(slope) or not 0 <= slope < 90:
        problems.append(f"max_slope_deg must be a number of degrees in [0, 90), got {slope!r}")
    iterations = settings.iterations
    if not _is_int(iterations) or not 1 <= iterations <= MAX_ITERATIONS:
        problems.append(
            f"iterations must be an integer in [1, {MAX_ITERATIONS}], got {iterations!r}"
        )
    seed = settings.seed
    if not _is_int(seed) or not 0 <= seed < 1 << 64:
        problems.append(f"seed must be an integer in [0, 2**64), got {seed!r}")
    work = settings.max_work_s
    if work is not None and (not _is_real(work) or not math.isfinite(work) or work <= 0):
        problems.append(f"max_work_s must be a finite number of seconds > 0 or None, got {work!r}")
    return problems


def bounded_settings(
    settings: GroundSettings, estimate: GroundWorkEstimate
) -> tuple[GroundSettings, str | None]:
    """``settings`` as the fit runs them under their own ``max_work_s``, given the twin's
    ``estimate`` of all their hypotheses: unchanged (reason None) within the bound, else with
    ``iterations`` capped to the hypotheses that fit in it, and the reason in one line."""
    limit = settings.max_work_s
    if limit is None or estimate.seconds <= limit:
        return settings, None
    capped = affordable_hypotheses(estimate, limit)
    reason = (
        f"ground removal: {estimate.describe()}, over ground_max_work_s {limit:g} s; plane "
        f"fitted with the first {capped} hypotheses only (as ground_iterations {capped} gives)"
    )
    return replace(settings, iterations=capped), reason


@dataclass(frozen=True)
class GroundFit:
    """One frame's ground plane and ground points.

    Attributes:
        mask: (N,) bool, True for ground points (a subset of the candidates); NumPy or CuPy, on
            the device the frame ran on.
        plane: ``(nx, ny, nz, d)`` as Python floats (unit normal with ``nz > 0``, the plane is
            ``n . p + d = 0``), or None when no hypothesis was accepted.
        inliers: ground points (the best hypothesis's score), 0 without a plane.
        hypothesis: index of the best hypothesis, -1 without a plane.
        fallback_reason: why the fit drew fewer hypotheses than its settings ask for (its work
            bound, :func:`bounded_settings`), or None.
    """

    mask: Any
    plane: tuple[float, float, float, float] | None
    inliers: int
    hypothesis: int
    fallback_reason: str | None = None


def mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's step on uint64 values (wrapping): add the increment, then the finaliser."""
    z = np.asarray(values, dtype=np.uint64) + np.uint64(MIX_INCREMENT)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX_MULTIPLIER_1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX_MULTIPLIER_2)
    return z ^ (z >> np.uint64(31))


def draw(seed: int, counters: np.ndarray) -> np.ndarray:
    """The hash of rule 2: ``mix(mix(seed) ^ counter)`` per uint64 counter ``3 * h + k``."""
    key = mix(np.array([seed], dtype=np.uint64))
    return mix(key ^ np.asarray(counters, dtype=np.uint64))


def sample_indices(seed: int, first: int, count: int, candidates: int) -> np.ndarray:
    """(count, 3) int64 candidate numbers of hypotheses ``first..first+count-1`` (rule 2)."""
    counters = np.arange(3 * first, 3 * (first + count), dtype=np.uint64)
    return (draw(seed, counters) % np.uint64(candidates)).astype(np.int64).reshape(count, 3)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
