"""Docstrings, comments and the documentation name only things that exist, and no tracker issue
numbers.

The repository's own code is scanned: the package, ``benchmarks/`` (Python files, and the
full-line comments of its shell scripts), ``test/``, ``launch/*.py``, ``setup.py`` and the
comments of the CUDA sources in ``gpu_euclidean_cluster/cuda/kernels/``; so are the Markdown
pages ``README.md``, ``CHANGELOG.md`` and ``docs/*.md`` (rule 4). Three rules, and one more for
the pages:

1. **Files.** A name ending in ``.md``, ``.py``, ``.cu`` or ``.cuh`` in a docstring or a comment
   (``union_find.md``, ``docs/union_find.md``, ``ros/node/node.py``, ``cuda/kernels/common.cuh``)
   must exist relative to the repository root, the package folder or the file's own folder; a
   bare file name may also name a file of exactly that name anywhere in the repository (outside
   ``.git``, ``.venv`` and build folders). Names inside URLs and glob patterns (``test_*.py``)
   are not file references; :data:`EXTERNAL_FILES` lists the few that name another project's
   files, each with its reason.
2. **Dotted references.** Sphinx roles (``:func:``, ``:class:``, ``:mod:``, ``:meth:``,
   ``:data:``, ``:attr:``, ``:exc:``, ``:const:``, ``:obj:``) must resolve: a leading ``~`` is
   ignored; leading dots are relative to the package of the module holding the text (one dot
   also tries the module itself); a target starting with a name of the current module (defined
   or imported) follows it; a bare ``:meth:``/``:attr:`` name may be a member of any class of the
   module. Double-backticked ``a.b`` is checked only when ``a`` is a module or folder name of
   this package or a class or function defined in it (``numbering.canonical_labels``,
   ``cuda.frame_pipeline``, ``ClusterConfig.resolve_method``); generic code (``np.add.reduceat``,
   ``cupy.RawModule``) is not. Resolution never imports: it reads the target module's AST (its
   top-level definitions, assignments and imports, and the members of its classes).
   References into other libraries (a first name imported from outside the repository, or a
   standard-library module) are not checked.
3. **No tracker issue numbers.** ``issue 11``, ``issues 9-12``, ``issue #12``, ``(#10)`` may not
   appear in a comment, docstring or string literal (help texts included), nor ``issue_11`` in
   a name: say what is meant instead. An upstream project's issue with its owner
   (``cupy/cupy#1234``, ``github.com/...``) may stay.
4. **Markdown pages.** Rules 1 and 3 apply to the whole page, code blocks included (a file
   name is taken relative to the page's folder too); rule 2 to every inline code span that is a
   dotted name (``core.numbering.canonical_labels`` or ``node.stats()`` in single backticks),
   outside code blocks, as to a double-backticked name of a docstring. Every link and image
   (``[text](target)``) outside code blocks must lead to a file or folder relative to the page,
   and its ``#anchor`` to a heading of the target page (GitHub's anchors: lower case, spaces to
   ``-``, punctuation dropped). The first column of a table headed ``| Old | New |`` names what
   a release moved or removed (CHANGELOG.md) and is not checked; :data:`REMOVED_NAMES` lists
   the few such names elsewhere in a page, each with its reason.

This file itself is not scanned: its docstring and its synthetic sources break the rules on
purpose, and :func:`test_the_rules_catch_a_bad_reference_of_each_kind` proves each rule fails.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "gpu_euclidean_cluster"

#: Folders never scanned nor searched for files.
SKIPPED_DIRS = frozenset(
    {".git", ".venv", "build", "install", "log", ".device", "__pycache__", ".pytest_cache",
     ".ruff_cache", ".mypy_cache", "node_modules"}
)  # fmt: skip

#: File names outside this repository, with the reason they may be named.
EXTERNAL_FILES: dict[str, str] = {
    "build_wheels.py": "the README's recipe of the ROS 2 tool wheels, in ../shared/wheels",
}

#: Names of things a release removed that CHANGELOG.md gives outside an ``| Old | New |`` table:
#: name -> why it may stay.
REMOVED_NAMES: dict[str, str] = {
    "ros/detections.py": (
        "CHANGELOG.md: the Autoware drop-in folded it into ros/messages/object_messages.py"
    ),
    "Labelling.timings_ms": "CHANGELOG.md: the package layout release replaced it by StageClock",
}

#: Double-backticked ``a.b`` whose first name is a module of this package but, in the code's
#: docstrings, the name of a variable of another library's type: name -> why it is not checked.
#: (A variable holding an instance of a class of the module of its name, such as ``settings``
#: for ``ros/parameters/settings.py``'s ``NodeSettings``, needs no entry: its attributes are
#: checked.)
VARIABLE_NAMES: dict[str, str] = {
    "module": "a cupy.RawModule in cuda/, not cuda/module.py",
    "cloud": "a PointCloud2 message or a RawCloud, not pointcloud_io/cloud.py",
}

#: This file: its docstring and its synthetic sources show violations on purpose.
THIS_FILE = Path("test") / "house" / "test_doc_references.py"

FILE_EXTENSIONS = ("md", "py", "cu", "cuh")
FILE_PATTERN = re.compile(
    r"(?<![\w./*{-])((?:\.\.?/)?(?:[\w.-]+/)*[\w-][\w.-]*\.(?:" + "|".join(FILE_EXTENSIONS) + r"))"
    r"(?![\w*/-])"
)
URL_PATTERN = re.compile(r"\b[a-z][a-z0-9+.-]*://\S*|\bgithub\.com/\S*|\bwww\.\S*", re.I)
ROLE_PATTERN = re.compile(r":(func|class|mod|meth|data|attr|exc|const|obj):`([^`]+)`")
#: ``:func:`title <target>``` links ``target``
EXPLICIT_TARGET = re.compile(r"<([^<>]+)>\s*$")
DOUBLE_BACKTICK_PATTERN = re.compile(r"``([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(\))?``")
#: Last parts of double-backticked names that make them file names, not attribute references.
NOT_ATTRIBUTES = frozenset(
    {*FILE_EXTENSIONS, "yaml", "yml", "json", "csv", "txt", "xml", "npy", "npz", "pcd", "bin",
     "db3", "mcap", "png", "svg", "sh", "toml", "cfg", "msg", "launch", "so", "log"}
)  # fmt: skip
ISSUE_PATTERN = re.compile(
    r"\bissues?[ \t]*(?:#[ \t]*)?\d+(?:[ \t]*(?:[-,]|and)[ \t]*#?\d+)*"  # issue 11, issues 9-12
    r"|(?<![\w/.-])\(#\d+\)"  # (#10)
    r"|(?<![\w/.-])#\d+\b(?=[ \t]*[,;:)]|$)",  # a bare #12 at a clause's end
    re.I | re.M,
)
UPSTREAM_ISSUE_PREFIX = re.compile(r"[\w.-]+/[\w.-]+[ \t]*$")
ISSUE_NAME_PATTERN = re.compile(r"(?i)(?:^|_)issues?_\d+")


@dataclass(frozen=True)
class Text:
    """A docstring, comment block, string literal or suspect name of one file."""

    path: Path
    line: int
    text: str
    kind: str  # "docstring", "comment", "string" or "name"

    def line_of(self, offset: int) -> int:
        return self.line + self.text.count("\n", 0, offset)


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    reference: str
    why: str

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}: {self.reference}"

    def describe(self, root: Path) -> str:
        return f"{self.where(root)} ({self.why})"


@dataclass
class ModuleSymbols:
    """What a module defines at its top level, read from its AST."""

    definitions: dict[str, ast.AST] = field(default_factory=dict)
    #: local name -> ``module.name`` or ``module`` it was imported as (absolute)
    imports: dict[str, str] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.definitions or name in self.imports


# --- reading texts ------------------------------------------------------------------------------


def _docstring_nodes(tree: ast.Module) -> list[ast.Constant]:
    owners = [tree] + [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    nodes = []
    for owner in owners:
        body = owner.body
        first = body[0].value if body and isinstance(body[0], ast.Expr) else None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            nodes.append(first)
    return nodes


def python_texts(path: Path, source: str, tree: ast.Module) -> Iterator[Text]:
    """Docstrings, other string literals, comment blocks (consecutive lines) and suspect names."""
    docstrings = _docstring_nodes(tree)
    for node in docstrings:
        yield Text(path, node.lineno, node.value, "docstring")
    docstring_ids = {id(node) for node in docstrings}
    for node in ast.walk(tree):
        is_string = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_string and id(node) not in docstring_ids:
            yield Text(path, node.lineno, node.value, "string")
    block: list[str] = []
    block_start = previous = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and ISSUE_NAME_PATTERN.search(token.string):
            yield Text(path, token.start[0], token.string, "name")
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if block and line != previous + 1:
            yield Text(path, block_start, "\n".join(block), "comment")
            block = []
        if not block:
            block_start = line
        block.append(token.string.lstrip("#:!").strip())
        previous = line
    if block:
        yield Text(path, block_start, "\n".join(block), "comment")


CUDA_COMMENT_PATTERN = re.compile(
    r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S
)


def cuda_comments(path: Path, source: str) -> Iterator[Text]:
    """``//`` lines (consecutive ones as one block) and ``/* */`` blocks of a CUDA source."""
    block: list[str] = []
    block_start = previous = 0
    for match in CUDA_COMMENT_PATTERN.finditer(source):
        token = match.group()
        if token[0] in "\"'":
            continue
        line = source.count("\n", 0, match.start()) + 1
        if token.startswith("/*"):
            yield Text(path, line, token[2:-2], "comment")
            continue
        if block and line != previous + 1:
            yield Text(path, block_start, "\n".join(block), "comment")
            block = []
        if not block:
            block_start = line
        block.append(token[2:].strip())
        previous = line
    if block:
        yield Text(path, block_start, "\n".join(block), "comment")


def shell_comments(path: Path, source: str) -> Iterator[Text]:
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#") and not stripped.startswith("#!"):
            yield Text(path, number, stripped.lstrip("#").strip(), "comment")


# --- the repository -----------------------------------------------------------------------------


class Repository:
    """Files, modules and module symbols of a checkout rooted at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.package_dir = root / PACKAGE
        self.files: list[Path] = []
        for path in self._walk(root):
            self.files.append(path)
        self.file_names = {path.name for path in self.files}
        #: dotted module name (from the root) -> file
        self.modules: dict[str, Path] = {}
        for path in self.files:
            if path.suffix == ".py":
                self.modules[self.module_name(path)] = path
        self._symbols: dict[str, ModuleSymbols] = {}
        self._trees: dict[Path, ast.Module] = {}

    def _walk(self, folder: Path) -> Iterator[Path]:
        for entry in sorted(folder.iterdir()):
            if entry.is_dir():
                if entry.name in SKIPPED_DIRS or entry.name.endswith(".egg-info"):
                    continue
                yield from self._walk(entry)
            elif entry.is_file():
                yield entry

    def module_name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def is_package(self, module: str) -> bool:
        return self.modules.get(module, Path()).name == "__init__.py"

    def scanned_files(self) -> list[Path]:
        scanned = []
        kernels = self.package_dir / "cuda" / "kernels"
        for path in self.files:
            relative = path.relative_to(self.root)
            top = relative.parts[0]
            if relative == THIS_FILE:
                continue
            python = path.suffix == ".py" and (
                top in {PACKAGE, "test", "benchmarks"}
                or (top == "launch" and len(relative.parts) == 2)
                or str(relative) == "setup.py"
            )
            cuda = path.suffix in {".cu", ".cuh"} and kernels in path.parents
            shell = path.suffix == ".sh" and top == "benchmarks"
            if python or cuda or shell:
                scanned.append(path)
        return scanned

    def markdown_pages(self) -> list[Path]:
        """``README.md``, ``CHANGELOG.md`` and the pages of ``docs/``."""
        return [
            path
            for path in self.files
            if path.suffix == ".md"
            and (
                path.parent == self.root / "docs"
                or path.relative_to(self.root) in {Path("README.md"), Path("CHANGELOG.md")}
            )
        ]

    def tree(self, path: Path) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(path.read_text(encoding="utf-8"), str(path))
        return self._trees[path]

    def symbols(self, module: str) -> ModuleSymbols:
        if module not in self._symbols:
            self._symbols[module] = self._read_symbols(module)
        return self._symbols[module]

    def _read_symbols(self, module: str) -> ModuleSymbols:
        symbols = ModuleSymbols()
        package = module if self.is_package(module) else module.rpartition(".")[0]
        for node in _top_level_statements(self.tree(self.modules[module]).body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                symbols.definitions[node.name] = node
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for name in _assigned_names(targets):
                    symbols.definitions[name] = node
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.partition(".")[0]
                    symbols.imports[local] = alias.name if alias.asname else local
            elif isinstance(node, ast.ImportFrom):
                base = _absolute_module(package, node.level, node.module or "")
                for alias in node.names:
                    symbols.imports[alias.asname or alias.name] = f"{base}.{alias.name}"
        return symbols

    @cached_property
    def top_levels(self) -> frozenset[str]:
        """First names of the repository's dotted module names (the package, test, ...)."""
        return frozenset(module.partition(".")[0] for module in self.modules)

    @cached_property
    def external_modules(self) -> frozenset[str]:
        """Top-level names of the standard library and of every module imported from outside."""
        ours = {path.relative_to(self.root).parts[0] for path in self.modules.values()}
        names = set(sys.stdlib_module_names)
        for module in self.modules:
            for target in self.symbols(module).imports.values():
                top = target.partition(".")[0]
                if top and top not in ours:
                    names.add(top)
        return frozenset(names - ours)

    @cached_property
    def package_names(self) -> frozenset[str]:
        """Module and folder names inside the package (and ``benchmarks``)."""
        names: set[str] = set()
        for top in (PACKAGE, "benchmarks"):
            folder = self.root / top
            for path in self.files:
                if folder in path.parents:
                    for part in path.relative_to(self.root).parts[:-1]:
                        names.add(part)
                    if path.suffix == ".py" and path.stem != "__init__":
                        names.add(path.stem)
        return frozenset(names - {"test"})

    @cached_property
    def package_definitions(self) -> dict[str, list[str]]:
        """Class or function name -> modules of the package that define it at their top level."""
        defined: dict[str, list[str]] = {}
        for module in self.modules:
            if module.partition(".")[0] in (PACKAGE, "benchmarks"):
                for name, node in self.symbols(module).definitions.items():
                    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                        defined.setdefault(name, []).append(module)
        return defined

    # - resolution ------------------------------------------------------------------------------

    def resolves(self, dotted: str, depth: int = 0) -> bool | None:
        """Whether an absolute dotted name exists; None when it leads outside the repository."""
        parts = dotted.split(".")
        if parts[0] not in self.top_levels:
            return None
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if module in self.modules:
                return self.resolves_in(module, parts[cut:], depth)
        return False

    def resolves_in(self, module: str, parts: list[str], depth: int = 0) -> bool | None:
        """Whether ``parts`` name something in ``module`` (followed through its imports)."""
        if not parts:
            return True
        if depth > 8:
            return None
        symbols = self.symbols(module)
        head, rest = parts[0], parts[1:]
        if head in symbols.definitions:
            node = symbols.definitions[head]
            if not rest:
                return True
            if isinstance(node, ast.ClassDef):
                return self.class_has(module, node, rest, depth)
            return True  # an attribute of a value: its type is not known without running it
        if head in symbols.imports:
            target = symbols.imports[head]
            return self.resolves(".".join([target, *rest]), depth + 1)
        return False

    def class_has(self, module: str, node: ast.ClassDef, parts: list[str], depth: int) -> bool:
        members = _class_members(node)
        head, rest = parts[0], parts[1:]
        if head in members:
            inner = members[head]
            if rest and isinstance(inner, ast.ClassDef):
                return self.class_has(module, inner, rest, depth)
            return True
        for base in node.bases:
            name = _dotted(base.value if isinstance(base, ast.Subscript) else base)
            if name in (None, "object", "Generic", "Protocol", "typing.Protocol", "typing.Generic"):
                continue
            found = self.resolve_from(module, f"{name}.{'.'.join(parts)}", depth + 1)
            if found is not False:
                return True  # defined on a base class, or a base class outside the repository
        return False

    def resolve_from(self, module: str, target: str, depth: int = 0) -> bool | None:
        """Resolve ``target`` as written in ``module``: relative dots, its own names, absolute."""
        stripped = target.lstrip(".")
        dots = len(target) - len(stripped)
        parts = stripped.split(".")
        if dots:
            package = module if self.is_package(module) else module.rpartition(".")[0]
            base = _absolute_module(package, dots, "")
            if self.resolves(f"{base}.{stripped}", depth):
                return True
            if dots == 1:
                return self.resolves_in(module, parts, depth)
            return False
        if self.symbols(module).has(parts[0]):
            return self.resolves_in(module, parts, depth)
        found = self.resolves(stripped, depth)
        if found is not None:
            return found
        if parts[0] in self.external_modules:
            return None
        return False


def _top_level_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for node in body:
        if isinstance(node, ast.If | ast.Try | ast.With):
            for inner in (
                node.body,
                getattr(node, "orelse", []),
                getattr(node, "finalbody", []),
                *[handler.body for handler in getattr(node, "handlers", [])],
            ):
                yield from _top_level_statements(inner)
        else:
            yield node


def _assigned_names(targets: list[ast.expr]) -> Iterator[str]:
    for target in targets:
        if isinstance(target, ast.Name):
            yield target.id
        elif isinstance(target, ast.Tuple | ast.List):
            yield from _assigned_names(list(target.elts))


def _class_members(node: ast.ClassDef) -> dict[str, ast.AST]:
    """Methods, nested classes, class-level names and ``self.x`` attributes set in methods."""
    members: dict[str, ast.AST] = {}
    for statement in _top_level_statements(node.body):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            members[statement.name] = statement
            for inner in ast.walk(statement):
                stored = isinstance(inner, ast.Attribute) and isinstance(inner.ctx, ast.Store)
                if stored and _dotted(inner.value) == "self":
                    members.setdefault(inner.attr, inner)
        elif isinstance(statement, ast.Assign | ast.AnnAssign):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for name in _assigned_names(targets):
                members[name] = statement
    return members


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _absolute_module(package: str, level: int, module: str) -> str:
    if level == 0:
        return module
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, module] if module else base)


# --- the rules ----------------------------------------------------------------------------------


def file_violations(text: Text, repo: Repository) -> Iterator[Violation]:
    cleaned = URL_PATTERN.sub(lambda match: " " * len(match.group()), text.text)
    for match in FILE_PATTERN.finditer(cleaned):
        name = match.group(1)
        if name in EXTERNAL_FILES or name.startswith(("/", "~")):
            continue
        folders = (repo.root, repo.package_dir, text.path.parent)
        if any((folder / name).is_file() for folder in folders):
            continue
        if "/" not in name and name in repo.file_names:
            continue
        yield Violation(text.path, text.line_of(match.start()), name, "no such file")


def dotted_violations(text: Text, module: str, repo: Repository) -> Iterator[Violation]:
    for match in ROLE_PATTERN.finditer(text.text):
        role, target = match.group(1), match.group(2).strip()
        explicit = EXPLICIT_TARGET.search(target)
        if explicit:
            target = explicit.group(1).strip()
        if target.startswith("!"):
            continue  # Sphinx's "no link" marker
        target = target.lstrip("~")
        if _role_resolves(repo, module, role, target) is False:
            yield Violation(text.path, text.line_of(match.start()), match.group(), "not found")
    for match in DOUBLE_BACKTICK_PATTERN.finditer(text.text):
        parts = match.group(1).split(".")
        if parts[-1] in NOT_ATTRIBUTES or parts[0] in VARIABLE_NAMES:
            continue
        if _backticked_resolves(repo, module, parts) is False:
            yield Violation(text.path, text.line_of(match.start()), match.group(), "not found")


def _role_resolves(repo: Repository, module: str, role: str, target: str) -> bool | None:
    found = repo.resolve_from(module, target)
    if found is not False or "." in target or role not in {"meth", "attr"}:
        return found
    # a bare method or attribute name: a member of a class of this module
    for node in repo.symbols(module).definitions.values():
        if isinstance(node, ast.ClassDef) and target in _class_members(node):
            return True
    return False


def _backticked_resolves(repo: Repository, module: str | None, parts: list[str]) -> bool | None:
    """Whether ``parts`` name something, as written in ``module`` (None: in a Markdown page)."""
    head = parts[0]
    if module and repo.symbols(module).has(head):
        return repo.resolves_in(module, parts)
    if head in repo.package_names:
        # the module named by a suffix of its dotted name: numbering.x, cuda.frame_pipeline
        for cut in range(len(parts), 0, -1):
            suffix = ".".join(parts[:cut])
            for name in repo.modules:
                named = name == suffix or name.endswith(f".{suffix}")
                if named and repo.resolves_in(name, parts[cut:]):
                    return True
        # a variable named after its type's module: ``settings.max_coordinate`` (NodeSettings)
        for name in repo.modules:
            if name == head or name.endswith(f".{head}"):
                for node in repo.symbols(name).definitions.values():
                    if isinstance(node, ast.ClassDef) and parts[1] in _class_members(node):
                        return True
        return False
    if head in repo.package_definitions:
        return any(repo.resolves_in(name, parts) for name in repo.package_definitions[head])
    return None


def issue_violations(text: Text) -> Iterator[Violation]:
    if text.kind == "name":
        yield Violation(text.path, text.line, text.text, "tracker issue number in a name")
        return
    for match in ISSUE_PATTERN.finditer(text.text):
        before = text.text[max(0, match.start() - 80) : match.start()]
        if UPSTREAM_ISSUE_PREFIX.search(before) or "github.com/" in before.rsplit(" ", 1)[-1]:
            continue
        reference = match.group().strip()
        yield Violation(text.path, text.line_of(match.start()), reference, "tracker issue number")


# --- Markdown pages -----------------------------------------------------------------------------

FENCE_PATTERN = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
HEADING_PATTERN = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.M)
LINK_PATTERN = re.compile(r"!?\[[^\]\n]*\]\(([^()\s]+)(?:[ \t]+\"[^\"\n]*\")?\)")
INLINE_CODE_PATTERN = re.compile(r"`([^`]+)`")
DOTTED_CODE_PATTERN = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?", re.S)
OLD_NEW_HEADER = re.compile(r"^\|[ \t]*Old[ \t]*\|[ \t]*New[ \t]*\|")


def _blanked(text: str) -> str:
    """``text`` as spaces, its line breaks kept (so offsets and line numbers stay)."""
    return re.sub(r"[^\n]", " ", text)


def markdown_page(path: Path, source: str) -> Text:
    """The page as one text, the first column of its ``| Old | New |`` tables blanked."""
    lines = source.split("\n")
    in_table = False
    for index, line in enumerate(lines):
        in_table = bool(OLD_NEW_HEADER.match(line)) or (in_table and line.startswith("|"))
        cells = line.split("|")
        if in_table and len(cells) > 2:
            lines[index] = "|".join([cells[0], _blanked(cells[1]), *cells[2:]])
    return Text(path, 1, "\n".join(lines), "page")


def markdown_prose(text: str) -> str:
    """``text`` with its fenced code blocks blanked."""
    return FENCE_PATTERN.sub(lambda match: _blanked(match.group()), text)


def heading_anchors(source: str) -> set[str]:
    """The ``#anchor`` of every heading of a page, as GitHub names them."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for match in HEADING_PATTERN.finditer(markdown_prose(source)):
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(f"{slug}-{count}" if count else slug)
    return anchors


def link_violations(page: Text) -> Iterator[Violation]:
    for match in LINK_PATTERN.finditer(markdown_prose(page.text)):
        target = match.group(1)
        if URL_PATTERN.match(target) or target.startswith("mailto:"):
            continue
        path_part, _, anchor = target.partition("#")
        linked = page.path.parent / path_part if path_part else page.path
        line = page.line_of(match.start())
        if not linked.exists():
            yield Violation(page.path, line, target, "no such file")
        elif (
            anchor
            and linked.suffix == ".md"
            and anchor not in heading_anchors(linked.read_text(encoding="utf-8"))
        ):
            yield Violation(page.path, line, target, "no such heading")


def markdown_dotted_violations(page: Text, repo: Repository) -> Iterator[Violation]:
    for match in INLINE_CODE_PATTERN.finditer(markdown_prose(page.text)):
        dotted = DOTTED_CODE_PATTERN.fullmatch(match.group(1).strip())
        if not dotted or dotted.group(1) in REMOVED_NAMES:
            continue
        parts = dotted.group(1).split(".")
        if parts[-1] in NOT_ATTRIBUTES or parts[0] in VARIABLE_NAMES:
            continue
        if _backticked_resolves(repo, None, parts) is False:
            yield Violation(page.path, page.line_of(match.start()), match.group(), "not found")


def markdown_violations(path: Path, repo: Repository) -> Iterator[Violation]:
    """Rule 4: the rules of files and issue numbers on the page, its links, its dotted names."""
    page = markdown_page(path, path.read_text(encoding="utf-8"))
    yield from issue_violations(page)
    yield from link_violations(page)
    yield from markdown_dotted_violations(page, repo)
    # a link's target is checked as a link (relative to the page only), not as a file name
    text = page.text
    for match in LINK_PATTERN.finditer(markdown_prose(text)):
        start, end = match.span(1)
        text = text[:start] + _blanked(text[start:end]) + text[end:]
    for violation in file_violations(Text(path, 1, text, "page"), repo):
        if violation.reference not in REMOVED_NAMES:
            yield violation


def find_violations(root: Path) -> list[Violation]:
    """Every violation of the four rules in the repository at ``root``."""
    repo = Repository(root)
    violations: list[Violation] = []
    for path in repo.scanned_files():
        source = path.read_text(encoding="utf-8")
        if path.suffix == ".py":
            module = repo.module_name(path)
            texts = list(python_texts(path, source, repo.tree(path)))
        elif path.suffix == ".sh":
            module, texts = "", list(shell_comments(path, source))
        else:
            module, texts = "", list(cuda_comments(path, source))
        for text in texts:
            violations.extend(issue_violations(text))
            if text.kind in {"docstring", "comment"}:
                violations.extend(file_violations(text, repo))
                if module:
                    violations.extend(dotted_violations(text, module, repo))
    for path in repo.markdown_pages():
        violations.extend(markdown_violations(path, repo))
    return violations


# --- the tests ----------------------------------------------------------------------------------


def test_docstrings_and_comments_name_what_exists():
    violations = [violation.describe(REPO) for violation in find_violations(REPO)]
    assert not violations, "stale references:\n" + "\n".join(violations)


SYNTHETIC_FILES = {
    f"{PACKAGE}/__init__.py": '"""The package."""\n',
    f"{PACKAGE}/core/__init__.py": "",
    f"{PACKAGE}/core/numbering.py": (
        '"""Numbering: see ``docs/notes.md``."""\n\n'
        "LIMIT = 3\n\n\n"
        "def canonical_labels(labels):\n"
        '    """Canonical labels (:data:`LIMIT`, :data:`MISSING_LIMIT`, :func:`x <lost>`)."""\n'
        "    return labels\n\n\n"
        "class Labels:\n"
        '    """See :meth:`relabel`, :meth:`absent_method`, :func:`it <canonical_labels>`."""\n\n'
        "    def relabel(self):\n"
        "        self.count = 0\n"
    ),
    f"{PACKAGE}/core/uses.py": (
        '"""Uses :func:`~.numbering.canonical_labels` and :func:`.numbering.lost_function`,\n'
        ":class:`..core.numbering.Labels`, :mod:`..cuda.frame_pipeline`,\n"
        ":attr:`Labels.count`, :meth:`Labels.missing_method`, :class:`rclpy.node.Node`,\n"
        "``numbering.canonical_labels``, ``numbering.renamed_labels``, ``Labels.relabel``,\n"
        "``Labels.gone``, ``np.add.reduceat`` and ``cupy.RawModule``.\n"
        '"""\n\n'
        "import rclpy\n\n"
        "from .numbering import Labels\n\n"
        "# The proof is in NOTES.md, the note in docs/union_find.md; cuda/kernels/gone.cuh,\n"
        "# not https://example.com/elsewhere.md nor test_*.py. Both fixed in issue 11 (#12).\n"
        'HELP = "as asked in issues 9-12"\n'
        'UPSTREAM = "cupy/cupy#1234 and tier4/nebula issue 56"\n\n\n'
        "def test_issue_11_targets():\n"
        '    """Numbering: ``core/numbering.py``, ``ros/node/node.py``, ``numbering.md``."""\n'
    ),
    f"{PACKAGE}/cuda/kernels/common.cuh": "// Shared by graph.cu\n",
    f"{PACKAGE}/cuda/kernels/graph.cu": (
        '#include "common.cuh"\n'
        "// Edges (see common.cuh, union_find.md and ghost.md)\n"
        '/* "quoted" kernel, issue #4 */\n'
        'const char *s = "// not a comment, gone.cu";\n'
    ),
    "docs/union_find.md": "# Union-find\n",
    "README.md": (
        "# The package\n\n"
        "[Fused](docs/union_find.md#union-find), [page](docs/page.md#the-h100s-usage),\n"
        "[top](#the-package), "
        "[gone](docs/gone.md), [nowhere](docs/page.md#nowhere), [site](https://example.com/x.md).\n"
    ),
    "docs/page.md": (
        "# Page\n\n## The H100's usage\n\n"
        "`numbering.canonical_labels`, `numbering.gone_name()`, `Labels.relabel`, `np.add.at`,\n"
        "``core/numbering.py``, `core/lost.py`, ![figure](figures/x.png),\n"
        "[up](../README.md#missing)\n\n"
        "```python\n"
        "numbering.in_code_blocks_not_checked  # [link](core/code.md), core/found.py: files are\n"
        "```\n"
    ),
    "CHANGELOG.md": (
        "# Changelog\n\n"
        "| Old | New |\n|---|---|\n"
        "| `core/old.py`, `numbering.old_name` | `core/numbering.py` |\n"
        "| `core/older.py` | `core/newer.py`, `numbering.newer_name` |\n\n"
        "Fixed in issue 12, `ros/detections.py` is gone.\n"
    ),
}

EXPECTED_SYNTHETIC = {
    f"{PACKAGE}/core/numbering.py:1: docs/notes.md",
    f"{PACKAGE}/core/numbering.py:7: :data:`MISSING_LIMIT`",
    f"{PACKAGE}/core/numbering.py:7: :func:`x <lost>`",
    f"{PACKAGE}/core/numbering.py:12: :meth:`absent_method`",
    f"{PACKAGE}/core/uses.py:1: :func:`.numbering.lost_function`",
    f"{PACKAGE}/core/uses.py:2: :mod:`..cuda.frame_pipeline`",
    f"{PACKAGE}/core/uses.py:3: :meth:`Labels.missing_method`",
    f"{PACKAGE}/core/uses.py:4: ``numbering.renamed_labels``",
    f"{PACKAGE}/core/uses.py:5: ``Labels.gone``",
    f"{PACKAGE}/core/uses.py:12: NOTES.md",
    f"{PACKAGE}/core/uses.py:12: cuda/kernels/gone.cuh",
    f"{PACKAGE}/core/uses.py:13: issue 11",
    f"{PACKAGE}/core/uses.py:13: (#12)",
    f"{PACKAGE}/core/uses.py:14: issues 9-12",
    f"{PACKAGE}/core/uses.py:18: test_issue_11_targets",
    f"{PACKAGE}/core/uses.py:19: ros/node/node.py",
    f"{PACKAGE}/core/uses.py:19: numbering.md",
    f"{PACKAGE}/cuda/kernels/graph.cu:2: ghost.md",
    f"{PACKAGE}/cuda/kernels/graph.cu:3: issue #4",
    "README.md:4: docs/gone.md",
    "README.md:4: docs/page.md#nowhere",
    "docs/page.md:5: `numbering.gone_name()`",
    "docs/page.md:6: core/lost.py",
    "docs/page.md:6: figures/x.png",
    "docs/page.md:7: ../README.md#missing",
    "docs/page.md:10: core/code.md",
    "docs/page.md:10: core/found.py",
    "CHANGELOG.md:6: core/newer.py",
    "CHANGELOG.md:6: `numbering.newer_name`",
    "CHANGELOG.md:8: issue 12",
}


def test_the_rules_catch_a_bad_reference_of_each_kind(tmp_path: Path):
    for name, content in SYNTHETIC_FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    found = {violation.where(tmp_path) for violation in find_violations(tmp_path)}
    assert found == EXPECTED_SYNTHETIC
