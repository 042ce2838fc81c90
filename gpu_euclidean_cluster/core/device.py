"""What a backend says about its device: a description, and its memory high-water mark.

Every backend answers these through the ``Backend`` protocol of ``clusterer.py``
(``describe``, ``release_memory``, ``measure_peak_memory``), so that front ends and benchmarks
report devices without importing a backend module or branching on a backend's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceInfo:
    """The device a backend runs on.

    Attributes:
        name: the GPU's name, or ``cpu``.
        memory_bytes: the GPU's memory; None on the CPU.
        driver_version, runtime_version: the CUDA driver's and runtime's versions (``12.4``);
            None on the CPU.
        cupy_version: CuPy's version where it imports, else None.
    """

    name: str
    memory_bytes: int | None = None
    driver_version: str | None = None
    runtime_version: str | None = None
    cupy_version: str | None = None


@dataclass(frozen=True)
class MemoryPeak:
    """Device memory of one run, measured from an empty memory pool.

    Attributes:
        peak_bytes: the most bytes held from the pool at once during the run (input allocated
            before the run is not counted).
        free_drop_bytes: how far the driver's free memory fell over the run.
    """

    peak_bytes: int
    free_drop_bytes: int
