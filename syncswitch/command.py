"""How to run `syncswitch` from here, spelled as the user would type it.

The README installs into `.venv` without activating it, so a printed hint that says bare
`syncswitch ...` would not run in the user's shell. `program()` names the command the way
that works: `syncswitch` when the one on PATH is this installation's, otherwise the path of
the script beside this interpreter (`.venv/bin/syncswitch` from the repository root).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

NAME = "syncswitch"


def program(*, cwd: Path | None = None, path: str | None = None) -> str:
    """The `syncswitch` command as it runs from `cwd` with `path` as PATH (defaults: the
    process's own)."""
    beside = Path(sys.executable).parent / NAME  # the interpreter's bin/ (not resolved)
    if not beside.is_file():
        return NAME  # not an installed environment (e.g. run from a source tree)
    on_path = shutil.which(NAME, path=path if path is not None else os.environ.get("PATH"))
    if on_path is not None and _same_file(Path(on_path), beside):
        return NAME
    here = cwd or Path.cwd()
    relative = os.path.relpath(beside.absolute(), here)
    return relative if not relative.startswith("..") else str(beside.absolute())


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False
