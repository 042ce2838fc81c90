"""Kernel constants come from Python only, each defined once; kernels are built in one place.

``gpu_euclidean_cluster/cuda/module.py`` compiles every compile unit from a ``KernelSource``
whose constants reach the CUDA sources as ``-DNAME=value``. Runs without CuPy or a GPU: the
Python files are read as syntax trees, the CUDA files as text. Checked:

* the ``-D`` names are the keys of every ``KernelSource(...)``'s constants (a dict or a tuple of
  pairs, written in the call or as a top-level name of the same file) and of ``cuda/module.py``'s
  ``COMMON_CONSTANTS`` (``common.cuh``'s, passed to every source that includes it);
* no ``.cu``/``.cuh`` file under ``cuda/kernels/`` ``#define``\\ s one of them, and each is
  guarded (``#ifndef NAME`` then ``#error``) so a missing ``-D`` fails at compile time;
* each is passed from one place, and the top-level Python constant behind it (its own name, and
  the name its value is read from) is assigned in one file of the package only;
* only ``cuda/module.py`` creates CuPy modules or kernels and looks kernels up in them.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "gpu_euclidean_cluster"
KERNEL_DIR = PACKAGE_DIR / "cuda" / "kernels"
MODULE_PY = PACKAGE_DIR / "cuda" / "module.py"

#: Constants the package passes today: the parser below must find at least these.
KNOWN = {"ES_TILE", "UF_LINK_BLOCKS_PER_SM", "MATRIX_B"}

_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)")


@dataclass(frozen=True)
class Passed:
    """One constant passed with ``-D``: where, and the Python expression giving its value."""

    name: str
    value: ast.expr
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(PACKAGE_DIR.parent)}:{self.line}"


@cache
def _python_files() -> tuple[Path, ...]:
    return tuple(sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts))


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _top_level_assignments(tree: ast.Module) -> dict[str, ast.expr | None]:
    """Names assigned at the top level of a module, with their values."""
    found: dict[str, ast.expr | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node.value
    return found


def _top_level_imports(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _pairs(node: ast.expr, path: Path) -> list[tuple[str, ast.expr, int]]:
    """``(name, value, line)`` of a constants literal: a dict, or a tuple/list of 2-tuples."""
    if isinstance(node, ast.Name):  # a top-level constant of the same file
        value = _top_level_assignments(_tree(path)).get(node.id)
        assert value is not None, (
            f"{path}:{node.lineno}: KernelSource constants {node.id!r} must be a top-level "
            "dict or tuple of pairs of the same file (this test reads them without importing)"
        )
        return _pairs(value, path)
    items: list[tuple[ast.expr | None, ast.expr]] = []
    if isinstance(node, ast.Dict):
        items = list(zip(node.keys, node.values, strict=True))
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            assert isinstance(element, ast.Tuple) and len(element.elts) == 2, (
                f"{path}:{element.lineno}: not a (name, value) pair"
            )
            items.append((element.elts[0], element.elts[1]))
    else:
        raise AssertionError(
            f"{path}:{node.lineno}: KernelSource constants must be a dict or a tuple of pairs "
            "written out (this test reads them without importing)"
        )
    pairs = []
    for key, value in items:
        assert isinstance(key, ast.Constant) and isinstance(key.value, str), (
            f"{path}:{node.lineno}: constant names must be string literals"
        )
        pairs.append((key.value, value, key.lineno))
    return pairs


@cache
def passed_constants() -> tuple[Passed, ...]:
    """Every constant passed with ``-D``, once per place that passes it."""
    found: dict[tuple[Path, int, int], list[tuple[str, ast.expr, int]]] = {}
    for path in _python_files():
        tree = _tree(path)
        literals: list[ast.expr] = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name != "KernelSource":
                continue
            if len(node.args) > 2:
                literals.append(node.args[2])
            literals += [k.value for k in node.keywords if k.arg == "constants"]
        if path == MODULE_PY:
            common = _top_level_assignments(tree).get("COMMON_CONSTANTS")
            assert common is not None, "cuda/module.py must define COMMON_CONSTANTS"
            literals.append(common)
        for literal in literals:
            if isinstance(literal, ast.Name):  # resolve so a literal is counted once
                literal = _top_level_assignments(tree).get(literal.id) or literal
            key = (path, literal.lineno, literal.col_offset)
            found.setdefault(key, _pairs(literal, path))
    return tuple(
        Passed(name, value, path, line)
        for (path, _, _), pairs in found.items()
        for name, value, line in pairs
    )


def _passed_names() -> set[str]:
    return {constant.name for constant in passed_constants()}


def _kernel_files() -> list[Path]:
    return sorted(p for p in KERNEL_DIR.rglob("*") if p.suffix in {".cu", ".cuh"})


def test_the_constants_passed_today_are_found():
    assert _passed_names() >= KNOWN, sorted(_passed_names())


def test_kernel_files_do_not_define_constants_passed_with_d():
    passed = _passed_names()
    defined = [
        f"{path.name}:{number}: #define {match.group(1)}"
        for path in _kernel_files()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if (match := _DEFINE.match(line)) and match.group(1) in passed
    ]
    assert not defined, "constants passed with -D by cuda/module.py, defined again:\n" + "\n".join(
        defined
    )


def test_kernel_files_stop_without_their_constants():
    guarded = set()
    for path in _kernel_files():
        lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        for line, after in pairwise(lines):
            if line.startswith("#ifndef ") and after.startswith("#error"):
                guarded.add(line.split()[1])
    missing = sorted(_passed_names() - guarded)
    assert not missing, f"no '#ifndef NAME' + '#error' guard in cuda/kernels/ for {missing}"


def test_each_constant_is_passed_from_one_place():
    counts = Counter(constant.name for constant in passed_constants())
    twice = {
        name: [c.where() for c in passed_constants() if c.name == name]
        for name, count in counts.items()
        if count > 1
    }
    assert not twice, f"constants passed with -D from more than one place: {twice}"


def test_each_constant_is_defined_once_in_python():
    assigned: dict[str, list[Path]] = {}
    for path in _python_files():
        for name in _top_level_assignments(_tree(path)):
            assigned.setdefault(name, []).append(path)
    problems = []
    for constant in passed_constants():
        tree = _tree(constant.path)
        module_level = set(_top_level_assignments(tree)) | _top_level_imports(tree)
        value = constant.value
        source = value.id if isinstance(value, ast.Name) else getattr(value, "attr", None)
        if source is not None and (isinstance(value, ast.Attribute) or source in module_level):
            places = assigned.get(source, [])
            if len(places) != 1:
                problems.append(
                    f"{constant.where()}: {constant.name} = {source}, assigned in "
                    f"{[str(p.relative_to(PACKAGE_DIR)) for p in places]}"
                )
        # else: a per-call value (e.g. MATRIX_B, the block size of the matrix source)
        places = assigned.get(constant.name, [])
        if len(places) > 1 or (places and constant.name != source):
            problems.append(
                f"{constant.name} is also a Python constant in "
                f"{[str(p.relative_to(PACKAGE_DIR)) for p in places]}"
            )
    assert not problems, "\n".join(problems)


def test_only_cuda_module_builds_kernels():
    builders = {"RawModule", "RawKernel", "get_function", "compile_with_cache"}
    found = []
    for path in _python_files():
        if path == MODULE_PY:
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name in builders:
                    found.append(f"{path.relative_to(PACKAGE_DIR)}:{node.lineno}: {name}")
            elif isinstance(node, ast.JoinedStr | ast.Constant):
                text = node.value if isinstance(node, ast.Constant) else None
                if isinstance(node, ast.JoinedStr) and node.values:
                    head = node.values[0]
                    text = head.value if isinstance(head, ast.Constant) else None
                if isinstance(text, str) and text.startswith("-D"):
                    found.append(f"{path.relative_to(PACKAGE_DIR)}:{node.lineno}: {text!r}")
    assert not found, "kernels are compiled and fetched only by cuda/module.py:\n" + "\n".join(
        found
    )


def test_kernel_source_options_and_identity():
    """``cuda/module.py`` loads without CuPy; a source's options carry every constant once."""
    from gpu_euclidean_cluster.cuda.module import (
        CLUSTERING,
        ES_TILE,
        NVRTC_OPTIONS,
        KernelSource,
    )

    assert NVRTC_OPTIONS == ("--std=c++17", "--fmad=false")
    frame = KernelSource("pointcloud2", ("common.cuh", "pointcloud2.cu"), {"PC2_SUM_LEAF": 64})
    assert frame.options() == (*NVRTC_OPTIONS, f"-DES_TILE={ES_TILE}", "-DPC2_SUM_LEAF=64")
    assert frame == KernelSource(
        "pointcloud2", ["common.cuh", "pointcloud2.cu"], [("PC2_SUM_LEAF", 64)]
    )
    assert hash(frame) == hash(KernelSource("pointcloud2", frame.files, frame.constants))
    assert CLUSTERING.options() == (*NVRTC_OPTIONS, f"-DES_TILE={ES_TILE}")
    matrix = KernelSource("m", ("common.cuh", "matrix.cu"), {"MATRIX_B": 128, "F": 0.5})
    assert matrix.options()[2:] == (f"-DES_TILE={ES_TILE}", "-DF=0.5", "-DMATRIX_B=128")
    assert KernelSource("alone", ("numbering.cu",)).options() == NVRTC_OPTIONS
    code = CLUSTERING.code()
    assert code.startswith((KERNEL_DIR / "common.cuh").read_text())
    assert "numbering_stats" in code and "uf_link_cells" not in code
    for bad in (
        dict(files=("graph.cu", "common.cuh")),  # common.cuh not first
        dict(files=("../kernels/labelling/graph.cu",)),
        dict(files=()),
        dict(files=("common.cuh",), constants={"ES_TILE": 128}),  # module.py's constant
        dict(files=("graph.cu",), constants={"BAD NAME": 1}),
        dict(files=("graph.cu",), constants={"X": float("inf")}),
    ):
        with pytest.raises(ValueError):
            KernelSource("bad", **bad)
    with pytest.raises(TypeError):
        KernelSource("bad", ("graph.cu",), {"X": "1"})
