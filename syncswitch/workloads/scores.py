"""What the built-in metrics (metrics.py) keep of a split between batches: a confusion count,
the class scores a ROC curve needs, and per-column running sums; each gives the whole split's
value, as scikit-learn computes it on the concatenated predictions."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from syncswitch.errors import WorkloadError

IGNORED_CLASS = -100  # cross_entropy's default ignore_index (padding in sequence targets)


@dataclass(frozen=True)
class ClassScores:
    """One batch of a classification, flattened to one row per counted sample (or position):
    `logits` (rows, classes), or one logit per row when `single` (class 1 when > 0)."""

    logits: torch.Tensor
    truth: torch.Tensor  # class ids, int64
    classes: int
    single: bool

    def labels(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(predicted, true) class ids."""
        predicted = (self.logits > 0).long() if self.single else self.logits.argmax(dim=1)
        return predicted, self.truth

    def binary_score(self) -> torch.Tensor:
        """Class 1's score, monotone in its probability: the logit itself, or with two
        columns the logit difference (softmax's class-1 probability saturates to ties)."""
        if self.classes == 2 and not self.single:
            return self.logits[:, 1].double() - self.logits[:, 0].double()
        return self.logits.double()  # one logit; or every class's, for one-vs-rest


def class_scores(outputs: torch.Tensor, targets: torch.Tensor, name: str) -> ClassScores:
    """A batch's outputs and targets as `ClassScores`, or one line saying what `name`
    needs: outputs (batch, classes, ...) against class ids (batch, ...) or class
    probabilities shaped like the outputs; or one logit per sample against 0/1 targets."""
    if outputs.ndim >= 2 and outputs.shape[1] >= 2:
        classes = int(outputs.shape[1])
        logits = outputs.movedim(1, -1).reshape(-1, classes)
        if targets.is_floating_point() and targets.shape == outputs.shape:
            truth = targets.argmax(dim=1).reshape(-1)
        elif not targets.is_floating_point() and targets.shape == (
            outputs.shape[:1] + outputs.shape[2:]
        ):
            truth = targets.reshape(-1).long()
        else:
            raise _refused(name, outputs, targets)
        kept = truth != IGNORED_CLASS
        return ClassScores(logits[kept], truth[kept], classes, single=False)
    if outputs.ndim in (1, 2) and outputs.numel() == targets.numel() == outputs.shape[0]:
        truth = targets.reshape(-1)
        if not bool(((truth == 0) | (truth == 1)).all()):
            raise WorkloadError(
                f"{name} with one output per sample needs targets 0 or 1; got values "
                f"{sorted({float(v) for v in truth.unique()[:4]})}"
            )
        return ClassScores(outputs.reshape(-1), truth.long(), 2, single=True)
    raise _refused(name, outputs, targets)


def _refused(name: str, outputs: torch.Tensor, targets: torch.Tensor) -> WorkloadError:
    return WorkloadError(
        f"{name} needs outputs (batch, classes, ...) and class ids (batch, ...) as targets, "
        f"or one logit per sample and 0/1 targets; got outputs {tuple(outputs.shape)} and "
        f"targets {tuple(targets.shape)} {str(targets.dtype).removeprefix('torch.')}"
    )


@dataclass
class ClassCounts:
    """A confusion count (true class x predicted class) over a split."""

    counts: torch.Tensor | None = None

    def add(self, predicted: torch.Tensor, truth: torch.Tensor, classes: int) -> None:
        if bool(((truth < 0) | (truth >= classes)).any()):
            raise WorkloadError(f"a class id is outside 0..{classes - 1}")
        flat = torch.bincount((truth * classes + predicted).cpu(), minlength=classes * classes)
        batch = flat.reshape(classes, classes)
        self.counts = batch if self.counts is None else self.counts + batch

    def f1(self) -> float:
        """Class 1's F1 with two classes; else the mean F1 over the classes that occur among
        the targets or the predictions (scikit-learn's macro average); 0 where undefined."""
        if self.counts is None:
            return math.nan
        true_positive = self.counts.diag().double()
        false_positive = self.counts.sum(dim=0).double() - true_positive
        false_negative = self.counts.sum(dim=1).double() - true_positive
        wrong = false_positive + false_negative
        per_class = torch.where(
            2 * true_positive + wrong > 0, 2 * true_positive / (2 * true_positive + wrong), 0.0
        )
        if self.counts.shape[0] == 2:
            return float(per_class[1])
        occurring = (true_positive + wrong) > 0
        return float(per_class[occurring].mean()) if bool(occurring.any()) else 0.0


@dataclass
class BinaryScores:
    """Every sample's score and class over a split, for the area under the ROC curve."""

    scores: list[torch.Tensor] = field(default_factory=list)
    truth: list[torch.Tensor] = field(default_factory=list)
    classes: int = 0

    def add(self, batch: ClassScores) -> None:
        self.classes = batch.classes
        self.scores.append(batch.binary_score().cpu())
        self.truth.append(batch.truth.cpu())

    def auc(self) -> float:
        if not self.truth:
            return math.nan
        scores, truth = torch.cat(self.scores), torch.cat(self.truth)
        if scores.ndim == 1:
            return _binary_auc(scores, truth == 1)
        # One class against the rest, on softmax probabilities, averaged over the classes.
        probabilities = torch.softmax(scores, dim=1)
        areas = [_binary_auc(probabilities[:, c], truth == c) for c in range(self.classes)]
        return sum(areas) / len(areas)


def _binary_auc(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """The Mann-Whitney statistic (tied scores take their mean rank), which is the trapezoid
    area under the ROC curve; NaN when one class is absent (scikit-learn refuses)."""
    positives = int(positive.sum())
    negatives = int(positive.numel()) - positives
    if positives == 0 or negatives == 0:
        return math.nan
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    first_rank = torch.cumsum(counts, 0) - counts + 1  # ranks from 1
    mean_rank = first_rank.double() + (counts.double() - 1) / 2
    rank_sum = float(mean_rank[inverse][positive].sum())
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


@dataclass
class ColumnSums:
    """Per output column over a split, in float64: the count, the targets' mean and sum of
    squared deviations (merged batch by batch, Chan et al., so no large sums cancel), and
    the sums of squared and absolute errors."""

    count: int = 0
    mean: torch.Tensor | None = None
    deviations: torch.Tensor | None = None
    squared_error: torch.Tensor | None = None
    absolute_error: torch.Tensor | None = None

    def add(self, outputs: torch.Tensor, targets: torch.Tensor) -> None:
        rows = int(targets.shape[0]) if targets.ndim else 1
        y = targets.detach().double().reshape(rows, -1).cpu()
        error = outputs.detach().double().reshape(rows, -1).cpu() - y
        mean, deviations = y.mean(dim=0), ((y - y.mean(dim=0)) ** 2).sum(dim=0)
        if self.mean is None or self.deviations is None:
            self.mean, self.deviations = mean, deviations
            self.squared_error, self.absolute_error = (error**2).sum(0), error.abs().sum(0)
        else:
            total = self.count + rows
            delta = mean - self.mean
            self.mean = self.mean + delta * rows / total
            self.deviations = self.deviations + deviations + delta**2 * self.count * rows / total
            self.squared_error = self.squared_error + (error**2).sum(0)  # type: ignore[operator]
            self.absolute_error = self.absolute_error + error.abs().sum(0)  # type: ignore[operator]
        self.count += rows

    def r2(self) -> float:
        """1 - residual / total sum of squares per column, averaged; a constant column
        scores 1 when predicted exactly, else 0 (scikit-learn's force_finite)."""
        if self.deviations is None or self.squared_error is None:
            return math.nan
        exact = self.squared_error == 0
        constant = self.deviations == 0
        safe = torch.where(constant, 1.0, self.deviations)
        scores = torch.where(constant, exact.double(), 1 - self.squared_error / safe)
        return float(scores.mean())

    def mean_squared_error(self) -> float:
        if self.squared_error is None:
            return math.nan
        return float(self.squared_error.sum()) / (self.count * self.squared_error.numel())

    def mean_absolute_error(self) -> float:
        if self.absolute_error is None:
            return math.nan
        return float(self.absolute_error.sum()) / (self.count * self.absolute_error.numel())
