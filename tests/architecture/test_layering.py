"""The dependency rules of docs/architecture.md, checked: `core` and `control` never reach Ray.

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

PACKAGE = Path(__file__).resolve().parents[2] / "syncswitch"
RAY_FREE = ("core", "control")
# What core and control may not import, even lazily: Ray, and the runtimes that wrap it.
FORBIDDEN = ("ray", "syncswitch.runtime")


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _forbidden(module: str) -> bool:
    return any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN)


@pytest.mark.parametrize("package", RAY_FREE)
def test_no_module_imports_ray_or_a_runtime(package: str) -> None:
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: import {module}"
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for line, module in _imports(path)
        if _forbidden(module)
    ]
    assert offending == [], "\n".join(offending)


def test_the_static_check_sees_a_lazy_ray_import(tmp_path: Path) -> None:
    module = tmp_path / "lazy.py"
    module.write_text("def f():\n    import ray.util\n    from ray import get\n")
    assert [m for _, m in _imports(module) if _forbidden(m)] == ["ray.util", "ray"]


def test_core_and_control_import_with_ray_absent() -> None:
    # sys.modules['ray'] = None makes every `import ray` fail, as on a machine without Ray.
    code = (
        "import sys; sys.modules['ray'] = None; "
        "import pkgutil, importlib, syncswitch.core, syncswitch.control\n"
        "for pkg in (syncswitch.core, syncswitch.control):\n"
        "    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "assert 'ray' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
