"""The registry's database: opened (or refused) once, and the transactions its operations
run in.

Opening looks before it writes: a file that is not SQLite, a database of some other program
or a registry of a newer schema is refused with one line and left untouched; otherwise the
tables are created (SQLite in WAL mode first). Every read and write then goes through `read`
or `write`, which turn a database error, or a malformed value read back, into one
RegistryError line.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from syncswitch.errors import RegistryError
from syncswitch.registry.location import RegistryLocation
from syncswitch.registry.schema import SCHEMA_VERSION, metadata, registry_meta
from syncswitch.registry.sqlite import (
    BUSY_TIMEOUT_S,
    check_sqlite_file,
    make_sqlite_transactions_explicit,
    switch_to_wal,
)


class RegistryDatabase:
    """One registry database, opened: its engine, and the transactions run on it."""

    def __init__(
        self,
        location: str | os.PathLike | RegistryLocation | None = None,
        *,
        create: bool = True,
    ) -> None:
        """`create=False` (listing): a database without a registry in it is one
        RegistryError line, and nothing is written to it (no tables, no journal mode)."""
        self.location = (
            location
            if isinstance(location, RegistryLocation)
            else RegistryLocation.resolve(location)
        )
        self._create = create
        if self.location.sqlite_path is not None:
            check_sqlite_file(self.location.sqlite_path)
        self._engine = self._create_engine()
        try:
            self._prepare()
        except BaseException:
            self._engine.dispose()
            raise

    # -- opening --------------------------------------------------------------------------

    def _create_engine(self) -> Engine:
        url = self.location.url
        try:
            if self.location.sqlite_path is None and not url.startswith("sqlite"):
                return create_engine(url, pool_pre_ping=True)
            engine = create_engine(
                url,
                connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
            )
        except (NoSuchModuleError, ModuleNotFoundError, ArgumentError) as error:
            raise RegistryError(
                f"registry {self.location.display}: cannot use this database URL "
                f"({one_line(error)}); is its driver installed?"
            ) from None
        make_sqlite_transactions_explicit(engine)
        return engine

    def _prepare(self) -> None:
        # Look before writing anything: a database of some other program is left alone.
        with self.errors("read it"), self._engine.connect() as conn:
            names = set(inspect(conn).get_table_names())
            if names and registry_meta.name not in names:
                raise RegistryError(
                    f"registry {self.location.display} is a database but not a syncswitch "
                    f"registry (it has tables {', '.join(sorted(names)[:5])}); it was left "
                    "untouched: use another file or URL"
                )
            if registry_meta.name in names:
                self._check_version(conn)
                if self._is_current(names):
                    return
            if not self._create:
                raise RegistryError(
                    f"registry {self.location.display} holds no syncswitch registry yet "
                    "(`syncswitch search` creates one); listing never creates it"
                )
        if self.location.sqlite_path is not None:
            # Outside any transaction (SQLite refuses to change the journal mode inside one);
            # the mode is stored in the file, so every later connection uses it.
            with self.errors("switch it to WAL mode"), self._engine.connect() as conn:
                switch_to_wal(conn.connection.dbapi_connection)
        try:
            with self.write("create its tables") as conn:
                metadata.create_all(conn)
                if conn.execute(select(registry_meta.c.value)).first() is None:
                    conn.execute(
                        registry_meta.insert().values(
                            key="schema_version", value=str(SCHEMA_VERSION)
                        )
                    )
        except RegistryError:
            # Another process may have created the tables at the same moment (databases
            # without SQLite's write lock); that is fine if they are there now.
            with self.errors("read it"), self._engine.connect() as conn:
                if not self._is_current(set(inspect(conn).get_table_names())):
                    raise

    @staticmethod
    def _is_current(names: set[str]) -> bool:
        return {t.name for t in metadata.sorted_tables} <= names

    def _check_version(self, conn: Connection) -> None:
        row = conn.execute(
            select(registry_meta.c.value).where(registry_meta.c.key == "schema_version")
        ).first()
        if row is None:
            return
        text = str(row.value).strip()
        if not text.isdecimal() or len(text) > 9:
            raise RegistryError(
                f"registry {self.location.display} has schema version {text[:40]!r}, which is "
                f"not a version number (this syncswitch writes {SCHEMA_VERSION}); it was left "
                "untouched: is it a syncswitch registry?"
            )
        if int(text) > SCHEMA_VERSION:
            raise RegistryError(
                f"registry {self.location.display} has schema version {text}, newer than "
                f"this syncswitch understands ({SCHEMA_VERSION}); upgrade syncswitch"
            )

    def close(self) -> None:
        self._engine.dispose()

    # -- transactions ---------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with self.errors("read it"), self._engine.connect() as conn:
            yield conn

    @contextmanager
    def write(self, action: str) -> Iterator[Connection]:
        with (
            self.errors(action),
            self._engine.connect().execution_options(registry_write=True) as conn,
            conn.begin(),
        ):
            yield conn

    @contextmanager
    def errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except (SQLAlchemyError, sqlite3.Error) as error:
            detail = one_line(getattr(error, "orig", None) or error)
            raise RegistryError(
                f"registry {self.location.display}: cannot {action}: {detail}"
            ) from error
        except (ValueError, TypeError, OverflowError, RecursionError) as error:
            # A value that is not what its column holds (bad JSON, text in a number column).
            detail = one_line(error)[:200]
            raise RegistryError(
                f"registry {self.location.display}: cannot {action}: it holds a malformed "
                f"value ({type(error).__name__}: {detail})"
            ) from None


def one_line(error: object) -> str:
    return " ".join(str(error).split())
