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

Modules: `location` (where it lives), `schema` (its tables), `records` (what it hands out,
typed as read back), `sqlite` (SQLite's locking and file checks); this module is `Registry`,
its operations. Their public names are importable from here too.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, create_engine, func, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import ArgumentError, IntegrityError, NoSuchModuleError, SQLAlchemyError

from syncswitch.errors import RegistryError
from syncswitch.registry.location import ENV_VAR, RegistryLocation, default_path, redact_url
from syncswitch.registry.records import (
    DECISION_KINDS,
    ONLINE,
    SEARCH,
    DecisionRecord,
    JobOverview,
    JobRecord,
    decision_from_row,
    trial_from_row,
)
from syncswitch.registry.schema import (
    SCHEMA_VERSION,
    decisions_table,
    jobs_table,
    metadata,
    registry_meta,
    trials_table,
)
from syncswitch.registry.sqlite import (
    BUSY_TIMEOUT_S,
    check_sqlite_file,
    make_sqlite_transactions_explicit,
    switch_to_wal,
)
from syncswitch.registry.trial import TrialRecord, TrialStatus

__all__ = [
    "BUSY_TIMEOUT_S",
    "DECISION_KINDS",
    "ENV_VAR",
    "ONLINE",
    "SCHEMA_VERSION",
    "SEARCH",
    "DecisionRecord",
    "JobOverview",
    "JobRecord",
    "Registry",
    "RegistryError",
    "RegistryLocation",
    "default_path",
    "redact_url",
]


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
                f"({_one_line(error)}); is its driver installed?"
            ) from None
        make_sqlite_transactions_explicit(engine)
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
                switch_to_wal(conn.connection.dbapi_connection)
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
            return [trial_from_row(row) for row in rows]

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
            return [decision_from_row(row, job.fingerprint) for row in rows]

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
        return decision_from_row(row, job.fingerprint) if row is not None else None

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


def _now() -> datetime:
    # Naive UTC: the same on every backend (SQLite stores no time zone).
    return datetime.now(UTC).replace(tzinfo=None)


def _one_line(error: object) -> str:
    return " ".join(str(error).split())
