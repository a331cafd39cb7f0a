"""Metrics are exact over a whole split, however it is batched: the built-in names equal
scikit-learn's on the concatenated predictions (an oracle), a plain function sees the split
whole, and an update/compute/reset object is used as torchmetrics' are."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch import per_sample_mean
from syncswitch.errors import WorkloadError
from syncswitch.workloads.loss_checks import check_whole_split_memory
from syncswitch.workloads.metrics import BUILTIN, WholeSplit, as_metric
from syncswitch.workloads.task import Task

metrics = pytest.importorskip("sklearn.metrics")

SAMPLES = 1_237
# Uneven evaluation batches, as a split's last batch is (one sample alone among them).
EDGES = [0, 1, 8, 264, 520, 521, 900, SAMPLES]


def batches(outputs: torch.Tensor, targets: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    return [(outputs[a:b], targets[a:b]) for a, b in itertools.pairwise(EDGES)]


def measured(metric: object, outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """A split's value through a task's meter, batch by batch, as the evaluator takes it."""
    task = Task.of(loss_fn=lambda o, y: o.sum() * 0, metrics={"m": metric}, primary_metric="loss")
    meter = task.meter()
    for out, y in batches(outputs, targets):
        meter.update(out, y)
    return meter.result()["m"]


def logits(classes: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    draw = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, classes, (SAMPLES,), generator=draw)
    # Outputs that lean towards the target: every metric is far from 0 and 1.
    outputs = torch.randn(SAMPLES, classes, generator=draw) + F.one_hot(targets, classes)
    return outputs, targets


def test_accuracy_and_f1_equal_scikit_learn_over_uneven_batches() -> None:
    for classes in (2, 5):
        outputs, targets = logits(classes)
        predicted = outputs.argmax(1).numpy()
        assert measured("accuracy", outputs, targets) == pytest.approx(
            metrics.accuracy_score(targets.numpy(), predicted), abs=1e-12
        )
        average = "binary" if classes == 2 else "macro"
        assert measured("f1", outputs, targets) == pytest.approx(
            metrics.f1_score(targets.numpy(), predicted, average=average), abs=1e-12
        )


def test_auc_equals_scikit_learn_with_two_columns_one_logit_and_many_classes() -> None:
    outputs, targets = logits(2)
    score = (outputs[:, 1].double() - outputs[:, 0].double()).numpy()
    expected = metrics.roc_auc_score(targets.numpy(), score)
    assert measured("auc", outputs, targets) == pytest.approx(expected, abs=1e-12)
    # One logit per sample, rounded so that many scores tie (ties take their mean rank).
    single = torch.round(outputs[:, 1:] - outputs[:, :1])
    expected = metrics.roc_auc_score(targets.numpy(), single.double().numpy().ravel())
    assert measured("auc", single, targets.float()) == pytest.approx(expected, abs=1e-12)
    outputs, targets = logits(4)
    probabilities = torch.softmax(outputs.double(), dim=1).numpy()
    expected = metrics.roc_auc_score(targets.numpy(), probabilities, multi_class="ovr")
    assert measured("auc", outputs, targets) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("columns", [1, 3])
def test_regression_metrics_equal_scikit_learn(columns: int) -> None:
    draw = torch.Generator().manual_seed(columns)
    # Targets far from 0 with a small spread: sums of squares would cancel; these do not.
    targets = 1e4 + torch.randn(SAMPLES, columns, generator=draw)
    outputs = targets + 0.5 * torch.randn(SAMPLES, columns, generator=draw)
    y, out = targets.double().numpy(), outputs.double().numpy()
    expected = {
        "r2": metrics.r2_score(y, out),
        "mse": metrics.mean_squared_error(y, out),
        "rmse": math.sqrt(metrics.mean_squared_error(y, out)),
        "mae": metrics.mean_absolute_error(y, out),
    }
    for name, value in expected.items():
        assert measured(name, outputs, targets) == pytest.approx(value, rel=1e-9), name


def test_a_sequence_accuracy_skips_padding_as_cross_entropy_does() -> None:
    outputs, targets = logits(3)
    outputs, targets = outputs.reshape(-1, 1, 3).transpose(1, 2), targets.reshape(-1, 1).clone()
    targets[::7] = -100
    kept = targets.ravel() != -100
    expected = metrics.accuracy_score(
        targets.ravel()[kept].numpy(), outputs.argmax(1).ravel()[kept].numpy()
    )
    assert measured("accuracy", outputs, targets) == pytest.approx(expected, abs=1e-12)


def test_a_plain_function_sees_the_whole_split_and_a_declared_mean_its_batches() -> None:
    outputs, targets = logits(5)

    def f1(out: torch.Tensor, y: torch.Tensor) -> float:
        return float(metrics.f1_score(y.numpy(), out.argmax(1).numpy(), average="macro"))

    assert measured(f1, outputs, targets) == pytest.approx(measured("f1", outputs, targets))
    hits = per_sample_mean(lambda out, y: float((out.argmax(1) == y).float().mean()))
    assert measured(hits, outputs, targets) == pytest.approx(  # a float32 mean per batch
        measured("accuracy", outputs, targets), abs=1e-6
    )


class Counting:
    """An object with torchmetrics' interface (torchmetrics itself is not required)."""

    def __init__(self) -> None:
        self.reset()

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.hits += int((preds.argmax(1) == target).sum())
        self.total += len(target)

    def compute(self) -> torch.Tensor:
        return torch.tensor(self.hits / self.total)

    def reset(self) -> None:
        self.hits, self.total = 0, 0


def test_an_update_compute_reset_object_is_reset_for_each_split() -> None:
    outputs, targets = logits(3)
    given = Counting()
    task = Task.of(metrics={"acc": given})
    for _ in range(2):  # two splits: the second starts from nothing
        meter = task.meter()
        for out, y in batches(outputs, targets):
            meter.update(out, y)
        assert meter.result()["acc"] == pytest.approx(measured("accuracy", outputs, targets))
    assert given.total == 0  # the evaluator measured with its own copy


def test_a_torchmetrics_metric_works_when_installed() -> None:
    torchmetrics = pytest.importorskip("torchmetrics")
    outputs, targets = logits(2)
    metric = torchmetrics.F1Score(task="multiclass", num_classes=2, average="macro")
    predicted = outputs.argmax(1).numpy()
    expected = metrics.f1_score(targets.numpy(), predicted, average="macro")
    assert measured(metric, outputs, targets) == pytest.approx(expected, abs=1e-6)


def test_the_cross_entropy_loss_is_the_whole_splits_mean_over_counted_positions() -> None:
    outputs, targets = logits(4)
    targets[::5] = -100  # padding: not a position the mean counts
    meter = Task.of().meter()
    for out, y in batches(outputs, targets):
        meter.update(out, y)
    assert meter.result()["loss"] == pytest.approx(float(F.cross_entropy(outputs, targets)))


def test_a_plain_function_over_its_memory_bound_is_refused_in_one_line() -> None:
    outputs, targets = logits(2)
    metric = WholeSplit(lambda o, y: 0.0, "big", limit_bytes=1_000)
    with pytest.raises(WorkloadError, match=r"metric 'big' is a plain function.*per_sample_mean"):
        for out, y in batches(outputs, targets):
            metric.update(out, y)


def test_unknown_names_and_values_are_refused_in_one_line() -> None:
    with pytest.raises(WorkloadError, match="no built-in metric 'f2'; built in: accuracy, f1"):
        as_metric("x", "f2")
    with pytest.raises(WorkloadError, match="must be a built-in name, a function"):
        as_metric("x", 3)
    with pytest.raises(WorkloadError, match=r"is a class; give an instance of it \(Counting"):
        as_metric("x", Counting)
    assert set(BUILTIN) >= {"accuracy", "f1", "auc", "r2", "mse", "mae"}
    assert list(Task.of(metrics=["f1", "auc"]).metrics) == ["f1", "auc"]


def test_a_metric_that_cannot_read_the_outputs_says_what_it_needs() -> None:
    with pytest.raises(WorkloadError, match=r"r2 needs outputs and targets of one shape"):
        measured("r2", torch.zeros(SAMPLES, 1), torch.zeros(SAMPLES))
    with pytest.raises(WorkloadError, match=r"f1 needs outputs \(batch, classes, \.\.\.\)"):
        measured("f1", torch.zeros(SAMPLES, 3), torch.zeros(SAMPLES, 2, dtype=torch.long))
    # Undefined on a split of one class (scikit-learn refuses): NaN, recorded as such.
    outputs, _ = logits(2)
    assert np.isnan(measured("auc", outputs, torch.ones(SAMPLES, dtype=torch.long)))


def test_a_plain_function_is_refused_before_the_start_when_a_split_would_not_fit() -> None:
    task = Task.of(metrics={"f1": lambda o, y: 0.0})
    outputs, targets = logits(10)  # 40 bytes of outputs and 8 of a target per sample
    check_whole_split_memory(task, outputs[:5], targets[:5], {"validation": 1_000_000})
    with pytest.raises(WorkloadError, match=r"metric 'f1' is a plain function.*MiB"):
        check_whole_split_memory(task, outputs[:5], targets[:5], {"validation": 30_000_000})


def test_a_plain_function_over_batches_of_unlike_shapes_says_what_to_give() -> None:
    metric = WholeSplit(lambda o, y: 0.0, "tokens")
    metric.update(torch.zeros(2, 3, 4), torch.zeros(2, 4, dtype=torch.long))
    metric.update(torch.zeros(2, 3, 5), torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(WorkloadError, match=r"differ in shape.*update/compute/reset"):
        metric.compute()
