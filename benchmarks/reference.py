"""Reference comparison: BSP, ASP and BSP-then-ASP on MNIST-1D with emulated workers.

Every run processes the same total samples. Prints a markdown table (paste it into the README)
and writes one JSON line per run to --out as each run finishes, so an interrupted benchmark
keeps what it measured. Timings come from emulated device time (a sleep standing in for a GPU
step); the table says so. The divergence guard is off here: the table compares the protocols
themselves, divergence included (benchmarks/faults.py shows the guard at work).

    python benchmarks/reference.py                 # the README table (about 30 minutes here)
    python benchmarks/reference.py --seeds 1 --epochs 10   # a quick look
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path

import ray

from syncswitch.config import TrainConfig
from syncswitch.runtime.ray_setup import local_init_kwargs
from syncswitch.runtime.train import train


@dataclass(frozen=True)
class Case:
    schedule: str
    momentum: str  # momentum policy for asynchronous phases

    @property
    def label(self) -> str:
        return self.schedule if self.schedule == "bsp" else f"{self.schedule} ({self.momentum})"


CASES = (
    Case("bsp", "keep"),
    Case("asp", "keep"),
    Case("asp", "scale"),
    Case("bsp:0.125,asp", "scale"),
    Case("bsp:0.25,asp", "keep"),
    Case("bsp:0.25,asp", "scale"),
    Case("bsp:0.5,asp", "scale"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--epochs", type=float, default=80.0)
    parser.add_argument("--step-time-ms", type=float, default=20.0)
    parser.add_argument("--jitter-sigma", type=float, default=0.2)
    parser.add_argument("--seeds", type=int, default=2, help="runs per case (seeds 0..N-1)")
    parser.add_argument("--out", default="benchmarks/results/reference")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "runs.jsonl").open("a")
    ray.init(**local_init_kwargs(args.workers + 4))
    rows = []
    for case in CASES:
        for seed in range(args.seeds):
            config = TrainConfig(
                workers=args.workers,
                schedule=case.schedule,
                momentum_at_switch=case.momentum,
                epochs=args.epochs,
                seed=seed,
                step_time_ms=args.step_time_ms,
                jitter_sigma=args.jitter_sigma,
                divergence_guard=False,
                progress=False,
                out=str(
                    out / f"{case.schedule.replace(':', '').replace(',', '-')}"
                    f"-{case.momentum}-s{seed}"
                ),
            )
            shutil.rmtree(config.out, ignore_errors=True)  # measured again from scratch
            result = train(config)
            row = measure(case, seed, result.summary, result.run_dir, args)
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(
                f"{case.label:<26} seed {seed}: acc {row['final_accuracy']:.4f} "
                f"time {row['wall_time_s']:.1f} s",
                flush=True,
            )
    print_table(rows, args)


def measure(case: Case, seed: int, summary: dict, run_dir: Path, args) -> dict:
    """The figures of one run, with the ASP phase's update rate read from updates.csv."""
    with (run_dir / "updates.csv").open() as handle:
        updates = list(csv.DictReader(handle))
    asp_versions = {int(r["version"]) for r in updates if r["protocol"] == "asp"}
    asp_time_s = summary["time_by_protocol"].get("asp", 0.0)
    ideal_updates_per_s = args.workers / (args.step_time_ms / 1000.0)
    switch_gap_s = None
    if summary["switches"]:
        at = summary["switches"][0]["time_s"]
        before = max(float(r["time_s"]) for r in updates if float(r["time_s"]) <= at)
        after = min(float(r["time_s"]) for r in updates if float(r["time_s"]) > at)
        switch_gap_s = after - before
    return {
        "case": case.label,
        "seed": seed,
        "final_accuracy": summary["final_accuracy"],
        "wall_time_s": summary["wall_time_s"],
        "samples_per_s": summary["samples_per_s"],
        "asp_efficiency": (
            len(asp_versions) / asp_time_s / ideal_updates_per_s if asp_time_s > 0 else None
        ),
        "switch_overhead_s": [s["overhead_s"] for s in summary["switches"]],
        "switch_gap_s": switch_gap_s,
        "emulation": summary["emulation"],
    }


def print_table(rows: list[dict], args) -> None:
    bsp_time = statistics.median(r["wall_time_s"] for r in rows if r["case"] == "bsp")
    print(
        f"\nMNIST-1D, {args.workers} workers, {args.epochs:g} epochs, EMULATED device time "
        f"{args.step_time_ms:g} ms/step (lognormal jitter sigma {args.jitter_sigma}); "
        f"medians over {args.seeds} seed(s)\n"
    )
    print(
        "| schedule (async momentum) | final acc % (per seed) | wall time s | samples/s "
        "| time vs BSP | ASP updates/s vs ideal | switch overhead ms | switch gap ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label in dict.fromkeys(r["case"] for r in rows):
        group = [r for r in rows if r["case"] == label]
        accs = [100 * r["final_accuracy"] for r in group]
        wall = statistics.median(r["wall_time_s"] for r in group)
        rate = statistics.median(r["samples_per_s"] for r in group)
        effs = [r["asp_efficiency"] for r in group if r["asp_efficiency"] is not None]
        overheads = [1000 * o for r in group for o in r["switch_overhead_s"]]
        gaps = [1000 * r["switch_gap_s"] for r in group if r["switch_gap_s"] is not None]
        print(
            f"| {label} | {statistics.median(accs):.1f} ({', '.join(f'{a:.1f}' for a in accs)})"
            f" | {wall:.1f} | {rate:,.0f} | {wall / bsp_time:.2f}x"
            f" | {f'{100 * statistics.median(effs):.0f}%' if effs else '-'}"
            f" | {f'{max(overheads):.2f}' if overheads else '-'}"
            f" | {f'{statistics.median(gaps):.1f}' if gaps else '-'} |"
        )


if __name__ == "__main__":
    main()
