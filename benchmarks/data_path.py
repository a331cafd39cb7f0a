"""Samples/s of the default job through a torch Dataset against the ArrayDataset fast path.

Real timing, nothing emulated. The same MNIST-1D samples go three ways (the batches are the
same bits):

- array: an `ArrayDataset`, the fast path (numpy slicing);
- TensorDataset: torch's `TensorDataset` of the same arrays, the usual in-memory `Dataset`
  (read one index per tensor: what collating its samples gives);
- per-sample: a map-style `Dataset` whose `__getitem__` returns one `(x, y)` pair, read one
  sample at a time and batched by torch's `default_collate` (any user `Dataset`).

1. The data path alone (one process, one torch thread, as a Ray worker has): median
   microseconds to make a worker's batch of 32 training samples over --batches batches, beside
   one step's compute (forward and backward of cnn1d on that batch).
2. The default job end to end on a local Ray (8 workers, the default online schedule, MNIST-1D
   with its validation split, --epochs passes): training samples/s over the steady window of
   updates.csv (20% to 90% of the time from the first to the last applied gradient). Each
   repeat runs the three, rotating which goes first; ratios to the array run are taken within
   a repeat and their medians over repeats are reported.

    python benchmarks/data_path.py                     # 3 repeats of 4 epochs (~6 min here)
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
from torch.utils.data import Dataset, TensorDataset

from syncswitch import TrainConfig
from syncswitch.workloads import ArrayDataset, Cnn1d, load_dataset
from syncswitch.workloads.data import ArrayData, TorchData

BATCH = 32
KINDS = ("array", "TensorDataset", "per-sample")


class PerSample(Dataset):
    """A user's map-style Dataset over in-memory tensors: one (x, y) per __getitem__."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def as_datasets(data: ArrayDataset, kind: str) -> dict[str, Any]:
    """train()'s data keywords for `kind` (see the module docstring)."""
    if kind == "array":
        return {"dataset": data}
    make = TensorDataset if kind == "TensorDataset" else PerSample
    keywords = {"train": "train_data", "validation": "val_data", "test": "test_data"}
    return {
        keywords[split]: make(torch.from_numpy(x), torch.from_numpy(y))
        for split, x, y in data.splits()
    }


def data_path_us(data: ArrayDataset, batches: int) -> dict[str, float]:
    """Median microseconds per batch of each kind, and of a step's compute."""
    torch.set_num_threads(1)
    readers: dict[str, Any] = {"array": ArrayData(data)}
    for kind in KINDS[1:]:
        given = as_datasets(data, kind)
        readers[kind] = TorchData(given["train_data"], given["val_data"], given["test_data"])
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
        x, y = readers["array"].train_batch(indices, None)
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()

    figures = {
        f"{kind}_us": timed(lambda i, r=reader: r.train_batch(i, None))
        for kind, reader in readers.items()
    }
    return {**figures, "step_us": timed(step)}


def run_job(data: ArrayDataset, kind: str, epochs: float, out: Path) -> dict[str, Any]:
    from syncswitch.runtime.train import train  # imports Ray

    shutil.rmtree(out, ignore_errors=True)
    config = TrainConfig(epochs=epochs, out=str(out), progress=False)
    model = {"model_factory": Cnn1d, "model_name": "cnn1d", "dataset_name": "mnist1d"}
    summary = train(config, **model, **as_datasets(data, kind), print_summary=False).summary
    times_s = [float(row["time_s"]) for row in read_csv_rows(out / "updates.csv")]
    return {
        "kind": kind,
        "samples_per_s": steady_rate(times_s) * BATCH,
        "validation_accuracy": summary.final_value,
        "test_accuracy": (summary.test or {}).get("accuracy"),
        "wall_s": summary.wall_time_s,
    }


def alone_table(alone: dict[str, float]) -> list[str]:
    rows = [
        [
            kind,
            cell(alone[f"{kind}_us"], ".0f"),
            f"{(alone[f'{kind}_us'] - alone['array_us']) / alone['step_us']:.1%}",
        ]
        for kind in KINDS
    ]
    return [
        check_timing("### The data path alone (real time, one thread, batch of 32)", Timing.REAL),
        "",
        *markdown_table(["data", "us per batch", "more than array, share of a step"], rows),
        "",
        f"A step's compute (forward and backward of cnn1d on the batch): "
        f"{alone['step_us']:.0f} us.",
    ]


def job_table(repeats: list[dict[str, Any]], epochs: float) -> list[str]:
    middle = medians(repeats)
    rows = []
    for kind in KINDS:
        vs = "1" if kind == "array" else cell(middle[f"{kind} ratio"], ".3f")
        each = (
            "-" if kind == "array" else ", ".join(cell(r[f"{kind} ratio"], ".3f") for r in repeats)
        )
        rows.append([kind, cell(middle[kind], ",.0f"), vs, each])
    title = (
        f"### The default job on a local Ray (real time, 8 workers, {epochs:g} epochs, "
        f"median of {len(repeats)} repeat(s))"
    )
    return [
        check_timing(title, Timing.REAL),
        "",
        *markdown_table(["data", "samples/s", "vs array", "per repeat"], rows),
    ]


def main() -> None:
    parser = harness_parser(__doc__, epilog=True)
    add_out(parser, Path(__file__).parent / "results" / "data-path")
    add_repeats(parser, 3, "repeats of the end-to-end runs")
    parser.add_argument("--epochs", type=float, default=4, help="passes per run (default 4)")
    parser.add_argument("--batches", type=int, default=2000, help="batches timed (default 2000)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = RunLog(args.out / "runs.jsonl")
    log.clear()

    data = load_dataset("mnist1d", mnist1d_samples=10000).with_validation(0.1)
    alone = data_path_us(data, args.batches)
    log.append({"part": "data path", **alone})
    lines = alone_table(alone)
    save_text(args.out / "table.md", "\n".join(lines) + "\n")

    repeats: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        order = [*KINDS[repeat % 3 :], *KINDS[: repeat % 3]]
        rates: dict[str, Any] = {}
        for kind in order:
            row = run_job(data, kind, args.epochs, args.out / "runs" / f"{kind}-{repeat}")
            log.append({"part": "job", "repeat": repeat, **row})
            rates[kind] = row["samples_per_s"]
            print(f"repeat {repeat} {kind}: {row['samples_per_s']:,.0f} samples/s", flush=True)
        ratios = {f"{k} ratio": ratio(rates[k], rates["array"]) for k in KINDS[1:]}
        repeats.append({**rates, **ratios})
        text = [*lines, "", *job_table(repeats, args.epochs)]
        save_text(args.out / "table.md", "\n".join(text) + "\n")
    print((args.out / "table.md").read_text())


if __name__ == "__main__":
    main()
