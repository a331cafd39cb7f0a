"""The house's standing checks: static (ast and text only, nothing imported), milliseconds.

- no module in syncswitch/ over MAX_MODULE_LINES lines: a module that long holds more than one
  concept, and is split by concept;
- no class in syncswitch/ with more than MAX_METHODS methods (defs directly in its body): a
  class that big is doing more than one job;
- the package's layers (LAYER_ORDER, lowest first): no module imports from a layer above its
  own, not even lazily (inside a function) or under `if TYPE_CHECKING:`;
- no import circle among the package's modules (module-level imports, those under
  `if TYPE_CHECKING:` included), and none either once lazy imports inside functions count:
  every cycle is reported as `a -> b -> ... -> a`;
- docs/architecture.md names only modules that exist: every `dir/name.py` path it mentions
  (relative to syncswitch/ or to the repository), and every bare `name.py` in its package tree
  (relative to the folder it is listed under).

Each failure lists everything that is wrong, not only the first.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "syncswitch"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_MODULE_LINES = 450
MAX_METHODS = 20
OVER_METHOD_LIMIT: set[str] = set()  # classes allowed over MAX_METHODS ("module.Class")

# The package's layers, lowest first: syncswitch/NAME/ or syncswitch/NAME.py, and "__init__"
# (the package's API: train(), TrainConfig, ...) on top. A module imports only from its own
# layer and the ones before it (docs/architecture.md, "Who imports whom").
LAYER_ORDER = (
    # the leaves: no torch, nothing of the package but each other
    "errors",
    "keys",
    "command",
    "user_code",
    "files",
    "import_path",
    "cluster_address",
    "terminal",
    "records",  # the records core and rundir share
    "core",  # semantics: protocols, the synchronizer, timing, stragglers, reliability
    "rundir",  # the run directory: its files, written and read
    "loggers",  # TensorBoard, MLflow: what the run directory receives, as series
    "config",  # TrainConfig and its checks (--logger's among them)
    "workloads",  # models, datasets, tasks, metrics
    "control",  # the run controller
    "registry",  # the job registry (SQL)
    "recurring",  # --schedule auto, the switch-point search
    "reports",  # tables and figures from run directories
    "run_summary",  # the end-of-run summary printed
    "runtime",  # train(): the simulator, the data plane, Ray
    "calibration",  # `syncswitch calibrate`: replays on the simulator
    "cli",  # the commands
    "__init__",  # the API
)


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


def _dotted(path: Path) -> str:
    """syncswitch/config/job.py -> syncswitch.config.job (outside the repository: its stem)."""
    relative = path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)
    return ".".join(relative.with_suffix("").parts)


# -- sizes ------------------------------------------------------------------------------------


def _long_modules(package: Path = PACKAGE, limit: int = MAX_MODULE_LINES) -> list[str]:
    long = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            long.append(f"{_rel(path)}: {lines} lines")
    return long


def _big_classes(
    paths: list[Path], limit: int = MAX_METHODS, allowed: frozenset[str] = frozenset()
) -> list[str]:
    """Classes with more than `limit` methods, but those `allowed` (module.Class)."""
    big = []
    for path in paths:
        tree = _tree(path)
        module = _dotted(path)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef) or f"{module}.{node.name}" in allowed:
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


def test_no_class_has_too_many_methods() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    big = _big_classes(paths, allowed=frozenset(OVER_METHOD_LIMIT))
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


def _all_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of the module: at module level, under TYPE_CHECKING, inside functions."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _imported(
    name: str, is_package: bool, node: ast.Import | ast.ImportFrom, modules: Iterable[str]
) -> list[str]:
    """What one import statement of module `name` imports, as dotted names (relative ones
    resolved). `from a.b import c` is an import of module a.b.c when that is a module, else
    of a.b."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        # Relative: from the module's own package, one level up per extra dot.
        anchor = name.split(".") if is_package else name.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
        for alias in node.names
    ]


def _import_graph(package: Path = PACKAGE, *, lazy: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level (with `lazy`, inside
    functions too)."""
    modules = _modules(package)
    imports = _all_imports if lazy else _top_level_imports
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in imports(_tree(path)):
            targets = _imported(name, path.name == "__init__.py", node, modules)
            graph[name].update(t for t in targets if t in modules and t != name)
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


def test_no_import_circles_counting_lazy_imports() -> None:
    cycles = _import_cycles(_import_graph(lazy=True))
    assert cycles == [], (
        f"{len(cycles)} import circle(s) once imports inside functions count; a lazy import "
        "hides a circle, it does not cut it (move what both need below both):\n" + "\n".join(cycles)
    )


# -- layers -----------------------------------------------------------------------------------


def _layer(module: str) -> str:
    """The layer of a dotted module of the package: its top-level package or module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _upward_imports(package: Path = PACKAGE, order: tuple[str, ...] = LAYER_ORDER) -> list[str]:
    """Every import, lazy and type-only ones included, of a layer above the importer's; and
    every top-level name of the package missing from `order`."""
    modules = _modules(package)
    rank = {name: i for i, name in enumerate(order)}
    unplaced = sorted({_layer(m) for m in modules} - set(rank))
    found = [f"{package.name}/{name}: in no layer of LAYER_ORDER" for name in unplaced]
    for name, path in modules.items():
        layer = _layer(name)
        if layer not in rank:
            continue
        for node in _all_imports(_tree(path)):
            for target in _imported(name, path.name == "__init__.py", node, modules):
                if target != package.name and not target.startswith(package.name + "."):
                    continue
                # `from syncswitch import X`: a module X if there is one, else the API.
                above = _layer(target)
                if rank.get(above, -1) > rank[layer]:
                    found.append(
                        f"{_rel(path)}:{node.lineno}: {layer} imports {target} ({above} is "
                        "above it)"
                    )
    return found


def test_no_layer_imports_a_layer_above_it() -> None:
    upward = _upward_imports()
    assert upward == [], (
        f"{len(upward)} import(s) against the layer order (lowest first: "
        f"{' < '.join(LAYER_ORDER)}); move what is needed down, or hand it in from above:\n"
        + "\n".join(upward)
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


def test_the_layer_check_sees_lazy_and_type_only_imports_and_unplaced_names(
    tmp_path: Path,
) -> None:
    package = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.high import api\n",
            "pkg/low.py": "def f():\n    from pkg.high import x\n",
            "pkg/mid/__init__.py": (
                "from typing import TYPE_CHECKING\nfrom pkg import low\n"
                "if TYPE_CHECKING:\n    from pkg import high\n"
            ),
            "pkg/mid/rel.py": "from .. import high\nfrom . import x\n",
            "pkg/high.py": "import pkg.low\nfrom pkg.mid import y\n",
            "pkg/stray.py": "",
        },
    )
    found = [line.split("pkg/", 1)[-1] for line in _upward_imports(package, LAYERS)]
    assert found == [
        "stray: in no layer of LAYER_ORDER",
        "low.py:2: low imports pkg.high (high is above it)",
        "mid/__init__.py:4: mid imports pkg.high (high is above it)",
        "mid/rel.py:1: mid imports pkg.high (high is above it)",
    ]


LAYERS = ("low", "mid", "high", "__init__")


def test_the_lazy_circle_check_follows_imports_inside_functions(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "pkg/__init__.py": "def f():\n    from pkg import opt\n",
            "pkg/opt.py": "def g():\n    from pkg import f\n",
        },
    )
    assert _import_cycles(_import_graph(package)) == []
    assert _import_cycles(_import_graph(package, lazy=True)) == ["pkg -> pkg.opt -> pkg"]


def test_the_method_limit_skips_only_the_allowed_classes() -> None:
    job = PACKAGE / "config" / "job.py"
    assert any("class TrainConfig" in line for line in _big_classes([job], limit=1))
    allowed = frozenset({"syncswitch.config.job.TrainConfig"})
    assert not any("class TrainConfig" in line for line in _big_classes([job], 1, allowed))
