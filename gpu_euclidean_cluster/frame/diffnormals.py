"""Difference-of-Normals filtering as a frame stage: flat surfaces cleared before clustering.

    >>> stage = DiffNormalsFilter(DiffNormalsSettings(small_radius=0.5, large_radius=2.0))
    >>> FramePipeline("auto", stages=[GroundRemoval(), stage]).process(cloud, config, window)

Autoware.ai's ``lidar_euclidean_cluster_detect`` with ``use_diffnormals: true``, after the ground
removal as there: each candidate's normal at two radii, and the points where they differ by more
than the threshold are kept (``core/diffnormals.py``'s rules; ``cpu/stages/diffnormals.py`` for
NumPy arrays, ``cuda/stages/diffnormals.py`` for CuPy ones: identical masks). The others are cleared
from the frame's mask: not clustered, label -1.
"""

from __future__ import annotations

from ..core.diffnormals import DiffNormalsSettings
from ..core.frame import DecodedFrame
from .twins import twin


class DiffNormalsFilter:
    """A :class:`~.pipeline.FrameStage` that keeps the points whose normals at two scales differ.

    Attributes:
        name: ``"diffnormals"``.
        settings: the radii and threshold.
    """

    name = "diffnormals"

    def __init__(self, settings: DiffNormalsSettings | None = None) -> None:
        self.settings = settings if settings is not None else DiffNormalsSettings()

    def apply(self, frame: DecodedFrame) -> DecodedFrame:
        """The frame with the points the filter does not keep cleared from the mask."""
        on_device = twin(frame.points, "stages.diffnormals", "difference_of_normals")
        kept = on_device(frame.points, frame.mask, self.settings)
        return DecodedFrame(points=frame.points, mask=kept)
