"""The package's layering: imports only go down, and no file imports itself back in a cycle.

Layers, bottom to top (see the README's "Package layout"): ``core`` and ``pointcloud_io`` need
nothing of the package; the twin backends ``cpu`` and ``cuda`` build on them; the library's
front door (``clusterer.py``, ``__init__.py``) picks a backend; ``tools`` sit on the library; the
front ends ``ros``, ``bench`` and ``commands`` come last, in that order. A module may import its
own folder and any lower layer, never a layer of the same rank (the twins stay apart) or above.
Every import counts, also one inside a function or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = "gpu_euclidean_cluster"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

#: Rank of each layer: a module imports only its own layer's folder and lower ranks.
LAYERS: dict[str, int] = {
    "core": 0,
    "pointcloud_io": 0,
    "cpu": 1,
    "cuda": 1,
    "": 2,  # files at the package root: the library's front door
    "tools": 3,
    "ros": 4,
    "bench": 5,
    "commands": 6,
}


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
    parts = module.split(".")[1:]
    return parts[0] if len(parts) > 1 else ""


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


def test_every_folder_has_a_layer():
    folders = {p.name for p in PACKAGE_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS), f"folders without a layer: {sorted(folders - set(LAYERS))}"


def test_imports_only_go_down():
    assert upward_imports(import_graph(PACKAGE_DIR), PACKAGE) == []


def test_no_import_cycles():
    assert cycles(import_graph(PACKAGE_DIR)) == []


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


def test_readme_layout_section_matches_the_tree():
    readme = (PACKAGE_DIR.parent / "README.md").read_text()
    section = readme.split("<!-- section:layout -->")[1].split("<!-- /section:layout -->")[0]
    listed = set(re.findall(rf"`{PACKAGE}/([a-z_]+)/`", section))
    folders = {p.name for p in PACKAGE_DIR.iterdir() if (p / "__init__.py").exists()}
    assert listed == folders
    for name in re.findall(rf"`{PACKAGE}/([a-z_]+\.py)`", section):
        assert (PACKAGE_DIR / name).is_file(), name
