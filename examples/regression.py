"""A regression job from your own `torch.utils.data.Dataset`: mean squared error as the loss
and as the metric every decision reads (lower is better), and r2 beside it; both built-in
metrics, exact over each split.

The dataset is 8 float inputs and a 2-dimensional float target, a fixed linear function of
them plus noise. The run reports the validation and the test mean squared error (summary.json's
"validation" and "test"); both should end far below the target's variance.

    .venv/bin/python examples/regression.py                       # 2 workers on a local Ray
    .venv/bin/python examples/regression.py --runtime sim --workers 4   # simulated, no Ray
"""

from __future__ import annotations

import argparse
import functools

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from syncswitch import TrainConfig, train

INPUTS, OUTPUTS = 8, 2


class LinearTargets(Dataset):
    """`size` samples (x, y) with y = x @ W + noise; W is fixed (seed 0) for every split, the
    samples are drawn from `seed`, so train, validation and test are different draws of
    the same problem."""

    def __init__(self, size: int, seed: int, noise: float = 0.1) -> None:
        weights = torch.randn(INPUTS, OUTPUTS, generator=torch.Generator().manual_seed(0))
        draw = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, INPUTS, generator=draw)
        self.y = self.x @ weights + noise * torch.randn(size, OUTPUTS, generator=draw)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(INPUTS, 32), torch.nn.ReLU(), torch.nn.Linear(32, OUTPUTS)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("ray", "sim"), default="ray")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=float, default=5)
    parser.add_argument("--out", default=None, help="run directory (default: runs/<time>-...)")
    args = parser.parse_args()

    config = TrainConfig(
        runtime=args.runtime,
        workers=args.workers,
        epochs=args.epochs,
        batch_size=32,
        lr=0.05,
        schedule="bsp:0.5,asp",
        out=args.out,
    )
    result = train(
        config,
        model_factory=make_model,
        # Factories (picklable callables that build the dataset): on Ray each worker builds
        # its own training set instead of receiving a copy through the driver.
        train_data=functools.partial(LinearTargets, 4096, seed=1),
        val_data=functools.partial(LinearTargets, 512, seed=2),
        test_data=functools.partial(LinearTargets, 512, seed=3),
        loss_fn=F.mse_loss,
        # Built-in names, each computed over the whole split (a function of your own, or a
        # torchmetrics Metric, would do as well: docs/your-job.md).
        metrics={"mse": "mse", "r2": "r2"},
        primary_metric="mse",  # lower is better: known for "mse" (else higher_is_better=False)
        dataset_name="linear-targets",
    )
    summary = result.summary
    variance = float(LinearTargets(512, seed=3).y.var(dim=0).mean())
    assert summary.validation is not None and summary.test is not None
    print(f"run directory: {result.run_dir}")
    print(f"target variance {variance:.3f}")
    print(f"validation mse {summary.validation['mse']:.4f} (the metric decisions read)")
    print(f"test mse {summary.test['mse']:.4f} (measured once, at the end)")
    print(f"validation r2 {summary.validation['r2']:.4f}, test r2 {summary.test['r2']:.4f}")
    assert summary.test["mse"] < variance / 10, "the model did not learn the linear map"


if __name__ == "__main__":
    main()
