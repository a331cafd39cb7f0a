"""Classification from your own `torch.utils.data.Dataset`, read from files on each worker.

The data are MNIST-1D, written once to .npy files (as a dataset of your own would already be
on disk). `NpyDataset` opens them memory-mapped and reads one sample per `__getitem__`; the
run is given *factories* of it (picklable callables), so on Ray every worker opens the files
itself and reads only the samples of its own shard: nothing is copied through the driver.

    .venv/bin/python examples/classification.py                    # 4 workers on a local Ray
    .venv/bin/python examples/classification.py --runtime sim --epochs 1   # simulated, no Ray
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from syncswitch import TrainConfig, train
from syncswitch.workloads import Cnn1d, load_dataset

SPLITS = ("train", "validation", "test")


class NpyDataset(Dataset):
    """One split of `directory` (SPLIT_x.npy, SPLIT_y.npy), memory-mapped: a sample is read
    from disk when it is asked for."""

    def __init__(self, directory: str, split: str) -> None:
        self.x = np.load(Path(directory) / f"{split}_x.npy", mmap_mode="r")
        self.y = np.load(Path(directory) / f"{split}_y.npy", mmap_mode="r")

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return torch.from_numpy(np.array(self.x[index])), int(self.y[index])


def write_splits(directory: Path, samples: int) -> None:
    """MNIST-1D (generated locally, never downloaded) as .npy files, with a validation split
    carved from training."""
    directory.mkdir(parents=True, exist_ok=True)
    data = load_dataset("mnist1d", mnist1d_samples=samples).with_validation(0.1)
    for split, x, y in data.splits():
        np.save(directory / f"{split}_x.npy", x)
        np.save(directory / f"{split}_y.npy", y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("ray", "sim"), default="ray")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--epochs", type=float, default=10)
    parser.add_argument("--samples", type=int, default=10000, help="MNIST-1D samples to make")
    parser.add_argument("--data", default="runs/mnist1d-npy", help="where the .npy files go")
    parser.add_argument("--out", default=None, help="run directory (default: runs/<time>-...)")
    args = parser.parse_args()

    directory = Path(args.data).resolve()  # workers may start elsewhere: an absolute path
    if not (directory / "test_y.npy").exists():
        write_splits(directory, args.samples)
    train_data, val_data, test_data = (
        functools.partial(NpyDataset, str(directory), split) for split in SPLITS
    )
    config = TrainConfig(
        runtime=args.runtime, workers=args.workers, epochs=args.epochs, out=args.out
    )
    result = train(
        config,
        model_factory=functools.partial(Cnn1d, input_length=40, num_classes=10),
        train_data=train_data,
        val_data=val_data,
        test_data=test_data,
        dataset_name="mnist1d-npy",
        model_name="cnn1d",
    )
    summary = result.summary
    assert summary.validation is not None and summary.test is not None
    print(f"run directory: {result.run_dir}")
    print(f"validation accuracy {100 * summary.validation['accuracy']:.2f}% (decisions read it)")
    print(f"test accuracy {100 * summary.test['accuracy']:.2f}% (measured once, at the end)")


if __name__ == "__main__":
    main()
