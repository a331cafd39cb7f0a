"""Early stopping, as a callback: the run ends once `patience` evaluations in a row have not
beaten the best before them by more than `min_delta` (the primary metric, on the split the
run's decisions read), as Lightning's EarlyStopping does.

The config's `early_stop_patience` / `early_stop_min_delta` (`--early-stop-patience`,
`--early-stop-min-delta`) install one (`builtin_callbacks`); `train(callbacks=[...])` takes
more. Its stop is carried out as any callback's (control/callbacks.py): summary.json's
`stopped_early` says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from syncswitch.control.callbacks import Callback, EvaluationEvent, StartEvent, StopRun
from syncswitch.control.plan import RunPlan
from syncswitch.errors import ConfigError
from syncswitch.records.metric import MetricSpec


class Valued(Protocol):
    @property
    def value(self) -> float: ...


def early_stop_reason(
    rows: Sequence[Valued], metric: MetricSpec, patience: int, min_delta: float
) -> str | None:
    """Why the run stops early after `rows` (None: it goes on): the last `patience`
    evaluations did not beat the best before them by more than `min_delta`."""
    if patience < 1 or len(rows) <= patience:
        return None
    best = metric.best(row.value for row in rows[:-patience])
    if best is None or math.isnan(best):
        return None
    margin = min_delta if metric.higher_is_better else -min_delta
    recent = [row.value for row in rows[-patience:]]
    if any(metric.better(value, best + margin) for value in recent):
        return None
    return (
        f"early stopping: {metric.name} has not improved on {metric.show(best)} by more than "
        f"{min_delta:g} in {patience} evaluations"
    )


class EarlyStopping(Callback):
    """Stops the run when the primary metric has stopped improving; asks once."""

    def __init__(self, patience: int, min_delta: float = 0.0) -> None:
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"EarlyStopping patience {patience!r}: give a whole number >= 1")
        if not _non_negative(min_delta):
            raise ConfigError(f"EarlyStopping min_delta {min_delta!r}: give a number >= 0")
        self.patience = patience
        self.min_delta = float(min_delta)
        self._seen: list[EvaluationEvent] = []
        self._asked = False

    def on_start(self, event: StartEvent) -> StopRun | None:
        # A resumed run goes on counting from the evaluations its checkpoint recorded.
        self._seen = list(event.evaluations)
        return None

    def on_evaluation(self, event: EvaluationEvent) -> StopRun | None:
        self._seen.append(event)
        if self._asked:
            return None
        reason = early_stop_reason(self._seen, event.metric, self.patience, self.min_delta)
        if reason is None:
            return None
        self._asked = True
        return StopRun(reason)


def builtin_callbacks(plan: RunPlan) -> list[Callback]:
    """The callbacks a config installs: early stopping, with a patience given."""
    job = plan.job
    if job.early_stop_patience < 1:
        return []
    return [EarlyStopping(job.early_stop_patience, job.early_stop_min_delta)]


def _non_negative(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )
