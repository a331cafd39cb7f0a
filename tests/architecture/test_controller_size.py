"""The run controller tells the run's story; cohesive pieces of it live in collaborators."""

from __future__ import annotations

import ast
from pathlib import Path

CONTROLLER = Path(__file__).resolve().parents[2] / "syncswitch" / "control" / "controller.py"
MOST_METHODS = 20


def test_run_controller_has_at_most_twenty_methods() -> None:
    tree = ast.parse(CONTROLLER.read_text(), filename=str(CONTROLLER))
    (controller,) = [
        n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunController"
    ]
    methods = [
        n.name for n in controller.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    assert len(methods) <= MOST_METHODS, (
        f"RunController has {len(methods)} methods (at most {MOST_METHODS}): {', '.join(methods)}"
    )
