"""The job registry: every search trial and every timing decision, in a SQL database.

Default: an embedded SQLite file in the user's data directory. Any SQLAlchemy URL (for
example `postgresql+psycopg://user@host/db`) works too, so a team can share decisions. The
location comes from `--registry`, else `SYNCSWITCH_REGISTRY`, else the default file.

Tables:
  registry_meta  (key, value): the schema version
  jobs           one row per fingerprint, with the normalised job description
  trials         one row per (job, fraction, seed): final accuracy, wall time, run directory,
                 and how many trials ran at once (wall times are comparable only when 1)
  decisions      the chosen fraction per search, with tolerance, repeats, evidence and reason

Several searches may write one SQLite file at once: it is put in WAL mode, every write is
one `BEGIN IMMEDIATE` transaction (a writer waits for the lock up front rather than failing
half-way when it upgrades a read lock), and a busy timeout makes writers queue instead of
erroring. A file that is not a SQLite database, or a database that is not a registry, is
refused with one line and never written to.
"""

from __future__ import annotations

import math
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs
from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Engine,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    func,
    inspect,
    select,
)
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError

from syncswitch.errors import RegistryError
from syncswitch.files import UnsafeFileError, open_regular
from syncswitch.registry.trial import TrialRecord, TrialStatus
from syncswitch.rundir.summary import FINAL_ACCURACY

ENV_VAR = "SYNCSWITCH_REGISTRY"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
_WAL_RETRY_S = 0.05
_SQLITE_HEADER = b"SQLite format 3\x00"

metadata = MetaData()
registry_meta = Table(
    "registry_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)
jobs_table = Table(
    "jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("fingerprint", String(64), nullable=False, unique=True),
    Column("description", JSON, nullable=False),
    Column("created", DateTime, nullable=False),
)
trials_table = Table(
    "trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("fraction", Float, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("schedule", String(200), nullable=False),
    Column("status", String(200), nullable=False),
    Column(FINAL_ACCURACY, Float),
    Column("wall_time_s", Float),
    Column("run_dir", Text),
    Column("concurrent", Integer),  # trials running at once: wall times are comparable at 1
    Column("created", DateTime, nullable=False),
    UniqueConstraint("job_id", "fraction", "seed", name="uq_trials_job_fraction_seed"),
)
decisions_table = Table(
    "decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs.id"), nullable=False),
    Column("fraction", Float, nullable=False),
    Column("tolerance", Float, nullable=False),
    Column("repeats", Integer, nullable=False),
    Column("evidence", JSON, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created", DateTime, nullable=False),
)


@dataclass(frozen=True)
class JobRecord:
    id: int
    fingerprint: str
    description: dict[str, Any]
    created: datetime


# Where a stored decision came from: a switch-point search's trials, or one online run that
# decided its own switch point (kept in the evidence, so the schema did not change).
SEARCH = "search"
ONLINE = "online"
DECISION_KINDS = (SEARCH, ONLINE)


@dataclass(frozen=True)
class DecisionRecord:
    id: int
    fingerprint: str
    fraction: float
    tolerance: float
    repeats: int
    evidence: dict[str, Any]
    reason: str
    created: datetime

    @property
    def kind(self) -> str:
        """ "search" or "online" (decisions stored before online runs are searches')."""
        kind = self.evidence.get("kind", SEARCH)
        return kind if kind in DECISION_KINDS else SEARCH


@dataclass(frozen=True)
class JobOverview:
    job: JobRecord
    trials: int
    complete_trials: int
    decisions: int
    latest: DecisionRecord | None


@dataclass(frozen=True)
class RegistryLocation:
    """Where the registry lives: a SQLAlchemy URL, and the file when it is SQLite."""

    url: str
    sqlite_path: Path | None

    @classmethod
    def resolve(cls, given: str | os.PathLike | None = None) -> RegistryLocation:
        text = str(given or os.environ.get(ENV_VAR) or "").strip() or str(default_path())
        if "://" not in text:
            path = Path(text).expanduser().absolute()
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
        return cls(text, sqlite_path)

    @property
    def display(self) -> str:
        if self.sqlite_path is not None:
            return str(self.sqlite_path)
        return make_url(self.url).render_as_string(hide_password=True)

    def exists(self) -> bool:
        """False only for a SQLite file that is not there yet (other databases: assumed)."""
        return self.sqlite_path is None or self.sqlite_path.exists()


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


class Registry:
    """The registry's operations; each one is a single short transaction."""

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
            _check_sqlite_file(self.location.sqlite_path)
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
                f"({_one_line(error)}); is its driver installed?"
            ) from None
        _make_sqlite_transactions_explicit(engine)
        return engine

    def _prepare(self) -> None:
        # Look before writing anything: a database of some other program is left alone.
        with self._errors("read it"), self._engine.connect() as conn:
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
            with self._errors("switch it to WAL mode"), self._engine.connect() as conn:
                _switch_to_wal(conn.connection.dbapi_connection)
        try:
            with self._write("create its tables") as conn:
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
            with self._errors("read it"), self._engine.connect() as conn:
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

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs -----------------------------------------------------------------------------

    def ensure_job(self, fingerprint: str, description: dict[str, Any]) -> JobRecord:
        """The job's row, created on first use."""
        for _attempt in range(2):
            try:
                with self._write("store the job") as conn:
                    found = self._job_where(conn, jobs_table.c.fingerprint == fingerprint)
                    if found:
                        return found[0]
                    conn.execute(
                        jobs_table.insert().values(
                            fingerprint=fingerprint, description=description, created=_now()
                        )
                    )
                    return self._job_where(conn, jobs_table.c.fingerprint == fingerprint)[0]
            except RegistryError as error:
                # A concurrent writer on a server database inserted it first: read it back.
                if not isinstance(error.__cause__, IntegrityError):
                    raise
        raise RegistryError(f"registry {self.location.display}: cannot store job {fingerprint}")

    def job(self, fingerprint: str) -> JobRecord | None:
        with self._read() as conn:
            found = self._job_where(conn, jobs_table.c.fingerprint == fingerprint)
        return found[0] if found else None

    def find_jobs(self, prefix: str) -> list[JobRecord]:
        """Jobs whose fingerprint starts with `prefix`, taken literally (autoescape: a '%' or
        '_' in it is not a LIKE wildcard)."""
        condition = jobs_table.c.fingerprint.startswith(prefix.lower(), autoescape=True)
        with self._read() as conn:
            return self._job_where(conn, condition)

    def overview(self) -> list[JobOverview]:
        with self._read() as conn:
            jobs = self._job_where(conn, None)
            counts = {
                (row.job_id, row.status): row.n
                for row in conn.execute(
                    select(
                        trials_table.c.job_id,
                        trials_table.c.status,
                        func.count().label("n"),
                    ).group_by(trials_table.c.job_id, trials_table.c.status)
                )
            }
            decisions = {
                row.job_id: row.n
                for row in conn.execute(
                    select(decisions_table.c.job_id, func.count().label("n")).group_by(
                        decisions_table.c.job_id
                    )
                )
            }
            result = []
            for job in jobs:
                total = sum(n for (job_id, _), n in counts.items() if job_id == job.id)
                result.append(
                    JobOverview(
                        job=job,
                        trials=total,
                        complete_trials=counts.get((job.id, TrialStatus.COMPLETE), 0),
                        decisions=decisions.get(job.id, 0),
                        latest=self._latest_decision(conn, job),
                    )
                )
        return result

    # -- trials ---------------------------------------------------------------------------

    def trials(self, job: JobRecord) -> list[TrialRecord]:
        with self._read() as conn:
            rows = conn.execute(
                select(trials_table)
                .where(trials_table.c.job_id == job.id)
                .order_by(trials_table.c.fraction.desc(), trials_table.c.seed)
            )
            return [_trial(row) for row in rows]

    def record_trial(self, job: JobRecord, trial: TrialRecord) -> None:
        """Store a trial; a later record of the same (fraction, seed) replaces the earlier."""
        values = {**trial.stored(), "created": _now()}
        key = (
            (trials_table.c.job_id == job.id)
            & (trials_table.c.fraction == trial.fraction)
            & (trials_table.c.seed == trial.seed)
        )
        for _attempt in range(2):
            try:
                with self._write("store a trial") as conn:
                    updated = conn.execute(trials_table.update().where(key).values(**values))
                    if updated.rowcount == 0:
                        conn.execute(
                            trials_table.insert().values(
                                job_id=job.id, fraction=trial.fraction, seed=trial.seed, **values
                            )
                        )
                return
            except RegistryError as error:
                if not isinstance(error.__cause__, IntegrityError):
                    raise

    # -- decisions ------------------------------------------------------------------------

    def record_decision(
        self,
        job: JobRecord,
        *,
        fraction: float,
        tolerance: float,
        repeats: int,
        evidence: dict[str, Any],
        reason: str,
    ) -> DecisionRecord:
        """Store a decision; the same decision as the job's latest is not stored twice."""
        with self._write("store the decision") as conn:
            latest = self._latest_decision(conn, job)
            if latest is not None and (
                (latest.fraction, latest.tolerance, latest.repeats, latest.evidence)
                == (fraction, tolerance, repeats, evidence)
            ):
                return latest
            conn.execute(
                decisions_table.insert().values(
                    job_id=job.id,
                    fraction=fraction,
                    tolerance=tolerance,
                    repeats=repeats,
                    evidence=evidence,
                    reason=reason,
                    created=_now(),
                )
            )
            stored = self._latest_decision(conn, job)
        assert stored is not None
        return stored

    def latest_decision(self, job: JobRecord) -> DecisionRecord | None:
        with self._read() as conn:
            return self._latest_decision(conn, job)

    def decisions(self, job: JobRecord) -> list[DecisionRecord]:
        with self._read() as conn:
            rows = conn.execute(
                select(decisions_table)
                .where(decisions_table.c.job_id == job.id)
                .order_by(decisions_table.c.id)
            )
            return [_decision(row, job.fingerprint) for row in rows]

    # -- plumbing -------------------------------------------------------------------------

    @staticmethod
    def _job_where(conn: Connection, condition: Any) -> list[JobRecord]:
        query = select(jobs_table).order_by(jobs_table.c.id)
        if condition is not None:
            query = query.where(condition)
        return [
            JobRecord(int(row.id), str(row.fingerprint), dict(row.description), row.created)
            for row in conn.execute(query)
        ]

    @staticmethod
    def _latest_decision(conn: Connection, job: JobRecord) -> DecisionRecord | None:
        row = conn.execute(
            select(decisions_table)
            .where(decisions_table.c.job_id == job.id)
            .order_by(decisions_table.c.id.desc())
            .limit(1)
        ).first()
        return _decision(row, job.fingerprint) if row is not None else None

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self._errors("read it"), self._engine.connect() as conn:
            yield conn

    @contextmanager
    def _write(self, action: str) -> Iterator[Connection]:
        with (
            self._errors(action),
            self._engine.connect().execution_options(registry_write=True) as conn,
            conn.begin(),
        ):
            yield conn

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except (SQLAlchemyError, sqlite3.Error) as error:
            detail = _one_line(getattr(error, "orig", None) or error)
            raise RegistryError(
                f"registry {self.location.display}: cannot {action}: {detail}"
            ) from error
        except (ValueError, TypeError, OverflowError, RecursionError) as error:
            # A value that is not what its column holds (bad JSON, text in a number column).
            detail = _one_line(error)[:200]
            raise RegistryError(
                f"registry {self.location.display}: cannot {action}: it holds a malformed "
                f"value ({type(error).__name__}: {detail})"
            ) from None


def _make_sqlite_transactions_explicit(engine: Engine) -> None:
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


def _check_sqlite_file(path: Path) -> None:
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


def _trial(row: Any) -> TrialRecord:
    # Typed and ranged on the way out: SQLite stores whatever a writer put in a column, and a
    # registry may be shared, so a value of the wrong type or out of range fails here (one
    # line, via _errors) rather than in whatever prints, averages or trains with it.
    return TrialRecord(
        fraction=_number(row.fraction, "fraction", 0.0, 1.0),
        seed=_integer(row.seed, "seed", 0, 2**31 - 1),
        schedule=str(row.schedule),
        status=str(row.status),
        final_accuracy=_optional(_number, row.final_accuracy, FINAL_ACCURACY, 0.0, 1.0),
        wall_time_s=_optional(_number, row.wall_time_s, "wall_time_s", 0.0, 1e9),
        run_dir=_optional(str, row.run_dir),
        created=row.created,
        concurrent=_optional(_integer, row.concurrent, "concurrent", 1, 10_000),
    )


def _decision(row: Any, fingerprint: str) -> DecisionRecord:
    return DecisionRecord(
        id=int(row.id),
        fingerprint=fingerprint,
        fraction=_number(row.fraction, "fraction", 0.0, 1.0),
        tolerance=_number(row.tolerance, "tolerance", 0.0, 100.0),
        repeats=_integer(row.repeats, "repeats", 1, 10_000),
        evidence=dict(row.evidence),
        reason=str(row.reason),
        created=row.created,
    )


def _number(value: Any, name: str, low: float, high: float) -> float:
    """A finite number in [low, high] (ValueError, one line, otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} {str(value)[:40]!r} is not a number")
    number = float(value)
    if not (math.isfinite(number) and low <= number <= high):
        raise ValueError(f"{name} = {number!r}; it must be a finite number in [{low:g}, {high:g}]")
    return number


def _integer(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} {str(value)[:40]!r} is not an integer")
    number = int(str(value)[:40])
    if not low <= number <= high:
        raise ValueError(f"{name} = {number}; it must be an integer in {low}..{high}")
    return number


def _optional(kind: Any, value: Any, *checks: Any) -> Any:
    return None if value is None else kind(value, *checks)


def _now() -> datetime:
    # Naive UTC: the same on every backend (SQLite stores no time zone).
    return datetime.now(UTC).replace(tzinfo=None)


def _one_line(error: object) -> str:
    return " ".join(str(error).split())


def _switch_to_wal(dbapi_connection: Any) -> None:
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
