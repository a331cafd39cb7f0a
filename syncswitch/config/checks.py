"""The checks every option gets from its declaration: its type, its size, its choices and
its range, each refused in one line that names the value and what is allowed.

An option declares them once, in its field's metadata (`choices=`, `range=Range(...)`; a
choice IMPORT_PATH lets it name the user's own code, checked here for form only);
`check_field` reads them, so TrainConfig writes no per-option check code of its own.
"""

from __future__ import annotations

import math
from dataclasses import Field, dataclass
from typing import Any

from syncswitch.config.limits import IMPORT_PATH, MAX_LIST_ITEMS, MAX_TEXT_CHARS
from syncswitch.errors import ConfigError
from syncswitch.import_path import colon_hint, import_path_problem, is_import_path


@dataclass(frozen=True)
class Range:
    """The values a number may take: from `low` to `high` (None: unbounded above), each end
    included unless open; with `off`, 0 is allowed too (it switches the feature off)."""

    low: float
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    off: bool = False
    unit: str = ""  # e.g. " seconds", shown after the range

    def __contains__(self, value: float) -> bool:
        if self.off and value == 0:
            return True
        above = value > self.low if self.low_open else value >= self.low
        if self.high is None:
            return above
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self, integer: bool) -> str:
        """'in 1..1024', 'in [0, 1)', '> 0 and <= 100000', '>= 0', ...: what the message says."""
        low, high = self.low, self.high
        if high is None:
            text = f"{'>' if self.low_open else '>='} {low:g}"
        elif integer:
            text = f"in {int(low)}..{int(high)}"
        elif self.low_open and not self.high_open:
            text = f"> {low:g} and <= {high:g}"
        else:
            opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
            text = f"in {opening}{low:g}, {high:g}{closing}"
        return f"{'0 (off) or ' if self.off else ''}{text}{self.unit}"


def check_field(f: Field, value: Any) -> None:
    """Refuse `value` for option `f` unless it has the declared type and size, is one of the
    declared choices and lies in the declared range (each item of a list)."""
    type_name = str(f.type)
    if value is None and type_name.endswith("| None"):
        return
    base = type_name.replace("| None", "").strip()
    problem = type_problem(base, value)
    if problem:
        refuse(f.name, value, problem)
    if isinstance(value, str | list):
        limit = MAX_TEXT_CHARS if isinstance(value, str) else MAX_LIST_ITEMS
        if len(value) > limit:
            unit = "characters" if isinstance(value, str) else "entries"
            raise ConfigError(f"{f.name} has {len(value)} {unit}; at most {limit} are allowed")
    choices = f.metadata.get("choices")
    if choices and isinstance(value, str) and value not in choices:
        if IMPORT_PATH in choices and is_import_path(value):
            problem = import_path_problem(value)
            if problem:
                raise ConfigError(f"{f.name} {problem}")
        else:
            hint = colon_hint(value) if IMPORT_PATH in choices else ""
            raise ConfigError(
                f"{f.name} {value!r} is not allowed; choose one of {', '.join(choices)}{hint}"
            )
    allowed: Range | None = f.metadata.get("range")
    if allowed is not None:
        for number in value if isinstance(value, list) else [value]:
            if number not in allowed:
                each = " (each)" if isinstance(value, list) else ""
                refuse(f.name, number, allowed.describe(base == "int") + each)


def refuse(name: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{name} = {short(value)} is not allowed; it must be {allowed}")


def require(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        refuse(name, value, allowed)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def type_problem(base: str, value: Any) -> str | None:
    """What `value` must be instead, for a field of type `base`; None when it fits."""
    if base == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        return "an integer"
    if base == "bool" and not isinstance(value, bool):
        return "true or false"
    if base == "float" and not (_is_number(value) and math.isfinite(value)):
        return "a finite number"
    if base == "str" and not isinstance(value, str):
        return "text"
    if base.startswith("list") and not isinstance(value, list):
        return "a list"
    if base == "list[float]" and not all(_is_number(v) and math.isfinite(v) for v in value):
        return "a list of finite numbers"
    return None


def short(value: Any, limit: int = 80) -> str:
    """A value's repr cut to one short line (a hostile value may be huge or multi-line)."""
    try:
        text = " ".join(repr(value).split())
    except ValueError:  # an int too long to print (Python caps int-to-text conversion)
        return f"an integer of {value.bit_length()} bits"
    return text if len(text) <= limit else text[: limit - 3] + "..."
