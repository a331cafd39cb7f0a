"""Transient stragglers: none / greedy / greedy with return / elastic on the paper's scenarios.

For each scenario of the Sync-Switch paper's family (1 or 2 stragglers, 10 or 30 ms added per
step, once or 4 times during the BSP phase) every policy trains the same job with the same
seed on 8 emulated workers. Prints a markdown table (final accuracy, wall time, BSP-phase time,
BSP work done, time relative to none), writes one JSON line per run as it finishes (an
interrupted benchmark keeps what it measured, and a rerun skips the runs already there), and
plots test accuracy over time for one scenario. All step times are EMULATED.

    python benchmarks/stragglers.py                    # the README table (about an hour here)
    python benchmarks/stragglers.py --only 2x30ms --seeds 2
    python benchmarks/stragglers.py --clean-minutes 5  # false detections on a clean run
"""

from __future__ import annotations

import csv
import shutil
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib
from harness import (
    RunLog,
    Timing,
    add_out,
    add_seeds,
    add_table,
    check_timing,
    markdown_table,
    parser,
    row_from,
)

from syncswitch.config import TrainConfig
from syncswitch.rundir import names
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train


@dataclass(frozen=True)
class Scenario:
    stragglers: int
    delay_ms: float
    occurrences: int

    @property
    def label(self) -> str:
        times = "once" if self.occurrences == 1 else f"{self.occurrences} times"
        return f"{self.stragglers}x{self.delay_ms:g}ms {times}"

    @property
    def key(self) -> str:
        return f"{self.stragglers}x{self.delay_ms:g}ms-{self.occurrences}"


@dataclass(frozen=True)
class Policy:
    label: str
    online_policy: str
    greedy_return: bool = False


SCENARIOS = tuple(
    Scenario(n, delay, times) for n in (1, 2) for delay in (10.0, 30.0) for times in (1, 4)
)
POLICIES = (
    Policy("none", "none"),
    Policy("greedy", "greedy"),
    Policy("greedy+return", "greedy", greedy_return=True),
    Policy("elastic", "elastic"),
)


@dataclass
class StragglerRow:
    """One run's line in runs.jsonl: a scenario, a policy, a seed and what came of it."""

    scenario: str
    label: str
    policy: str
    seed: int
    final_accuracy: float
    wall_time_s: float
    bsp_time_s: float
    bsp_samples: int
    planned_bsp_samples: int
    detections: int
    false_detections: int | None
    detection_delay_s_median: float | None
    dropped: dict[str, int]
    threshold: float
    run_dir: str
    emulation: Any


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--workers", type=int, default=8)
    cli.add_argument("--epochs", type=float, default=80.0)
    cli.add_argument("--schedule", default="bsp:0.25,asp")
    cli.add_argument("--step-time-ms", type=float, default=20.0)
    cli.add_argument("--jitter-sigma", type=float, default=0.2)
    cli.add_argument(
        "--coverage", type=float, default=0.5, help="share of the BSP phase the episodes cover"
    )
    cli.add_argument(
        "--threshold-10ms",
        type=float,
        default=1.3,
        help="detector threshold for the 10 ms scenarios: 10 ms on a 20 ms step is a ratio of "
        "1.5, exactly the default threshold",
    )
    add_seeds(cli, 1)
    cli.add_argument("--only", help="run only scenarios whose key contains this, e.g. 2x30ms")
    cli.add_argument(
        "--clean-minutes",
        type=float,
        default=0.0,
        help="instead: run elastic on a straggler-free job for about this long and count the "
        "false detections at the default threshold",
    )
    add_out(cli, "benchmarks/results/stragglers")
    add_table(cli, "give the options it ran with")
    args = cli.parse_args()

    out = args.out
    log = RunLog(out / "runs.jsonl")
    if args.table:
        print_table([row_from(StragglerRow, r) for r in log.read()], args)
        return
    out.mkdir(parents=True, exist_ok=True)
    start_local(args.workers + 4)
    if args.clean_minutes:
        clean_run(args, out)
        return
    # Always resumed: the runs already in runs.jsonl are not run again.
    rows = [row_from(StragglerRow, r) for r in log.read()]
    done = {(r.scenario, r.policy, r.seed) for r in rows}
    scenarios = [s for s in SCENARIOS if not args.only or args.only in s.key]
    for scenario in scenarios:
        for seed in range(args.seeds):
            for policy in POLICIES:
                if (scenario.key, policy.label, seed) in done:
                    continue
                row = run_case(args, out, scenario, policy, seed)
                rows.append(row)
                log.append(row)
                print(
                    f"{scenario.label:<18} {policy.label:<14} seed {seed}: "
                    f"acc {row.final_accuracy:.4f} time {row.wall_time_s:.1f} s "
                    f"bsp {row.bsp_time_s:.1f} s",
                    flush=True,
                )
    print_table([r for r in rows if any(r.scenario == s.key for s in scenarios)], args)
    plot_accuracy(rows, out, key=scenarios[-1].key)


def job(args, seed: int, out_dir: Path, **extra) -> TrainConfig:
    # A run directory without a row in runs.jsonl is an interrupted run's: start it afresh
    # (train() refuses to write into an earlier run's directory).
    shutil.rmtree(out_dir, ignore_errors=True)
    return TrainConfig(
        workers=args.workers,
        schedule=args.schedule,
        epochs=args.epochs,
        seed=seed,
        step_time_ms=args.step_time_ms,
        jitter_sigma=args.jitter_sigma,
        progress=False,
        out=str(out_dir),
        **extra,
    )


def run_case(args, out: Path, scenario: Scenario, policy: Policy, seed: int) -> StragglerRow:
    paper = {
        "stragglers": scenario.stragglers,
        "delay_ms": scenario.delay_ms,
        "occurrences": scenario.occurrences,
        "coverage": args.coverage,
        "seed": seed,
    }
    threshold = args.threshold_10ms if scenario.delay_ms <= 10 else 1.5
    config = job(
        args,
        seed,
        out / f"{scenario.key}-{policy.label}-s{seed}",
        stragglers=[{"paper": paper}],
        online_policy=policy.online_policy,
        greedy_return=policy.greedy_return,
        straggler_threshold=threshold,
        straggler_recover_threshold=min(1.2, threshold - 0.05),
    )
    summary = train(config, print_summary=False).summary
    online = summary.online
    return StragglerRow(
        scenario=scenario.key,
        label=scenario.label,
        policy=policy.label,
        seed=seed,
        final_accuracy=summary.final_value,
        wall_time_s=summary.wall_time_s,
        bsp_time_s=summary.time_by_protocol.get("bsp", 0.0),
        bsp_samples=online["bsp_samples"],
        planned_bsp_samples=online["planned_bsp_samples"],
        detections=online["detections"],
        false_detections=online["false_detections"],
        detection_delay_s_median=online["detection_delay_s_median"],
        dropped=summary.gradients.dropped,
        threshold=threshold,
        run_dir=summary.run_dir,
        emulation=summary.emulation,
    )


COLUMNS = (
    "scenario",
    "policy",
    "final acc %",
    "wall time s",
    "BSP-phase time s",
    "BSP work done",
    "speed-up vs none",
    "BSP-phase speed-up vs none",
    "detection delay s",
)


def print_table(rows: list[StragglerRow], args) -> None:
    title = (
        f"MNIST-1D, {args.workers} workers, schedule {args.schedule}, {args.epochs:g} epochs, "
        f"EMULATED {args.step_time_ms:g} ms steps (lognormal sigma {args.jitter_sigma}); "
        f"episodes cover {args.coverage:.0%} of the BSP phase; medians over seeds"
    )
    print(f"\n{check_timing(title, Timing.EMULATED)}\n")
    table = []
    for key in dict.fromkeys(r.scenario for r in rows):
        group = [r for r in rows if r.scenario == key]
        base = _median(group, "none", "wall_time_s")
        base_bsp = _median(group, "none", "bsp_time_s")
        speedup = (lambda b, t: f"{b / t:.2f}x") if base else (lambda b, t: "-")
        for policy in POLICIES:
            runs = [r for r in group if r.policy == policy.label]
            if not runs:
                continue
            accs = [100 * r.final_accuracy for r in runs]
            wall = statistics.median(r.wall_time_s for r in runs)
            bsp = statistics.median(r.bsp_time_s for r in runs)
            work = statistics.median(r.bsp_samples / r.planned_bsp_samples for r in runs)
            delays = [r.detection_delay_s_median for r in runs if r.detection_delay_s_median]
            each = f" ({', '.join(f'{a:.1f}' for a in accs)})" if len(accs) > 1 else ""
            table.append(
                (
                    runs[0].label,
                    policy.label,
                    f"{statistics.median(accs):.1f}{each}",
                    f"{wall:.1f}",
                    f"{bsp:.1f}",
                    f"{work:.0%}",
                    speedup(base, wall),
                    speedup(base_bsp, bsp),
                    f"{statistics.median(delays):.2f}" if delays else "-",
                )
            )
    print("\n".join(markdown_table(COLUMNS, table)))


def _median(rows: list[StragglerRow], policy: str, field: str) -> float | None:
    values = [getattr(r, field) for r in rows if r.policy == policy]
    return statistics.median(values) if values else None  # None: not measured (yet)


def plot_accuracy(rows: list[StragglerRow], out: Path, key: str) -> None:
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for policy in POLICIES:
        runs = [r for r in rows if r.scenario == key and r.policy == policy.label]
        if not runs:
            continue
        with (Path(runs[0].run_dir) / names.METRICS).open() as handle:
            metrics = list(csv.DictReader(handle))
        times = [float(m["time_s"]) for m in metrics]
        accs = [100 * float(m["test_accuracy"]) for m in metrics]
        ax.plot(times, accs, marker=".", label=policy.label)
    ax.set_xlabel("wall time, s (emulated device time)")
    ax.set_ylabel("test accuracy, %")
    ax.set_title(f"MNIST-1D, 8 workers, stragglers {key}")
    ax.set_ylim(bottom=50)
    ax.grid(alpha=0.3)
    ax.legend()
    path = out / f"accuracy-{key}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")


def clean_run(args, out: Path) -> None:
    """Elastic on a job whose workers differ only by jitter: every detection is false."""
    # Pure BSP keeps the detector busy for the whole run; about 21 updates/s x 256 samples.
    epochs = max(1.0, args.clean_minutes * 60 * 21 * 256 / 8000)
    config = job(args, 0, out / "clean-elastic", online_policy="elastic")
    config = replace(config, schedule="bsp", epochs=epochs)
    summary = train(config, print_summary=False).summary
    online = summary.online
    steps = summary.gradients.sent
    print(
        f"clean run: {summary.wall_time_s:.0f} s, {steps:,} worker steps observed, "
        f"{online['detections']} detections ({online['false_detections']} false) at threshold "
        f"{online['detector']['threshold']}, window {online['detector']['window']}"
    )


if __name__ == "__main__":
    main()
