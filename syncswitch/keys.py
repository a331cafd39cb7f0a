"""The one "unknown key" check every reader of a user's mapping uses (config files, cluster
files, straggler and fault lists): the first key not allowed, a close match when there is one,
and what is allowed, in one line. A leaf: imports the standard library only."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

_SHOWN_KEY_CHARS = 60  # a hostile key may be huge or multi-line; the message stays one line


def did_you_mean(name: object, allowed: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest allowed name, or '' when none is close."""
    close = difflib.get_close_matches(str(name), list(allowed), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def shown_key(key: object) -> str:
    """A key as an error message shows it: quoted, on one line, cut short."""
    return repr(" ".join(str(key).split())[:_SHOWN_KEY_CHARS])


def unknown_key_problem(
    keys: Iterable[object], allowed: Sequence[str], allowed_text: str | None = None
) -> str | None:
    """ "unknown key 'x' (did you mean 'y'?); allowed keys are ..." for the first of `keys`
    not in `allowed`, or None when every key is allowed. `allowed_text` replaces the list of
    allowed keys where it would be too long to be useful."""
    for key in keys:
        if key not in allowed:
            listing = allowed_text or ", ".join(allowed)
            return (
                f"unknown key {shown_key(key)}{did_you_mean(key, allowed)}; "
                f"allowed keys are {listing}"
            )
    return None
