"""An import path to the user's own code (`mypkg.models:Net`), as `--model` and `--dataset`
take one: checked for form without importing anything, and resolved to the object it names.

The form is `MODULE:NAME`: a dotted module, a colon, then a name in it (a dotted name reaches
inside, e.g. `mypkg.zoo:Nets.small`). The colon is what makes a value an import path, so that
a built-in name, or a typo of one, is never taken for code to import, and the module and the
attribute are never guessed from a dotted string (LightningCLI's `class_path` and Hydra's
`_target_` guess; setuptools' entry points and `uvicorn app:main` do not).

Resolving imports the module, and so runs its code: only a value the user gave (a flag or a
config file they named) is resolved, never one read from a run directory (docs/security.md).
A module that cannot be found, a name it lacks, an import that fails inside the module, or an
object that is not callable without arguments is one UserError line, never a traceback.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import traceback
from typing import Any

from syncswitch.errors import ConfigError

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_IDENTIFIER}(\.{_IDENTIFIER})*"
_FORM = re.compile(rf"{_DOTTED}:{_DOTTED}")
FORM = "MODULE:NAME (e.g. mypkg.models:Net)"


def is_import_path(value: object) -> bool:
    """Whether `value` is meant as an import path: text holding a colon."""
    return isinstance(value, str) and ":" in value


def colon_hint(value: str) -> str:
    """For a dotted name given where an import path was meant: how to write it."""
    module, dot, name = value.rpartition(".")
    if not dot or not _FORM.fullmatch(f"{module}:{name}"):
        return ""
    return f" (your own code is named with a colon: {module}:{name})"


def import_path_problem(value: str) -> str | None:
    """What is wrong with the form of import path `value`; None when it is well formed."""
    if _FORM.fullmatch(value):
        return None
    return f"{value!r} is not an import path of the form {FORM}"


def resolve(path: str, option: str) -> Any:
    """The callable that import path `path` names; `option` ("model", "dataset") is what the
    message names. The current directory is put on the module search path (last), as
    `python -m` would put it first, so that `mypkg` beside the command is found."""
    problem = import_path_problem(path)
    if problem:
        raise ConfigError(f"{option} {problem}")
    module_name, _, attribute = path.partition(":")
    _search_current_directory()
    module = _import(module_name, option)
    found: Any = module
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigError(
                f"{option} {path!r}: module {module_name!r} ({_where(module)}) has no {attribute!r}"
            ) from None
    if not callable(found):
        raise ConfigError(
            f"{option} {path!r} names a value of type {type(found).__name__}, not a callable: "
            "name a function or class that takes no arguments"
        )
    required = _required_parameters(found)
    if required:
        raise ConfigError(
            f"{option} {path!r} takes arguments ({', '.join(required)}); name a function or "
            "class that takes none (e.g. one of yours that calls it with them)"
        )
    return found


def _required_parameters(found: Any) -> list[str]:
    """The parameters a call without arguments would miss (none known: an empty list)."""
    try:
        signature = inspect.signature(found)
    except (TypeError, ValueError):  # some built-in callables have none
        return []
    return [
        name
        for name, parameter in signature.parameters.items()
        if parameter.default is parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    ]


def _import(module_name: str, option: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(
                f"{option}: no module named {missing!r} (looked in the current directory, "
                "PYTHONPATH and the installed packages)"
            ) from None
        raise ConfigError(_failed(module_name, option, error)) from None
    except Exception as error:  # the user's module raised while it was imported
        raise ConfigError(_failed(module_name, option, error)) from None


def _failed(module_name: str, option: str, error: BaseException) -> str:
    """One line for an import that failed inside the user's module: what and where."""
    if isinstance(error, SyntaxError):  # raised by the compiler, not in the module's code
        where = f" at {error.filename}:{error.lineno}"
        return f"{option}: importing {module_name!r} failed{where}: SyntaxError: {error.msg}"
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not frame.filename.startswith("<frozen")  # importlib's own
    ]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{option}: importing {module_name!r} failed{where}: {type(error).__name__}: {error}"


def _where(module: Any) -> str:
    return str(getattr(module, "__file__", None) or "a namespace package")


def _search_current_directory() -> None:
    # The console script's sys.path starts with its own bin directory, not the current one.
    # Last, not first: a file in the current directory never shadows an installed package.
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)
