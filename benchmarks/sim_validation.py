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

import argparse
import csv
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from syncswitch.calibration import calibrate, cluster_yaml
from syncswitch.config import TrainConfig
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

SCHEDULES = ("bsp", "asp", "bsp:0.25,asp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--epochs", type=float, default=20.0)
    parser.add_argument("--step-time-ms", type=float, default=20.0)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--calibrate-on", default="bsp:0.25,asp", help="schedule (seed 0)")
    parser.add_argument("--out", default="benchmarks/results/sim-validation")
    parser.add_argument(
        "--reuse-ray", action="store_true", help="keep complete Ray runs from an earlier try"
    )
    args = parser.parse_args()

    out = Path(args.out)
    runs = out / "runs"
    if not args.reuse_ray:
        shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset("mnist1d", mnist1d_samples=10000)
    # Seed by seed, every schedule in turn: a drift of this shared machine's speed over the
    # session then touches every schedule alike.
    jobs = [(s, seed) for seed in range(args.seeds) for s in SCHEDULES]
    log = (out / "runs.jsonl").open("w")
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
        summary_path = Path(config.out) / "summary.json"
        if args.reuse_ray and summary_path.exists():
            summary = json.loads(summary_path.read_text())
            if summary["status"] != "complete":
                raise SystemExit(f"{config.out} is not complete: rerun without --reuse-ray")
        else:
            shutil.rmtree(config.out, ignore_errors=True)
            summary = train(config, dataset=dataset).summary
        measured[(schedule, seed)] = _facts(summary, Path(config.out))
        log.write(json.dumps({"runtime": "ray", **measured[(schedule, seed)]}) + "\n")
        log.flush()
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
        result = train(config, dataset=dataset)
        predicted[(schedule, seed)] = _facts(result.summary, Path(config.out))
        log.write(json.dumps({"runtime": "sim", **predicted[(schedule, seed)]}) + "\n")
        log.flush()
        print(f"sim {schedule} seed {seed}: {predicted[(schedule, seed)]}", flush=True)
    table = _table(args, measured, predicted, runs)
    (out / "table.md").write_text(table + "\n")
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


def _name(schedule: str) -> str:
    return schedule.replace(":", "").replace(",", "-")


def _facts(summary: dict, run_dir: Path) -> dict:
    staleness = []
    with (run_dir / "updates.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row["protocol"] != "bsp":
                staleness.append(int(row["staleness"]))
    weights = torch.load(run_dir / "final_weights.pt")["flat_weights"].numpy()
    np.save(run_dir / "final_weights.npy", weights)
    return {
        "schedule": summary["schedule"],
        "seed": json.loads((run_dir / "config.json").read_text())["seed"],
        "wall_time_s": summary["wall_time_s"],
        "final_accuracy": summary["final_accuracy"],
        "staleness_mean": float(np.mean(staleness)) if staleness else None,
        "staleness_p90": float(np.percentile(staleness, 90)) if staleness else None,
        "rollbacks": summary["reliability"]["rollbacks"],
    }


def _error(predicted: float | None, measured: float | None) -> str:
    if predicted is None or measured is None or measured == 0:
        return "-"
    return f"{100 * (predicted - measured) / measured:+.1f}%"


def _table(args, measured: dict, predicted: dict, runs: Path) -> str:
    lines = [
        f"{args.workers} workers, MNIST-1D, {args.epochs:g} epochs. Ray: EMULATED "
        f"{args.step_time_ms:g} ms steps on this 2-core machine, measured wall seconds. "
        "Simulator: SIMULATED seconds under the cluster model calibrated on "
        f"`{args.calibrate_on}` seed 0 (marked *).",
        "",
        "| run | wall s Ray | wall s sim | error | mean staleness Ray / sim | error | "
        "p90 staleness Ray / sim | error | accuracy % Ray / sim | diff (pt) | "
        "BSP max param diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in measured:
        m, p = measured[key], predicted[key]
        schedule, seed = key
        mark = "*" if schedule == args.calibrate_on and seed == 0 else ""
        diff = "-"
        if schedule == "bsp":
            ray_w = np.load(runs / f"ray-{_name(schedule)}-s{seed}" / "final_weights.npy")
            sim_w = np.load(runs / f"sim-{_name(schedule)}-s{seed}" / "final_weights.npy")
            diff = f"{np.abs(ray_w - sim_w).max() / np.abs(ray_w).max():.1e} (relative)"
        lines.append(
            f"| {schedule} s{seed}{mark} | {m['wall_time_s']:.2f} | {p['wall_time_s']:.2f} | "
            f"{_error(p['wall_time_s'], m['wall_time_s'])} | "
            f"{_fmt(m['staleness_mean'])} / {_fmt(p['staleness_mean'])} | "
            f"{_error(p['staleness_mean'], m['staleness_mean'])} | "
            f"{_fmt(m['staleness_p90'])} / {_fmt(p['staleness_p90'])} | "
            f"{_error(p['staleness_p90'], m['staleness_p90'])} | "
            f"{100 * m['final_accuracy']:.2f} / {100 * p['final_accuracy']:.2f} | "
            f"{100 * (p['final_accuracy'] - m['final_accuracy']):+.2f} | {diff} |"
        )
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
