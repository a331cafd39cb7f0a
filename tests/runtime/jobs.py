"""Small real training jobs for the end-to-end tests, and readers of what they write."""

import csv
from pathlib import Path

from syncswitch.config import TrainConfig
from syncswitch.runtime.train import RunResult, train

LR = 0.2


def run(tmp_path: Path, dataset, **overrides) -> RunResult:
    values = dict(
        workers=3,
        batch_size=8,
        epochs=1.0,
        lr=LR,
        momentum=0.9,
        lr_schedule="constant",
        progress=False,
        eval_every=0.25,
        out=str(tmp_path / "run"),
        mnist1d_samples=400,
    )
    values.update(overrides)
    return train(TrainConfig(**values), dataset=dataset)


def read_csv(run_dir: Path, name: str) -> list[dict]:
    with (run_dir / name).open() as handle:
        return list(csv.DictReader(handle))


def read_updates(run_dir: Path) -> list[dict]:
    return read_csv(run_dir, "updates.csv")
