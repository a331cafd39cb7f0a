"""What a job optimises and what it is judged by: its loss, its named metrics, and the one
metric (with its direction) that every decision reads.

Each metric is measured over the whole split, exactly, whatever the evaluation batches
(metrics.py: a built-in name, an object with update/compute/reset such as a torchmetrics
`Metric`, or a plain function); the loss too (meter.py). The loss is always measured, under
the name ``loss``. A *derived* metric is computed from a split's values once they are taken
(perplexity is exp of the split's mean loss).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from syncswitch.errors import WorkloadError
from syncswitch.records.metric import VALIDATION, MetricSpec, check_metric_name, known_direction
from syncswitch.workloads.meter import LOSS, SplitMeter, own_copies
from syncswitch.workloads.metrics import Accuracy, as_metric

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
DerivedFn = Callable[[Mapping[str, float]], float]  # a split's values -> one value


def _accuracy() -> dict[str, Any]:
    return {"accuracy": Accuracy()}


@dataclass(frozen=True)
class Task:
    """The loss, the metrics and the primary metric of a job (picklable: it goes to Ray)."""

    loss_fn: LossFn = F.cross_entropy
    metrics: Mapping[str, Any] = field(default_factory=_accuracy)  # name -> metric object
    primary: str = "accuracy"
    higher_is_better: bool = True
    derived: Mapping[str, DerivedFn] = field(default_factory=dict)
    # metrics= was not given with a loss of the user's own (a class-weighted cross-entropy):
    # accuracy joins once a first batch shows class ids (`with_accuracy`), as the primary
    # metric too when primary_metric= was not given either.
    accuracy_if_classes: bool = False
    accuracy_primary: bool = False
    # A language model's task: the loss is a mean per token (nats), and the summary gives
    # tokens/s beside samples/s (the targets' positions per sample times samples/s).
    per_token: bool = False

    @classmethod
    def of(
        cls,
        loss_fn: LossFn | None = None,
        metrics: Mapping[str, Any] | list[str] | None = None,
        primary_metric: str | None = None,
        higher_is_better: bool | None = None,
    ) -> Task:
        """The task the API's keyword arguments describe, checked, with defaults filled in:
        cross-entropy and accuracy (with a loss of the user's own, accuracy once a first batch
        shows class ids: `with_accuracy`); each metric as metrics.py's `as_metric` makes it
        (a list names built-in metrics); a primary metric named by `primary_metric` (else
        accuracy if measured, else the first metric, else the loss), its direction known for
        common names and otherwise required."""
        loss_fn = F.cross_entropy if loss_fn is None else loss_fn
        if not callable(loss_fn):
            raise WorkloadError(f"loss_fn= must be a callable (outputs, targets), not {loss_fn!r}")
        metrics_given = metrics is not None
        primary_given = primary_metric is not None or higher_is_better is not None
        if metrics is None:
            metrics = {"accuracy": "accuracy"} if loss_fn is F.cross_entropy else {}
        if isinstance(metrics, list | tuple) and all(isinstance(m, str) for m in metrics):
            metrics = {name: name for name in metrics}  # built-in names, each its own name
        if not isinstance(metrics, Mapping):
            raise WorkloadError(
                f"metrics= must be a dict of name -> metric (a built-in name, a function "
                f"(outputs, targets) or an object with update/compute/reset), not {metrics!r}"
            )
        measured: dict[str, Any] = {}
        for name, fn in metrics.items():
            try:
                check_metric_name(name, "a metrics= name")
            except ValueError as error:
                raise WorkloadError(str(error)) from None
            if name == LOSS:
                raise WorkloadError(
                    "metrics= may not name 'loss': the loss is always measured under that name"
                )
            measured[name] = as_metric(name, fn)
        if primary_metric is None:
            primary_metric = "accuracy" if "accuracy" in metrics else next(iter(metrics), LOSS)
        if primary_metric != LOSS and primary_metric not in metrics:
            named = ", ".join([LOSS, *metrics])
            raise WorkloadError(
                f"primary_metric={primary_metric!r} is not measured; allowed: {named}"
            )
        if higher_is_better is None:
            higher_is_better = _known_direction(primary_metric)
        chosen = not metrics_given and loss_fn is not F.cross_entropy
        return cls(
            loss_fn,
            measured,
            primary_metric,
            bool(higher_is_better),
            accuracy_if_classes=chosen,
            accuracy_primary=chosen and not primary_given,
        )

    def with_accuracy(self) -> Task:
        """This task with accuracy measured (the targets are class ids), as its primary
        metric when none was named."""
        metrics = {"accuracy": Accuracy(), **self.metrics}
        if not self.accuracy_primary:
            return replace(self, metrics=metrics, accuracy_if_classes=False)
        return replace(
            self,
            metrics=metrics,
            primary="accuracy",
            higher_is_better=True,
            accuracy_if_classes=False,
            accuracy_primary=False,
        )

    def spec(self, split: str = VALIDATION) -> MetricSpec:
        return MetricSpec(self.primary, self.higher_is_better, split)

    @property
    def names(self) -> tuple[str, ...]:
        """The measured names, the primary first, then the loss, then the others."""
        rest = [n for n in (LOSS, *self.metrics, *self.derived) if n != self.primary]
        return (self.primary, *rest)

    def meter(self) -> SplitMeter:
        """A fresh measure of one split: `update` per batch, then `finish(meter.result())`.
        The metric objects are its own copies (a simulated run evaluates in this process)."""
        return SplitMeter(self.loss_fn, own_copies(self.metrics))

    def finish(self, measured: Mapping[str, float]) -> dict[str, float]:
        """A split's measures in `names`' order: the loss and metrics, and the derived
        metrics computed from them."""
        values = dict(measured)
        for name, fn in self.derived.items():
            values[name] = float(fn(measured))
        return {name: values[name] for name in self.names}


def _known_direction(name: str) -> bool:
    higher = known_direction(name)
    if higher is not None:
        return higher
    raise WorkloadError(
        f"primary_metric={name!r}: say whether higher or lower is better with "
        "higher_is_better=True or False"
    )
