"""The twin of a stage's function for the device a frame is on.

A stage's work lives twice, in ``cpu/stages/<name>.py`` (NumPy) and ``cuda/stages/<name>.py``
(CuPy), with identical results; a stage takes whichever matches its frame's arrays. The CUDA module
is imported on first use only, so a CPU-only install never imports CuPy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.numbering import array_module


def twin(points: Any, module: str, function: str) -> Callable[..., Any]:
    """``function`` of the module ``cpu.<module>`` for NumPy ``points``, of ``cuda.<module>``
    for CuPy ones (``module`` is dotted from the backend's folder, e.g. ``stages.ground``)."""
    backend = "cpu" if array_module(points) is np else "cuda"
    return getattr(importlib.import_module(f"..{backend}.{module}", __package__), function)
