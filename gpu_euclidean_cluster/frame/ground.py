"""Ground removal as a frame stage: RANSAC plane fit on the frame's device, ground cleared.

    >>> stage = GroundRemoval(GroundSettings(distance_threshold=0.2))
    >>> output = FramePipeline("auto", stages=[stage]).process(cloud, config, window)
    >>> output.ground, output.ground_plane   # host bool mask of the ground points, (nx, ny, nz, d)

Autoware.ai's ``lidar_euclidean_cluster_detect`` with ``remove_ground: true``: the plane is fitted
on the points the frame would cluster (its mask), by ``core/ground.py``'s rules, on the device the
frame is on (``cpu/stages/ground.py`` for NumPy arrays, ``cuda/stages/ground.py`` for CuPy ones:
identical results). The ground points are cleared from the mask, so they are not clustered and get
label -1 in the labelled cloud like every other unclustered point; :class:`~.pipeline.FramePipeline`
collects :attr:`GroundRemoval.last_ground` into :attr:`~.pipeline.FrameOutput.ground` (what a
front end publishes as the ground points) and ``ground_plane``, which tell them apart.

The fit's work is bounded before it is spent: the twin estimates it (``estimate_work``:
hypotheses x points at its declared rate) and, where that is over the settings' ``max_work_s``,
the frame is fitted with the first hypotheses that fit in it (``core/ground.py``,
``bounded_settings``); the fit's ``fallback_reason`` says so in one line, which the pipeline
reports as the frame's fallback (the node warns, throttled, and counts it in ``/diagnostics``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.frame import DecodedFrame
from ..core.ground import GroundFit, GroundSettings, bounded_settings
from .twins import twin


class GroundRemoval:
    """A :class:`~.pipeline.FrameStage` that removes the ground plane before clustering.

    Attributes:
        name: ``"ground_removal"``.
        settings: the RANSAC settings.
        last_ground: the last frame's fit, its ``mask`` on the host (N,) (None before the first
            frame), its ``fallback_reason`` set where the work bound capped its hypotheses; the
            pipeline reads it after :meth:`apply`.
    """

    name = "ground_removal"

    def __init__(self, settings: GroundSettings | None = None) -> None:
        self.settings = settings if settings is not None else GroundSettings()
        self.last_ground: GroundFit | None = None

    def apply(self, frame: DecodedFrame) -> DecodedFrame:
        """The frame with its ground points cleared from the mask."""
        self.last_ground = None
        settings, reason = self.settings, None
        if settings.max_work_s is not None:
            estimate = twin(frame.points, "stages.ground", "estimate_work")(
                frame.points, frame.mask, settings.iterations
            )
            settings, reason = bounded_settings(settings, estimate)
        fit = twin(frame.points, "stages.ground", "fit_ground")(frame.points, frame.mask, settings)
        mask = ~fit.mask if frame.mask is None else frame.mask & ~fit.mask
        host = fit.mask if isinstance(fit.mask, np.ndarray) else fit.mask.get()
        self.last_ground = replace(fit, mask=host, fallback_reason=reason)
        return DecodedFrame(points=frame.points, mask=mask)
