"""The default job's accuracy by schedule, each figure labelled with the split it is on.

Runs `syncswitch train` as a user would (real time, no emulated device time, seed 0, the
default MNIST-1D job: 7,200 training, 800 validation and 2,000 test samples), once per
schedule, and tabulates the validation accuracy every decision read (final and best) beside
the test accuracy of the final weights (measured once, at the end).

    python benchmarks/default_job.py                 # four schedules on a local Ray (~5 min)
    python benchmarks/default_job.py --runtime sim   # the same on the simulator (SIMULATED)

Results: --out (default benchmarks/results/default-job/): table.md and runs.jsonl (a line per
run as it ends); the run directories under runs/.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from harness import RunLog, Timing, add_out, check_timing, markdown_table, read_summary, save_text
from harness import parser as harness_parser

SCHEDULES = (
    ("online", []),
    ("bsp", ["--schedule", "bsp"]),
    ("bsp:0.25,asp", ["--schedule", "bsp:0.25,asp", "--momentum-at-switch", "scale"]),
    ("asp (keep)", ["--schedule", "asp", "--momentum-at-switch", "keep"]),
)


def main() -> None:
    parser = harness_parser(__doc__, epilog=True)
    add_out(parser, Path(__file__).parent / "results" / "default-job")
    parser.add_argument("--runtime", choices=("ray", "sim"), default="ray")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    log = RunLog(args.out / "runs.jsonl")
    log.clear()
    timing = Timing.SIMULATED if args.runtime == "sim" else Timing.REAL
    title = check_timing(
        f"The default job, seed 0 ({'SIMULATED' if args.runtime == 'sim' else 'real'} time, "
        "no emulated device time)",
        timing,
    )
    rows = []
    command = Path(sys.executable).parent / "syncswitch"
    for label, flags in SCHEDULES:
        out = args.out / "runs" / label.replace(":", "").replace(",", "-").replace(" ", "")
        shutil.rmtree(out, ignore_errors=True)
        argv = [str(command), "train", "--runtime", args.runtime, *flags, "--out", str(out)]
        # Its own registry: an online run's stored share must not reach the user's.
        argv += ["--registry", str(args.out / "registry.db")]
        subprocess.run([*argv, "--no-progress", "--json"], check=True, capture_output=True)
        summary = read_summary(out)
        test = (summary.test or {}).get("accuracy")
        row = {
            "schedule": label,
            "validation_final": summary.final_value,
            "validation_best": summary.best_value,
            "test": test,
            "wall_time_s": summary.wall_time_s,
            "switches": [s.to_plain() for s in summary.switches],
            "rollbacks": summary.reliability.rollbacks if summary.reliability else 0,
        }
        log.append(row)
        rows.append(
            [
                f"`{' '.join(['syncswitch', 'train', *flags])}`",
                _pct(summary.final_value),
                _pct(summary.best_value),
                _pct(test),
                ", ".join(f"{s.from_protocol}>{s.to_protocol} @{s.at_fraction:.0%}"
                          for s in summary.switches) or "-",
                f"{summary.wall_time_s:.1f}",
            ]
        )  # fmt: skip
        table = [
            f"### {title}",
            "",
            *markdown_table(
                [
                    "command",
                    "validation acc, final",
                    "validation acc, best",
                    "test acc (final weights)",
                    "switches",
                    "time s",
                ],
                rows,
            ),
        ]
        save_text(args.out / "table.md", "\n".join(table) + "\n")
        print(f"{label}: done", flush=True)
    print((args.out / "table.md").read_text())


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


if __name__ == "__main__":
    main()
