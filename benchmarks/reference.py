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

import csv
import shutil
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (
    RunLog,
    Timing,
    add_keep,
    add_out,
    add_seeds,
    check_timing,
    markdown_table,
    parser,
    read_summary,
    row_from,
)

from syncswitch.config import TrainConfig
from syncswitch.errors import TrainingStalled
from syncswitch.rundir import Summary, names
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train


@dataclass(frozen=True)
class Case:
    schedule: str
    momentum: str  # momentum policy for asynchronous phases

    @property
    def label(self) -> str:
        return self.schedule if self.schedule == "bsp" else f"{self.schedule} ({self.momentum})"


@dataclass
class RunRow:
    """One run's line in runs.jsonl. `final_accuracy` None and `stopped` set: the run stopped
    itself (every worker quarantined for NaN gradients). `final_accuracy` is on the split the
    run's decisions read (validation; the test set in runs.jsonl files from before 0.2, which
    have no `test_accuracy`), `test_accuracy` the final weights on the test split."""

    case: str
    seed: int
    final_accuracy: float | None
    wall_time_s: float | None
    samples_per_s: float | None
    asp_efficiency: float | None
    switch_overhead_s: list[float]
    switch_gap_s: float | None
    emulation: Any
    stopped: str | None = None
    samples: int | None = None
    test_accuracy: float | None = None


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
    cli = parser(__doc__)
    cli.add_argument("--workers", type=int, default=8)
    cli.add_argument("--epochs", type=float, default=80.0)
    cli.add_argument("--step-time-ms", type=float, default=20.0)
    cli.add_argument("--jitter-sigma", type=float, default=0.2)
    add_seeds(cli, 2)
    add_out(cli, "benchmarks/results/reference")
    add_keep(cli)
    args = cli.parse_args()

    out = args.out
    log = RunLog(out / "runs.jsonl")
    rows = [row_from(RunRow, r) for r in log.read()] if args.keep else []
    done = {(r.case, r.seed) for r in rows}
    start_local(args.workers + 4)
    for case in CASES:
        for seed in range(args.seeds):
            if (case.label, seed) in done:
                continue
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
            try:
                result = train(config, print_summary=False)
                row = measure(case, seed, result.summary, result.run_dir, args)
            except TrainingStalled as stalled:
                # A diverging case may end with every worker quarantined (NaN gradients):
                # that is its result, not the benchmark's failure.
                row = stopped_row(case, seed, Path(config.out), str(stalled))
            rows.append(row)
            log.append(row)
            print(f"{case.label:<26} seed {seed}: {_outcome(row)}", flush=True)
    print_table(rows, args)


def _outcome(row: RunRow) -> str:
    if row.stopped:
        return f"stopped after {row.samples:,} samples: {row.stopped}"
    return f"acc {row.final_accuracy:.4f} time {row.wall_time_s:.1f} s"


def stopped_row(case: Case, seed: int, run_dir: Path, reason: str) -> RunRow:
    """A run that stopped itself (every worker quarantined): where and why, from its summary."""
    summary = read_summary(run_dir)
    return RunRow(
        case=case.label,
        seed=seed,
        final_accuracy=None,
        stopped=reason.split(";")[0],
        samples=summary.samples,
        wall_time_s=summary.wall_time_s,
        samples_per_s=summary.samples_per_s,
        asp_efficiency=None,
        switch_overhead_s=[s.overhead_s for s in summary.switches],
        switch_gap_s=None,
        emulation=summary.emulation,
    )


def measure(case: Case, seed: int, summary: Summary, run_dir: Path, args) -> RunRow:
    """The figures of one run, with the ASP phase's update rate read from updates.csv."""
    with (run_dir / names.UPDATES).open() as handle:
        updates = list(csv.DictReader(handle))
    asp_versions = {int(r["version"]) for r in updates if r["protocol"] == "asp"}
    asp_time_s = summary.time_by_protocol.get("asp", 0.0)
    ideal_updates_per_s = args.workers / (args.step_time_ms / 1000.0)
    switch_gap_s = None
    if summary.switches:
        at = summary.switches[0].time_s
        before = max(float(r["time_s"]) for r in updates if float(r["time_s"]) <= at)
        after = min(float(r["time_s"]) for r in updates if float(r["time_s"]) > at)
        switch_gap_s = after - before
    return RunRow(
        case=case.label,
        seed=seed,
        final_accuracy=summary.final_value,
        test_accuracy=(summary.test or {}).get("accuracy"),
        wall_time_s=summary.wall_time_s,
        samples_per_s=summary.samples_per_s,
        asp_efficiency=(
            len(asp_versions) / asp_time_s / ideal_updates_per_s if asp_time_s > 0 else None
        ),
        switch_overhead_s=[s.overhead_s for s in summary.switches],
        switch_gap_s=switch_gap_s,
        emulation=summary.emulation,
    )


def print_table(rows: list[RunRow], args) -> None:
    bsp_time = statistics.median(r.wall_time_s for r in rows if r.case == "bsp")
    title = (
        f"MNIST-1D, {args.workers} workers, {args.epochs:g} epochs, EMULATED device time "
        f"{args.step_time_ms:g} ms/step (lognormal jitter sigma {args.jitter_sigma}); "
        f"medians over {args.seeds} seed(s)"
    )
    print(f"\n{check_timing(title, Timing.EMULATED)}\n")
    columns = (
        "schedule (async momentum)",
        "validation acc % (per seed)",
        "test acc %",
        "wall time s",
        "samples/s",
        "time vs BSP",
        "ASP updates/s vs ideal",
        "switch overhead ms",
        "switch gap ms",
    )
    table = []
    for label in dict.fromkeys(r.case for r in rows):
        group = [r for r in rows if r.case == label]
        accs = [100 * r.final_accuracy for r in group if r.final_accuracy is not None]
        stopped = sum(1 for r in group if r.final_accuracy is None)
        # A run that stopped itself (every worker quarantined for NaN gradients) diverged.
        acc_cell = (
            f"{statistics.median(accs):.1f} ({', '.join(f'{a:.1f}' for a in accs)})" if accs else ""
        ) + (f"{' + ' if accs else ''}{stopped} stopped (diverged to NaN)" if stopped else "")
        tests = [100 * r.test_accuracy for r in group if r.test_accuracy is not None]
        wall = statistics.median(r.wall_time_s for r in group)
        rate = statistics.median(r.samples_per_s for r in group)
        effs = [r.asp_efficiency for r in group if r.asp_efficiency is not None]
        overheads = [1000 * o for r in group for o in r.switch_overhead_s]
        gaps = [1000 * r.switch_gap_s for r in group if r.switch_gap_s is not None]
        table.append(
            (
                label,
                acc_cell,
                f"{statistics.median(tests):.1f}" if tests else "-",
                f"{wall:.1f}",
                f"{rate:,.0f}",
                f"{wall / bsp_time:.2f}x",
                f"{100 * statistics.median(effs):.0f}%" if effs else "-",
                f"{max(overheads):.2f}" if overheads else "-",
                f"{statistics.median(gaps):.1f}" if gaps else "-",
            )
        )
    print("\n".join(markdown_table(columns, table)))


if __name__ == "__main__":
    main()
