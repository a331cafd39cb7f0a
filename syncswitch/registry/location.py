"""Where the registry lives: `--registry`, else `SYNCSWITCH_REGISTRY`, else the default file.

Default: an embedded SQLite file in the user's data directory. Any SQLAlchemy URL (for
example `postgresql+psycopg://user@host/db`) works too, so a team can share decisions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from syncswitch.errors import RegistryError
from syncswitch.files import name_too_long

ENV_VAR = "SYNCSWITCH_REGISTRY"


@dataclass(frozen=True)
class RegistryLocation:
    """Where the registry lives: a SQLAlchemy URL, and the file when it is SQLite."""

    url: str
    sqlite_path: Path | None

    @classmethod
    def resolve(cls, given: str | os.PathLike | None = None) -> RegistryLocation:
        text = str(given or os.environ.get(ENV_VAR) or "").strip() or str(default_path())
        if "://" not in text:
            path = _fitting(Path(text).expanduser().absolute())
            return cls(f"sqlite:///{path}", path)
        try:
            url = make_url(text)
        except (ArgumentError, ValueError):
            raise RegistryError(
                f"registry {redact_url(text)!r} is not a database URL or a file path; use e.g. "
                "sqlite:////path/registry.db, postgresql+psycopg://user@host/db, or a file path"
            ) from None
        sqlite_path: Path | None = None
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            sqlite_path = Path(url.database).expanduser().absolute()
        return cls(text, _fitting(sqlite_path))

    @property
    def display(self) -> str:
        if self.sqlite_path is not None:
            return str(self.sqlite_path)
        return make_url(self.url).render_as_string(hide_password=True)

    def exists(self) -> bool:
        """False only for a SQLite file that is not there yet (other databases: assumed)."""
        return self.sqlite_path is None or self.sqlite_path.exists()


def _fitting(path: Path | None) -> Path | None:
    """`path`, or one RegistryError line when a part of it is longer than a name may be."""
    problem = None if path is None else name_too_long(path, "registry")
    if problem:
        raise RegistryError(problem)
    return path


def redact_url(text: str) -> str:
    """`text` with any password in its user-info part (scheme://user:PASSWORD@host) hidden.

    For URLs SQLAlchemy cannot parse (whose own hiding needs a parsed URL): the text up to
    the last '@' after the scheme is taken as user info.
    """
    scheme, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    user_info, _, host = rest.rpartition("@")
    user = user_info.split(":", 1)[0]
    hidden = f"{user}:***" if ":" in user_info else user
    return f"{scheme}://{hidden}@{host}"


def default_path() -> Path:
    return Path(platformdirs.user_data_dir("syncswitch")) / "registry.db"
