"""The house's standing checks: static (ast and text only, nothing imported), milliseconds.

- no module in syncswitch/ over MAX_MODULE_LINES lines: a module that long holds more than one
  concept, and is split by concept;
- no class in core/ or control/ with more than MAX_METHODS methods (defs directly in its body):
  a class that big is doing more than one job;
- no import circle among the package's modules (module-level imports, those under
  `if TYPE_CHECKING:` included, lazy imports inside functions not): every cycle is reported as
  `a -> b -> ... -> a`;
- docs/architecture.md names only modules that exist: every `dir/name.py` path it mentions
  (relative to syncswitch/ or to the repository), and every bare `name.py` in its package tree
  (relative to the folder it is listed under).

Each failure lists everything that is wrong, not only the first.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "syncswitch"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_MODULE_LINES = 450
MAX_METHODS = 20
METHOD_LIMITED = ("core", "control")  # folders under syncswitch/ whose classes are counted


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its
    __init__.py)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each module parsed once per session, whichever checks read it."""
    return ast.parse(path.read_text(), filename=str(path))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


# -- sizes ------------------------------------------------------------------------------------


def _long_modules(package: Path = PACKAGE, limit: int = MAX_MODULE_LINES) -> list[str]:
    long = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            long.append(f"{_rel(path)}: {lines} lines")
    return long


def _big_classes(paths: list[Path], limit: int = MAX_METHODS) -> list[str]:
    big = []
    for path in paths:
        tree = _tree(path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = [
                n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            if len(methods) > limit:
                big.append(f"{_rel(path)}:{node.lineno}: class {node.name}: {len(methods)} methods")
    return big


def test_no_module_is_over_the_line_limit() -> None:
    long = _long_modules()
    assert long == [], (
        f"{len(long)} module(s) over {MAX_MODULE_LINES} lines; split each by concept:\n"
        + "\n".join(long)
    )


def test_no_class_in_core_or_control_has_too_many_methods() -> None:
    paths = [p for folder in METHOD_LIMITED for p in sorted((PACKAGE / folder).rglob("*.py"))]
    assert paths, f"no modules under {METHOD_LIMITED}: a stale rule"
    big = _big_classes(paths)
    assert big == [], (
        f"{len(big)} class(es) with more than {MAX_METHODS} methods; give a job to a "
        "collaborator:\n" + "\n".join(big)
    )


# -- import circles ---------------------------------------------------------------------------


def _top_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported: at its top level and inside top-level
    if/try/with blocks (`if TYPE_CHECKING:` included); never inside a def or a class."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If | ast.For | ast.While):
            pending.extend([*node.body, *node.orelse])
        elif isinstance(node, ast.With):
            pending.extend(node.body)
        elif isinstance(node, ast.Try | ast.TryStar):
            pending.extend(node.body)
            for handler in node.handlers:
                pending.extend(handler.body)
            pending.extend([*node.orelse, *node.finalbody])


def _import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level. `from a.b import c` is an
    import of module a.b.c when that is a module, else of a.b."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = _tree(path)
        for node in _top_level_imports(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    # Relative: from the module's own package, one level up per extra dot.
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            graph[name].update(t for t in targets if t in modules)
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _cycle_through(start: str, members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest import path from `start` back to itself inside one component."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & members):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if successor not in previous:
                    previous[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{start} is in no cycle of {sorted(members)}")


def _import_cycles(graph: dict[str, set[str]]) -> list[str]:
    cycles = []
    for component in _strongly_connected(graph):
        if len(component) == 1 and component[0] not in graph[component[0]]:
            continue
        cycle = _cycle_through(component[0], set(component), graph)
        also = f" (all of {', '.join(component)} import each other)" if len(component) > 2 else ""
        cycles.append(" -> ".join(cycle) + also)
    return sorted(cycles)


def test_no_import_circles() -> None:
    cycles = _import_cycles(_import_graph())
    assert cycles == [], (
        f"{len(cycles)} import circle(s) among module-level imports; cut each (move what both "
        "need below both, or import lazily where it is used):\n" + "\n".join(cycles)
    )


# -- docs/architecture.md ---------------------------------------------------------------------

# A `.py` path as the page writes one: letters, digits, '_' and '/', not part of a longer word
# or dotted name.
_PY = re.compile(r"(?<![\w/.-])([a-z0-9_][a-z0-9_/]*\.py)\b")
_FOLDER = re.compile(r"^[a-z_][a-z0-9_]*/$")


def _tree_entries(markdown: str) -> Iterator[tuple[int, str, str]]:
    """(line, folder, name) for each bare `name.py` in a fenced package tree: the folder is
    the one it is listed under (by indentation; a line indented deeper than its folder's
    entries continues the entry above)."""
    fenced = False
    folders: list[tuple[int, str]] = []  # (indent, name) of the enclosing folders
    for number, line in enumerate(markdown.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced, folders = not fenced, []
            continue
        if not fenced or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        first = line.split()[0]
        entry = not folders or indent <= folders[-1][0] + 2
        if entry:
            while folders and folders[-1][0] >= indent:
                folders.pop()
            if _FOLDER.match(first):
                folders.append((indent, first.rstrip("/")))
        if not folders:
            continue
        folder = "/".join(name for _, name in folders)
        for match in _PY.finditer(line):
            if "/" not in match.group(1):
                yield number, folder, match.group(1)


def _missing_in_docs(markdown: str, root: Path = ROOT) -> list[str]:
    package = root / "syncswitch"
    missing = []
    for number, line in enumerate(markdown.splitlines(), start=1):
        for match in _PY.finditer(line):
            path = match.group(1)
            if "/" in path and not (package / path).is_file() and not (root / path).is_file():
                missing.append(f"line {number}: {path} (no syncswitch/{path}, no {path})")
    for number, folder, name in _tree_entries(markdown):
        if not (root / folder / name).is_file():
            missing.append(f"line {number}: {name} listed under {folder}/ (no {folder}/{name})")
    return sorted(missing, key=lambda text: int(text.split(":")[0].split()[1]))


def test_architecture_page_names_only_modules_that_exist() -> None:
    missing = _missing_in_docs(ARCHITECTURE.read_text())
    assert missing == [], (
        f"docs/architecture.md names {len(missing)} module(s) that do not exist; point each at "
        "where it lives now:\n" + "\n".join(missing)
    )


# -- the checks themselves --------------------------------------------------------------------


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_cycle_check_follows_module_level_imports_only(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.c import C\n"
            ),
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "import pkg.a\nclass C: ...\n",
            "pkg/lazy.py": "import pkg.d\n",
            "pkg/d.py": "def f():\n    import pkg.lazy\n",
            "pkg/rel.py": "from . import rel2\n",
            "pkg/rel2.py": "from .rel import x\n",
        },
    )
    graph = _import_graph(package)
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.sub.c"}
    assert graph["pkg.d"] == set()
    assert _import_cycles(graph) == [
        "pkg.a -> pkg.b -> pkg.sub.c -> pkg.a (all of pkg.a, pkg.b, pkg.sub.c import each other)",
        "pkg.rel -> pkg.rel2 -> pkg.rel",
    ]


def test_the_size_checks_name_what_is_too_big(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "pkg/long.py": "x = 1\n" * 451,
            "pkg/fits.py": "x = 1\n" * 450,
            "pkg/big.py": "class Big:\n"
            + "".join(f"    def m{i}(self): ...\n" for i in range(21))
            + "class Fine:\n"
            + "".join(f"    def m{i}(self): ...\n" for i in range(20)),
        },
    )
    assert [line.split("pkg/")[1] for line in _long_modules(package)] == ["long.py: 451 lines"]
    assert [line.split("pkg/")[1] for line in _big_classes([package / "big.py"])] == [
        "big.py:1: class Big: 21 methods"
    ]


def test_the_docs_check_reads_paths_and_the_package_tree(tmp_path: Path) -> None:
    _package(
        tmp_path,
        {
            "syncswitch/core/sync/synchronizer.py": "",
            "syncswitch/control/shard.py": "",
            "tests/t.py": "",
        },
    )
    page = "\n".join(
        [
            "See core/sync/synchronizer.py, tests/t.py and core/gone.py; harness.py is prose.",
            "```",
            "syncswitch/",
            "  control/     the controller: shard.py, old.py",
            "    shard.py         ServerShard",
            "                     continued; gone.py too",
            "  core/",
            "    sync/            synchronizer.py",
            "```",
        ]
    )
    assert _missing_in_docs(page, tmp_path) == [
        "line 1: core/gone.py (no syncswitch/core/gone.py, no core/gone.py)",
        "line 4: old.py listed under syncswitch/control/ (no syncswitch/control/old.py)",
        "line 6: gone.py listed under syncswitch/control/ (no syncswitch/control/gone.py)",
    ]
