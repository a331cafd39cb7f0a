"""Evaluation assembly: each shard sends its slice of the weights at an evaluation point; once
every shard has, the full weights go to an evaluator, and results (which may come back in any
order) are released in training order, each with the mean training loss up to its point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from syncswitch.control.decisions import Evaluate
from syncswitch.control.shard import ShardReport
from syncswitch.core.records import EvalPoint


@dataclass(frozen=True)
class Evaluated:
    """An evaluation result, released in training order."""

    point: EvalPoint
    accuracy: float
    loss: float
    train_loss: float

    def metric_row(self) -> dict[str, Any]:
        """The metrics.csv row (and RunRecord.metrics entry) for this point."""
        point = self.point
        return {
            "time_s": round(point.time_s, 4),
            "samples": point.samples,
            "fraction": round(point.fraction, 6),
            "version": point.version,
            "protocol": point.protocol,
            "test_accuracy": self.accuracy,
            "test_loss": self.loss,
            "train_loss": self.train_loss,
            "samples_per_s": round(point.samples / point.time_s, 2) if point.time_s else "",
        }


@dataclass
class EvaluationAssembly:
    _slices: list[list[tuple[EvalPoint, np.ndarray]]] = field(default_factory=list)  # per shard
    _pending: list[tuple[EvalPoint, float]] = field(default_factory=list)  # (point, train loss)
    _results: dict[EvalPoint, tuple[float, float]] = field(default_factory=dict)

    def add(self, reports: list[ShardReport], train_loss: Callable[[], float]) -> list[Evaluate]:
        """Evaluate a point once every shard has sent its slice of the weights.

        Shards reach the same sample counts but are drained at slightly different moments,
        so one may already hold a point that another has not reached yet. `train_loss` takes
        the mean training loss since the last point.
        """
        while len(self._slices) < len(reports):
            self._slices.append([])
        for queue, report in zip(self._slices, reports, strict=False):
            queue.extend(zip(report.outcome.evaluations, report.eval_weights, strict=True))
        decisions: list[Evaluate] = []
        while all(self._slices):
            slices = [queue.pop(0) for queue in self._slices]
            point = slices[0][0]
            weights = np.concatenate([w for _, w in slices])
            self._pending.append((point, train_loss()))
            decisions.append(Evaluate(point, weights, f"progress reached {point.fraction:g}"))
        return decisions

    def result(self, point: EvalPoint, accuracy: float, loss: float) -> list[Evaluated]:
        """Results now releasable in training order (none while an earlier one is out)."""
        self._results[point] = (accuracy, loss)
        released: list[Evaluated] = []
        while self._pending and self._pending[0][0] in self._results:
            done, train_loss = self._pending.pop(0)
            released.append(Evaluated(done, *self._results.pop(done), train_loss))
        return released

    def forget_slices(self) -> None:
        """Slices that only some shards had sent belong to a timeline the servers lost."""
        self._slices.clear()

    @property
    def slices_waiting(self) -> bool:
        """Some shard has sent a slice the others have not (one ended later than another)."""
        return any(self._slices)

    @property
    def outstanding(self) -> int:
        """Evaluations asked for whose results have not been released."""
        return len(self._pending)
