"""Metrics measured over a whole split, whatever its evaluation batches.

Every metric is an object with torchmetrics' interface: ``update(outputs, targets)`` once per
evaluation batch, ``compute()`` once per split, ``reset()`` before the next. A torchmetrics
`Metric` (or any object with those three methods) is used as it is; the built-in names
(`BUILTIN`) are such objects, each exact over the split (they sum counts, not batch means);
a plain function ``fn(outputs, targets) -> float`` is wrapped:

- `per_sample_mean(fn)`: it declares itself a mean over samples (accuracy, a mean squared
  error), so the batch values weighted by batch size give the split's value exactly;
- otherwise (`WholeSplit`) it is called once, on the split's outputs and targets
  concatenated: exact for any function, at the cost of holding them in the evaluator's
  memory (refused above `MAX_WHOLE_SPLIT_BYTES`, before the run and while it evaluates).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from syncswitch.errors import WorkloadError
from syncswitch.workloads.data import batch_size_of
from syncswitch.workloads.scores import BinaryScores, ClassCounts, ColumnSums, class_scores

MetricFn = Callable[[torch.Tensor, torch.Tensor], "float | torch.Tensor"]
# What a plain function may hold of one split: outputs and targets together, on the
# evaluator's CPU (an evaluator's memory is the machine's, shared with workers).
MAX_WHOLE_SPLIT_BYTES = 1 << 30


def is_metric(value: object) -> bool:
    """Whether `value` has torchmetrics' `Metric` interface (duck-typed: torchmetrics is not
    a dependency)."""
    return all(callable(getattr(value, name, None)) for name in ("update", "compute", "reset"))


@dataclass
class PerSampleMean:
    """A plain function declared a per-sample mean: batch values weighted by batch size."""

    fn: MetricFn
    _total: float = 0.0
    _count: int = 0

    def __call__(self, outputs: torch.Tensor, targets: torch.Tensor) -> float:
        return float(self.fn(outputs, targets))

    def update(self, outputs: torch.Tensor, targets: Any) -> None:
        size = batch_size_of(targets)
        self._total += float(self.fn(outputs, targets)) * size
        self._count += size

    def compute(self) -> float:
        return self._total / self._count if self._count else math.nan

    def reset(self) -> None:
        self._total, self._count = 0.0, 0


def per_sample_mean(fn: MetricFn) -> PerSampleMean:
    """Declare `fn(outputs, targets)` a mean over the batch's samples: the split's value is
    then the batch values averaged by batch size (exact), and nothing is held."""
    if not callable(fn):
        raise WorkloadError(f"per_sample_mean() takes a function (outputs, targets), not {fn!r}")
    return PerSampleMean(fn)


@dataclass
class WholeSplit:
    """A plain function called once on the split's outputs and targets, concatenated."""

    fn: MetricFn
    name: str = "a metric"
    limit_bytes: int = MAX_WHOLE_SPLIT_BYTES
    _outputs: list[torch.Tensor] = field(default_factory=list)
    _targets: list[torch.Tensor] = field(default_factory=list)
    _bytes: int = 0

    def update(self, outputs: torch.Tensor, targets: Any) -> None:
        if not isinstance(targets, torch.Tensor):
            raise WorkloadError(
                f"metric {self.name!r} is a plain function, so it receives the split's outputs "
                f"and targets whole, concatenated: they must be tensors, and the targets are "
                f"a {type(targets).__name__}; give an object with update/compute/reset"
            )
        self._bytes += _nbytes(outputs) + _nbytes(targets)
        if self._bytes > self.limit_bytes:
            raise WorkloadError(too_large(self.name, self._bytes, self.limit_bytes))
        self._outputs.append(outputs.detach().cpu())
        self._targets.append(targets.detach().cpu())

    def compute(self) -> float:
        if not self._targets:
            return math.nan
        try:
            outputs, targets = torch.cat(self._outputs), torch.cat(self._targets)
        except RuntimeError:  # e.g. sequences padded to each batch's own length
            shapes = sorted({tuple(o.shape[1:]) for o in self._outputs})[:3]
            raise WorkloadError(
                f"metric {self.name!r} is a plain function, so it receives the split's outputs "
                f"and targets concatenated, but the batches' outputs differ in shape beyond "
                f"the first dimension ({', '.join(map(str, shapes))}, ...); give an object "
                "with update/compute/reset"
            ) from None
        return float(self.fn(outputs, targets))

    def reset(self) -> None:
        self._outputs, self._targets, self._bytes = [], [], 0


def too_large(name: str, size_bytes: int, limit_bytes: int) -> str:
    return (
        f"metric {name!r} is a plain function, so it receives the split's outputs and targets "
        f"whole: {size_bytes / 2**20:,.0f} MiB, over the {limit_bytes / 2**20:,.0f} MiB "
        "allowed; wrap it in per_sample_mean(fn) if it is a mean over samples, or give an "
        "object with update/compute/reset (a torchmetrics Metric)"
    )


def _nbytes(value: torch.Tensor) -> int:
    return value.numel() * value.element_size()


# -- the built-in names ---------------------------------------------------------------------


class Accuracy:
    """Share of samples (positions, for sequences) whose largest output is the target class;
    class probabilities as targets count their largest one; cross-entropy's padding id -100
    is not counted."""

    def __init__(self) -> None:
        self.reset()

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        predicted, truth = class_scores(outputs, targets, "accuracy").labels()
        self._hits += int((predicted == truth).sum())
        self._count += int(truth.numel())

    def compute(self) -> float:
        return self._hits / self._count if self._count else math.nan

    def reset(self) -> None:
        self._hits, self._count = 0, 0


class F1:
    """F1 of class 1 with two classes (scikit-learn's ``f1_score``); with more, the mean
    of each class's F1 (``average="macro"``). Exact: a confusion count over the split."""

    def __init__(self) -> None:
        self.reset()

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        scores = class_scores(outputs, targets, "f1")
        self._counts.add(*scores.labels(), scores.classes)

    def compute(self) -> float:
        return self._counts.f1()

    def reset(self) -> None:
        self._counts = ClassCounts()


class AUC:
    """Area under the ROC curve (scikit-learn's ``roc_auc_score``): of the class-1 score with
    two classes (logit difference; one output column: the output itself), one-vs-rest over
    softmax probabilities averaged over classes with more. Holds one score per sample."""

    def __init__(self) -> None:
        self.reset()

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        self._scores.add(class_scores(outputs, targets, "auc"))

    def compute(self) -> float:
        return self._scores.auc()

    def reset(self) -> None:
        self._scores = BinaryScores()


class _Regression:
    """Sums per output column over the split (float64), for r2, mse, mae and rmse."""

    name = ""

    def __init__(self) -> None:
        self.reset()

    def update(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        if outputs.shape != targets.shape:
            raise WorkloadError(
                f"{self.name} needs outputs and targets of one shape; got outputs "
                f"{tuple(outputs.shape)} and targets {tuple(targets.shape)}"
            )
        self._sums.add(outputs, targets)

    def reset(self) -> None:
        self._sums = ColumnSums()


class R2(_Regression):
    """Coefficient of determination per output column, averaged over columns (scikit-learn's
    ``r2_score``, ``multioutput="uniform_average"``)."""

    name = "r2"

    def compute(self) -> float:
        return self._sums.r2()


class MSE(_Regression):
    name = "mse"

    def compute(self) -> float:
        return self._sums.mean_squared_error()


class RMSE(_Regression):
    name = "rmse"

    def compute(self) -> float:
        return math.sqrt(self._sums.mean_squared_error())


class MAE(_Regression):
    name = "mae"

    def compute(self) -> float:
        return self._sums.mean_absolute_error()


BUILTIN: dict[str, type] = {
    "accuracy": Accuracy,
    "f1": F1,
    "auc": AUC,
    "r2": R2,
    "mse": MSE,
    "rmse": RMSE,
    "mae": MAE,
}


def as_metric(name: str, value: object) -> Any:
    """What `metrics={name: value}` measures with: a built-in name, an object with
    update/compute/reset, or a plain function (see the module docstring)."""
    if isinstance(value, str):
        built = BUILTIN.get(value)
        if built is None:
            raise WorkloadError(
                f"metrics={{{name!r}: {value!r}}}: no built-in metric {value!r}; built in: "
                f"{', '.join(BUILTIN)} (perplexity comes with the language model's loss)"
            )
        return built()
    if isinstance(value, type) and is_metric(value):
        raise WorkloadError(
            f"metrics={{{name!r}: {value.__name__}}} is a class; give an instance of it "
            f"({value.__name__}(...)): each evaluation resets and updates it"
        )
    if is_metric(value):
        return value
    if callable(value):
        return WholeSplit(value, name)
    raise WorkloadError(
        f"metrics={{{name!r}: ...}} must be a built-in name, a function (outputs, targets) or "
        f"an object with update/compute/reset, not {type(value).__name__}"
    )


def computed(name: str, value: Any) -> float:
    """A metric's compute() as one float (a one-element tensor too), or one line."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    shown = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
    raise WorkloadError(f"metric {name!r} computed {shown}, not one number")
