"""The search's results: its trial runs, the time the chosen fraction saves, the whole result.

Plain data shared by the runner (`search`) and its report (`report`): nothing here trains or
writes files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from syncswitch.core.switch_search import (
    BASELINE,
    SearchSpec,
    TimingDecision,
    TrialKey,
    format_fraction,
)
from syncswitch.registry import DecisionRecord, TrialStatus


@dataclass
class TrialRun:
    """One row of the search trace."""

    key: TrialKey
    schedule: str
    status: str
    final_accuracy: float | None
    wall_time_s: float | None
    run_dir: str | None
    source: str  # "run": trained by this search; "registry": reused; "disk": recovered
    concurrent: int = 1  # most trials running at once while this one ran

    @property
    def complete(self) -> bool:
        return self.status == TrialStatus.COMPLETE and self.final_accuracy is not None

    def to_row(self) -> dict[str, Any]:
        return {
            "fraction": self.key.fraction,
            "label": format_fraction(self.key.fraction),
            "seed": self.key.seed,
            "schedule": self.schedule,
            "status": self.status,
            "final_accuracy": self.final_accuracy,
            "wall_time_s": self.wall_time_s,
            "concurrent": self.concurrent,
            "source": self.source,
            "run_dir": self.run_dir,
        }


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

    def to_record(self) -> dict[str, Any]:
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
    decision: TimingDecision
    stored: DecisionRecord
    search_dir: Path
    trace: list[TrialRun]
    trials: dict[TrialKey, TrialRun]  # every finished trial of the job, reused ones included
    time_saved: TimeSaved | None
    slots: int
    files: dict[str, str] = field(default_factory=dict)


def time_saved(
    decision: TimingDecision, trials: dict[TrialKey, TrialRun], spec: SearchSpec
) -> TimeSaved | None:
    def walls(fraction: float) -> list[TrialRun]:
        keys = (TrialKey(fraction, seed) for seed in spec.seeds)
        return [trials[key] for key in keys if key in trials]

    bsp, chosen = walls(BASELINE), walls(decision.fraction)
    if not bsp or not chosen or any(r.wall_time_s is None for r in bsp + chosen):
        return None
    return TimeSaved(
        bsp_wall_s=sum(r.wall_time_s for r in bsp) / len(bsp),
        chosen_wall_s=sum(r.wall_time_s for r in chosen) / len(chosen),
        comparable=all(r.concurrent <= 1 for r in bsp + chosen),
    )
