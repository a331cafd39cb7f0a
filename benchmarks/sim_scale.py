"""Scale study on the simulator: BSP, ASP and BSP-first hybrids at 8-256 workers (SIMULATED).

For each worker count, every schedule trains the same job (MNIST-1D, the same total samples,
per-worker batch and learning rate) on the simulator with real gradients; times are seconds
of the simulated clock under the cluster model (default: 20 ms steps with lognormal jitter,
a 10 GbE network). Prints, per worker count, each schedule's mean final accuracy and simulated
time, and the smallest BSP share whose mean accuracy is within --tolerance points of BSP's
(the paper's finding: it grows with the number of workers). Writes one JSON line per run to
OUT/runs.jsonl as each run finishes (an interrupted study resumes where it stopped), and
OUT/table.md, OUT/accuracy_vs_time.png and OUT/share_vs_workers.png at the end.

    python benchmarks/sim_scale.py                          # the study in docs/simulator.md
    python benchmarks/sim_scale.py --workers 8,16 --seeds 1 --epochs 5   # a quick look
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from harness import (
    RunLog,
    Timing,
    add_out,
    add_seeds,
    check_timing,
    comma_list,
    markdown_table,
    parser,
    row_from,
    save_text,
)

from syncswitch.config import TrainConfig
from syncswitch.rundir import names
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset


@dataclass
class ScaleRow:
    """One simulated run's line in runs.jsonl, with its accuracy curve (time_s, accuracy)."""

    simulated: bool
    workers: int
    schedule: str
    seed: int
    final_accuracy: float
    best_accuracy: float
    sim_time_s: float
    host_time_s: float
    time_by_protocol: dict[str, float]
    staleness: Any
    cluster: Any
    curve: list[list[float]]


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--workers", default="8,16,32,64,128,256")
    cli.add_argument("--shares", default="1/16,1/8,1/4,1/2", help="BSP shares to try")
    add_seeds(cli, 2)
    cli.add_argument("--mnist1d-samples", type=int, default=20000)
    cli.add_argument("--epochs", type=float, default=40.0)
    cli.add_argument("--batch-size", type=int, default=32)
    cli.add_argument("--lr", type=float, default=0.2)
    cli.add_argument("--step-time-ms", type=float, default=20.0)
    cli.add_argument("--jitter-sigma", type=float, default=0.2)
    cli.add_argument("--cluster", default=None, help="a cluster file or preset instead")
    cli.add_argument("--tolerance", type=float, default=0.5, help="accuracy points")
    add_out(cli, "benchmarks/results/sim-scale")
    args = cli.parse_args()

    workers = comma_list(args.workers, int)
    shares = comma_list(args.shares, Fraction)
    schedules = ["bsp", "asp", *(f"bsp:{float(s):g},asp" for s in shares)]
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    log = RunLog(out / "runs.jsonl")
    # Always resumed: the runs already in runs.jsonl are not run again.
    done = log.keys(lambda r: (r["workers"], r["schedule"], r["seed"]))
    dataset = load_dataset("mnist1d", mnist1d_samples=args.mnist1d_samples)
    scratch = Path(tempfile.mkdtemp(prefix="sim-scale-"))
    total = len(workers) * len(schedules) * args.seeds
    count = 0
    try:
        for w in workers:
            for schedule in schedules:
                for seed in range(args.seeds):
                    count += 1
                    if (w, schedule, seed) in done:
                        continue
                    row = _run(args, dataset, scratch, w, schedule, seed)
                    log.append(row)
                    print(
                        f"[{count}/{total}] {w} workers {schedule} seed {seed}: "
                        f"{100 * row.final_accuracy:.2f}% in {row.sim_time_s:.1f} "
                        f"simulated s ({row.host_time_s:.0f} host s)",
                        flush=True,
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    rows = [row_from(ScaleRow, r) for r in log.read()]
    rows = [r for r in rows if r.workers in workers]
    table = _table(rows, workers, schedules, args.tolerance)
    save_text(out / "table.md", table + "\n")
    print(table)
    _plots(rows, workers, schedules, out)


def _run(args, dataset, scratch: Path, workers: int, schedule: str, seed: int) -> ScaleRow:
    emulation = (
        {}
        if args.cluster
        else {"step_time_ms": args.step_time_ms, "jitter_sigma": args.jitter_sigma}
    )
    config = TrainConfig(
        runtime="sim",
        cluster=args.cluster,
        workers=workers,
        schedule=schedule,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        mnist1d_samples=args.mnist1d_samples,
        seed=seed,
        eval_every=0.05,
        checkpoint_every=0.0,
        divergence_guard=False,  # compare the protocols themselves, divergence included
        progress=False,
        out=str(scratch / f"w{workers}-{schedule.replace(':', '').replace(',', '-')}-s{seed}"),
        **emulation,
    )
    started = time.perf_counter()
    summary = train(config, dataset=dataset, print_summary=False).summary
    metrics = _curve(Path(config.out))
    shutil.rmtree(config.out, ignore_errors=True)  # the study keeps its JSON lines only
    return ScaleRow(
        simulated=True,
        workers=workers,
        schedule=schedule,
        seed=seed,
        final_accuracy=summary.final_value,
        best_accuracy=summary.best_value,
        sim_time_s=summary.wall_time_s,
        host_time_s=round(time.perf_counter() - started, 2),
        time_by_protocol=summary.time_by_protocol,
        staleness=summary.staleness,
        cluster=summary.cluster,
        curve=metrics,
    )


def _curve(run_dir: Path) -> list[list[float]]:
    import csv

    with (run_dir / names.METRICS).open() as handle:
        return [[float(r["time_s"]), float(r["test_accuracy"])] for r in csv.DictReader(handle)]


def _means(rows: list[ScaleRow], workers: int, schedule: str) -> tuple[float, float] | None:
    runs = [r for r in rows if r.workers == workers and r.schedule == schedule]
    if not runs:
        return None
    accuracy = statistics.mean(100 * r.final_accuracy for r in runs)
    return accuracy, statistics.mean(r.sim_time_s for r in runs)


def smallest_share(rows: list[ScaleRow], workers: int, schedules: list[str], tolerance: float):
    """The smallest BSP share whose mean accuracy is within `tolerance` points of BSP's."""
    bsp = _means(rows, workers, "bsp")
    if bsp is None:
        return None
    holding = []
    for schedule in schedules:
        if not schedule.startswith("bsp:"):
            continue
        means = _means(rows, workers, schedule)
        if means is not None and means[0] >= bsp[0] - tolerance:
            holding.append(Fraction(schedule.split(":")[1].split(",")[0]).limit_denominator(64))
    return min(holding) if holding else None


def _table(rows: list[ScaleRow], workers: list[int], schedules: list[str], tolerance: float) -> str:
    seeds = len({r.seed for r in rows})
    title = (
        f"SIMULATED (virtual clock, real gradients); mean of {seeds} seed(s); final test "
        "accuracy % / simulated seconds"
    )
    columns = ["workers", *schedules, f"smallest share within {tolerance:g} pt"]
    table = []
    for w in workers:
        cells = []
        for schedule in schedules:
            means = _means(rows, w, schedule)
            cells.append(f"{means[0]:.2f} / {means[1]:.1f} s" if means else "-")
        share = smallest_share(rows, w, schedules, tolerance)
        table.append([w, *cells, share if share is not None else "none"])
    return "\n".join([check_timing(title, Timing.SIMULATED), "", *markdown_table(columns, table)])


def _plots(rows: list[ScaleRow], workers: list[int], schedules: list[str], out: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = min(3, len(workers))
    lines = (len(workers) + columns - 1) // columns
    figure = Figure(figsize=(4.5 * columns, 3.4 * lines))
    FigureCanvasAgg(figure)
    for index, w in enumerate(workers):
        axes = figure.add_subplot(lines, columns, index + 1)
        for schedule in schedules:
            run = next((r for r in rows if r.workers == w and r.schedule == schedule), None)
            if run and run.curve:
                times, accuracies = zip(*run.curve, strict=True)
                axes.plot(times, [100 * a for a in accuracies], label=schedule)
        axes.set_title(f"{w} workers (seed 0)")
        axes.set_xlabel("SIMULATED time (s)")
        axes.set_ylabel("test accuracy (%)")
        axes.grid(alpha=0.3)
        if index == 0:
            axes.legend(fontsize=7)
    figure.suptitle("Accuracy vs simulated time (simulator, MNIST-1D)")
    figure.tight_layout()
    figure.savefig(out / "accuracy_vs_time.png", dpi=110)

    figure = Figure(figsize=(5, 3.4))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    shares = [smallest_share(rows, w, schedules, 0.5) for w in workers]
    plotted = [(w, float(s)) for w, s in zip(workers, shares, strict=True) if s is not None]
    if plotted:
        axes.plot(*zip(*plotted, strict=True), marker="o")
    axes.set_xscale("log", base=2)
    axes.set_xlabel("workers")
    axes.set_ylabel("smallest BSP share within 0.5 pt")
    axes.set_title("BSP share needed vs workers (SIMULATED)")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out / "share_vs_workers.png", dpi=110)


if __name__ == "__main__":
    main()
