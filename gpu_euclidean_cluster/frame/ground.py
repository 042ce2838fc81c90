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
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.frame import DecodedFrame
from ..core.ground import GroundFit, GroundSettings
from .twins import twin


class GroundRemoval:
    """A :class:`~.pipeline.FrameStage` that removes the ground plane before clustering.

    Attributes:
        name: ``"ground_removal"``.
        settings: the RANSAC settings.
        last_ground: the last frame's fit, its ``mask`` on the host (N,) (None before the first
            frame); the pipeline reads it after :meth:`apply`.
    """

    name = "ground_removal"

    def __init__(self, settings: GroundSettings | None = None) -> None:
        self.settings = settings if settings is not None else GroundSettings()
        self.last_ground: GroundFit | None = None

    def apply(self, frame: DecodedFrame) -> DecodedFrame:
        """The frame with its ground points cleared from the mask."""
        self.last_ground = None
        fit = twin(frame.points, "stages.ground", "fit_ground")(
            frame.points, frame.mask, self.settings
        )
        mask = ~fit.mask if frame.mask is None else frame.mask & ~fit.mask
        host = fit.mask if isinstance(fit.mask, np.ndarray) else fit.mask.get()
        self.last_ground = replace(fit, mask=host)
        return DecodedFrame(points=frame.points, mask=mask)
