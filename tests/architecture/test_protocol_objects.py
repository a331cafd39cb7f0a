"""A protocol is one object: the code outside core/sync/protocols/ asks a protocol what it does
and names a specific one only where naming it is the point (static, milliseconds).

What may name one, and why (each a line count, so a new branch on a protocol shows up here):
- the grammar: only a BSP phase may end online (core/sync/protocol.py);
- the plan: the planned BSP share it reports (control/plan.py);
- policies whose choice is a protocol: online timing's follower (ASP or local-H,
  core/timing/follower.py, by name as the records carry it), the divergence guard's fallback
  (BSP, core/reliability/divergence.py);
- defaults before anything is known: the straggler view before the first report
  (control/stragglers.py), the protocol before a local phase (core/sync/live.py);
- the kind a model delta is counted under: only local rounds send deltas
  (core/sync/local_phase.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "syncswitch"
PROTOCOLS = PACKAGE / "core" / "sync" / "protocols"
# The names of specific protocols: their classes and their instances (and follower.py's names).
SPECIFIC = {"BSP", "ASP", "Bsp", "Asp", "Ssp", "LocalH"}
ALLOWED = {
    "core/sync/protocol.py": 1,
    "control/plan.py": 1,
    "core/timing/follower.py": 6,
    "core/reliability/divergence.py": 1,
    "control/stragglers.py": 4,
    "core/sync/live.py": 1,
    "core/sync/local_phase.py": 1,
}


def _naming_lines(path: Path) -> set[int]:
    """Lines of `path` whose code names a specific protocol (imports aside)."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        named = (isinstance(node, ast.Name) and node.id in SPECIFIC) or (
            isinstance(node, ast.Attribute) and node.attr in SPECIFIC
        )
        if named:
            lines.add(node.lineno)
    return lines


def test_only_the_listed_places_name_a_specific_protocol() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(PROTOCOLS):
            continue
        lines = _naming_lines(path)
        if lines:
            found[str(path.relative_to(PACKAGE))] = len(lines)
    over = {name: count for name, count in found.items() if count > ALLOWED.get(name, 0)}
    assert over == {}, (
        "these modules name a specific protocol (BSP, ASP, Ssp, LocalH, ...) more than the "
        f"listed places do: {over}; ask the protocol object instead (a property of "
        "core/sync/protocols/base.py's ProtocolSpec), or say here why naming it is the point"
    )
    assert sum(found.values()) <= sum(ALLOWED.values())


def test_the_check_sees_a_branch_on_a_protocol(tmp_path: Path) -> None:
    module = tmp_path / "branchy.py"
    module.write_text("if spec == BSP:\n    pass\nx = protocols.LocalH(4)\n")
    assert _naming_lines(module) == {1, 3}
