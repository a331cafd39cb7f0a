"""The search's results: the time the chosen fraction saves, the whole result, and a trial
record made from a trial's Summary.

Plain data shared by the runner (`search_runner`) and its report (`search_report`): nothing
here trains or writes files. A trial is a `TrialRecord` (syncswitch.registry), the same record
the registry stores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncswitch.core.timing.fraction_search import BASELINE, SearchDecision, SearchSpec, TrialKey
from syncswitch.registry import DecisionRecord, TrialRecord, TrialStatus
from syncswitch.rundir import Summary


@dataclass(frozen=True)
class TimeSaved:
    """The chosen fraction's mean wall time against full BSP's, over the same seeds."""

    bsp_wall_s: float
    chosen_wall_s: float
    comparable: bool  # every trial behind the two means ran alone

    @property
    def saved_s(self) -> float:
        return self.bsp_wall_s - self.chosen_wall_s

    @property
    def speedup(self) -> float:
        return self.bsp_wall_s / self.chosen_wall_s if self.chosen_wall_s > 0 else math.nan

    def to_plain(self) -> dict[str, Any]:
        return {
            "bsp_wall_s": self.bsp_wall_s,
            "chosen_wall_s": self.chosen_wall_s,
            "saved_s": self.saved_s,
            "saved_percent": 100 * self.saved_s / self.bsp_wall_s if self.bsp_wall_s else None,
            "speedup": self.speedup,
            "comparable": self.comparable,
        }


@dataclass
class SearchResult:
    fingerprint: str
    job: dict[str, Any]
    spec: SearchSpec
    decision: SearchDecision
    stored: DecisionRecord
    search_dir: Path
    trace: list[TrialRecord]
    trials: dict[TrialKey, TrialRecord]  # every finished trial of the job, reused ones included
    time_saved: TimeSaved | None
    slots: int
    files: dict[str, str] = field(default_factory=dict)


def time_saved(
    decision: SearchDecision, trials: dict[TrialKey, TrialRecord], spec: SearchSpec
) -> TimeSaved | None:
    def walls(fraction: float) -> list[TrialRecord]:
        keys = (TrialKey(fraction, seed) for seed in spec.seeds)
        return [trials[key] for key in keys if key in trials]

    bsp, chosen = walls(BASELINE), walls(decision.fraction)
    bsp_s = [r.wall_time_s for r in bsp if r.wall_time_s is not None]
    chosen_s = [r.wall_time_s for r in chosen if r.wall_time_s is not None]
    if not bsp or not chosen or len(bsp_s) < len(bsp) or len(chosen_s) < len(chosen):
        return None
    return TimeSaved(
        bsp_wall_s=sum(bsp_s) / len(bsp_s),
        chosen_wall_s=sum(chosen_s) / len(chosen_s),
        comparable=all(r.ran_alone for r in bsp + chosen),
    )


def trial_from_summary(
    key: TrialKey,
    schedule: str,
    summary: Summary,
    run_dir: str,
    *,
    source: str,
    concurrent: int = 1,
) -> TrialRecord:
    """A trial as its finished run's Summary describes it (complete only with an accuracy)."""
    accuracy = summary.final_value
    status = TrialStatus.COMPLETE if accuracy is not None else "failed: no final accuracy"
    return TrialRecord(
        fraction=key.fraction,
        seed=key.seed,
        schedule=schedule,
        status=status,
        final_accuracy=accuracy,
        wall_time_s=summary.wall_time_s,
        run_dir=run_dir,
        concurrent=concurrent,
        source=source,
    )
