"""What a job optimises and what it is judged by: its loss, its named metrics, and the one
metric (with its direction) that every decision reads.

A metric is ``fn(outputs, targets) -> float`` on one evaluation batch; a split's value is the
mean over its batches weighted by their sizes, so a per-sample mean (accuracy, mean squared
error) comes out exactly. The loss is always measured too, under the name ``loss``. A
*derived* metric is computed from a split's means once they are taken (perplexity is exp of
the split's mean loss, which no mean of per-batch values gives).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from syncswitch.errors import WorkloadError
from syncswitch.records.metric import VALIDATION, MetricSpec, check_metric_name, known_direction
from syncswitch.user_code import described

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MetricFn = Callable[[torch.Tensor, torch.Tensor], "float | torch.Tensor"]
DerivedFn = Callable[[Mapping[str, float]], float]  # a split's means -> one value
LOSS = "loss"


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of samples whose largest output is the target class (classification's default).

    Sequence outputs ``(N, C, ...)`` with targets ``(N, ...)`` are scored per position."""
    return int((outputs.argmax(dim=1) == targets).sum()) / max(targets.numel(), 1)


@dataclass(frozen=True)
class Task:
    """The loss, the metrics and the primary metric of a job (picklable: it goes to Ray)."""

    loss_fn: LossFn = F.cross_entropy
    metrics: Mapping[str, MetricFn] = field(default_factory=lambda: {"accuracy": accuracy})
    primary: str = "accuracy"
    higher_is_better: bool = True
    derived: Mapping[str, DerivedFn] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        loss_fn: LossFn | None = None,
        metrics: Mapping[str, MetricFn] | None = None,
        primary_metric: str | None = None,
        higher_is_better: bool | None = None,
    ) -> Task:
        """The task the API's keyword arguments describe, checked, with defaults filled in:
        cross-entropy and accuracy; a primary metric named by `primary_metric` (else
        accuracy if measured, else the first metric, else the loss), its direction known for
        common names and otherwise required."""
        loss_fn = F.cross_entropy if loss_fn is None else loss_fn
        if not callable(loss_fn):
            raise WorkloadError(f"loss_fn= must be a callable (outputs, targets), not {loss_fn!r}")
        if metrics is None:
            metrics = {"accuracy": accuracy} if loss_fn is F.cross_entropy else {}
        if not isinstance(metrics, Mapping):
            raise WorkloadError(
                f"metrics= must be a dict of name -> fn(outputs, targets), not {metrics!r}"
            )
        for name, fn in metrics.items():
            try:
                check_metric_name(name, "a metrics= name")
            except ValueError as error:
                raise WorkloadError(str(error)) from None
            if name == LOSS:
                raise WorkloadError(
                    "metrics= may not name 'loss': the loss is always measured under that name"
                )
            if not callable(fn):
                raise WorkloadError(f"metrics={{{name!r}: ...}} must be a callable, not {fn!r}")
        if primary_metric is None:
            primary_metric = "accuracy" if "accuracy" in metrics else next(iter(metrics), LOSS)
        if primary_metric != LOSS and primary_metric not in metrics:
            named = ", ".join([LOSS, *metrics])
            raise WorkloadError(
                f"primary_metric={primary_metric!r} is not measured; allowed: {named}"
            )
        if higher_is_better is None:
            higher_is_better = _known_direction(primary_metric)
        return cls(loss_fn, dict(metrics), primary_metric, bool(higher_is_better))

    def spec(self, split: str = VALIDATION) -> MetricSpec:
        return MetricSpec(self.primary, self.higher_is_better, split)

    @property
    def names(self) -> tuple[str, ...]:
        """The measured names, the primary first, then the loss, then the others."""
        rest = [n for n in (LOSS, *self.metrics, *self.derived) if n != self.primary]
        return (self.primary, *rest)

    def measure(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """The loss and every metric on one batch."""
        values: dict[str, float] = {}
        for name, fn in {LOSS: self.loss_fn, **self.metrics}.items():
            try:
                values[name] = float(fn(outputs, targets))
            except Exception as error:  # one line, as the checks before the start say it
                raise WorkloadError(
                    f"{name} failed on an evaluation batch: {described(error)}"
                ) from None
        return values

    def finish(self, means: Mapping[str, float]) -> dict[str, float]:
        """A split's measures in `names`' order: its per-batch means, and the derived
        metrics computed from them."""
        values = dict(means)
        for name, fn in self.derived.items():
            values[name] = float(fn(means))
        return {name: values[name] for name in self.names}


def _known_direction(name: str) -> bool:
    higher = known_direction(name)
    if higher is not None:
        return higher
    raise WorkloadError(
        f"primary_metric={name!r}: say whether higher or lower is better with "
        "higher_is_better=True or False"
    )
