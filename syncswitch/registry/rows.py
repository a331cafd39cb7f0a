"""What the registry hands out: jobs, decisions and overviews, typed and ranged as they are
read back from its rows (SQLite stores whatever a writer put in a column)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from syncswitch.registry.trial import TrialRecord
from syncswitch.rundir.summary import FINAL_ACCURACY


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


def trial_from_row(row: Any) -> TrialRecord:
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


def decision_from_row(row: Any, fingerprint: str) -> DecisionRecord:
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
