"""Evaluation assembly: each shard sends its slice of the weights at an evaluation point; once
every shard has, the full weights go to an evaluator, and results (which may come back in any
order) are released in training order, each with the mean training loss up to its point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import UnionType
from typing import Any

import numpy as np

from syncswitch.control.decisions import Evaluate
from syncswitch.control.shard import ShardReport
from syncswitch.core.sync.records import EvalPoint
from syncswitch.records.metric import COLUMN_PREFIX, SPLITS, VALIDATION, column


@dataclass(frozen=True)
class MetricsRow:
    """One evaluation point as the run records it: a row of metrics.csv and of
    RunRecord.metrics (checkpointed in the plain form of `to_plain()`)."""

    time_s: float
    samples: int
    fraction: float
    version: int
    protocol: str
    # The evaluated split's measures by name: the primary metric first, then the loss.
    values: dict[str, float]
    train_loss: float  # mean since the previous point (nan when there was no update)
    samples_per_s: float | None  # None at time 0 (an empty cell)
    split: str = VALIDATION  # which split `values` were measured on

    @property
    def value(self) -> float:
        """The primary metric's value."""
        return next(iter(self.values.values()))

    @property
    def loss(self) -> float:
        """The evaluated split's loss."""
        return self.values.get("loss", float("nan"))

    def to_plain(self) -> dict[str, Any]:
        return {
            "time_s": self.time_s,
            "samples": self.samples,
            "fraction": self.fraction,
            "version": self.version,
            "protocol": self.protocol,
            **{column(self.split, name): value for name, value in self.values.items()},
            "train_loss": self.train_loss,
            "samples_per_s": "" if self.samples_per_s is None else self.samples_per_s,
        }

    @classmethod
    def from_plain(cls, row: Any) -> MetricsRow:
        """Back from `to_plain()` (a checkpointed run record), each value as it was saved;
        raises, in one line, on a malformed one."""
        if not isinstance(row, dict):
            raise ValueError("a metrics row is not a mapping")
        rate = row.get("samples_per_s")
        split, values = _measures(row)
        return cls(
            time_s=_number(row, "time_s"),
            samples=_number(row, "samples", int),
            fraction=_number(row, "fraction"),
            version=_number(row, "version", int),
            protocol=_text(row, "protocol"),
            values=values,
            train_loss=_number(row, "train_loss"),
            samples_per_s=None if rate == "" else _number(row, "samples_per_s"),
            split=split,
        )


def _measures(row: dict[str, Any]) -> tuple[str, dict[str, float]]:
    """The split and the measures of a saved row (checkpoints from before validation
    splits hold test_accuracy and test_loss)."""
    for split in SPLITS:
        prefix = COLUMN_PREFIX[split] + "_"
        keys = [key for key in row if isinstance(key, str) and key.startswith(prefix)]
        if keys:
            return split, {key[len(prefix) :]: _number(row, key) for key in keys}
    raise ValueError("a metrics row has no measures")


def _number(row: dict[str, Any], key: str, kind: type | UnionType = int | float) -> Any:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"a metrics row has {key} = {value!r}")
    return value


def _text(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if not isinstance(value, str):
        raise ValueError(f"a metrics row has {key} = {value!r}")
    return value


@dataclass(frozen=True)
class Evaluated:
    """An evaluation result, released in training order."""

    point: EvalPoint
    values: dict[str, float]  # the primary metric first
    train_loss: float
    split: str
    weights: np.ndarray | None = None  # the flat weights evaluated (control/best.py)

    def metric_row(self) -> MetricsRow:
        """The metrics.csv row (and RunRecord.metrics entry) for this point."""
        point = self.point
        return MetricsRow(
            time_s=round(point.time_s, 4),
            samples=point.samples,
            fraction=round(point.fraction, 6),
            version=point.version,
            protocol=point.protocol,
            values=self.values,
            train_loss=self.train_loss,
            samples_per_s=round(point.samples / point.time_s, 2) if point.time_s else None,
            split=self.split,
        )


@dataclass
class EvaluationAssembly:
    split: str = VALIDATION  # the split evaluations are measured on
    _slices: list[list[tuple[EvalPoint, np.ndarray]]] = field(default_factory=list)  # per shard
    # (point, train loss, weights): the weights kept (a reference) until the result is in,
    # so the best evaluation's can be kept (control/best.py).
    _pending: list[tuple[EvalPoint, float, np.ndarray]] = field(default_factory=list)
    _results: dict[EvalPoint, dict[str, float]] = field(default_factory=dict)

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
            self._pending.append((point, train_loss(), weights))
            decisions.append(Evaluate(point, weights, f"progress reached {point.fraction:g}"))
        return decisions

    def result(self, point: EvalPoint, values: dict[str, float]) -> list[Evaluated]:
        """Results now releasable in training order (none while an earlier one is out)."""
        self._results[point] = values
        released: list[Evaluated] = []
        while self._pending and self._pending[0][0] in self._results:
            done, train_loss, weights = self._pending.pop(0)
            values = self._results.pop(done)
            released.append(Evaluated(done, values, train_loss, self.split, weights))
        return released

    def forget_slices(self) -> None:
        """Slices that only some shards had sent belong to a timeline the servers lost."""
        self._slices.clear()

    @property
    def slices_waiting(self) -> bool:
        """Some shard has sent a slice the others have not (one ended later than another)."""
        return any(self._slices)

    @property
    def first_unreleased_samples(self) -> int | None:
        """The samples of the earliest point whose row is not released yet (asked for, or
        with slices still to come from some shard); None when there is none."""
        waiting = [queue[0][0].samples for queue in self._slices if queue]
        asked = [point.samples for point, _, _ in self._pending[:1]]
        return min(waiting + asked, default=None)

    @property
    def outstanding(self) -> int:
        """Evaluations asked for whose results have not been released."""
        return len(self._pending)
