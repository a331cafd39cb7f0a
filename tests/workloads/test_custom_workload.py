"""A Python-API run records the dataset and model it was given, and its weights load back.

Run on the simulator (no Ray): the run directory, the report and the fingerprint are the
same whichever runtime trained the job.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from syncswitch.config import TrainConfig
from syncswitch.registry.fingerprint import describe_job, fingerprint
from syncswitch.reports import Report
from syncswitch.rundir.weights import flat_weights, read_final_weights
from syncswitch.runtime.job_parts import workload_of
from syncswitch.runtime.train import train
from syncswitch.workloads import ArrayDataset, model_name_of, prepare_batch


class TwoLayerNet(torch.nn.Module):
    """A model the package does not know, with a BatchNorm (buffers beside parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(6, 16),
            torch.nn.BatchNorm1d(16),
            torch.nn.ReLU(),
            torch.nn.Linear(16, 2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def separable_points() -> ArrayDataset:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 1, 6)).astype(np.float32)
    y = (x[:, 0, 0] + x[:, 0, 1] > 0).astype(np.int64)
    return ArrayDataset("separable-points", x[:500], y[:500], x[500:], y[500:], num_classes=2)


JOB = dict(
    runtime="sim",
    workers=2,
    batch_size=16,
    epochs=2.0,
    lr=0.5,
    schedule="bsp:0.5,asp",
    progress=False,
    eval_every=0.5,
)


def accuracy_of(model: torch.nn.Module, data: ArrayDataset) -> float:
    x, y = prepare_batch(data, data.x_test, data.y_test, train=False)
    with torch.no_grad():
        return int((model(x).argmax(dim=1) == y).sum()) / len(y)  # as the evaluator counts


def test_a_custom_run_names_its_dataset_and_model_and_its_weights_load(tmp_path: Path) -> None:
    data = separable_points()
    config = TrainConfig(**JOB, out=str(tmp_path / "custom"))
    result = train(config, model_factory=TwoLayerNet, dataset=data)

    saved = json.loads((result.run_dir / "config.json").read_text())
    assert (saved["dataset"], saved["model"]) == ("separable-points", "TwoLayerNet")
    row = Report.load([result.run_dir]).runs_table()
    assert row.rows[0][row.columns.index("dataset")] == "separable-points (TwoLayerNet)"
    job = describe_job(config, result.workload)
    assert (job["dataset"], job["model"]) == ("separable-points", "TwoLayerNet")
    assert fingerprint(config, result.workload) != fingerprint(config)  # not mnist1d/cnn1d

    # final_weights.pt is a standard state_dict: a new instance reproduces the accuracy.
    model = TwoLayerNet()
    model.load_state_dict(torch.load(result.run_dir / "final_weights.pt", weights_only=True))
    model.eval()
    # The test split is measured once, at the end, on these weights.
    assert accuracy_of(model, data) == result.summary.test["accuracy"]
    assert accuracy_of(result.model(), data) == result.summary.test["accuracy"]
    np.testing.assert_array_equal(
        flat_weights(read_final_weights(result.run_dir), TwoLayerNet()).numpy(),
        result.final_weights,
    )


def test_names_come_from_the_objects_and_may_be_given(tmp_path: Path) -> None:
    config = TrainConfig(**JOB)
    assert model_name_of(TwoLayerNet) == "TwoLayerNet"
    assert model_name_of(lambda: TwoLayerNet()).endswith("<lambda>")
    built = workload_of(config)
    assert (built.dataset, built.model) == ("mnist1d", "cnn1d")
    named = workload_of(config, separable_points().name, TwoLayerNet, model_name="mlp-bn")
    assert (named.dataset, named.model) == ("separable-points", "mlp-bn")
    # A built-in job keeps its fingerprint: no workload is the config's own.
    assert fingerprint(config, built) == fingerprint(config)


def test_an_earlier_runs_flat_weights_file_still_reads(tmp_path: Path) -> None:
    vector = torch.arange(5, dtype=torch.float32)
    torch.save({"flat_weights": vector}, tmp_path / "final_weights.pt")
    assert torch.equal(flat_weights(read_final_weights(tmp_path)), vector)
