"""Simulator validation: predict Ray runs from a cluster model calibrated on one of them.

Trains each schedule (bsp, asp, bsp:0.25,asp) with each seed on Ray (8 workers, EMULATED 20 ms
steps on this machine), fits a cluster model to one of those runs (`syncswitch calibrate`),
then simulates every run with it and prints predicted against measured: wall time (Ray:
measured seconds of emulated training; simulator: SIMULATED seconds), mean and p90 staleness
of asynchronous gradients, final accuracy, and for BSP the largest parameter difference.
Writes OUT/runs.jsonl (one line per run, as it finishes), OUT/cluster.yaml and OUT/table.md.

    python benchmarks/sim_validation.py            # the table in docs/simulator.md
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from harness import (
    RunLog,
    Timing,
    add_out,
    add_seeds,
    check_timing,
    markdown_table,
    parser,
    read_config,
    read_summary,
    save_text,
)

from syncswitch.calibration import calibrate, cluster_yaml
from syncswitch.config import TrainConfig
from syncswitch.rundir import Summary, names
from syncswitch.rundir.weights import flat_weights, read_final_weights
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

SCHEDULES = ("bsp", "asp", "bsp:0.25,asp")


@dataclass
class Facts:
    """One run's figures, as measured on Ray or predicted by the simulator (a runs.jsonl line)."""

    runtime: str
    schedule: str
    seed: int
    wall_time_s: float
    final_accuracy: float
    staleness_mean: float | None
    staleness_p90: float | None
    rollbacks: int


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--workers", type=int, default=8)
    cli.add_argument("--epochs", type=float, default=20.0)
    cli.add_argument("--step-time-ms", type=float, default=20.0)
    add_seeds(cli, 2)
    cli.add_argument("--calibrate-on", default="bsp:0.25,asp", help="schedule (seed 0)")
    add_out(cli, "benchmarks/results/sim-validation")
    cli.add_argument(
        "--reuse-ray", action="store_true", help="keep complete Ray runs from an earlier try"
    )
    args = cli.parse_args()

    out = args.out
    runs = out / "runs"
    if not args.reuse_ray:
        shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset("mnist1d", mnist1d_samples=10000)
    # Seed by seed, every schedule in turn: a drift of this shared machine's speed over the
    # session then touches every schedule alike.
    jobs = [(s, seed) for seed in range(args.seeds) for s in SCHEDULES]
    log = RunLog(out / "runs.jsonl")
    log.clear()  # every run is measured (or predicted) again
    start_local(args.workers + 4)
    # A fresh Ray instance runs its first job slower (its own processes still starting):
    # one short run, not measured, takes that.
    warm_up = runs / "warm-up"
    shutil.rmtree(warm_up, ignore_errors=True)
    if not args.reuse_ray:
        train(_config(args, "asp", 0, warm_up, epochs=2.0), dataset=dataset)
    measured = {}
    for schedule, seed in jobs:
        config = _config(args, schedule, seed, runs / f"ray-{_name(schedule)}-s{seed}")
        summary = _earlier(Path(config.out)) if args.reuse_ray else None
        if summary is None:
            shutil.rmtree(config.out, ignore_errors=True)
            summary = train(config, dataset=dataset).summary
        measured[(schedule, seed)] = _facts("ray", summary, Path(config.out))
        log.append(measured[(schedule, seed)])
        print(f"ray {schedule} seed {seed}: {measured[(schedule, seed)]}", flush=True)
    import ray

    ray.shutdown()  # the simulator needs no Ray; its cores go back to the simulations
    basis = runs / f"ray-{_name(args.calibrate_on)}-s0"
    model, report = calibrate(basis)
    (out / "cluster.yaml").write_text(cluster_yaml(model))
    print(f"calibrated on {basis.name}: {report['measured_s_per_step']}", flush=True)
    predicted = {}
    for schedule, seed in jobs:
        config = _config(args, schedule, seed, runs / f"sim-{_name(schedule)}-s{seed}")
        shutil.rmtree(config.out, ignore_errors=True)
        config = TrainConfig(
            **{
                **config.to_dict(),
                "runtime": "sim",
                "cluster": str(out / "cluster.yaml"),
                "step_time_ms": 0.0,
            }
        )
        summary = train(config, dataset=dataset).summary
        predicted[(schedule, seed)] = _facts("sim", summary, Path(config.out))
        log.append(predicted[(schedule, seed)])
        print(f"sim {schedule} seed {seed}: {predicted[(schedule, seed)]}", flush=True)
    table = _table(args, measured, predicted, runs)
    save_text(out / "table.md", table + "\n")
    print(table)
    # The run directories stay (large per-update files: not committed; see .gitignore).


def _config(args, schedule: str, seed: int, out: Path, epochs: float | None = None) -> TrainConfig:
    return TrainConfig(
        workers=args.workers,
        schedule=schedule,
        epochs=epochs or args.epochs,
        seed=seed,
        step_time_ms=args.step_time_ms,
        progress=False,
        out=str(out),
    )


def _earlier(run_dir: Path) -> Summary | None:
    """The summary of a complete Ray run kept from an earlier try (--reuse-ray), or None."""
    try:
        summary = read_summary(run_dir)
    except FileNotFoundError:
        return None
    if not summary.complete:
        raise SystemExit(f"{run_dir} is not complete: rerun without --reuse-ray")
    return summary


def _name(schedule: str) -> str:
    return schedule.replace(":", "").replace(",", "-")


def _facts(runtime: str, summary: Summary, run_dir: Path) -> Facts:
    staleness = []
    with (run_dir / names.UPDATES).open() as handle:
        for row in csv.DictReader(handle):
            if row["protocol"] != "bsp":
                staleness.append(int(row["staleness"]))
    weights = flat_weights(read_final_weights(run_dir)).numpy()  # cnn1d: no buffers
    np.save(run_dir / "final_weights.npy", weights)
    return Facts(
        runtime=runtime,
        schedule=summary.schedule,
        seed=read_config(run_dir)["seed"],
        wall_time_s=summary.wall_time_s,
        final_accuracy=summary.final_accuracy,
        staleness_mean=float(np.mean(staleness)) if staleness else None,
        staleness_p90=float(np.percentile(staleness, 90)) if staleness else None,
        rollbacks=summary.reliability.rollbacks,
    )


def _error(predicted: float | None, measured: float | None) -> str:
    if predicted is None or measured is None or measured == 0:
        return "-"
    return f"{100 * (predicted - measured) / measured:+.1f}%"


def _table(args, measured: dict, predicted: dict, runs: Path) -> str:
    title = (
        f"{args.workers} workers, MNIST-1D, {args.epochs:g} epochs. Ray: EMULATED "
        f"{args.step_time_ms:g} ms steps on this 2-core machine, measured wall seconds. "
        "Simulator: SIMULATED seconds under the cluster model calibrated on "
        f"`{args.calibrate_on}` seed 0 (marked *)."
    )
    columns = (
        "run",
        "wall s Ray",
        "wall s sim",
        "error",
        "mean staleness Ray / sim",
        "error",
        "p90 staleness Ray / sim",
        "error",
        "accuracy % Ray / sim",
        "diff (pt)",
        "BSP max param diff",
    )
    table = []
    for key in measured:
        m, p = measured[key], predicted[key]
        schedule, seed = key
        mark = "*" if schedule == args.calibrate_on and seed == 0 else ""
        diff = "-"
        if schedule == "bsp":
            ray_w = np.load(runs / f"ray-{_name(schedule)}-s{seed}" / "final_weights.npy")
            sim_w = np.load(runs / f"sim-{_name(schedule)}-s{seed}" / "final_weights.npy")
            diff = f"{np.abs(ray_w - sim_w).max() / np.abs(ray_w).max():.1e} (relative)"
        table.append(
            (
                f"{schedule} s{seed}{mark}",
                f"{m.wall_time_s:.2f}",
                f"{p.wall_time_s:.2f}",
                _error(p.wall_time_s, m.wall_time_s),
                f"{_fmt(m.staleness_mean)} / {_fmt(p.staleness_mean)}",
                _error(p.staleness_mean, m.staleness_mean),
                f"{_fmt(m.staleness_p90)} / {_fmt(p.staleness_p90)}",
                _error(p.staleness_p90, m.staleness_p90),
                f"{100 * m.final_accuracy:.2f} / {100 * p.final_accuracy:.2f}",
                f"{100 * (p.final_accuracy - m.final_accuracy):+.2f}",
                diff,
            )
        )
    check_timing(title, Timing.EMULATED, Timing.SIMULATED)
    return "\n".join([title, "", *markdown_table(columns, table)])


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
