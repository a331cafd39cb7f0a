"""A loss that does not fit the job is refused in one line before anything starts; a loss of
the user's own on class ids keeps accuracy."""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from syncswitch import TrainConfig, train
from syncswitch.errors import WorkloadError
from syncswitch.workloads.checks import check_job
from syncswitch.workloads.data import TorchData
from syncswitch.workloads.loss_checks import check_loss_fits
from syncswitch.workloads.task import Task
from tests.workloads.test_checks import refused

JOB = dict(runtime="sim", workers=2, epochs=1, progress=False)
WHERE = "on a first batch"


def pairs(targets: torch.Tensor, features: int = 4) -> TensorDataset:
    inputs = torch.randn(len(targets), features, generator=torch.Generator().manual_seed(0))
    return TensorDataset(inputs, targets)


def linear(outputs: int) -> torch.nn.Module:
    return torch.nn.Linear(4, outputs)


def test_a_regression_target_under_the_default_cross_entropy_is_refused(tmp_path: Path) -> None:
    data = pairs(torch.randn(32, 1))
    says = refused(
        tmp_path, model_factory=functools.partial(linear, 1), train_data=data, val_data=data
    )
    assert "targets are float32 (5, 1) against outputs (5, 1)" in says
    assert "for a regression target give train() a loss_fn=" in says


def test_outputs_that_only_broadcast_against_the_targets_are_refused(tmp_path: Path) -> None:
    data = pairs(torch.randn(32))
    for loss in (F.mse_loss, lambda o, t: ((o - t) ** 2).mean()):  # torch's own, and one's own
        says = refused(
            tmp_path,
            model_factory=functools.partial(linear, 1),
            train_data=data,
            val_data=data,
            loss_fn=loss,
        )
        assert "the loss broadcasts outputs (5, 1) against targets (5,)" in says


def test_a_loss_that_reshapes_itself_is_not_taken_for_a_broadcast() -> None:
    outputs, targets = torch.randn(5, 1), torch.randn(5)
    squeezed = Task.of(loss_fn=lambda o, t: F.mse_loss(o.squeeze(-1), t))
    check_loss_fits(squeezed, outputs, targets, WHERE)  # nothing to refuse


@pytest.mark.parametrize(
    ("loss", "says"),
    [
        (lambda o, t: F.mse_loss(o, t, reduction="none"), "it returned shape (5, 1)"),
        (lambda o, t: (o - t).mean() * 0 + math.inf, "the loss is inf on a first batch"),
        (lambda o, t: (o - t).mean() * math.nan, "the loss is nan"),
    ],
)
def test_a_loss_that_is_not_one_finite_number_is_refused(loss: Any, says: str) -> None:
    with pytest.raises(WorkloadError, match=re.escape(says)):
        check_loss_fits(Task.of(loss_fn=loss), torch.randn(5, 1), torch.randn(5, 1), WHERE)


def test_class_probabilities_are_a_target_cross_entropy_takes() -> None:
    soft = torch.softmax(torch.randn(5, 3), dim=1)
    check_loss_fits(Task.of(), torch.randn(5, 3), soft, WHERE)
    with pytest.raises(WorkloadError, match="not class probabilities"):
        check_loss_fits(Task.of(), torch.randn(5, 3), soft * 2, WHERE)


def test_a_class_weighted_loss_keeps_accuracy_as_the_primary_metric() -> None:
    data = TorchData(pairs(torch.arange(32) % 3), pairs(torch.arange(12) % 3))
    weighted = functools.partial(F.cross_entropy, weight=torch.tensor([1.0, 2.0, 3.0]))
    task = check_job(data, functools.partial(linear, 3), Task.of(loss_fn=weighted))
    assert list(task.metrics) == ["accuracy"] and task.primary == "accuracy"
    # A primary metric named, or metrics= given, are the user's: accuracy is only added.
    named = check_job(data, functools.partial(linear, 3), Task.of(weighted, None, "loss", None))
    assert list(named.metrics) == ["accuracy"] and named.primary == "loss"
    lower = check_job(data, functools.partial(linear, 3), Task.of(weighted, None, None, False))
    assert list(lower.metrics) == ["accuracy"] and lower.primary == "loss"
    given = check_job(data, functools.partial(linear, 3), Task.of(weighted, {}, "loss"))
    assert list(given.metrics) == []
    # Not class ids: the loss alone.
    floats = TorchData(pairs(torch.randn(32, 3)), pairs(torch.randn(12, 3)))
    regression = check_job(floats, functools.partial(linear, 3), Task.of(loss_fn=F.mse_loss))
    assert list(regression.metrics) == [] and regression.primary == "loss"


def test_the_run_says_which_metrics_the_data_chose(tmp_path: Path, capsys) -> None:
    weighted = functools.partial(F.cross_entropy, weight=torch.tensor([1.0, 2.0, 3.0]))
    result = train(
        TrainConfig(**JOB, out=str(tmp_path / "classes")),
        model_factory=functools.partial(linear, 3),
        train_data=pairs(torch.arange(32) % 3),
        val_data=pairs(torch.arange(12) % 3),
        loss_fn=weighted,
    )
    assert result.summary.metric.name == "accuracy" and "accuracy" in result.summary.validation
    assert "metrics: accuracy (the targets are class ids) and the loss" in capsys.readouterr().err
    train(
        TrainConfig(**JOB, out=str(tmp_path / "values")),
        model_factory=functools.partial(linear, 3),
        train_data=pairs(torch.randn(32, 3)),
        val_data=pairs(torch.randn(12, 3)),
        loss_fn=F.mse_loss,
    )
    assert "metrics: the loss only (loss_fn= without metrics=" in capsys.readouterr().err
