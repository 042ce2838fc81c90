"""Compiles the package's CUDA C sources (``kernels/*.cu``) into one CuPy RawModule per device.

All ``.cu`` files share ``common.cuh`` (the float32 neighbour rule and the ES/RS searches) and are
compiled together with NVRTC; CuPy caches the binary on disk, so later processes skip the compile.
``--fmad=false`` keeps products and sums separately rounded, as the neighbour rule requires.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import cupy

KERNEL_DIR = Path(__file__).with_name("kernels")
SOURCES = ("voxel_grid.cu", "graph.cu", "ccl.cu", "matrix.cu", "numbering.cu", "union_find.cu")

#: Threads per block of the element-wise and search kernels (ES needs exactly its tile size, 256).
THREADS = 256


def _source() -> str:
    parts = [(KERNEL_DIR / "common.cuh").read_text()]
    parts += [(KERNEL_DIR / name).read_text() for name in SOURCES]
    return "\n".join(parts)


@cache
def kernel_module(device_id: int, matrix_block: int) -> cupy.RawModule:
    """The compiled module for ``device_id``, matrix kernels specialised for ``matrix_block``."""
    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(
            code=_source(),
            options=("--std=c++17", "--fmad=false", f"-DMATRIX_B={matrix_block}"),
        )
        module.compile()
        return module


def blocks(count: int, threads: int = THREADS) -> tuple[int]:
    """Grid size covering ``count`` threads."""
    return (max(1, (count + threads - 1) // threads),)
