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

Modules: `location` (where it lives), `schema` (its tables), `rows` (what it hands out,
typed as read back), `sqlite` (SQLite's locking and file checks), `database` (the database
opened, or refused, once, and the transactions run on it); this module is `Registry`, its
operations. Their public names are importable from here too.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from syncswitch.errors import RegistryError
from syncswitch.registry.database import RegistryDatabase
from syncswitch.registry.location import ENV_VAR, RegistryLocation, default_path, redact_url
from syncswitch.registry.rows import (
    DECISION_KINDS,
    ONLINE,
    SEARCH,
    DecisionRecord,
    JobOverview,
    JobRecord,
    decision_from_row,
    trial_from_row,
)
from syncswitch.registry.schema import SCHEMA_VERSION, decisions_table, jobs_table, trials_table
from syncswitch.registry.sqlite import BUSY_TIMEOUT_S
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
        """Open the registry at `location` (RegistryDatabase says what `create` does)."""
        self._db = RegistryDatabase(location, create=create)
        self.location = self._db.location

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- jobs -----------------------------------------------------------------------------

    def ensure_job(self, fingerprint: str, description: dict[str, Any]) -> JobRecord:
        """The job's row, created on first use."""
        for _attempt in range(2):
            try:
                with self._db.write("store the job") as conn:
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
        with self._db.read() as conn:
            found = self._job_where(conn, jobs_table.c.fingerprint == fingerprint)
        return found[0] if found else None

    def find_jobs(self, prefix: str) -> list[JobRecord]:
        """Jobs whose fingerprint starts with `prefix`, taken literally (autoescape: a '%' or
        '_' in it is not a LIKE wildcard)."""
        condition = jobs_table.c.fingerprint.startswith(prefix.lower(), autoescape=True)
        with self._db.read() as conn:
            return self._job_where(conn, condition)

    def overview(self) -> list[JobOverview]:
        with self._db.read() as conn:
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
        with self._db.read() as conn:
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
                with self._db.write("store a trial") as conn:
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
        with self._db.write("store the decision") as conn:
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
        with self._db.read() as conn:
            return self._latest_decision(conn, job)

    def decisions(self, job: JobRecord) -> list[DecisionRecord]:
        with self._db.read() as conn:
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


def _now() -> datetime:
    # Naive UTC: the same on every backend (SQLite stores no time zone).
    return datetime.now(UTC).replace(tzinfo=None)
