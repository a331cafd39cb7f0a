"""One trial of a switch-point search: the record the registry stores, the search runs and
its trace shows (one class for all three, so a trial's fields are written down once)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from syncswitch.core.timing.fraction_search import TrialKey, format_fraction
from syncswitch.rundir.summary import FINAL_ACCURACY


class TrialStatus:
    COMPLETE = "complete"
    FAILED = "failed"


class TrialSource:
    """Where a trial in a search's trace came from."""

    RUN = "run"  # trained by this search
    REGISTRY = "registry"  # finished earlier, reused from the registry
    DISK = "disk"  # finished on disk but never stored (the search was stopped in between)


# The search trace's columns (trace.csv), in order: `TrialRecord.to_plain()` gives them.
TRACE_COLUMNS = (
    "fraction",
    "label",
    "seed",
    "schedule",
    "status",
    FINAL_ACCURACY,
    "wall_time_s",
    "concurrent",
    "source",
    "run_dir",
)


@dataclass(frozen=True)
class TrialRecord:
    fraction: float
    seed: int
    schedule: str
    status: str
    final_accuracy: float | None
    wall_time_s: float | None
    run_dir: str | None
    created: datetime | None = None  # when the registry stored it
    concurrent: int | None = None  # most trials running at once while it ran (None: unknown)
    source: str = TrialSource.REGISTRY  # not stored: says where a trace row came from

    @property
    def key(self) -> TrialKey:
        return TrialKey(self.fraction, self.seed)

    @property
    def complete(self) -> bool:
        return self.status == TrialStatus.COMPLETE and self.final_accuracy is not None

    @property
    def ran_alone(self) -> bool:
        """Its wall time is comparable with others' only when no other trial shared the CPUs."""
        return (self.concurrent or 1) <= 1

    def to_plain(self) -> dict[str, Any]:
        """One row of the search trace (TRACE_COLUMNS)."""
        row = {name: getattr(self, name, None) for name in TRACE_COLUMNS}
        row["label"] = format_fraction(self.fraction)
        row["concurrent"] = self.concurrent or 1
        return row

    def stored(self) -> dict[str, Any]:
        """What the registry stores of it beside its job, fraction and seed."""
        return {name: getattr(self, name) for name in STORED_FIELDS}


# Not stored: the key (fraction, seed) is the row's, `created` is set by the registry, and
# `source` only says where a trace row came from.
STORED_FIELDS = tuple(
    f.name for f in fields(TrialRecord) if f.name not in ("fraction", "seed", "created", "source")
)
