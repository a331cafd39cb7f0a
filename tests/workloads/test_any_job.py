"""Jobs of the user's own through train(): torch Datasets and their factories, any tensors,
named metrics with a direction, and a validation split that alone drives decisions."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from syncswitch import TrainConfig, train
from syncswitch.workloads import Cnn1d, load_dataset
from syncswitch.workloads.data import TorchData

from .jobs import ArraySplit, LinearTargets, Tagger, Tokens, regressor

JOB = dict(runtime="sim", workers=4, batch_size=16, eval_every=0.25, progress=False, seed=1)


def mse(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float(F.mse_loss(outputs, targets))


def test_a_regression_job_reports_validation_and_test_mse(tmp_path: Path) -> None:
    result = train(
        TrainConfig(**JOB, epochs=4, lr=0.05, schedule="bsp:0.5,asp", out=str(tmp_path / "r")),
        model_factory=regressor,
        train_data=functools.partial(LinearTargets, 1024, 1),
        val_data=functools.partial(LinearTargets, 256, 2),
        test_data=LinearTargets(256, 3),  # an object works too
        loss_fn=F.mse_loss,
        metrics={"mse": mse},
        primary_metric="mse",
    )
    summary = result.summary
    assert summary.metric.name == "mse" and not summary.metric.higher_is_better
    assert summary.best_value == min(m for m in _column(result.run_dir, "val_mse"))
    variance = float(LinearTargets(256, 3).y.var(dim=0).mean())
    assert summary.validation["mse"] < variance / 10 and summary.test["mse"] < variance / 10
    assert [s.to_protocol for s in summary.switches] == ["asp"]


def test_token_ids_stay_integers_and_a_target_may_be_a_sequence(tmp_path: Path) -> None:
    result = train(
        TrainConfig(**JOB, epochs=6, lr=0.5, schedule="bsp:0.5,asp", out=str(tmp_path / "s")),
        model_factory=Tagger,  # raises if the ids arrive as floats
        train_data=functools.partial(Tokens, 512, 1),
        val_data=functools.partial(Tokens, 128, 2),
        test_data=functools.partial(Tokens, 128, 3),
    )
    assert result.summary.metric.name == "accuracy" and result.summary.test["accuracy"] > 0.3


def test_a_dataset_trains_bit_for_bit_as_the_array_fast_path(tmp_path: Path) -> None:
    data = load_dataset("mnist1d", mnist1d_samples=500).with_validation(0.1)
    config = dict(JOB, epochs=1, schedule="bsp:0.5,asp")
    model = functools.partial(Cnn1d, input_length=40, num_classes=10)
    fast = train(TrainConfig(**config, out=str(tmp_path / "a")), model_factory=model, dataset=data)
    general = train(
        TrainConfig(**config, out=str(tmp_path / "d")),
        model_factory=model,
        train_data=ArraySplit(data, "train"),
        val_data=ArraySplit(data, "validation"),
        test_data=ArraySplit(data, "test"),
    )
    np.testing.assert_array_equal(fast.final_weights, general.final_weights)
    assert fast.summary.validation == general.summary.validation
    assert fast.summary.test == general.summary.test


def test_changing_the_test_set_changes_no_decision(tmp_path: Path) -> None:
    """The default (online) job: its switch, best value and every evaluation read the
    validation split; another test set changes only the test figures."""
    data = load_dataset("mnist1d", mnist1d_samples=1000).with_validation(0.1)
    other = load_dataset("mnist1d", mnist1d_samples=1000, mnist1d_seed=7)
    swapped = type(data)(**{**data.__dict__, "x_test": other.x_test, "y_test": other.y_test})
    runs = []
    for name, dataset in (("a", data), ("b", swapped)):
        config = TrainConfig(**{**JOB, "workers": 2}, epochs=2, out=str(tmp_path / name))
        runs.append(train(config, dataset=dataset))
    first, second = (run.summary for run in runs)
    assert first.schedule == "online" and first.online_timing is not None
    assert first.switches == second.switches and first.online_timing == second.online_timing
    assert (first.final_value, first.best_value) == (second.final_value, second.best_value)
    assert first.validation == second.validation and first.test != second.test
    for file in ("metrics.csv", "timing_signals.csv"):
        assert (runs[0].run_dir / file).read_text() == (runs[1].run_dir / file).read_text()


def test_a_factory_is_built_where_it_is_read_not_pickled_built() -> None:
    data = TorchData(functools.partial(LinearTargets, 64, 1), LinearTargets(16, 2))
    assert data.size("train") == 64  # built here, on first use
    shipped = pickle.loads(pickle.dumps(data))
    assert shipped._built == {}  # a worker builds its own
    assert len(pickle.dumps(data)) < 2000 < len(pickle.dumps(LinearTargets(64, 1)))


def test_collate_fn_and_getitems_are_used() -> None:
    class Many(LinearTargets):
        asked: ClassVar[list[list[int]]] = []

        def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
            self.asked.append(indices)
            return [self[i] for i in indices]

    def collate(samples: list) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.stack([x for x, _ in samples]) * 0, torch.stack([y for _, y in samples])

    data = TorchData(Many(32, 1), LinearTargets(8, 2), collate_fn=collate)
    x, y = data.train_batch(np.array([3, 1, 2]), None)
    assert Many.asked == [[3, 1, 2]] and x.abs().sum() == 0 and y.shape == (3, 2)


def _column(run_dir: Path, name: str) -> list[float]:
    lines = (run_dir / "metrics.csv").read_text().splitlines()
    index = lines[0].split(",").index(name)
    return [float(line.split(",")[index]) for line in lines[1:]]


def test_a_tensor_dataset_batch_is_what_collating_its_samples_gives() -> None:
    tensors = (torch.randn(20, 2, 2).double(), torch.arange(20))
    indices = np.array([7, 0, 19, 7])
    fast = TorchData(TensorDataset(*tensors), TensorDataset(*tensors)).train_batch(indices, None)

    class Plain(TensorDataset):  # a subclass may read otherwise: it is read one by one
        pass

    slow = TorchData(Plain(*tensors), Plain(*tensors)).train_batch(indices, None)
    for a, b in zip(fast, slow, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
