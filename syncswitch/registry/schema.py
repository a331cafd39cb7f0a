"""The registry's tables (SQLAlchemy Core) and its schema version.

registry_meta  (key, value): the schema version
jobs           one row per fingerprint, with the normalised job description
trials         one row per (job, fraction, seed): final accuracy, wall time, run directory,
               and how many trials ran at once (wall times are comparable only when 1)
decisions      the chosen fraction per search, with tolerance, repeats, evidence and reason
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from syncswitch.rundir.summary import FINAL_ACCURACY

SCHEMA_VERSION = 1


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
