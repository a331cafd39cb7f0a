"""A job whose parts do not fit together is refused in one line by train(), before Ray starts
and before a run directory exists, naming the keyword argument and the shapes."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from syncswitch import TrainConfig, train
from syncswitch.errors import UserError
from syncswitch.workloads import ArrayDataset

from .jobs import LinearTargets, regressor

JOB = dict(runtime="sim", workers=2, epochs=1, progress=False)


def points(classes: int = 2, labels: np.ndarray | None = None, dtype: Any = np.int64) -> Any:
    x = np.random.default_rng(0).normal(size=(40, 1, 6)).astype(np.float32)
    y = labels if labels is not None else np.arange(40) % classes
    return functools.partial(
        ArrayDataset, "pts", x[:30], y[:30].astype(dtype), x[30:], y[30:].astype(dtype)
    )


def net(outputs: int = 2) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(6, outputs))


class NoParameters(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)[:, :2]


def refused(tmp_path: Path, **kwargs: Any) -> str:
    out = tmp_path / "run"
    with pytest.raises(UserError) as error:
        train(TrainConfig(**JOB, out=str(out)), **kwargs)
    message = str(error.value)
    assert "\n" not in message and not out.exists()
    return message


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        # The first batch does not go through the model: its shapes are named.
        (dict(dataset=points()(num_classes=2), model_factory=lambda: net() if False else
              torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(5, 2))),
         "a batch of train_data= (inputs (5, 1, 6) float32) does not go through the model"),
        (dict(dataset=points()(num_classes=5), model_factory=net),
         "num_classes=5 but the model outputs 2 values per sample"),
        (dict(model_factory=net(), dataset=points()(num_classes=2)), "model_factory= is a model"),
        (dict(model_factory=lambda: "net", dataset=points()(num_classes=2)),
         "model_factory= returned a str, not a torch.nn.Module"),
        (dict(model_factory=NoParameters, dataset=points()(num_classes=2)),
         "no trainable parameters"),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1)),
         "train_data= needs val_data="),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1),
              val_data=LinearTargets(0, 2), loss_fn=F.mse_loss), "val_data= is empty"),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1),
              val_data=LinearTargets(8, 2), test_data=LinearTargets(0, 3), loss_fn=F.mse_loss),
         "test_data= is empty"),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1),
              val_data=LinearTargets(8, 2)),
         "targets are float32 (5, 2) but not class probabilities"),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1),
              val_data=LinearTargets(8, 2), metrics={}, primary_metric="loss",
              loss_fn=lambda o, t: F.cross_entropy(o, t[:, 0])),
         "the loss fails on a batch of train_data="),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1),
              val_data=LinearTargets(8, 2), loss_fn=F.mse_loss, metrics={"r": lambda o, t: "x"},
              primary_metric="loss"),
         "metric 'r' fails"),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1),
              val_data=LinearTargets(8, 2), loss_fn=F.mse_loss, primary_metric="r2"),
         "primary_metric='r2' is not measured; allowed: loss"),
        (dict(model_factory=regressor, train_data=LinearTargets(32, 1),
              val_data=LinearTargets(8, 2), loss_fn=F.mse_loss,
              metrics={"score": lambda o, t: 0.0}),
         "primary_metric='score': say whether higher or lower is better"),
        (dict(model_factory=regressor, train_data=[1, 2], val_data=LinearTargets(8, 2)),
         "a batch must be (inputs, targets)"),
    ],
)  # fmt: skip
def test_a_job_that_does_not_fit_is_refused_in_one_line(tmp_path, kwargs, says) -> None:
    assert says in refused(tmp_path, **kwargs)


@pytest.mark.parametrize(
    ("labels", "dtype", "says"),
    [
        (np.full(40, 7), np.int64, "label 7 is out of range; with num_classes=5"),
        (np.full(40, -1), np.int64, "label -1 is out of range"),
        (np.arange(40) % 2 + 0.5, np.float32, "labels are float32"),
    ],
)
def test_classification_labels_are_class_ids_in_range(labels, dtype, says) -> None:
    with pytest.raises(UserError) as error:
        points(labels=labels, dtype=dtype)(num_classes=5)
    assert says in str(error.value)


def test_class_ids_beyond_the_models_outputs_are_refused(tmp_path) -> None:
    class Labels(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return torch.zeros(6), 7

    message = refused(tmp_path, model_factory=net, train_data=Labels(), val_data=Labels())
    assert "class id 7 in train_data= is out of range: the model outputs 2 classes" in message


def test_uint8_images_without_channel_statistics_are_refused_before_start(tmp_path) -> None:
    x = np.zeros((8, 3, 4, 4), dtype=np.uint8)
    data = ArrayDataset("my-images", x, np.arange(8) % 2, x, np.arange(8) % 2, num_classes=2)
    model = functools.partial(torch.nn.Sequential, torch.nn.Flatten(), torch.nn.Linear(48, 2))
    assert "no channel statistics for uint8 dataset 'my-images'" in refused(
        tmp_path, dataset=data, model_factory=model
    )


def test_the_array_fast_path_refuses_a_torch_dataset_as_dataset(tmp_path) -> None:
    message = refused(tmp_path, dataset=LinearTargets(8, 1), model_factory=regressor)
    assert "dataset= takes a syncswitch.workloads.ArrayDataset" in message
    assert "train_data=" in message  # the keyword to use instead
