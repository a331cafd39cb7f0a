"""The dependency rules of docs/architecture.md, checked: only runtime/ray/ reaches Ray.

Two checks, because each misses what the other sees: the static one names the offending line
even when the import sits inside a function (which an import-time check never runs); the
dynamic one catches Ray arriving indirectly, through a module outside these packages.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.architecture.test_house import LAYER_ORDER

PACKAGE = Path(__file__).resolve().parents[2] / "syncswitch"
RAY = "ray"
RUNTIMES = "syncswitch.runtime"  # any runtime: its Ray internals and its drivers
RAY_RUNTIME = "syncswitch.runtime.ray"
# core/ imports nothing of the package above it (LAYER_ORDER, test_house.py: the one list of
# the package's layers) but the leaf modules.
LAYERS_ABOVE_CORE = tuple(
    f"syncswitch.{name}"
    for name in LAYER_ORDER[LAYER_ORDER.index("core") + 1 :]
    if name != "__init__"
)
# core/'s subpackages, lowest first: each imports only those before it, so the imports between
# them run one way (docs/architecture.md draws it).
CORE_LAYERS = ("timing", "sync", "stragglers", "reliability", "cluster")
# Package (a folder under syncswitch/) -> what it may not import, even lazily. Every one of
# them works with Ray absent. calibration replays a job through `runtime.train` (on the
# simulator), and the simulator and the data plane are runtimes themselves: those three may
# import the runtime package, never its Ray part.
RULES: dict[str, tuple[str, ...]] = {
    "core": (RAY, RUNTIMES, *LAYERS_ABOVE_CORE),
    # The records core and rundir share (a switch, gradient counts): a leaf below both, which
    # imports neither them nor torch or numpy (it imports syncswitch.errors only).
    "records": (RAY, RUNTIMES, "torch", "numpy", "syncswitch.core", *LAYERS_ABOVE_CORE),
    "control": (RAY, RUNTIMES),
    "rundir": (RAY, RUNTIMES),
    "config": (RAY, RUNTIMES),
    "recurring": (RAY, RUNTIMES),
    "registry": (RAY, RUNTIMES),
    "reports": (RAY, RUNTIMES),
    "loggers": (RAY, RUNTIMES),
    "calibration": (RAY, RAY_RUNTIME),
    "runtime/sim": (RAY, RAY_RUNTIME),
    "runtime/dataplane": (RAY, RAY_RUNTIME),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _forbidden(module: str, forbidden: tuple[str, ...]) -> bool:
    return any(module == bad or module.startswith(bad + ".") for bad in forbidden)


@pytest.mark.parametrize("package", sorted(RULES))
def test_no_module_imports_what_its_package_may_not(package: str) -> None:
    modules = sorted((PACKAGE / package).rglob("*.py"))
    assert modules, f"syncswitch/{package} has no modules: a stale rule"
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: import {module}"
        for path in modules
        for line, module in _imports(path)
        if _forbidden(module, RULES[package])
    ]
    assert offending == [], "\n".join(offending)


def test_the_static_check_sees_a_lazy_ray_import(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    import ray.util\n    from ray import get\n")
    assert [m for _, m in _imports(module) if _forbidden(m, (RAY,))] == ["ray.util", "ray"]


def test_the_static_check_tells_the_runtime_package_from_its_ray_part() -> None:
    assert _forbidden("syncswitch.runtime.ray.launch", (RAY_RUNTIME,))
    assert not _forbidden("syncswitch.runtime.train", (RAY_RUNTIME,))
    assert not _forbidden("raylet_like", (RAY,))


def test_every_ray_free_package_imports_with_ray_absent() -> None:
    # sys.modules['ray'] = None makes every `import ray` fail, as on a machine without Ray.
    packages = [f"syncswitch.{name.replace('/', '.')}" for name in sorted(RULES)]
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import pkgutil, importlib\n"
        f"for name in {packages!r}:\n"
        "    pkg = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "assert 'ray' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _core_layer_rules() -> dict[str, tuple[str, ...]]:
    """core/NAME -> the core subpackages it may not import: itself and every one above it may
    import it, not the other way round."""
    rules = {}
    for i, name in enumerate(CORE_LAYERS):
        above = CORE_LAYERS[i + 1 :]
        # reliability and stragglers sit side by side: neither imports the other
        beside = {"stragglers": ("reliability",), "reliability": ("stragglers",)}.get(name, ())
        rules[name] = tuple(f"syncswitch.core.{other}" for other in (*above, *beside))
    return rules


def test_core_is_only_subpackages() -> None:
    # A module straight under core/ would belong to no layer: every concept has its folder.
    loose = sorted(p.name for p in (PACKAGE / "core").glob("*.py") if p.name != "__init__.py")
    assert loose == []
    folders = sorted(p.name for p in (PACKAGE / "core").iterdir() if (p / "__init__.py").exists())
    assert folders == sorted(CORE_LAYERS)


@pytest.mark.parametrize(("layer", "forbidden"), sorted(_core_layer_rules().items()))
def test_core_subpackages_import_one_way(layer: str, forbidden: tuple[str, ...]) -> None:
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: import {module}"
        for path in sorted((PACKAGE / "core" / layer).rglob("*.py"))
        for line, module in _imports(path)
        if _forbidden(module, forbidden)
    ]
    assert offending == [], "\n".join(offending)


def _core_import_graph() -> dict[str, set[str]]:
    """core/'s modules -> the core modules each imports, lazily or under TYPE_CHECKING too."""
    modules = {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
            ".__init__"
        ): path
        for path in (PACKAGE / "core").rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        imported = set()
        for _, module in _imports(path):
            imported.add(module)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):  # `from package import module` names a module too
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        graph[name] = {m for m in imported if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_core_modules_import_no_circle() -> None:
    # Within a subpackage too: a circle, even one closed only under TYPE_CHECKING, means two
    # modules are one concept split in two (or one needs a value that belongs lower down).
    assert _cycles(_core_import_graph()) == []


def test_the_circle_check_sees_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
