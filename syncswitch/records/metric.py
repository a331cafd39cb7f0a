"""The metric a run is judged by, and the split it is measured on.

Every decision that reads an evaluation (the best value, the loss-plateau rule, a search
trial's score, the registry's stored outcome, the terminal line) reads this metric on this
split. New runs measure it on a validation split; runs written before validation splits
existed measured accuracy on the test set, and say so when read back (`LEGACY`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from syncswitch.records.fields import Fields

VALIDATION = "validation"
TEST = "test"
SPLITS = (VALIDATION, TEST)
# The prefix of a split's columns in metrics.csv (val_accuracy, test_loss, ...).
COLUMN_PREFIX = {VALIDATION: "val", TEST: "test"}


def column(split: str, name: str) -> str:
    """A measure's metrics.csv column, e.g. ``val_accuracy``."""
    return f"{COLUMN_PREFIX[split]}_{name}"


@dataclass(frozen=True)
class MetricSpec:
    """A run's primary metric: its name, which way is better, and the split it is read on."""

    name: str = "accuracy"
    higher_is_better: bool = True
    split: str = VALIDATION

    def better(self, a: float, b: float) -> bool:
        """Whether `a` is strictly better than `b` (NaN is never better)."""
        if math.isnan(a):
            return False
        if math.isnan(b):
            return True
        return a > b if self.higher_is_better else a < b

    def best(self, values: Iterable[float]) -> float | None:
        """The best of `values` (NaN only when every value is NaN; None when there is none)."""
        best: float | None = None
        for value in values:
            if best is None or self.better(value, best):
                best = value
        return best

    def show(self, value: float | None) -> str:
        """A value as a person reads it: accuracies in percent, others to 4 digits."""
        if value is None:
            return "-"
        if self.name.endswith("accuracy"):
            return f"{100 * value:.2f}%"
        return f"{value:.4g}"

    def to_plain(self) -> dict[str, Any]:
        return {"name": self.name, "higher_is_better": self.higher_is_better, "split": self.split}

    @classmethod
    def from_plain(cls, data: Any, where: str = "metric") -> MetricSpec:
        read = Fields(data, where)
        higher = read.data.get("higher_is_better")
        if not isinstance(higher, bool):
            raise read.refuse("higher_is_better", "true or false")
        return cls(
            name=_metric_name(read),
            higher_is_better=higher,
            split=read.text("split", choices=SPLITS),
        )


# Names whose direction is known without asking (also as a suffix: val_mse, top-1-acc).
_HIGHER = ("accuracy", "acc", "f1", "auc", "precision", "recall", "r2", "iou", "dice", "bleu")
_LOWER = ("loss", "mse", "mae", "rmse", "error", "err", "perplexity", "ppl", "nll", "wer", "cer")


def known_direction(name: str) -> bool | None:
    """Whether higher is better for a metric called `name`; None when the name does not say."""
    lowered = name.lower()
    for words, higher in ((_HIGHER, True), (_LOWER, False)):
        if any(lowered == w or lowered.endswith(("_" + w, "-" + w)) for w in words):
            return higher
    return None


# What a run is judged by unless told otherwise, and what runs written before validation
# splits existed were judged by.
DEFAULT = MetricSpec("accuracy", True, VALIDATION)
LEGACY = MetricSpec("accuracy", True, TEST)
MAX_NAME_CHARS = 64


def check_metric_name(name: object, what: str = "a metric name") -> str:
    """A metric name fit for a CSV column and a file: a short identifier-like text."""
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= MAX_NAME_CHARS
        or not all(c.isalnum() or c in "_-." for c in name)
    ):
        raise ValueError(
            f"{what} must be 1 to {MAX_NAME_CHARS} letters, digits, '_', '-' or '.', not {name!r}"
        )
    return name


def _metric_name(read: Fields) -> str:
    value = read.data.get("name")
    try:
        return check_metric_name(value)
    except ValueError:
        raise read.refuse("name", f"a metric name (up to {MAX_NAME_CHARS} characters)") from None
