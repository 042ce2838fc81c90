"""RANSAC ground-plane fit on the GPU: the CUDA twin of ``cpu/stages/ground.py``, bit for bit.

    >>> fit = fit_ground(points, mask, GroundSettings())   # CuPy points and mask
    >>> fit.mask, fit.plane      # CuPy bool mask; (nx, ny, nz, d) as Python floats, or None

The rules are ``core/ground.py``'s; ``cuda/kernels/stages/ground.cu`` says how the kernels follow
them. Four launches (planes, scoring, best, mask) and two host synchronisations: the candidates'
number (``cupy.flatnonzero``) and the six values of the result (plane, hypothesis, inliers). The
work is known before it is spent (:func:`estimate_work`: hypotheses x the frame's points at
:data:`TESTS_PER_SECOND`; one more synchronisation, the mask's count), for the frame stage's bound
(``core/ground.py``, ``bounded_settings``).
"""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

from ...core.ground import (
    MIX_INCREMENT,
    MIX_MULTIPLIER_1,
    MIX_MULTIPLIER_2,
    GroundFit,
    GroundSettings,
    mix,
)
from ...core.work import GroundWorkEstimate, ground_work
from ..module import THREADS, KernelSource, blocks, get_kernel

#: Threads per block of ``ground_score``.
GROUND_THREADS = 256
#: Hypotheses per block of ``ground_score`` (their planes staged in shared memory).
GROUND_GROUP = 32
#: Points per thread of ``ground_score`` (held in registers while the group's planes are tested).
GROUND_POINTS_PER_THREAD = 4
#: Distance tests per second of this twin, below the slowest measured: on an H200
#: (2026-11-28, kitti_000001 and a flat floor of its size, every hypothesis scored) 1.3e11 at
#: 256 hypotheses (launches dominate) and 1.1e12 to 2.1e12 from 4 096 to 1 048 576; the
#: estimate errs long, so a bound is never overrun.
TESTS_PER_SECOND = 1e11

GROUND = KernelSource(
    "ground",
    ("stages/ground.cu",),
    {
        "GROUND_THREADS": GROUND_THREADS,
        "GROUND_GROUP": GROUND_GROUP,
        "GROUND_POINTS_PER_THREAD": GROUND_POINTS_PER_THREAD,
        "GROUND_MIX_INCREMENT": MIX_INCREMENT,
        "GROUND_MIX_MULTIPLIER_1": MIX_MULTIPLIER_1,
        "GROUND_MIX_MULTIPLIER_2": MIX_MULTIPLIER_2,
    },
)


def estimate_work(points: Any, mask: Any, hypotheses: int) -> GroundWorkEstimate:
    """The work of :func:`fit_ground` with ``hypotheses`` on CuPy ``points`` (N, 3) and ``mask``,
    before any of it: ``ground_score`` tests every hypothesis against every point of the frame
    (the mask's points counted, the others skipped in the same grid). One synchronisation where
    there is a mask: its points' number, which says whether any hypothesis is drawn."""
    n = int(points.size // 3)
    candidates = n if mask is None else int(cupy.count_nonzero(mask))
    return ground_work(hypotheses, n, candidates, "cuda", TESTS_PER_SECOND)


def fit_ground(points: Any, mask: Any, settings: GroundSettings) -> GroundFit:
    """The ground plane and ground points of CuPy ``points`` (N, 3, any real dtype) among the
    candidates ``mask`` ((N,) bool; None: every point), on the points' device."""
    device_id = points.device.id
    with cupy.cuda.Device(device_id):
        xyz = cupy.ascontiguousarray(points.reshape(-1, 3), dtype=cupy.float64)
        n = xyz.shape[0]
        if mask is None:
            mask = cupy.ones(n, dtype=cupy.bool_)
        mask = cupy.ascontiguousarray(mask.reshape(-1), dtype=cupy.bool_)
        candidates = cupy.flatnonzero(mask)  # synchronises: the candidates' number
        m = int(candidates.shape[0])
        if m < 3:
            return GroundFit(cupy.zeros(n, dtype=cupy.bool_), None, 0, -1)
        hypotheses = settings.iterations
        key = int(mix(np.array([settings.seed], dtype=np.uint64))[0])
        threshold = np.float64(settings.distance_threshold)
        planes = cupy.empty((hypotheses, 4), dtype=cupy.float64)
        accepted = cupy.empty(hypotheses, dtype=cupy.int32)
        counts = cupy.empty(hypotheses, dtype=cupy.uint32)
        best = cupy.zeros(1, dtype=cupy.uint64)
        ground = cupy.empty(n, dtype=cupy.bool_)
        result = cupy.empty(6, dtype=cupy.float64)
        kernel = get_kernel(GROUND, "ground_planes", device_id)
        kernel(
            blocks(hypotheses),
            (THREADS,),
            (
                xyz,
                candidates.astype(cupy.int64, copy=False),
                np.int64(m),
                np.uint64(key),
                np.int32(hypotheses),
                np.float64(settings.min_normal_z),
                planes,
                accepted,
                counts,
            ),
        )
        per_block = GROUND_THREADS * GROUND_POINTS_PER_THREAD
        grid = ((n + per_block - 1) // per_block, (hypotheses + GROUND_GROUP - 1) // GROUND_GROUP)
        get_kernel(GROUND, "ground_score", device_id)(
            grid,
            (GROUND_THREADS,),
            (xyz, mask, np.int64(n), planes, accepted, np.int32(hypotheses), threshold, counts),
        )
        get_kernel(GROUND, "ground_best", device_id)(
            blocks(hypotheses), (THREADS,), (counts, accepted, np.int32(hypotheses), best)
        )
        get_kernel(GROUND, "ground_mask", device_id)(
            blocks(n),
            (THREADS,),
            (xyz, mask, np.int64(n), planes, best, threshold, ground, result),
        )
        values = result.get()  # synchronises
    hypothesis = int(values[4])
    if hypothesis < 0:
        return GroundFit(ground, None, 0, -1)
    plane = tuple(float(v) for v in values[:4])
    return GroundFit(ground, plane, int(values[5]), hypothesis)  # type: ignore[arg-type]
