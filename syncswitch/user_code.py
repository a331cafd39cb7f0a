"""One line for an exception that the user's own code raised (a model, a dataset, a loss, a
metric, a factory: a traceback frame outside this package and the installed libraries), or
that Ray raised on its behalf in a worker; None for anything else, whose traceback is a bug
of ours to show.

The line names the exception's type, the first line of its message and where it was raised;
the caller prints it through `one_line`, which escapes control characters (a user's message,
or Ray's report of it, may hold colour codes).
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import traceback
from pathlib import Path

_PACKAGE = str(Path(__file__).resolve().parent) + os.sep
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    return tuple(str(Path(r).resolve()) + os.sep for r in roots if r)


def _is_users(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib...>, <string>
        return False
    resolved = str(Path(filename).resolve())
    return not resolved.startswith((_PACKAGE, *_library_roots()))


def described(error: BaseException, *, colours: bool = True) -> str:
    """`Type: first line of the message`; without `colours`, colour codes removed (Ray adds
    them to its reports). What is left is escaped by the printer (`one_line`)."""
    text = str(error) if colours else _ANSI.sub("", str(error))
    lines = text.strip().splitlines()
    return f"{type(error).__name__}: {lines[0].strip() if lines else ''}".rstrip(": ")


def user_failure(error: BaseException) -> str | None:
    """What the user's code (or Ray running it) raised, as one line; None when the
    exception came from this package or a library alone."""
    if type(error).__module__.split(".")[0] == "ray":
        cause = getattr(error, "cause", None)
        if isinstance(cause, BaseException) and type(cause).__module__.split(".")[0] != "ray":
            return f"a Ray worker's code raised {described(cause)}"
        return f"Ray: {described(error, colours=False)}"
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _is_users(f.filename)]
    if not frames:
        return None
    return f"your code raised {described(error)} (at {frames[-1].filename}:{frames[-1].lineno})"


def raised(error: BaseException) -> str:
    """`Type: message (at FILE:LINE)`: what a call into the user's code raised, and where
    (the deepest frame of the user's own, else the deepest frame)."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if _is_users(f.filename)] or frames
    where = f" (at {own[-1].filename}:{own[-1].lineno})" if own else ""
    return f"{described(error)}{where}"
