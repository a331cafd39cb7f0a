"""Checks before a run starts (syncswitch/workloads/checks.py): each mistake that used to
fail mid-run (torch's IndexError, numpy's allocation error, a dtype mismatch at the first
step) is one line before any file or process exists, naming the value and what is allowed."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from syncswitch.config import TrainConfig
from syncswitch.errors import RunStopped, UserError
from syncswitch.runtime.train import train


def split(samples: int, seed: int, bad_at: int | None = None) -> TensorDataset:
    x = torch.randn(samples, 8, generator=torch.Generator().manual_seed(seed))
    y = (x[:, 0] > 0).long()
    if bad_at is not None:
        y[bad_at] = 7
    return TensorDataset(x, y)


class Lazy(Dataset):
    """Samples made on demand (no tensors held): its labels are read through __getitem__."""

    def __init__(self, size: int, bad_at: int | None = None) -> None:
        self.size, self.bad_at = size, bad_at

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = torch.randn(8, generator=torch.Generator().manual_seed(index % 1000))
        return x, 7 if index == self.bad_at else int(x[0] > 0)


def linear() -> torch.nn.Module:
    return torch.nn.Linear(8, 2)


def refused(tmp_path: Path, match: str, *, workers: int = 2, **parts) -> None:
    parts.setdefault("model_factory", linear)
    parts.setdefault("train_data", split(256, 0))
    parts.setdefault("val_data", split(64, 1))
    out = tmp_path / "run"
    config = TrainConfig(runtime="sim", workers=workers, epochs=1.0, progress=False, out=str(out))
    with pytest.raises(UserError, match=match) as raised:
        train(config, **parts)
    assert len(str(raised.value).splitlines()) == 1
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("where", "parts"),
    [
        ("train_data", {"train_data": split(1024, 0, bad_at=700)}),
        ("val_data", {"val_data": split(64, 1, bad_at=40)}),
        ("test_data", {"test_data": split(64, 2, bad_at=63)}),
        ("train_data", {"train_data": Lazy(5000, bad_at=4999)}),  # the last is read too
    ],
)
def test_class_ids_are_checked_over_every_split(tmp_path, where, parts) -> None:
    refused(tmp_path, rf"class id 7 in {where}= is out of range", **parts)


def test_fewer_training_samples_than_workers_is_one_line(tmp_path) -> None:
    refused(
        tmp_path, "train_data= holds 3 samples for 4 workers", workers=4, train_data=split(3, 0)
    )


def test_an_impossible_len_is_refused_before_anything_is_sized_by_it(tmp_path) -> None:
    refused(tmp_path, r"says it holds 1,000,000,000,000 samples", train_data=Lazy(10**12))


def test_float64_parameters_are_refused(tmp_path) -> None:
    refused(tmp_path, "parameters of dtype float64", model_factory=lambda: linear().double())


def test_a_factory_must_build_the_same_model_every_call(tmp_path) -> None:
    widths = itertools.count(2)
    refused(
        tmp_path,
        "built 18 parameters .* then 27 .* on a second call",
        model_factory=lambda: torch.nn.Linear(8, next(widths)),
        train_data=TensorDataset(torch.randn(64, 8), torch.zeros(64, dtype=torch.long)),
    )


def test_a_loss_without_a_gradient_is_refused(tmp_path) -> None:
    def detached(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(outputs.detach(), targets)

    refused(tmp_path, "has no gradient", loss_fn=detached)


def test_a_class_id_the_checks_did_not_read_stops_the_run_in_one_line(tmp_path) -> None:
    # 1,024 of 5,000 samples are read before the start (0, 4, 9, ...): sample 7 is not.
    out = tmp_path / "run"
    config = TrainConfig(runtime="sim", workers=2, epochs=1.0, progress=False, out=str(out))
    with pytest.raises(UserError, match="the loss failed on a training batch: IndexError"):
        train(config, model_factory=linear, train_data=Lazy(5000, bad_at=7), val_data=split(64, 1))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"].startswith("failed")


def test_a_signal_s_stop_inside_the_user_s_loss_stays_a_stop(tmp_path) -> None:
    # SIGTERM's handler raises RunStopped wherever the main thread is, often inside the
    # loss on the simulator: it must stop the run as a signal (resumable), not as the user's
    # loss failing.
    calls = itertools.count()

    def stopped_on_the_tenth_call(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if next(calls) == 10:
            raise RunStopped("SIGTERM received; continue with --resume")
        return torch.nn.functional.cross_entropy(outputs, targets)

    out = tmp_path / "run"
    config = TrainConfig(runtime="sim", workers=2, epochs=1.0, progress=False, out=str(out))
    with pytest.raises(RunStopped, match="SIGTERM received"):
        train(config, model_factory=linear, train_data=split(512, 0), val_data=split(64, 1),
              loss_fn=stopped_on_the_tenth_call)  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"].startswith("failed: RunStopped")
