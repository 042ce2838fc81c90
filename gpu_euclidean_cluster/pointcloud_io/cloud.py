"""The in-memory point cloud that every reader returns and the PCD writer takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class PointCloudFileError(ValueError):
    """A point cloud file cannot be read or written; the message names the path and the reason."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


@dataclass(frozen=True)
class Cloud:
    """Points as read from a file.

    Attributes:
        xyz: (N, 3) float32 coordinates, C-contiguous. Rows with NaN or Inf are kept as they are
            (the clusterer labels them -1), so row ``i`` is always the file's point ``i``.
        fields: the file's other per-point fields by name (``intensity``, ``ring``, ...), each an
            (N,) array or (N, count) for multi-valued fields, in the file's own dtype.
        height: rows of an organised cloud (1 for an unorganised one); points are row-major.
        width: points per row; ``None`` on construction means N / height.
    """

    xyz: np.ndarray
    fields: dict[str, np.ndarray] = field(default_factory=dict)
    height: int = 1
    width: int | None = None

    def __post_init__(self) -> None:
        xyz = self.xyz
        if not isinstance(xyz, np.ndarray) or xyz.ndim != 2 or xyz.shape[1] != 3:
            raise ValueError(f"Cloud.xyz must be an (N, 3) array, got {_describe(xyz)}")
        if xyz.dtype != np.float32 or not xyz.flags.c_contiguous:
            raise ValueError("Cloud.xyz must be C-contiguous float32")
        n = xyz.shape[0]
        for name, values in self.fields.items():
            if not isinstance(values, np.ndarray) or values.ndim not in (1, 2):
                raise ValueError(f"Cloud field {name!r} must be an (N,) or (N, count) array")
            if values.shape[0] != n:
                raise ValueError(f"Cloud field {name!r} has {values.shape[0]} rows, xyz has {n}")
        if self.height < 1 or (n and n % self.height) or (not n and self.height != 1):
            raise ValueError(f"Cloud height {self.height} does not divide its {n} points")
        width = n // self.height
        if self.width is not None and self.width != width:
            raise ValueError(f"Cloud of {n} points and height {self.height} has width {width}")
        object.__setattr__(self, "width", width)

    def __len__(self) -> int:
        return self.xyz.shape[0]

    @property
    def num_points(self) -> int:
        """N, the number of points, finite or not."""
        return self.xyz.shape[0]

    @property
    def is_organized(self) -> bool:
        """True for an image-like cloud (height > 1)."""
        return self.height > 1

    def finite_mask(self) -> np.ndarray:
        """Boolean (N,) array: True where x, y and z are all finite."""
        return np.isfinite(self.xyz).all(axis=1)


def _describe(value: object) -> str:
    shape = getattr(value, "shape", None)
    return f"shape {shape}" if shape is not None else type(value).__name__
