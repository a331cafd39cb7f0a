"""A metric of the user's that returns NaN or infinity: the run records what it measured
(`nan`, `inf`, `-inf` in metrics.csv and summary.json), and `report` reads it back and shows
it, table and plots, instead of refusing the run it called complete (docs/security.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from syncswitch.cli.main import main
from syncswitch.config import TrainConfig
from syncswitch.runtime.train import train


def _split(samples: int, seed: int) -> TensorDataset:
    x = torch.randn(samples, 8, generator=torch.Generator().manual_seed(seed))
    return TensorDataset(x, (x[:, 0] > 0).long())


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    return float((outputs.argmax(1) == targets).float().mean())


def run_with_metric(out: Path, value: float, primary: str) -> dict:
    train(
        TrainConfig(
            runtime="sim",
            workers=2,
            epochs=1.0,
            batch_size=16,
            schedule="bsp:0.5,asp",
            progress=False,
            out=str(out),
        ),
        model_factory=lambda: torch.nn.Linear(8, 2),
        train_data=_split(256, 0),
        val_data=_split(64, 1),
        test_data=_split(64, 2),
        metrics={"accuracy": accuracy, "odd": lambda outputs, targets: value},
        primary_metric=primary,
        higher_is_better=True,
    )
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("primary", ["odd", "accuracy"])
def test_a_non_finite_metric_is_recorded_and_reported(tmp_path, capsys, value, primary) -> None:
    out = tmp_path / "run"
    summary = run_with_metric(out, value, primary)
    assert summary["status"] == "complete"
    recorded = summary["validation"]["odd"]
    assert math.isnan(recorded) if math.isnan(value) else recorded == value
    assert f",{value}," in (out / "metrics.csv").read_text()
    capsys.readouterr()
    assert main(["report", str(out), "--plot", str(tmp_path / "p.png")]) == 0
    shown = capsys.readouterr().out
    assert "complete" in shown
    if primary == "odd":  # the table's final, best and test columns show what was measured
        assert str(value) in shown
    assert (tmp_path / "p.png").is_file()
