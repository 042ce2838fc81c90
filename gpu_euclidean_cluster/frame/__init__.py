"""The frame layer, ROS-free: one PointCloud2 frame through decode, stages, clustering, encode.

Between the library's front door and the front ends (the node, the CLI). The backends' twin
codecs (``cpu/codecs/frame.py``, ``cuda/codecs/frame.py``) do the device work;
:class:`FramePipeline` runs them in order, with the fallbacks.
"""

from ..core.frame import DecodedFrame, EncodedFrame, FrameWindow
from .diffnormals import DiffNormalsFilter
from .ground import GroundRemoval
from .pipeline import FrameOutput, FramePipeline, FrameStage

__all__ = [
    "DecodedFrame",
    "DiffNormalsFilter",
    "EncodedFrame",
    "FrameOutput",
    "FramePipeline",
    "FrameStage",
    "FrameWindow",
    "GroundRemoval",
]
