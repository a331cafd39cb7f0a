"""Your own model and dataset through the Python API.

Trains a small MLP on a two-class problem made up here, then loads the saved weights into a
fresh model and checks that it scores the run's final test accuracy. The dataset has no
validation split of its own, so `val_fraction` (10%) of its training samples become one. The
run directory names the dataset ("two-spirals") and the model ("SpiralNet") in config.json
and in `.venv/bin/syncswitch report`.

    .venv/bin/python examples/custom_model.py             # 8 workers on a local Ray instance
    .venv/bin/python examples/custom_model.py --runtime sim --epochs 1   # a quick run, simulated
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from syncswitch import TrainConfig, train
from syncswitch.workloads import ArrayDataset, prepare_batch


class SpiralNet(torch.nn.Module):
    """Any nn.Module works; the factory (here the class itself) must be picklable."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Flatten(),
            torch.nn.Linear(2, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 2),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def two_spirals(samples: int = 4000, seed: int = 0) -> ArrayDataset:
    rng = np.random.default_rng(seed)
    turns = rng.uniform(0.25, 3.0, size=samples) * np.pi
    labels = rng.integers(0, 2, size=samples)
    sign = np.where(labels == 1, 1.0, -1.0)
    points = np.stack([sign * turns * np.cos(turns), sign * turns * np.sin(turns)], axis=1)
    points += rng.normal(scale=0.3, size=points.shape)
    x = (points / 10).astype(np.float32)[:, None, :]  # (N, 1, 2): samples, then features
    y = labels.astype(np.int64)
    split = samples * 4 // 5
    return ArrayDataset("two-spirals", x[:split], y[:split], x[split:], y[split:], num_classes=2)


def accuracy(model: torch.nn.Module, data: ArrayDataset) -> float:
    x, y = prepare_batch(data, data.x_test, data.y_test, train=False)
    with torch.no_grad():
        return int((model(x).argmax(dim=1) == y).sum()) / len(y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("ray", "sim"), default="ray")
    parser.add_argument("--epochs", type=float, default=20)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", default=None, help="run directory (default: runs/<time>-...)")
    args = parser.parse_args()

    data = two_spirals()
    config = TrainConfig(
        runtime=args.runtime,
        workers=args.workers,
        epochs=args.epochs,
        batch_size=32,
        lr=0.5,
        schedule="bsp:0.25,asp",
        out=args.out,
    )
    result = train(config, model_factory=SpiralNet, dataset=data)
    print(f"run directory: {result.run_dir}")
    print(f"recorded as dataset {result.workload.dataset!r}, model {result.workload.model!r}")
    print(f"validation accuracy {100 * result.summary.final_value:.2f}% (decisions read it)")
    assert result.summary.test is not None  # the test split, measured once at the end
    print(f"test accuracy {100 * result.summary.test['accuracy']:.2f}%")

    # final_weights.pt is a standard state_dict: load it into a new instance of the model.
    model = SpiralNet()
    model.load_state_dict(torch.load(result.run_dir / "final_weights.pt", weights_only=True))
    model.eval()
    reloaded = accuracy(model, data)
    print(f"reloaded model's accuracy {100 * reloaded:.2f}%")
    assert reloaded == result.summary.test["accuracy"] == accuracy(result.model(), data)


if __name__ == "__main__":
    main()
