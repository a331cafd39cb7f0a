"""Jobs of the user's own on a real local Ray: dataset factories built on each worker, a
regression job judged by MSE, and a sequence job whose inputs stay integers."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch.nn.functional as F

from syncswitch import TrainConfig, train
from tests.workloads.jobs import LinearTargets, Tagger, Tokens, regressor

pytestmark = pytest.mark.ray

JOB = dict(runtime="ray", workers=2, batch_size=16, eval_every=0.25, progress=False)


def mse(outputs, targets) -> float:
    return float(F.mse_loss(outputs, targets))


def test_a_regression_job_trains_on_ray_from_dataset_factories(ray_session, tmp_path: Path):
    result = train(
        TrainConfig(**JOB, epochs=4, lr=0.05, schedule="bsp:0.5,asp", out=str(tmp_path / "r")),
        model_factory=regressor,
        train_data=functools.partial(LinearTargets, 1024, 1),
        val_data=functools.partial(LinearTargets, 256, 2),
        test_data=functools.partial(LinearTargets, 256, 3),
        loss_fn=F.mse_loss,
        metrics={"mse": mse},
        primary_metric="mse",
    )
    summary = result.summary
    variance = float(LinearTargets(256, 3).y.var(dim=0).mean())
    assert summary.complete and summary.runtime == "ray"
    assert summary.validation["mse"] < variance / 10 and summary.test["mse"] < variance / 10
    assert [s.to_protocol for s in summary.switches] == ["asp"]
    assert summary.gradients.unaccounted == 0


def test_a_sequence_job_with_integer_inputs_trains_on_ray(ray_session, tmp_path: Path):
    result = train(
        TrainConfig(**JOB, epochs=6, lr=0.5, schedule="bsp:0.5,asp", out=str(tmp_path / "s")),
        model_factory=Tagger,  # refuses token ids that arrive as floats
        train_data=functools.partial(Tokens, 512, 1),
        val_data=functools.partial(Tokens, 128, 2),
        test_data=functools.partial(Tokens, 128, 3),
    )
    assert result.summary.complete and result.summary.test["accuracy"] > 0.3
