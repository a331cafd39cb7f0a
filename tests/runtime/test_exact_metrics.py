"""A run's summary holds metrics exact over the whole validation split (1,200 samples, in
uneven evaluation batches), on the simulator and on Ray: each equals scikit-learn's on the
predictions of the weights the summary names (the final ones)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from syncswitch import TrainConfig, train

metrics = pytest.importorskip("sklearn.metrics")
torchmetrics = pytest.importorskip("torchmetrics")

JOB = dict(workers=2, batch_size=16, epochs=1, lr=0.05, eval_every=0.5, progress=False)
VALIDATION = 1_200


def classes(size: int, seed: int) -> TensorDataset:
    """Two classes, not separable (so that no metric is 0 or 1)."""
    draw = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 4, generator=draw)
    y = ((x[:, 0] + x[:, 1] + torch.randn(size, generator=draw)) > 0).long()
    return TensorDataset(x, y)


def values(size: int, seed: int) -> TensorDataset:
    draw = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 4, generator=draw)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [0.0]]) + torch.randn(size, 1, generator=draw)
    return TensorDataset(x, y)


class BinaryF1:
    """torchmetrics' interface, written out: any object with update/compute/reset."""

    def __init__(self) -> None:
        self.reset()

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        predicted = preds.argmax(1)
        self.tp += int(((predicted == 1) & (target == 1)).sum())
        self.wrong += int((predicted != target).sum())

    def compute(self) -> float:
        return 2 * self.tp / (2 * self.tp + self.wrong)

    def reset(self) -> None:
        self.tp, self.wrong = 0, 0


def macro_f1(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """A plain function: it receives the split whole."""
    return float(metrics.f1_score(targets.numpy(), outputs.argmax(1).numpy(), average="macro"))


def _classification(runtime: str, out: Path) -> None:
    validation = classes(VALIDATION, 2)
    result = train(
        TrainConfig(**JOB, runtime=runtime, schedule="bsp:0.5,asp", out=str(out)),
        model_factory=functools.partial(torch.nn.Linear, 4, 2),
        train_data=classes(512, 1),
        val_data=validation,
        metrics={
            "f1": "f1",
            "f1_object": BinaryF1(),
            "f1_macro": macro_f1,
            "f1_torchmetrics": torchmetrics.classification.MulticlassF1Score(2, average="macro"),
            "auc": "auc",
        },
        primary_metric="f1",
    )
    with torch.no_grad():
        outputs = result.model()(validation.tensors[0])
    y, predicted = validation.tensors[1].numpy(), outputs.argmax(1).numpy()
    score = (outputs[:, 1].double() - outputs[:, 0].double()).numpy()
    measured = result.summary.validation
    assert measured["f1"] == pytest.approx(metrics.f1_score(y, predicted), abs=1e-6)
    assert measured["f1_object"] == pytest.approx(measured["f1"], abs=1e-6)
    assert measured["f1_macro"] == pytest.approx(
        metrics.f1_score(y, predicted, average="macro"), abs=1e-6
    )
    assert measured["f1_torchmetrics"] == pytest.approx(measured["f1_macro"], abs=1e-6)
    assert measured["auc"] == pytest.approx(metrics.roc_auc_score(y, score), abs=1e-6)
    assert measured["loss"] == pytest.approx(float(F.cross_entropy(outputs, validation.tensors[1])))


def test_the_simulators_summary_equals_scikit_learn(tmp_path: Path) -> None:
    _classification("sim", tmp_path / "classes")
    validation = values(VALIDATION, 2)
    result = train(
        TrainConfig(**JOB, runtime="sim", schedule="bsp", out=str(tmp_path / "values")),
        model_factory=functools.partial(torch.nn.Linear, 4, 1),
        train_data=values(512, 1),
        val_data=validation,
        loss_fn=F.mse_loss,
        metrics={"r2": "r2", "r2_torchmetrics": torchmetrics.R2Score(), "mae": "mae"},
        primary_metric="r2",
    )
    with torch.no_grad():
        outputs = result.model()(validation.tensors[0]).double().numpy()
    y = validation.tensors[1].double().numpy()
    assert result.summary.metric.name == "r2"
    assert result.summary.validation["r2"] == pytest.approx(metrics.r2_score(y, outputs), abs=1e-6)
    r2_torchmetrics = result.summary.validation["r2_torchmetrics"]
    assert r2_torchmetrics == pytest.approx(metrics.r2_score(y, outputs), abs=1e-6)
    assert result.summary.validation["mae"] == pytest.approx(
        metrics.mean_absolute_error(y, outputs), abs=1e-6
    )


@pytest.mark.ray
def test_rays_summary_equals_scikit_learn(ray_session, tmp_path: Path) -> None:
    _classification("ray", tmp_path / "classes")
