"""The best evaluation's weights on the primary metric.

Every evaluation (the primary metric on validation) that beats the best so far keeps its
weights: in the run record (so checkpoints carry them and a resumed run goes on from them),
and in RUN_DIR/best_weights.pt, written with each checkpoint and at the end when the best has
changed since (as final_weights.pt, a state_dict: with BatchNorm its statistics are measured
on the driver, too slow for every evaluation of a large model on Ray).

Early stopping, which reads the same metric, is a callback (control/early_stopping.py).

The test split is measured on the final weights, as before (nothing decided during the run
has seen it); summary.json says so (`test_weights`, best_weights.py).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from syncswitch.control.best_weights import BestWeights
from syncswitch.control.evaluations import Evaluated
from syncswitch.control.plan import RunPlan
from syncswitch.control.record import RunRecord
from syncswitch.core.reliability.checkpoints import LoadedCheckpoint
from syncswitch.files import write_atomic
from syncswitch.records.metric import MetricSpec


class BestKeeper:
    """Keeps the best evaluation's weights in the record and best_weights.pt."""

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

    def observe(self, evaluated: Evaluated, weights: np.ndarray | None) -> None:
        """An evaluation's row is released (in training order): keep its weights if it is the
        best so far."""
        row = evaluated.metric_row()
        best = self.best
        if weights is not None and (best is None or self.metric.better(row.value, best.value)):
            point = evaluated.point
            new = BestWeights(row.value, point.samples, point.version, row.fraction, weights)
            self.record.bests.append(new)


def save_weights(
    path: Path, state: Callable[[np.ndarray], dict[str, torch.Tensor]], weights: np.ndarray
) -> None:
    """final_weights.pt or best_weights.pt: `state` (a state_dict) of flat `weights`."""
    buffer = io.BytesIO()  # written atomically: never through a planted symlink
    torch.save(state(weights), buffer)
    write_atomic(path, buffer.getvalue())
