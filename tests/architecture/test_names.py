"""One name per idea: no two classes in the package share a name.

Two classes with one name read as one idea in a traceback, a docstring or an import, and an
import of the wrong one type-checks wherever their fields happen to agree.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "syncswitch"


def _class_names() -> dict[str, list[str]]:
    """Every class defined anywhere under syncswitch/ (nested ones too) -> where."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_class_names_are_unique() -> None:
    found = _class_names()
    assert found, "no classes found under syncswitch/: a stale path"
    clashes = {name: places for name, places in found.items() if len(places) > 1}
    listed = "\n".join(f"{name}: {', '.join(places)}" for name, places in sorted(clashes.items()))
    assert not clashes, f"class names defined more than once:\n{listed}"
