"""Checked reads of one JSON object's fields: the record classes build themselves with these.

A run directory may come from elsewhere, so a value of the wrong type, a NaN where a number
is needed or a missing key ends in one `RunDirError` line naming the file, the field and what
is allowed, never in whatever later prints or averages the value.
"""

from __future__ import annotations

import json
import math
from typing import Any

from syncswitch.errors import RunDirError

_MISSING = object()


class Fields:
    """The fields of one JSON object read from `where` (e.g. the summary, or its "gradients")."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise RunDirError(f"{where} must be a JSON object, not {_kind(data)}")
        self.data = data
        self.where = where

    def refuse(self, key: str, allowed: str) -> RunDirError:
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            return RunDirError(f"{self.where}: {key!r} is missing; it must be {allowed}")
        return RunDirError(
            f"{self.where}: {key} = {short(value)} is not allowed; it must be {allowed}"
        )

    def text(self, key: str, default: Any = _MISSING, *, choices: tuple[str, ...] = ()) -> str:
        value = self.data.get(key, default)
        ok = isinstance(value, str) and (not choices or value in choices)
        if not ok:
            allowed = "one of " + ", ".join(choices) if choices else "a string"
            raise self.refuse(key, allowed)
        return value

    def optional_text(self, key: str, default: Any = _MISSING) -> str | None:
        value = self.data.get(key, default)
        if value is not None and not isinstance(value, str):
            raise self.refuse(key, "a string or null")
        return value

    def integer(self, key: str, default: Any = _MISSING, *, low: int = 0) -> int:
        value = self.data.get(key, default)
        if not _is_int(value) or value < low:
            raise self.refuse(key, f"an integer >= {low}")
        return value

    def optional_integer(self, key: str, default: Any = _MISSING, *, low: int = 0) -> int | None:
        value = self.data.get(key, default)
        if value is not None and (not _is_int(value) or value < low):
            raise self.refuse(key, f"an integer >= {low} or null")
        return value

    def number(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        low: float = -math.inf,
        high: float = math.inf,
        optional: bool = False,
        finite: bool = True,
    ) -> Any:
        """A number (int or float, kept as written) in low..high; NaN/inf only if not `finite`."""
        value = self.data.get(key, default)
        if value is None and optional:
            return None
        ok = _is_number(value) and (
            (not finite and not math.isfinite(value))
            or (math.isfinite(value) and low <= value <= high)
        )
        if not ok:
            raise self.refuse(key, _number_allowed(low, high, optional, finite))
        return value

    def mapping(self, key: str, default: Any = _MISSING, *, optional: bool = False) -> Any:
        value = self.data.get(key, default)
        if value is None and optional:
            return None
        if not isinstance(value, dict):
            raise self.refuse(key, "a JSON object" + (" or null" if optional else ""))
        return value

    def numbers_by_name(self, key: str, default: Any = _MISSING, *, integers: bool = False) -> Any:
        """An object of finite numbers >= 0 by name (e.g. seconds per protocol)."""
        value = self.mapping(key, default)
        check = _is_int if integers else _is_number
        if not all(check(v) and math.isfinite(v) and v >= 0 for v in value.values()):
            kind = "integers" if integers else "finite numbers"
            raise self.refuse(key, f"an object of {kind} >= 0")
        return value

    def objects(self, key: str, default: Any = _MISSING) -> list[dict[str, Any]]:
        """A list of JSON objects."""
        value = self.data.get(key, default)
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.refuse(key, "a list of JSON objects")
        return value

    def nested(self, key: str, default: Any = _MISSING) -> Fields:
        value = self.data.get(key, default)
        if value is _MISSING:
            raise self.refuse(key, "a JSON object")
        return Fields(value, f"{self.where}: {key}")

    def absent(self, key: str) -> bool:
        return key not in self.data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number_allowed(low: float, high: float, optional: bool, finite: bool) -> str:
    if math.isinf(low) and math.isinf(high):
        text = "a finite number" if finite else "a number"
    elif math.isinf(high):
        text = f"a finite number >= {low:g}"
    else:
        text = f"a finite number in {low:g}..{high:g}"
    if not finite:
        text += ", NaN or infinity"
    return text + (" or null" if optional else "")


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: "an object", list: "a list", str: "a string"}
    return kinds.get(type(value), short(value))


def short(value: Any, limit: int = 80) -> str:
    """A value as it reads in a one-line error, cut to `limit` characters."""
    text = json.dumps(value, default=str) if not isinstance(value, float) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
