"""Plain data: what a checkpoint may hold, checked before saving and again after loading.

A checkpoint is a dict of plain data: torch tensors, str, int, float, bool, None, and lists,
tuples and str-keyed dicts of those. `check_plain` enforces this, with the exact path of any
offending entry. Plain data is what `torch.load(weights_only=True)` rebuilds without calling
any Python code; anything richer (a deque, a numpy array, an enum member, a dataclass) would
either fail to load under weights_only or tempt someone to load with weights_only=False, which
runs whatever the file says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

# Deeper than any real state; a deeper structure is almost surely a cycle or a mistake, and
# refusing it early beats a RecursionError from inside the pickler.
MAX_DEPTH = 64
_SCALARS = (str, int, float, bool, type(None))


class PlainDataError(TypeError):
    """A state holds something other than tensors and plain data."""


def _hint(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "; convert it with torch.from_numpy(a) or a.tolist()"
    if isinstance(value, np.generic):
        return "; convert it with .item()"
    if isinstance(value, torch.Tensor):
        return "; store a plain dense tensor (e.g. t.detach().clone())"
    if isinstance(value, str | int | float):
        base = next(t for t in (bool, str, int, float) if isinstance(value, t))
        return f" (a {base.__name__} subclass); store {base.__name__}(x) instead"
    if isinstance(value, set | frozenset):
        return "; store a sorted list"
    if isinstance(value, Mapping):
        return "; store dict(x) with str keys"
    if hasattr(value, "__iter__"):
        return "; store list(x)"
    return ""


def _type_name(value: Any) -> str:
    cls = type(value)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _refuse(path: str, value: Any) -> PlainDataError:
    return PlainDataError(
        f"{path} is a {_type_name(value)}; checkpoints hold tensors and plain data only "
        f"(str, int, float, bool, None, and lists, tuples and str-keyed dicts of them)"
        f"{_hint(value)}"
    )


def check_plain(state: Any, name: str = "state") -> None:
    """Raise PlainDataError naming the first entry that is not a tensor or plain data.

    Types are matched exactly, not by isinstance: a StrEnum member, a numpy float64 or an
    OrderedDict passes isinstance(str/float/dict) yet pickles as a reference to its class,
    which weights_only refuses to load (and which would run code on a trusting load).
    """
    if type(state) is not dict:
        raise PlainDataError(f"{name} is a {_type_name(state)}; a checkpoint must be a dict")
    _check(state, name, depth=0, ancestors=set())


def _check(value: Any, path: str, depth: int, ancestors: set[int]) -> None:
    kind = type(value)
    if kind in _SCALARS:
        return
    if kind is torch.Tensor:
        if value.layout is not torch.strided:
            raise PlainDataError(
                f"{path} is a {value.layout} tensor; checkpoints hold dense tensors only "
                f"(convert with .to_dense())"
            )
        return
    if kind not in (dict, list, tuple):
        raise _refuse(path, value)
    if depth >= MAX_DEPTH:
        raise PlainDataError(f"{path} is nested deeper than {MAX_DEPTH} levels; allowed up to that")
    if id(value) in ancestors:
        raise PlainDataError(f"{path} contains itself; checkpoints must be trees, not cycles")
    ancestors.add(id(value))
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise PlainDataError(
                    f"{path} has key {key!r} of type {_type_name(key)}; checkpoint dict keys "
                    f"must be str (convert e.g. optimizer state keys with str())"
                )
            _check(item, f"{path}[{key!r}]", depth + 1, ancestors)
    else:
        for index, item in enumerate(value):
            _check(item, f"{path}[{index}]", depth + 1, ancestors)
    ancestors.discard(id(value))
