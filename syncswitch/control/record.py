"""What the run controller has learnt about a run so far; summary.json is made from it.

Kept apart from the actors so that it can be checkpointed (plain data both ways) and a resumed
run picks up its metrics, switches and decisions where the checkpoint left them. Per-update
figures are folded into running totals, so memory stays flat however long the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from syncswitch.control.best_weights import BestWeights
from syncswitch.control.evaluations import MetricsRow
from syncswitch.control.timing import TimingHistory
from syncswitch.core.stragglers.detector import StragglerRecord
from syncswitch.core.sync.records import Decision
from syncswitch.records import Switch
from syncswitch.records.failures import FailureEntry, failure_from_record


@dataclass
class StalenessStats:
    gradients: int = 0
    total: int = 0
    max: int = 0

    def add(self, staleness: int) -> None:
        self.gradients += 1
        self.total += staleness
        self.max = max(self.max, staleness)

    def describe(self) -> dict[str, Any]:
        mean = self.total / self.gradients if self.gradients else 0.0
        return {"mean": mean, "max": self.max, "gradients": self.gradients}


@dataclass
class RunRecord:
    metrics: list[MetricsRow] = field(default_factory=list)  # one row per evaluation
    switches: list[Switch] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)  # policies, guard, admission
    straggler_events: list[StragglerRecord] = field(default_factory=list)
    failures: list[FailureEntry] = field(default_factory=list)  # and how each was recovered
    checkpoints: int = 0
    staleness: dict[str, StalenessStats] = field(default_factory=dict)
    rollbacks: int = 0
    # The divergence guard's untrained loss level, once it has one. A resumed run must hand it
    # back: measured afresh from the resumed (already trained) losses it would make the guard's
    # "gave back most of what was learned" test fire on ordinary noise.
    guard_initial_level: float | None = None
    # Training losses since the last evaluation point (the mean goes into metrics.csv).
    losses_since_eval: list[float] = field(default_factory=list)
    # Online timing's estimator, signal history and decision (a resumed run continues them).
    timing: TimingHistory = field(default_factory=TimingHistory)
    # The final weights' measures on the test split, once the run has finished (the test
    # split is evaluated there only, so nothing decided during the run has seen it).
    test: dict[str, float] | None = None
    # The best evaluations' weights (control/best.py): the best so far last; a checkpoint
    # keeps its own best, the record that and any found since.
    bests: list[BestWeights] = field(default_factory=list)
    stopped_early: str | None = None  # why early stopping ended the workload, if it did

    def add_update(self, protocol: str, staleness: int, loss: float) -> None:
        self.staleness.setdefault(protocol, StalenessStats()).add(staleness)
        self.losses_since_eval.append(loss)

    def take_train_loss(self) -> float:
        losses, self.losses_since_eval = self.losses_since_eval, []
        return float(np.mean(losses)) if losses else float("nan")

    # -- checkpoints ----------------------------------------------------------------------------

    def to_plain(self) -> dict[str, Any]:
        return {
            "metrics": [row.to_plain() for row in self.metrics],
            "switches": [switch.to_plain() for switch in self.switches],
            "decisions": [decision.to_plain() for decision in self.decisions],
            "straggler_events": [event.to_plain() for event in self.straggler_events],
            "failures": [failure.to_plain() for failure in self.failures],
            "checkpoints": self.checkpoints,
            "staleness": {
                name: [s.gradients, s.total, s.max] for name, s in self.staleness.items()
            },
            "rollbacks": self.rollbacks,
            "guard_initial_level": self.guard_initial_level,
            "timing": self.timing.to_plain(),
            "bests": [best.to_plain() for best in self.bests[-1:]],
        }

    @classmethod
    def from_plain(cls, state: dict[str, Any]) -> RunRecord:
        """Back from `to_plain()` (a checkpoint, untrusted); raises, in one line, on a
        malformed one."""
        return cls(
            metrics=[MetricsRow.from_plain(row) for row in state["metrics"]],
            switches=[Switch.from_plain(entry) for entry in state["switches"]],
            decisions=[Decision.from_plain(entry) for entry in state["decisions"]],
            straggler_events=[
                StragglerRecord.from_plain(entry) for entry in _mappings(state, "straggler_events")
            ],
            failures=[failure_from_record(entry) for entry in _mappings(state, "failures")],
            checkpoints=int(state["checkpoints"]),
            staleness={
                name: StalenessStats(int(g), int(t), int(m))
                for name, (g, t, m) in state["staleness"].items()
            },
            rollbacks=int(state["rollbacks"]),
            guard_initial_level=state.get("guard_initial_level"),
            timing=(  # absent in checkpoints of runs before online timing
                TimingHistory.from_plain(state["timing"]) if "timing" in state else TimingHistory()
            ),
            # Absent in checkpoints of runs before best weights were kept.
            bests=[BestWeights.from_plain(best) for best in state.get("bests", [])][-1:],
        )

    # -- reading ---------------------------------------------------------------------------------

    def final_metric(self) -> MetricsRow | None:
        last = self.metrics[-1] if self.metrics else None
        return last if last and last.fraction >= 1.0 else None

    def staleness_summary(self) -> dict[str, Any]:
        return {name: stats.describe() for name, stats in self.staleness.items()}


def _mappings(state: dict[str, Any], name: str) -> list[dict[str, Any]]:
    entries = list(state[name])
    if not all(isinstance(entry, dict) for entry in entries):
        raise ValueError(f"{name} must be a list of mappings")
    return entries
