"""A simulated scale study: how the BSP share a switch needs grows with the number of workers.

Runs each (workers, schedule) pair on the simulator (`--runtime sim`: the real controller and
real gradients on a virtual clock, no Ray) and prints final accuracy and SIMULATED time. The
full study, with 8-256 workers and two seeds, is
`.venv/bin/python benchmarks/sim_scale.py`
(docs/simulator.md).

    .venv/bin/python examples/scale_study.py                       # 8, 16 and 32 workers
    .venv/bin/python examples/scale_study.py --workers 8 --epochs 1 --samples 2000  # quick
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from syncswitch import TrainConfig, train
from syncswitch.command import program
from syncswitch.rundir.changes import schedule_changes
from syncswitch.workloads import load_dataset

SCHEDULES = ("bsp", "bsp:0.5,asp", "bsp:0.25,asp", "asp")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--epochs", type=float, default=10)
    parser.add_argument("--samples", type=int, default=10000, help="MNIST-1D samples")
    parser.add_argument("--jitter-sigma", type=float, default=0.2, help="step-time spread")
    parser.add_argument("--out", type=Path, default=None, help="where the runs go")
    args = parser.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="scale-study-"))
    dataset = load_dataset("mnist1d", mnist1d_samples=args.samples)
    print(f"SIMULATED timing; runs in {out}")
    print(
        f"{'workers':>7}  {'schedule':<14} {'final acc':>9}  {'simulated s':>11}  {'host s':>6}"
        "  as planned"
    )
    for workers in args.workers:
        for schedule in SCHEDULES:
            config = TrainConfig(
                runtime="sim",
                workers=workers,
                schedule=schedule,
                epochs=args.epochs,
                # Step times that vary (a mean-one lognormal): with identical workers BSP waits
                # for nobody, and every schedule would take the same simulated time.
                jitter_sigma=args.jitter_sigma,
                mnist1d_samples=args.samples,
                progress=False,
                out=str(out / f"w{workers}-{schedule.replace(':', '').replace(',', '-')}"),
            )
            # One row per run in its own table: not train()'s summary of each.
            summary = train(config, dataset=dataset, print_summary=False).summary
            # A rolled-back run ran another schedule than its name: never report it as that.
            changes = schedule_changes(summary)
            print(
                f"{workers:>7}  {schedule:<14} {100 * summary.final_value:>8.2f}%"
                f"  {summary.wall_time_s:>11.1f}  {summary.host_time_s:>6.1f}"
                f"  {'no: ' + '; '.join(changes) if changes else 'yes'}"
            )
    print(f"compare them: {program()} report {out}/*")


if __name__ == "__main__":
    main()
