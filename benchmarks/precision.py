"""Worker precision: float32 (`--precision 32`) against bf16-mixed (bfloat16 autocast), in
samples/s of a worker's step and in training runs' samples/s and final accuracy.

Two tables, every figure real compute on this machine (nothing emulated):

- step: one worker's gradient step (runtime/gradient.py, the Ray workers' and the
  simulator's code) on one thread, batch 32, for a small CNN (cnn1d, MNIST-1D), ResNet-20
  (CIFAR-shaped synthetic images) and a 16.9M-parameter MLP (wide_models.py); the two
  precisions alternate within each repeat, and the table gives medians over repeats.
- train: the same job trained on Ray (local Ray, real processes) under each precision,
  seeds 0..N-1, the two precisions alternating per seed: median samples/s and the median
  final validation accuracy (the evaluator measures in float32 for both).

    python benchmarks/precision.py                    # this CPU: both tables, a few minutes
    python benchmarks/precision.py --quick            # the code path, small
    python benchmarks/precision.py --device cuda      # a GPU machine: the same tables

Results: benchmarks/results/precision/<device>.json and .md (the tables printed at the end).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from gpu import hardware_name, synthetic_cifar
from harness import (
    Timing,
    add_out,
    add_quick,
    add_repeats,
    add_seeds,
    args_record,
    check_timing,
    markdown_table,
    parser,
    save_json,
    save_text,
)
from wide_models import mlp17m

from syncswitch.config import TrainConfig
from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.core.sync.precision import Precision
from syncswitch.runtime.gradient import backward_on_batch
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train
from syncswitch.workloads import ArrayDataset, build_model, load_dataset
from syncswitch.workloads.data import ArrayData

RESULTS = Path("benchmarks/results/precision")
PRECISIONS = tuple(p.value for p in Precision)
STEP_BATCH = 32


@dataclass(frozen=True)
class StepCase:
    name: str
    dataset: ArrayDataset
    model_factory: Callable[[], torch.nn.Module]


def step_cases(quick: bool) -> list[StepCase]:
    mnist = load_dataset("mnist1d", mnist1d_samples=4000)
    cifar = synthetic_cifar(1024, 64, seed=0)
    cases = [
        StepCase("cnn1d (MNIST-1D)", mnist, lambda: build_model("cnn1d", mnist)),
        StepCase(
            "resnet20 (CIFAR-shaped, synthetic)", cifar, lambda: build_model("resnet20", cifar)
        ),
    ]
    if not quick:
        cases.append(StepCase("mlp17m (MNIST-1D, 16.9M parameters)", mnist, mlp17m))
    return cases


def step_samples_per_s(case: StepCase, precision: Precision, device: str, steps: int) -> float:
    """One worker's gradient steps on one thread, timed after two warm-up steps."""
    torch.manual_seed(0)
    model = case.model_factory().to(device)
    model.train()
    flat = FlatParameters(model)
    data, generator = ArrayData(case.dataset), torch.Generator().manual_seed(0)
    samples = len(case.dataset.y_train)

    def step(i: int) -> None:
        indices = np.arange(i * STEP_BATCH, (i + 1) * STEP_BATCH) % samples
        backward_on_batch(model, flat, data, indices, F.cross_entropy, generator, precision)

    for i in range(2):
        step(i)
    _synchronize(device)
    started = time.perf_counter()
    for i in range(steps):
        step(i)
    _synchronize(device)
    return steps * STEP_BATCH / (time.perf_counter() - started)


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def step_table(cases: list[StepCase], device: str, repeats: int, steps: int) -> tuple[str, list]:
    rows, cells = [], []
    for case in cases:
        measured: dict[str, list[float]] = {p: [] for p in PRECISIONS}
        for _ in range(repeats):
            for precision in Precision:  # alternating, so drift in the machine hits both
                measured[precision.value].append(step_samples_per_s(case, precision, device, steps))
        median = {p: statistics.median(v) for p, v in measured.items()}
        # Within a repeat, then the median: a busy spell slows both sides of one ratio.
        mixed, full = measured[Precision.BF16_MIXED.value], measured[Precision.FLOAT32.value]
        speedup = statistics.median(m / f for m, f in zip(mixed, full, strict=True))
        rows.append(
            {"case": case.name, "samples_per_s": measured, "median": median, "ratio": speedup}
        )
        cells.append(
            (
                case.name,
                f"{median[Precision.FLOAT32.value]:,.0f}",
                f"{median[Precision.BF16_MIXED.value]:,.0f}",
                f"{speedup:.2f}x",
            )
        )
    title = (
        f"One worker's gradient step, batch {STEP_BATCH}, 1 thread, device {device}; real "
        f"timing, medians of {repeats} repeats x {steps} steps"
    )
    columns = ("model", "32: samples/s", "bf16-mixed: samples/s", "bf16-mixed / 32 (median)")
    lines = [check_timing(title, Timing.REAL), "", *markdown_table(columns, cells)]
    return "\n".join(lines), rows


@dataclass(frozen=True)
class TrainJob:
    workers: int
    epochs: float
    mnist1d_samples: int
    schedule: str = "bsp:0.5,asp"


def train_table(job: TrainJob, device: str, seeds: int, out: Path) -> tuple[str, list]:
    dataset = load_dataset("mnist1d", mnist1d_samples=job.mnist1d_samples)
    start_local(job.workers + 2)  # one local Ray for every run
    runs: dict[str, list[tuple[float, float]]] = {p: [] for p in PRECISIONS}
    for seed in range(seeds):
        for precision in PRECISIONS:  # alternating, as the step table does
            run_dir = out / f"{precision}-seed{seed}"
            shutil.rmtree(run_dir, ignore_errors=True)
            config = TrainConfig(
                workers=job.workers,
                epochs=job.epochs,
                mnist1d_samples=job.mnist1d_samples,
                schedule=job.schedule,
                precision=precision,
                device=device,
                seed=seed,
                eval_every=0.25,
                checkpoint_every=0.0,
                progress=False,
                out=str(run_dir),
            )
            summary = train(config, dataset=dataset).summary
            runs[precision].append((summary.samples_per_s or 0.0, summary.final_value or 0.0))
            print(f"{precision} seed {seed}: {runs[precision][-1]}", flush=True)
    cells, rows = [], []
    for precision, measured in runs.items():
        rates, accuracies = [r for r, _ in measured], [a for _, a in measured]
        rows.append({"precision": precision, "runs": measured})
        cells.append(
            (
                precision,
                f"{statistics.median(rates):,.0f}",
                f"{100 * statistics.median(accuracies):.1f}",
                f"{100 * min(accuracies):.1f} - {100 * max(accuracies):.1f}",
            )
        )
    title = (
        f"cnn1d on MNIST-1D ({job.mnist1d_samples} samples), {job.workers} workers on Ray, "
        f"{job.schedule}, {job.epochs:g} epochs, device {device}; real timing, medians of "
        f"{seeds} seeds"
    )
    columns = ("precision", "samples/s", "final val acc %", "range %")
    lines = [check_timing(title, Timing.REAL), "", *markdown_table(columns, cells)]
    return "\n".join(lines), rows


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    add_repeats(cli, 5, "repeats of each step measurement")
    add_seeds(cli, 3)
    add_quick(cli, "fewer and shorter measurements: the code path, not a result")
    add_out(cli, RESULTS, "where results go: <out>/<device>.json and .md")
    args = cli.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU visible here")
    torch.set_num_threads(1)  # a worker's own thread count (the resource plan's on a CPU)
    repeats, steps = (2, 3) if args.quick else (args.repeats, 20)
    job = TrainJob(2, 0.5, 2000) if args.quick else TrainJob(2, 6.0, 10_000)
    seeds = 1 if args.quick else args.seeds
    name = args.device + ("-quick" if args.quick else "")
    out = args.out / name
    step_text, step_rows = step_table(step_cases(args.quick), args.device, repeats, steps)
    print(step_text, flush=True)
    train_text, train_rows = train_table(job, args.device, seeds, out)
    hardware = hardware_name(args.device)
    # Other work on a shared machine slows both precisions alike, but widens the spread.
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    text = f"{hardware}, torch {torch.__version__}; load average at the end {load}\n\n"
    text += f"{step_text}\n\n{train_text}"
    record = {
        "args": args_record(args),
        "hardware": hardware,
        "torch": torch.__version__,
        "load_average": os.getloadavg(),
        "step": step_rows,
        "train": train_rows,
    }
    save_json(out.with_suffix(".json"), record, indent=2)
    save_text(out.with_suffix(".md"), text + "\n")
    print(text)


if __name__ == "__main__":
    main()
