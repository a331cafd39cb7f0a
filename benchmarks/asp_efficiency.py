"""ASP's update rate against the ideal (workers / emulated step time), with the CPU it costs.

Runs pure ASP on MNIST-1D several times and reports the median share of the ideal rate, and,
from /proc, the CPU seconds per update spent by the server, the workers and everything else
during the steady part of each run. On a machine with fewer cores than the CPU a step costs
times the ideal rate, the CPU is the ceiling, not the framework; the table shows which.

    python benchmarks/asp_efficiency.py --repeats 3
"""

from __future__ import annotations

import os
import shutil
import threading
import time

from harness import Timing, add_repeats, check_timing, markdown_table, medians, parser

from syncswitch.config import TrainConfig
from syncswitch.runtime.ray.connect import start_local
from syncswitch.runtime.train import train

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds_by_kind(kinds: dict[str, str] | None = None) -> dict[str, float]:
    """CPU seconds used so far by every process, grouped by what it is.

    `kinds` (pid -> kind, filled in here) keeps a process in the group it was first seen in:
    a Ray worker process is renamed when its task ends.
    """
    kinds = {} if kinds is None else kinds
    totals: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
            with open(f"/proc/{pid}/cmdline") as handle:
                cmd = handle.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / _TICK
        kind = "server" if "ParameterServer" in cmd else "workers" if "Worker" in cmd else "other"
        totals[kind] = totals.get(kind, 0.0) + seconds
    return totals


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--workers", type=int, default=8)
    cli.add_argument("--step-time-ms", type=float, default=20.0)
    cli.add_argument("--epochs", type=float, default=40.0)
    add_repeats(cli, 3)
    args = cli.parse_args()
    start_local(args.workers + 4)
    ideal = args.workers / (args.step_time_ms / 1000)
    rows = []
    for seed in range(args.repeats):
        marks: dict[str, tuple[dict, float]] = {}

        def sample(marks=marks) -> None:
            # Past start-up: the workers are training, then a few seconds more.
            while "workers" not in cpu_seconds_by_kind():
                time.sleep(0.5)
            time.sleep(4)
            kinds: dict[str, str] = {}
            marks["a"] = (cpu_seconds_by_kind(kinds), time.monotonic())
            time.sleep(10)
            marks["b"] = (cpu_seconds_by_kind(kinds), time.monotonic())

        run_dir = f"benchmarks/results/asp-efficiency/s{seed}"
        shutil.rmtree(run_dir, ignore_errors=True)  # measured again from scratch
        threading.Thread(target=sample, daemon=True).start()
        summary = train(
            TrainConfig(
                workers=args.workers,
                schedule="asp",
                epochs=args.epochs,
                seed=seed,
                step_time_ms=args.step_time_ms,
                jitter_sigma=0.2,
                progress=False,
                out=run_dir,
            ),
            print_summary=False,
        ).summary
        rate = summary.updates_per_s
        (a, ta), (b, tb) = marks["a"], marks["b"]
        window_updates = rate * (tb - ta)
        row = {"efficiency": rate / ideal, "updates_per_s": rate}
        for kind in ("server", "workers", "other"):
            row[f"{kind}_ms"] = 1000 * (b.get(kind, 0) - a.get(kind, 0)) / window_updates
        row["cores_busy"] = sum(b.values()) - sum(a.values())
        row["cores_busy"] /= tb - ta
        rows.append(row)
        print(
            f"seed {seed}: {100 * row['efficiency']:.1f}% of {ideal:.0f} updates/s, "
            f"{row['cores_busy']:.2f} cores busy",
            flush=True,
        )
    med = medians(rows)
    title = (
        f"ASP, {args.workers} workers, EMULATED {args.step_time_ms:g} ms steps (lognormal "
        f"sigma 0.2), {os.cpu_count()} cores; medians of {args.repeats} runs"
    )
    print(f"\n{check_timing(title, Timing.EMULATED)}\n")
    columns = ("updates/s", "vs ideal", "CPU ms per update: server", "workers", "other")
    cells = (
        f"{med['updates_per_s']:.0f}",
        f"{100 * med['efficiency']:.1f}%",
        f"{med['server_ms']:.2f}",
        f"{med['workers_ms']:.2f}",
        f"{med['other_ms']:.2f}",
        f"{med['cores_busy']:.2f}",
    )
    print("\n".join(markdown_table((*columns, "cores busy"), [cells])))


if __name__ == "__main__":
    main()
