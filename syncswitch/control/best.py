"""The best evaluation's weights, and early stopping on the primary metric.

Every evaluation (the primary metric on validation) that beats the best so far keeps its
weights: in the run record (so checkpoints carry them and a resumed run goes on from them),
and in RUN_DIR/best_weights.pt, written with each checkpoint and at the end when the best has
changed since (as final_weights.pt, a state_dict: with BatchNorm its statistics are measured
on the driver, too slow for every evaluation of a large model on Ray).

Early stopping (off by default) ends the workload once `patience` evaluations in a row have
not beaten the best by more than `min_delta`, as Lightning's EarlyStopping does; the run then
ends as one whose workload another shard ended (the shards finish, the evaluation points left
are measured on the weights it stopped at), and summary.json says why.

The test split is measured on the final weights, as before (nothing decided during the run
has seen it); summary.json says so (`test_weights`, best_weights.py).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from syncswitch.control.best_weights import BestWeights
from syncswitch.control.evaluations import Evaluated, MetricsRow
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.core.reliability.checkpoints import LoadedCheckpoint
from syncswitch.files import write_atomic
from syncswitch.records.metric import MetricSpec


def early_stop_reason(
    rows: list[MetricsRow], metric: MetricSpec, patience: int, min_delta: float
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


class BestKeeper:
    """Keeps the best evaluation's weights in the record and best_weights.pt, and says when
    the run stops early."""

    def __init__(
        self,
        record: RunRecord,
        plan: RunPlan,
        save: Callable[[np.ndarray], None],
        resumed_from: LoadedCheckpoint | None = None,
    ) -> None:
        """`save` writes best_weights.pt from flat weights (atomically); `resumed_from`: the
        checkpoint a resumed run goes on from (`record` is its record)."""
        self.record = record
        self.metric: MetricSpec = plan.metric
        self.save = save
        self.patience = plan.job.early_stop_patience
        self.min_delta = plan.job.early_stop_min_delta
        self._saved: BestWeights | None = None  # the best best_weights.pt holds
        self._checkpoints = record.checkpoints  # checkpoints written when it was last asked
        if resumed_from is not None:
            self.resumed(resumed_from.info.samples)

    @property
    def best(self) -> BestWeights | None:
        return self.record.bests[-1] if self.record.bests else None

    def resumed(self, samples: int) -> None:
        """A resumed run goes on from a checkpoint at `samples`: what its record knew then."""
        self.record.bests = [b for b in self.record.bests if b.samples <= samples][-1:]
        # best_weights.pt may hold a best the interrupted run found after the checkpoint.
        self.flush()

    def checkpointed(self) -> None:
        """Asked after each drain: with a checkpoint written since, best_weights.pt too."""
        if self.record.checkpoints != self._checkpoints:
            self._checkpoints = self.record.checkpoints
            self.flush()

    def flush(self) -> None:
        """Write best_weights.pt if the best changed since it was last written (at each
        checkpoint and at the end)."""
        best = self.best
        if best is not None and best is not self._saved:
            self.save(best.weights)
            self._saved = best

    def observe(self, evaluated: Evaluated, weights: np.ndarray | None) -> str | None:
        """An evaluation's row is released (in training order): keep its weights if it is the
        best so far; return why the run stops early, if it does."""
        row = evaluated.metric_row()
        best = self.best
        if weights is not None and (best is None or self.metric.better(row.value, best.value)):
            point = evaluated.point
            new = BestWeights(row.value, point.samples, point.version, row.fraction, weights)
            self.record.bests.append(new)
        if self.record.stopped_early is not None:
            return None  # decided once (the controller records it when it ends the workload)
        return early_stop_reason(self.record.metrics, self.metric, self.patience, self.min_delta)


def save_weights(
    path: Path, state: Callable[[np.ndarray], dict[str, torch.Tensor]], weights: np.ndarray
) -> None:
    """final_weights.pt or best_weights.pt: `state` (a state_dict) of flat `weights`."""
    buffer = io.BytesIO()  # written atomically: never through a planted symlink
    torch.save(state(weights), buffer)
    write_atomic(path, buffer.getvalue())
