"""The package's layering: imports only go down, and no file imports itself back in a cycle.

Layers, bottom to top (docs/architecture.md, "Package layout"): ``core`` and ``pointcloud_io`` need
nothing of the package; the twin backends ``cpu`` and ``cuda`` build on them; the library's
front door (``clusterer.py``, ``__init__.py``) picks a backend; the frame layer ``frame`` and the
``tools`` sit on the library; the front ends ``ros`` and ``commands`` come last, in that order. A
module may import its own folder and any lower layer, never a layer of the same rank (the twins
stay apart) or above. Every import counts, also one inside a function or under ``TYPE_CHECKING``.

The backend rule: outside ``cpu/``, ``cuda/``, ``frame/`` and the front door's factory
(``clusterer.py``), nothing imports a backend module or branches on a backend's type or name;
what differs between backends is a method of the ``Backend`` protocol.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = "gpu_euclidean_cluster"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE

#: Rank of each layer: a module imports only its own layer's folder and lower ranks.
LAYERS: dict[str, int] = {
    "core": 0,
    "pointcloud_io": 0,
    "cpu": 1,
    "cuda": 1,
    "": 2,  # files at the package root: the library's front door
    "frame": 3,
    "tools": 3,
    "ros": 4,
    "commands": 5,
}

#: Layers that may know the backends apart, and the factory that builds them by name.
BACKEND_LAYERS = ("cpu", "cuda", "frame")
BACKEND_FACTORY = f"{PACKAGE}.clusterer"
#: Attribute and variable names that hold a backend's name (or the backend itself).
BACKEND_NAMES = {"backend", "backend_name", "name"}
#: The folders kept in wings, and the most source files (``.py``, ``.cu``, ``.cuh``) one folder
#: of them may hold before it is split by concern.
WINGED_LAYERS = ("cpu", "cuda", "ros")
MAX_FOLDER_FILES = 12
SOURCE_SUFFIXES = {".py", ".cu", ".cuh"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports (``from pkg import module`` resolves to the module)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [
                f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                for alias in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): imports_of(p, root, modules) for p in paths}


def layer_of(module: str, package: str) -> str:
    """The layer (folder) of ``module``, ``""`` for the package's root files and itself."""
    parts = module.split(".")[1:]
    return parts[0] if parts and parts[0] in LAYERS else ""


def upward_imports(graph: dict[str, set[str]], package: str) -> list[str]:
    problems = []
    for module, targets in graph.items():
        here = layer_of(module, package)
        for target in sorted(targets):
            there = layer_of(target, package)
            if there != here and LAYERS[there] >= LAYERS[here]:
                problems.append(f"{module} ({here or 'root'}) imports {target} ({there or 'root'})")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def backend_rule_problems(root: Path) -> list[str]:
    """Imports of a backend module and branches on a backend's name or type outside
    :data:`BACKEND_LAYERS` and :data:`BACKEND_FACTORY`."""
    graph = import_graph(root)
    package = root.name
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        if layer_of(module, package) in BACKEND_LAYERS or module == BACKEND_FACTORY:
            continue
        for target in sorted(graph[module]):
            if layer_of(target, package) in ("cpu", "cuda"):
                problems.append(f"{module} imports backend module {target}")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _compares_backend_name(node) or _checks_backend_type(node):
                problems.append(f"{module}:{node.lineno} branches on a backend's name or type")
    return problems


def _compares_backend_name(node: ast.AST) -> bool:
    """``backend.name == "cuda"``, ``backend_name != "cpu"``, ``x.backend in ("cuda",)``..."""
    if not isinstance(node, ast.Compare):
        return False
    operands = [node.left, *node.comparators]
    named = any(
        (isinstance(o, ast.Attribute) and o.attr in BACKEND_NAMES)
        or (isinstance(o, ast.Name) and o.id in BACKEND_NAMES - {"name"})
        for o in operands
    )
    strings = {
        c.value
        for o in operands
        for c in ast.walk(o)
        if isinstance(c, ast.Constant) and isinstance(c.value, str)
    }
    return named and bool(strings & {"cuda", "cpu"})


def _checks_backend_type(node: ast.AST) -> bool:
    """``isinstance(x, CudaBackend)`` or any class named ``...Backend``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        return False
    if node.func.id != "isinstance" or len(node.args) != 2:
        return False
    return any(isinstance(n, ast.Name) and n.id.endswith("Backend") for n in ast.walk(node.args[1]))


def test_every_folder_has_a_layer():
    folders = {p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS), f"folders without a layer: {sorted(folders - set(LAYERS))}"


def crowded_folders(root: Path, limit: int) -> list[str]:
    """The folders under ``root`` holding more than ``limit`` source files, with their counts."""
    found = []
    for folder in sorted(p for p in [root, *root.rglob("*")] if p.is_dir()):
        count = sum(1 for f in folder.iterdir() if f.suffix in SOURCE_SUFFIXES)
        if count > limit:
            found.append(f"{folder.relative_to(root.parent)}: {count} files")
    return found


def test_winged_folders_stay_small():
    crowded = [
        c for layer in WINGED_LAYERS for c in crowded_folders(PACKAGE_DIR / layer, MAX_FOLDER_FILES)
    ]
    assert crowded == [], f"split these by concern: {crowded}"


def test_crowded_folders_are_found(tmp_path: Path):
    wing = tmp_path / "cuda" / "wing"
    wing.mkdir(parents=True)
    for index in range(MAX_FOLDER_FILES + 1):
        (wing / f"m{index}.py").write_text("")
    (tmp_path / "cuda" / "notes.txt").write_text("")
    assert crowded_folders(tmp_path / "cuda", MAX_FOLDER_FILES) == ["cuda/wing: 13 files"]


def test_imports_only_go_down():
    assert upward_imports(import_graph(PACKAGE_DIR), PACKAGE) == []


def test_no_import_cycles():
    assert cycles(import_graph(PACKAGE_DIR)) == []


def test_only_the_backend_layers_know_the_backends_apart():
    assert backend_rule_problems(PACKAGE_DIR) == []


@pytest.fixture()
def bad_package(tmp_path: Path) -> Path:
    """A package with an upward import (core -> ros), a twin import and a cycle inside ros."""
    root = tmp_path / PACKAGE
    files = {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/config.py": "from ..ros.node import Node\n",
        "cpu/__init__.py": "",
        "cpu/backend.py": "def f():\n    from ..cuda import backend\n",
        "cuda/__init__.py": "",
        "cuda/backend.py": "",
        "ros/__init__.py": "",
        "ros/node.py": "from . import replay\nfrom gpu_euclidean_cluster.core import config\n",
        "ros/replay.py": "from .node import Node\n",
        "ros/frames.py": (
            "from ..cuda.backend import CudaBackend\n"
            "def f(backend, b):\n"
            "    if backend.name == 'cuda' or isinstance(b, CudaBackend):\n"
            "        return 1\n"
        ),
        "frame/__init__.py": "",
        "frame/pipeline.py": "from ..cuda.backend import CudaBackend\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_checker_finds_upward_imports_and_cycles(bad_package: Path):
    graph = import_graph(bad_package)
    assert graph[f"{PACKAGE}.ros.node"] == {f"{PACKAGE}.ros.replay", f"{PACKAGE}.core.config"}
    assert upward_imports(graph, PACKAGE) == [
        f"{PACKAGE}.core.config (core) imports {PACKAGE}.ros.node (ros)",
        f"{PACKAGE}.cpu.backend (cpu) imports {PACKAGE}.cuda.backend (cuda)",
    ]
    assert cycles(graph) == [
        [f"{PACKAGE}.core.config", f"{PACKAGE}.ros.node", f"{PACKAGE}.ros.replay"]
    ]


def test_checker_finds_backend_imports_and_branches(bad_package: Path):
    assert backend_rule_problems(bad_package) == [
        f"{PACKAGE}.ros.frames imports backend module {PACKAGE}.cuda.backend",
        f"{PACKAGE}.ros.frames:3 branches on a backend's name or type",
        f"{PACKAGE}.ros.frames:3 branches on a backend's name or type",
    ]


def test_docs_layout_section_matches_the_tree():
    page = (PACKAGE_DIR.parent / "docs" / "architecture.md").read_text()
    section = page.split("<!-- section:layout -->")[1].split("<!-- /section:layout -->")[0]
    listed = set(re.findall(rf"`{PACKAGE}/([a-z_]+)/`", section))
    folders = {p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").exists()}
    assert listed == folders
    for name in re.findall(rf"`{PACKAGE}/([a-z_]+\.py)`", section):
        assert (PACKAGE_DIR / name).is_file(), name
