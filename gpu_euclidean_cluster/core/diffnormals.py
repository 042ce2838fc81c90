"""Difference-of-Normals filtering: the settings, the rules both twins follow, the result.

Autoware.ai's ``lidar_euclidean_cluster_detect`` (``use_diffnormals: true``) estimated every
point's normal at two scales (PCL ``NormalEstimation``, radii 0.5 and 2.0 m, viewpoint at +inf
on every axis), took half their difference (PCL ``DifferenceOfNormalsEstimation``, Ioannou et
al., 3DIMPVT 2012) and kept the points where its length exceeds 0.5: where the surface bends
within two metres (poles, vehicles, people), not where it is flat at both scales (road, walls).
Its code built that filtered cloud and then passed the unfiltered one on, so there the option
changed nothing; here the filter applies. The normals follow Section 5.1 of the companion paper
(``../shared/paper/gpgpu_robotic_applications.md``: regular-grid neighbour search, a covariance
matrix per query point, its smallest principal axis, oriented towards the viewpoint), one thread
per point on the GPU (``cuda/stages/diffnormals.py``), vectorised in NumPy
(``cpu/stages/diffnormals.py``). Both follow these rules and return the same mask, bit for bit:

1. **Candidates**: the points where the frame's mask is True (after the windows and the ground
   stage), with their float32 coordinates as decoded (true heights).
2. **Neighbours at radius r** of candidate ``i``: the candidates ``j`` (``i`` itself included)
   whose float32 squared distance is below ``float32(r**2)`` (``core/neighbour_rule.py``, the
   clustering's own rule). With fewer than 3 the point has no normal at that scale.
3. **Sums, exact**: each offset ``p_j - p_i`` (float64, one rounding) is scaled by ``2**k`` with
   ``k = FIXED_POINT_BITS - ceil(log2(r))`` and rounded to the nearest int64 (ties to even); the
   count, the three sums and six sums of products are int64, so their value does not depend on
   the order the neighbours are visited in.
4. **Covariance** (float64, each operation rounded once, never fused; ``K`` the count, ``S`` the
   sums): ``m_a = S_a / K``, ``C_ab = S_ab / K - m_a * m_b``.
5. **Normal**: the eigenvector of the smallest eigenvalue of ``C``, by :data:`JACOBI_SWEEPS`
   cyclic Jacobi sweeps over the pairs (0, 1), (0, 2), (1, 2) (a rotation is skipped where
   ``C_pq == 0``): ``theta = (C_qq - C_pp) / (C_pq + C_pq)``,
   ``t = sign(theta) / (|theta| + sqrt(theta * theta + 1))`` (sign(0) = +1; an overflowing
   ``theta * theta`` gives ``t = 0``), ``c = 1 / sqrt(t * t + 1)``, ``s = t * c`` (Golub & Van
   Loan, Algorithm 8.5.2), then ``C = J^T C J`` and ``V = V J`` as written out in both twins —
   only ``+ - * / sqrt``, which IEEE rounds identically on both devices; the smallest diagonal
   entry picks the column (ties: the lower index); it is divided by its length, and negated
   when ``(nx + ny) + nz < 0`` (PCL's ``flipNormalTowardsViewpoint`` with Autoware.ai's
   viewpoint at +inf on every axis).
6. **Difference of normals**: ``D = (n_small - n_large) / 2``; the point is kept when both
   normals exist and ``sqrt((Dx*Dx + Dy*Dy) + Dz*Dz) > threshold``; the others are cleared from
   the frame's mask (not clustered, label -1).

PCL differs in float rounding only (float32 covariance sums, its own 3x3 eigen solver): points
whose difference is within rounding of the threshold may go the other way there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import ConfigError

#: Offsets are fixed-point numbers of ``FIXED_POINT_BITS`` bits below the radius' power of two:
#: a product is at most 2**40 and an int64 sum holds :data:`MAX_CANDIDATES` of them (rule 3).
FIXED_POINT_BITS = 20
#: Most candidates a frame may have: every sum of rule 3 stays below 2**62 even when every
#: candidate is every other's neighbour.
MAX_CANDIDATES = 1 << 21
#: Cyclic Jacobi sweeps (rule 5): a 3x3 symmetric matrix converges in 4-6; 8 is to spare.
JACOBI_SWEEPS = 8
#: The pairs a sweep rotates, in order (rule 5).
JACOBI_PAIRS = ((0, 1), (0, 2), (1, 2))
#: Largest radius (m): beyond it a neighbourhood is no longer a surface patch of a sweep, and the
#: neighbour search grows with the radius cubed.
MAX_RADIUS = 10.0


@dataclass(frozen=True)
class DiffNormalsSettings:
    """Difference-of-Normals settings (validated on creation: :class:`ConfigError`).

    Attributes:
        small_radius: neighbourhood radius (m) of the small-scale normal.
        large_radius: neighbourhood radius (m) of the large-scale normal; above ``small_radius``.
        threshold: a point is kept when half the difference of its normals is longer than this
            (in (0, 1): 0 keeps every point with both normals, 1 none).
    """

    small_radius: float = 0.5
    large_radius: float = 2.0
    threshold: float = 0.5

    def __post_init__(self) -> None:
        for problem in diffnormals_problems(self):
            raise ConfigError(problem)


def diffnormals_problems(settings: DiffNormalsSettings) -> list[str]:
    """Why ``settings`` cannot be used (empty when they can)."""
    problems = []
    for name in ("small_radius", "large_radius"):
        radius = getattr(settings, name)
        if not (isinstance(radius, (int, float)) and 1e-3 <= radius <= MAX_RADIUS):
            problems.append(f"{name} must be in [0.001, {MAX_RADIUS:g}] m, got {radius!r}")
    if not problems and settings.large_radius <= settings.small_radius:
        problems.append(
            f"large_radius ({settings.large_radius}) must be larger than small_radius "
            f"({settings.small_radius})"
        )
    threshold = settings.threshold
    if not (isinstance(threshold, (int, float)) and 0 <= threshold < 1):
        problems.append(f"threshold must be in [0, 1), got {threshold!r}")
    return problems


def fixed_point_scale(radius: float) -> float:
    """``2**k`` of rule 3 for neighbourhoods of ``radius``: offsets below the radius become
    integers below ``2**FIXED_POINT_BITS``."""
    return math.ldexp(1.0, FIXED_POINT_BITS - math.ceil(math.log2(radius)))
