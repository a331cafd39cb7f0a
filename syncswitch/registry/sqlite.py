"""SQLite specifics: refusing a file that is not a database, explicit write transactions, WAL.

Several searches may write one SQLite file at once: it is put in WAL mode, every write is
one `BEGIN IMMEDIATE` transaction (a writer waits for the lock up front rather than failing
half-way when it upgrades a read lock), and a busy timeout makes writers queue instead of
erroring. A file that is not a SQLite database is refused with one line and never written to.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection

from syncswitch.errors import RegistryError
from syncswitch.files import UnsafeFileError, open_regular
from syncswitch.registry.location import ENV_VAR

BUSY_TIMEOUT_S = 60.0
_WAL_RETRY_S = 0.05
_SQLITE_HEADER = b"SQLite format 3\x00"


def make_sqlite_transactions_explicit(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event (below) issue BEGIN, instead of the driver's implicit
        # deferred BEGIN, so that writers can take the write lock up front.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("registry_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def check_sqlite_file(path: Path) -> None:
    """Refuse, before SQLite opens it, a file that is not a SQLite database."""
    if path.is_dir():
        raise RegistryError(f"registry {path} is a directory; give a file path or a URL")
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise RegistryError(
                f"registry {path}: cannot create its directory: {error.strerror}"
            ) from None
        return
    try:
        # A regular file only: SQLite opening a FIFO or a device would block or misbehave.
        with os.fdopen(open_regular(path), "rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except UnsafeFileError as error:
        raise RegistryError(f"registry: {error}") from None
    except OSError as error:
        raise RegistryError(f"registry {path} cannot be read: {error.strerror}") from None
    if header and header != _SQLITE_HEADER:
        raise RegistryError(
            f"registry {path} is not a SQLite database (unknown file header); it was left "
            f"untouched: move it away or point --registry / {ENV_VAR} at another file"
        )


def switch_to_wal(dbapi_connection: Any) -> None:
    """Put a SQLite file in WAL mode, waiting while another process holds it.

    SQLite answers "database is locked" to a journal-mode change at once, without its busy
    handler, when another connection is reading or creating the file at that moment (two
    registries opened together on a new file); so wait here, as long as a write would.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cursor = dbapi_connection.execute("PRAGMA journal_mode=WAL")
            cursor.close()
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(_WAL_RETRY_S)
