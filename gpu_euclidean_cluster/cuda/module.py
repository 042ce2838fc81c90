"""Builds the package's CUDA kernels: named compile units, compiled once per device, one accessor.

A :class:`KernelSource` names the files of one compile unit (CUDA C under ``kernels/``, beside
this module, concatenated in order, ``common.cuh`` first where it is used) and the constants it is
built with. :func:`get_kernel` is the one way to a kernel handle: the first call for a source and
device compiles the unit with NVRTC (:data:`NVRTC_OPTIONS` plus one ``-DNAME=value`` per
constant, the only place compiler options are set) and memoises the module per (source, device)
and each handle per (source, function, device); :func:`compile_source` compiles ahead of use.
CuPy also caches the binary on disk, so later processes skip NVRTC. ``--fmad=false`` keeps
products and sums separately rounded, as the neighbour rule requires.

Constants are Python's: each is defined once, in the Python module that owns it, and reaches the
kernels only as a ``-D`` option. The ``.cu``/``.cuh`` files never ``#define`` them; they stop the
compile with ``#error`` when one is missing. ``common.cuh``'s own constant (:data:`ES_TILE`) is
defined here and passed to every source that includes ``common.cuh`` (:data:`COMMON_CONSTANTS`).
``test/backends/test_kernel_constants.py`` checks these rules without a GPU.

The package's compile units (few, as each costs an NVRTC run the first time a machine uses it):

* :data:`CLUSTERING` (here): the voxel grid, graph building and label propagation of the paper's
  vertex- and edge-based methods, and the canonical numbering (filter stage) of every method.
* ``union_find.UNION_FIND``: the fused ``union_find`` method, built with that module's
  ``UF_LINK_BLOCKS_PER_SM``.
* ``matrix.matrix_source(b)``: the matrix-based method, specialised per block size ``b``
  (``MATRIX_B``); only the method's own kernels are recompiled for another ``b``.
* ``kdtree.STRUCTURES``: the kd-tree and scan-bin searches with the graph and ``union_find``
  kernels they feed (``UNION_FIND``'s constants).

Other modules may define their own :class:`KernelSource` (e.g. the PointCloud2 kernels). CuPy is
imported on the first compile only, so this module loads without it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import cupy

KERNEL_DIR = Path(__file__).with_name("kernels")

#: Compiler options of every compile unit (the ``-D`` constants are added per source).
NVRTC_OPTIONS = ("--std=c++17", "--fmad=false")

#: Threads per block of the element-wise and range-search kernels.
THREADS = 256

#: Exhaustive-search tile of ``common.cuh``: the points staged in shared memory per step, and so
#: the threads per block every ``exhaustive_search`` caller must be launched with.
ES_TILE = 256

#: The constants of ``common.cuh``, passed to every source that includes it.
COMMON_CONSTANTS = {"ES_TILE": ES_TILE}

#: The file every compile unit that uses the shared device code starts with.
COMMON_HEADER = "common.cuh"

#: A ``-D`` constant's value.
Constant = int | float


@dataclass(frozen=True)
class KernelSource:
    """One compile unit: ``files`` of ``kernels/``, concatenated in order, built with ``constants``.

    Attributes:
        name: the unit's name (for messages), e.g. ``"clustering"`` or ``"matrix_b256"``.
        files: paths under ``kernels/`` (a wing's folder and a file name, or a shared header);
        ``common.cuh`` first where it is used. constants: ``NAME -> int or float``, each passed to
        NVRTC as ``-DNAME=value``. Given as a
            mapping (or pairs); stored as pairs sorted by name, so sources are hashable and equal
            when they build the same thing. ``common.cuh``'s constants (:data:`COMMON_CONSTANTS`)
            are added by :meth:`defines` and must not be given here.
    """

    name: str
    files: tuple[str, ...]
    constants: Mapping[str, Constant] | tuple[tuple[str, Constant], ...] = ()

    def __post_init__(self) -> None:
        files = tuple(self.files)
        if not files:
            raise ValueError(f"kernel source {self.name!r} lists no files")
        for file in files:
            if (
                not isinstance(file, str)
                or Path(file).is_absolute()
                or ".." in Path(file).parts
                or not file.endswith((".cu", ".cuh"))
            ):
                raise ValueError(
                    f"kernel source {self.name!r}: {file!r} is not a .cu/.cuh path under kernels/"
                )
        if len(set(files)) != len(files):
            raise ValueError(f"kernel source {self.name!r} lists a file twice: {files}")
        if COMMON_HEADER in files and files[0] != COMMON_HEADER:
            raise ValueError(f"kernel source {self.name!r}: {COMMON_HEADER} must come first")
        checked: list[tuple[str, Constant]] = []
        for name, value in sorted(dict(self.constants).items()):
            if not (isinstance(name, str) and name.isidentifier() and name.isascii()):
                raise ValueError(f"kernel source {self.name!r}: bad constant name {name!r}")
            if isinstance(value, bool) or not isinstance(value, (Integral, Real)):
                raise TypeError(
                    f"kernel source {self.name!r}: constant {name} must be an int or a float, "
                    f"not {value!r}"
                )
            value = int(value) if isinstance(value, Integral) else float(value)
            if not math.isfinite(value):
                raise ValueError(f"kernel source {self.name!r}: constant {name} is {value}")
            if COMMON_HEADER in files and name in COMMON_CONSTANTS:
                raise ValueError(
                    f"kernel source {self.name!r}: {name} is {COMMON_HEADER}'s constant, "
                    "passed by cuda/module.py"
                )
            checked.append((name, value))
        constants = tuple(checked)
        object.__setattr__(self, "files", files)
        object.__setattr__(self, "constants", constants)
        # Sources key every kernel lookup: hash the fields once.
        object.__setattr__(self, "_hash", hash((self.name, files, constants)))

    def __hash__(self) -> int:
        return self._hash

    def defines(self) -> dict[str, Constant]:
        """Every constant the unit is built with: ``common.cuh``'s (if included), then its own."""
        defines: dict[str, Constant] = {}
        if COMMON_HEADER in self.files:
            defines.update(COMMON_CONSTANTS)
        defines.update(self.constants)
        return defines

    def options(self) -> tuple[str, ...]:
        """The NVRTC options: :data:`NVRTC_OPTIONS`, then ``-DNAME=value`` per constant."""
        return NVRTC_OPTIONS + tuple(
            f"-D{name}={_literal(value)}" for name, value in self.defines().items()
        )

    def code(self) -> str:
        """The unit's CUDA C: its files, in order."""
        return "\n".join((KERNEL_DIR / file).read_text() for file in self.files)


#: Voxel grid, graph building, label propagation and canonical numbering.
CLUSTERING = KernelSource(
    "clustering",
    (
        COMMON_HEADER,
        "labelling/voxel_grid.cu",
        "labelling/graph.cu",
        "labelling/ccl.cu",
        "labelling/numbering.cu",
    ),
)

_modules: dict[tuple[KernelSource, int], cupy.RawModule] = {}
_kernels: dict[tuple[KernelSource, str, int], cupy.RawKernel] = {}
_lock = threading.Lock()


def get_kernel(source: KernelSource, function: str, device_id: int) -> cupy.RawKernel:
    """The kernel ``function`` of ``source`` compiled for ``device_id`` (memoised; the first call
    for a source and device compiles it). Launch it with ``device_id`` current."""
    key = (source, function, device_id)
    kernel = _kernels.get(key)
    if kernel is None:
        with _lock:
            kernel = _kernels.get(key)
            if kernel is None:
                import cupy

                with cupy.cuda.Device(device_id):
                    kernel = _module(source, device_id).get_function(function)
                _kernels[key] = kernel
    return kernel


def compile_source(source: KernelSource, device_id: int) -> None:
    """Compile ``source`` for ``device_id`` now, if not done yet (e.g. before timed work)."""
    if (source, device_id) not in _modules:
        with _lock:
            _module(source, device_id)


def _module(source: KernelSource, device_id: int) -> cupy.RawModule:
    """The compiled module of ``source`` on ``device_id`` (compiled on first use; holds _lock)."""
    module = _modules.get((source, device_id))
    if module is None:
        import cupy

        with cupy.cuda.Device(device_id):
            module = cupy.RawModule(code=source.code(), options=source.options())
            module.compile()
        _modules[(source, device_id)] = module
    return module


def _literal(value: Constant) -> str:
    """``value`` as a C literal (a float keeps its exact double value)."""
    return repr(value) if isinstance(value, float) else str(value)


def blocks(count: int, threads: int = THREADS) -> tuple[int]:
    """Grid size covering ``count`` threads."""
    return (max(1, (count + threads - 1) // threads),)
