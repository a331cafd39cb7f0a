"""Samples/s of the default job through a torch Dataset against the ArrayDataset fast path.

Real timing, nothing emulated. Two measurements:

1. The data path alone (one process, one torch thread, as a Ray worker has): a worker's batch
   of 32 MNIST-1D training samples made by the fast path (numpy slicing of an ArrayDataset) and
   by the general one (a map-style Dataset read one `__getitem__` per sample, then torch's
   `default_collate`), median microseconds per batch over --batches batches, beside one step's
   compute (forward and backward of cnn1d on that batch).
2. The default job end to end on a local Ray (8 workers, the default online schedule, MNIST-1D
   with its validation split, --epochs passes): training samples/s over the steady window of
   updates.csv (20% to 90% of the time from the first to the last applied gradient), the data
   given as an ArrayDataset and as map-style Datasets of the same samples (the batches are the
   same bits). Each repeat runs both, alternating which goes first; the ratio is taken within
   a repeat and its median over repeats is reported.

    python benchmarks/data_path.py                     # 3 repeats of 4 epochs (~8 min here)
    python benchmarks/data_path.py --repeats 1 --epochs 1 --out /tmp/dp   # a quick look

Results: --out (default benchmarks/results/data-path/): table.md and runs.jsonl (one line per
run as it ends); the run directories under runs/.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from harness import (
    RunLog,
    Timing,
    add_out,
    add_repeats,
    cell,
    check_timing,
    markdown_table,
    medians,
    ratio,
    save_text,
)
from harness import parser as harness_parser
from steady import read_csv_rows, steady_rate
from torch.utils.data import Dataset

from syncswitch import TrainConfig
from syncswitch.workloads import ArrayDataset, Cnn1d, load_dataset
from syncswitch.workloads.data import ArrayData, TorchData

BATCH = 32


class ArraySplit(Dataset):
    """One split of an ArrayDataset as a user's map-style Dataset: a sample per __getitem__."""

    def __init__(self, data: ArrayDataset, split: str) -> None:
        _, self.x, self.y = next(s for s in data.splits() if s[0] == split)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.array(self.x[index], dtype=np.float32))
        return x, torch.tensor(self.y[index], dtype=torch.int64)


def as_datasets(data: ArrayDataset) -> dict[str, Any]:
    return {
        "train_data": ArraySplit(data, "train"),
        "val_data": ArraySplit(data, "validation"),
        "test_data": ArraySplit(data, "test"),
    }


def data_path_us(data: ArrayDataset, batches: int) -> dict[str, float]:
    """Median microseconds per batch: the fast path, the general one, and a step's compute."""
    torch.set_num_threads(1)
    fast = ArrayData(data)
    general = TorchData(**{k.removesuffix("_data"): v for k, v in as_datasets(data).items()})
    rng = np.random.default_rng(0)
    draws = [rng.choice(len(data.y_train), BATCH, replace=False) for _ in range(batches)]
    model = Cnn1d()

    def timed(make: Any) -> float:
        times = []
        for indices in draws:
            started = time.perf_counter()
            make(indices)
            times.append(time.perf_counter() - started)
        return 1e6 * statistics.median(times)

    def step(indices: np.ndarray) -> None:
        x, y = fast.train_batch(indices, None)
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()

    return {
        "array_us": timed(lambda i: fast.train_batch(i, None)),
        "dataset_us": timed(lambda i: general.train_batch(i, None)),
        "step_us": timed(step),
    }


def run_job(data: ArrayDataset, kind: str, epochs: float, out: Path) -> dict[str, Any]:
    from syncswitch.runtime.train import train  # imports Ray

    shutil.rmtree(out, ignore_errors=True)
    config = TrainConfig(epochs=epochs, out=str(out), progress=False)
    model = {"model_factory": Cnn1d, "model_name": "cnn1d", "dataset_name": "mnist1d"}
    given = {"dataset": data} if kind == "array" else as_datasets(data)
    summary = train(config, **model, **given).summary
    times_s = [float(row["time_s"]) for row in read_csv_rows(out / "updates.csv")]
    return {
        "kind": kind,
        "samples_per_s": steady_rate(times_s) * BATCH,
        "validation_accuracy": summary.final_value,
        "test_accuracy": (summary.test or {}).get("accuracy"),
        "wall_s": summary.wall_time_s,
    }


def main() -> None:
    parser = harness_parser(__doc__, epilog=True)
    add_out(parser, Path(__file__).parent / "results" / "data-path")
    add_repeats(parser, 3, "repeats of the end-to-end pair")
    parser.add_argument("--epochs", type=float, default=4, help="passes per run (default 4)")
    parser.add_argument("--batches", type=int, default=2000, help="batches timed (default 2000)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = RunLog(args.out / "runs.jsonl")
    log.clear()

    data = load_dataset("mnist1d", mnist1d_samples=10000).with_validation(0.1)
    alone = data_path_us(data, args.batches)
    log.append({"part": "data path", **alone})
    lines = [
        check_timing("### The data path alone (real time, one thread, batch of 32)", Timing.REAL),
        "",
        *markdown_table(
            [
                "ArrayDataset (us/batch)",
                "Dataset (us/batch)",
                "a step's compute (us)",
                "Dataset extra, share of a step",
            ],
            [
                [
                    cell(alone["array_us"], ".0f"),
                    cell(alone["dataset_us"], ".0f"),
                    cell(alone["step_us"], ".0f"),
                    f"{(alone['dataset_us'] - alone['array_us']) / alone['step_us']:.1%}",
                ]
            ],
        ),
    ]
    save_text(args.out / "table.md", "\n".join(lines) + "\n")

    repeats: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        order = ["array", "dataset"] if repeat % 2 == 0 else ["dataset", "array"]
        rates: dict[str, Any] = {}
        for kind in order:
            row = run_job(data, kind, args.epochs, args.out / "runs" / f"{kind}-{repeat}")
            log.append({"part": "job", "repeat": repeat, **row})
            rates[kind] = row["samples_per_s"]
            print(f"repeat {repeat} {kind}: {row['samples_per_s']:,.0f} samples/s", flush=True)
        repeats.append({**rates, "ratio": ratio(rates["dataset"], rates["array"])})
        middle = medians(repeats)
        job_lines = [
            "",
            check_timing(
                f"### The default job on a local Ray (real time, 8 workers, {args.epochs:g} "
                f"epochs, median of {len(repeats)} repeat(s))",
                Timing.REAL,
            ),
            "",
            *markdown_table(
                ["ArrayDataset (samples/s)", "Dataset (samples/s)", "Dataset / ArrayDataset"],
                [
                    [
                        cell(middle["array"], ",.0f"),
                        cell(middle["dataset"], ",.0f"),
                        cell(middle["ratio"], ".3f"),
                    ]
                ],
            ),
            "",
            "Per repeat (dataset / array): " + ", ".join(cell(r["ratio"], ".3f") for r in repeats),
        ]
        save_text(args.out / "table.md", "\n".join(lines + job_lines) + "\n")
    print((args.out / "table.md").read_text())


if __name__ == "__main__":
    main()
