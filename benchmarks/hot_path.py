"""Does evaluation, checkpointing and result writing stall ASP's update loop? (issue 13, item 3)

Pure ASP, 8 workers, EMULATED 20 ms device time per worker step (mean-one lognormal jitter,
sigma 0.2), MNIST-1D cnn1d, batch 32, in two configurations, alternated within every repeat
(quiet first in even repeats, busy first in odd ones) so the shared machine's slow spells hit
both alike:

- quiet: evaluation as rare as the config allows (eval_every 1: only the final one, after the
  last update), no periodic or timed checkpoints (checkpoint_every 0, checkpoint_every_s 0;
  the final checkpoint comes after the last update too);
- busy: evaluation and checkpoints every 1% of training (eval_every 0.01, checkpoint_every
  0.01), so each evaluation also appends to metrics.csv and rewrites summary.json, each
  checkpoint writes a .pt with its manifest and appends to events.jsonl; --busy-loggers adds
  TensorBoard and/or MLflow on top.

Both write updates.csv, one row per applied gradient: it cannot be switched off, and it is what
the rate is read from. The update rate is the applied gradients per second over the steady
window (20%-90% of the time from the first to the last applied gradient); the ideal is
workers / mean emulated step time (8 / 20 ms = 400/s). Printed: each configuration's rate and
share of the ideal (medians), the busy/quiet ratio within each repeat and its median, and how
many evaluations and checkpoints fell inside the window. EMULATED timing: the workers sleep out
the device time a GPU would take; the CPU work (gradients, Ray calls, the server) is real.

    python benchmarks/hot_path.py                          # 3 repeats (~4 min here)
    python benchmarks/hot_path.py --repeats 1 --epochs 5 --out /tmp/hp   # a quick look

Results: --out (default benchmarks/results/hot-path/): table.md and runs.json, rewritten after
every run; the run directories under runs/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

from harness import (
    Timing,
    add_out,
    add_repeats,
    args_record,
    cell,
    check_timing,
    comma_list,
    markdown_table,
    medians,
    parser,
    ratio,
    save_json,
    save_text,
)
from steady import WINDOW, count_in, read_csv_rows, steady_rate, steady_window

from syncswitch.config import TrainConfig
from syncswitch.rundir import names

OUT = Path("benchmarks/results/hot-path")
KINDS = ("quiet", "busy")
JITTER_SIGMA = 0.2


# -- arithmetic (pure; tested in tests/runtime/test_throughput_arith.py) ---------------------


def ideal_updates_per_s(workers: int, step_time_ms: float) -> float:
    """Every worker sending one gradient per mean emulated step, none waiting."""
    return workers / (step_time_ms / 1000)


def measure_updates(
    update_times_s: list[float],
    step_times_s: list[float],
    eval_times_s: list[float],
    checkpoint_times_s: list[float],
    ideal_per_s: float,
) -> dict:
    """One run's figures over its steady window: applied gradients/s and their share of the
    ideal, the workers' mean step time, the evaluations and checkpoints inside the window."""
    window = steady_window(update_times_s)
    rate = steady_rate(update_times_s)
    in_window = [
        s for t, s in zip(update_times_s, step_times_s, strict=True) if window[0] <= t < window[1]
    ]
    return {
        "updates_per_s": rate,
        "vs_ideal": rate / ideal_per_s,
        "window_s": list(window),
        "mean_step_time_ms": 1000 * statistics.mean(in_window) if in_window else None,
        "evaluations_in_window": count_in(eval_times_s, window),
        "checkpoints_in_window": count_in(checkpoint_times_s, window),
    }


def table(repeats: list[dict], args: argparse.Namespace) -> str:
    rates = medians(r["updates_per_s"] for r in repeats)
    shares = medians({k: r["runs"][k].get("vs_ideal") for k in KINDS} for r in repeats)
    busy_quiet = medians({"busy/quiet": r["busy/quiet"]} for r in repeats)["busy/quiet"]
    ideal = ideal_updates_per_s(args.workers, args.step_time_ms)

    def each(kind: str, key: str, fmt: str) -> str:
        return ", ".join(cell(r["runs"][kind].get(key), fmt) for r in repeats)

    head = (
        f"**EMULATED {args.step_time_ms:g} ms device time per step** (mean-one lognormal "
        f"jitter, sigma {JITTER_SIGMA:g}), ASP, {args.workers} workers, MNIST-1D cnn1d, batch "
        f"32, {args.epochs:g} epochs; applied gradients/s over the steady window "
        f"({WINDOW[0]:.0%}-{WINDOW[1]:.0%} of each run); ideal {ideal:.0f}/s; medians of "
        f"{len(repeats)} repeat(s); {os.cpu_count()} cores, shared machine.\n\n"
    )
    check_timing(head, Timing.EMULATED)
    columns = (
        "configuration",
        "updates/s",
        "vs ideal",
        "per repeat (updates/s)",
        "evaluations, checkpoints in window (per repeat)",
    )
    cells = []
    labels = {
        "quiet": "quiet: eval_every 1 (final only), checkpoint_every 0",
        "busy": "busy: eval_every 0.01, checkpoint_every 0.01"
        + (f", loggers {','.join(args.busy_loggers)}" if args.busy_loggers else ""),
    }
    for kind in KINDS:
        inside = ", ".join(
            f"{r['runs'][kind].get('evaluations_in_window', '-')}/"
            f"{r['runs'][kind].get('checkpoints_in_window', '-')}"
            for r in repeats
        )
        cells.append(
            (
                labels[kind],
                cell(rates.get(kind), ".0f"),
                cell(shares.get(kind), ".1%"),
                each(kind, "updates_per_s", ".0f"),
                inside,
            )
        )
    rows = markdown_table(columns, cells)
    per_repeat = ", ".join(cell(r["busy/quiet"], ".3f") for r in repeats)
    rows.append(f"\nbusy/quiet update rate: median **{cell(busy_quiet, '.3f')}** ({per_repeat})")
    return head + "\n".join(rows) + "\n"


# -- one run ----------------------------------------------------------------------------------


def run(config: TrainConfig, ideal_per_s: float) -> dict:
    from syncswitch.runtime.train import train  # imports Ray

    run_dir = Path(str(config.out))
    shutil.rmtree(run_dir, ignore_errors=True)  # measured again from scratch
    summary = train(config, print_summary=False).summary
    updates = read_csv_rows(run_dir / names.UPDATES)
    evaluations = read_csv_rows(run_dir / names.METRICS)  # one row per evaluation
    checkpoints = [
        event["meta"]["time_s"]
        for event in map(json.loads, (run_dir / names.EVENTS).read_text().splitlines())
        if event.get("event") == "checkpoint" and "time_s" in event.get("meta", {})
    ]
    row = measure_updates(
        [float(u["time_s"]) for u in updates],
        [float(u["step_time_s"]) for u in updates],
        [float(e["time_s"]) for e in evaluations],
        checkpoints,
        ideal_per_s,
    )
    row["run_updates_per_s"] = summary.updates_per_s
    row["wall_s"] = summary.wall_time_s
    row["evaluations"] = len(evaluations)
    row["checkpoints"] = len(checkpoints)
    return row


def parse_args() -> argparse.Namespace:
    cli = parser(__doc__, epilog=True)
    cli.add_argument("--workers", type=int, default=8, help="ASP workers (default 8)")
    cli.add_argument(
        "--step-time-ms", type=float, default=20.0, help="emulated device time (default 20)"
    )
    cli.add_argument(
        "--epochs",
        type=float,
        default=15.0,
        help="passes over the 8,000 training samples per run (default 15: 3,750 updates, "
        "about 12-15 s at the 250-300 updates/s seen here, plus start-up)",
    )
    add_repeats(cli, 3, "quiet/busy pairs")
    cli.add_argument(
        "--busy-loggers",
        default="",
        help="also log the busy runs to these backends: tensorboard, mlflow, comma-separated "
        "(default none: the run directory's own files only)",
    )
    add_out(cli, OUT)
    args = cli.parse_args()
    args.busy_loggers = comma_list(args.busy_loggers)
    return args


def main() -> None:
    args = parse_args()
    from syncswitch.runtime.ray.connect import start_local

    args.out.mkdir(parents=True, exist_ok=True)
    start_local(args.workers + 4)
    ideal = ideal_updates_per_s(args.workers, args.step_time_ms)

    def config(kind: str, seed: int) -> TrainConfig:
        busy = kind == "busy"
        return TrainConfig(
            workers=args.workers,
            schedule="asp",
            epochs=args.epochs,
            seed=seed,
            step_time_ms=args.step_time_ms,
            jitter_sigma=JITTER_SIGMA,
            eval_every=0.01 if busy else 1.0,
            checkpoint_every=0.01 if busy else 0.0,
            checkpoint_every_s=0.0,
            logger=(args.busy_loggers or None) if busy else None,
            progress=False,
            out=str(args.out / "runs" / f"{kind}-s{seed}"),
        )

    repeats: list[dict] = []
    for seed in range(args.repeats):
        order = KINDS if seed % 2 == 0 else KINDS[::-1]
        repeat: dict = {"seed": seed, "order": list(order), "runs": {}, "updates_per_s": {}}
        for kind in order:
            started = time.monotonic()
            try:
                row = run(config(kind, seed), ideal)
            except Exception as error:  # one failed run must not lose the others' figures
                row = {"error": f"{type(error).__name__}: {error}"}
                print(f"repeat {seed}, {kind}: FAILED: {row['error']}", flush=True)
            row["elapsed_s"] = time.monotonic() - started
            repeat["runs"][kind] = row
            repeat["updates_per_s"][kind] = row.get("updates_per_s")
            if "updates_per_s" in row:
                print(
                    f"repeat {seed}, {kind}: {row['updates_per_s']:.0f} updates/s "
                    f"({row['vs_ideal']:.1%} of {ideal:.0f}), {row['evaluations_in_window']} "
                    f"evaluations and {row['checkpoints_in_window']} checkpoints in the window",
                    flush=True,
                )
        repeat["busy/quiet"] = ratio(
            repeat["updates_per_s"]["busy"], repeat["updates_per_s"]["quiet"]
        )
        repeats.append(repeat)
        meta = {
            "label": "EMULATED device time",
            "args": args_record(args),
            "window": WINDOW,
            "ideal_updates_per_s": ideal,
            "jitter_sigma": JITTER_SIGMA,
        }
        save_text(args.out / "table.md", table(repeats, args))
        save_json(args.out / "runs.json", {**meta, "repeats": repeats})
    print("\n" + table(repeats, args), flush=True)


if __name__ == "__main__":
    main()
