"""One name per idea: no two classes in the package share a name, nor two modules a file name.

Two classes with one name read as one idea in a traceback, a docstring or an import, and an
import of the wrong one type-checks wherever their fields happen to agree. Two modules with one
file name are two `search.py` tabs in an editor and two `report.py` lines in a traceback: which
one is meant takes reading the folder too.
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


# File names two modules may still share, each pair judged harmless (the same idea at two
# layers: the record and who fills it, the work and its Ray shell) or owned by another
# change. The list shows what is left; a new clash fails until it is renamed or listed here.
SHARED_FILE_NAMES: dict[str, tuple[str, ...]] = {
    # summary.json's typed record (rundir) and the controller building it (control).
    "summary.py": ("control/summary.py", "rundir/summary.py"),
    # The evaluation itself and the Ray actor around it (runtime/ray/evaluator.py says so).
    "evaluator.py": ("runtime/evaluator.py", "runtime/ray/evaluator.py"),
    # The checkpoint files' layout (core) and when the controller writes one (control).
    "checkpoints.py": ("control/checkpoints.py", "core/reliability/checkpoints.py"),
    # The divergence guard's math (core) and its glue into the controller (control).
    "divergence.py": ("control/divergence.py", "core/reliability/divergence.py"),
    # The data plane's socket end and the parameter-server actor: both a server's side of one
    # thing, never imported side by side.
    "server.py": ("runtime/dataplane/server.py", "runtime/ray/server.py"),
    # A worker as each runtime runs it (a Ray actor, a simulated one): one runtime's package
    # never imports the other's.
    "worker.py": ("runtime/ray/worker.py", "runtime/sim/worker.py"),
    # Each option's declared checks (config) and a first batch through model and loss
    # (workloads): checks of a job, at two layers.
    "checks.py": ("config/checks.py", "workloads/checks.py"),
    # The bounded, atomic file primitives (the leaf) and the YAML/TOML readers on top of them.
    "files.py": ("config/files.py", "files.py"),
    # Each package's base beside its implementations (what every protocol is asked; what a
    # logger backend receives, RunLogger), mostly imported through the package's own name.
    "base.py": ("core/sync/protocols/base.py", "loggers/base.py"),
}


def _file_names(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Module file name -> the modules under `package` with it (relative to it), leaving out
    `__init__.py` and cli/ (a command's module is named after its subcommand, on purpose)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if path.name == "__init__.py" or relative.parts[0] == "cli":
            continue
        found[path.name].append(relative.as_posix())
    return found


def _unlisted_clashes(
    names: dict[str, list[str]], allowed: dict[str, tuple[str, ...]]
) -> dict[str, list[str]]:
    return {
        name: places
        for name, places in names.items()
        if len(places) > 1 and tuple(places) != allowed.get(name)
    }


def test_module_file_names_are_unique() -> None:
    names = _file_names()
    assert names, "no modules found under syncswitch/: a stale path"
    clashes = _unlisted_clashes(names, SHARED_FILE_NAMES)
    listed = "\n".join(f"{name}: {', '.join(places)}" for name, places in sorted(clashes.items()))
    assert not clashes, (
        f"module file names used more than once (rename one, or list the pair in "
        f"SHARED_FILE_NAMES with why):\n{listed}"
    )


def test_the_allowed_shared_names_still_clash() -> None:
    # A pair renamed since leaves its line here: drop it, so the list stays what is left.
    names = _file_names()
    stale = [name for name, places in SHARED_FILE_NAMES.items() if names.get(name) != list(places)]
    assert not stale, f"SHARED_FILE_NAMES lists pairs that no longer clash: {stale}"


def test_the_file_name_check_sees_a_clash(tmp_path: Path) -> None:
    for module in ("a/search.py", "b/search.py", "cli/report.py", "c/report.py", "d/__init__.py"):
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text("")
    (tmp_path / "__init__.py").write_text("")
    names = _file_names(tmp_path)
    assert _unlisted_clashes(names, {}) == {"search.py": ["a/search.py", "b/search.py"]}
    assert _unlisted_clashes(names, {"search.py": ("a/search.py", "b/search.py")}) == {}
