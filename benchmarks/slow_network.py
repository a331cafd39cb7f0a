"""Slow networks: local phases that hold at the switch, and what `--schedule online` chooses.

Every run is on the simulator (SIMULATED times: virtual clock, real gradients), with the
divergence guard on, as a user runs it. Two tables, one command each:

  python benchmarks/slow_network.py study     # the local study's 40-epoch job (MNIST-1D
                                              # 20,000 samples, 20 ms steps, jitter 0.2),
                                              # wan-1g and the default cluster, 8 and 32 workers
  python benchmarks/slow_network.py default   # `syncswitch train --runtime sim --cluster wan-1g`
                                              # with its own defaults (80 epochs), 8 and 32 workers

Each writes runs.jsonl (a line per run, as it ends) and table.md into
benchmarks/results/slow-network-<table>/. `--keep` skips the runs already there (so two
processes, e.g. `--workers 8` and `--workers 32`, can fill one folder); `--show` rewrites
table.md from runs.jsonl and prints it.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import (
    RunLog,
    add_keep,
    add_out,
    comma_list,
    markdown_table,
    parser,
    row_from,
    save_text,
)
from local_eval import SIM_JOB as LOCAL_STUDY_JOB

from syncswitch.config import TrainConfig

# The local study's job (benchmarks/local_eval.py) at 40 epochs, with the divergence guard and
# checkpoints as a user has them (that study turned both off to compare the schedules alone).
STUDY_JOB: dict[str, Any] = {
    **{
        k: v
        for k, v in LOCAL_STUDY_JOB.items()
        if k not in ("divergence_guard", "checkpoint_every")
    },
    "epochs": 40.0,
}
DEFAULT_JOB: dict[str, Any] = {"runtime": "sim", "progress": False}  # syncswitch train's own

NO_RAMP = {"local_switch_warmup": 0.0}  # the switch into a local phase as it was before
CASES: dict[str, dict[str, Any]] = {
    "bsp": {"schedule": "bsp"},
    "online": {"schedule": "online"},
    "bsp:0.25,local-16": {"schedule": "bsp:0.25,local-16"},
    "bsp:0.25,local-16 no ramp": {"schedule": "bsp:0.25,local-16", **NO_RAMP},
    # What `--schedule online` ran before it chose what follows BSP: the same run, bit for bit,
    # where it chooses ASP.
    "bsp:online,asp": {"schedule": "bsp:online,asp"},
}


@dataclass(frozen=True)
class Table:
    job: dict[str, Any]
    cases: dict[str, tuple[str, ...]]  # by cluster


TABLES = {
    "study": Table(
        STUDY_JOB,
        {
            "wan-1g": ("bsp", "online", "bsp:0.25,local-16", "bsp:0.25,local-16 no ramp"),
            "default": ("online", "bsp:online,asp"),
        },
    ),
    "default": Table(
        DEFAULT_JOB,
        {"wan-1g": ("bsp", "online", "bsp:0.25,local-16", "bsp:0.25,local-16 no ramp")},
    ),
}


@dataclass
class Row:
    table: str
    case: str
    cluster: str
    workers: int
    seed: int
    timing: str  # SIMULATED, always
    final_accuracy: float | None  # validation
    test_accuracy: float | None
    time_s: float  # SIMULATED training time
    host_time_s: float
    status: str
    rollbacks: int
    protocols: list[str]  # in force, in order
    switched_at: float | None  # an online phase's end
    follower: dict[str, Any] | None  # what `online` chose, with its inputs
    curve: list[list[float]] = field(default_factory=list)  # (fraction, accuracy)


def run_one(table: str, case: str, cluster: str, workers: int, seed: int, dataset: Any) -> Row:
    from syncswitch.rundir import load_run
    from syncswitch.runtime.train import train

    values = {**TABLES[table].job, **CASES[case], "cluster": cluster, "workers": workers}
    with tempfile.TemporaryDirectory(prefix="slow-network-") as scratch:
        values |= {"seed": seed, "out": scratch}
        started = time.perf_counter()
        result = train(TrainConfig(**values), dataset=dataset, print_summary=False)
        host_s = time.perf_counter() - started
        metrics = load_run(Path(scratch)).metrics
    summary = result.summary
    timing = summary.online_timing
    first = summary.schedule.split(",")[0].split(":")[0]  # the first phase's protocol
    protocols = [first if first != "online" else "bsp", *(s.to_protocol for s in summary.switches)]
    return Row(
        table=table,
        case=case,
        cluster=cluster,
        workers=workers,
        seed=seed,
        timing="SIMULATED",
        final_accuracy=summary.final_value,
        test_accuracy=(summary.test or {}).get("accuracy"),
        time_s=summary.wall_time_s,
        host_time_s=round(host_s, 1),
        status=summary.status,
        rollbacks=summary.reliability.rollbacks if summary.reliability else 0,
        protocols=protocols,
        switched_at=timing.at_fraction if timing is not None else None,
        follower=timing.follower if timing is not None else None,
        curve=[[float(f), float(a)] for f, a in zip(metrics.fraction, metrics.value, strict=True)],
    )


# -- the table ------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _mean(values: list[float]) -> float | None:
    return statistics.mean(values) if values else None


def render(rows: list[Row], table: str) -> str:
    lines = [
        f"## SIMULATED times: `{table}` job, divergence guard on",
        "",
        "Final validation accuracy per seed and mean; the difference from BSP's mean in points;",
        "mean SIMULATED training time and its ratio to BSP's; rollbacks by the guard; for",
        "`online`, where it left BSP and what it chose (with the message/step ratio measured).",
        "",
    ]
    spec = TABLES[table]
    for cluster, cases in spec.cases.items():
        for workers in sorted({r.workers for r in rows if r.cluster == cluster}):
            mine = [r for r in rows if (r.cluster, r.workers, r.table) == (cluster, workers, table)]
            bsp = [r for r in mine if r.case == "bsp"]
            bsp_acc = _mean([r.final_accuracy for r in bsp if r.final_accuracy is not None])
            bsp_time = _mean([r.time_s for r in bsp])
            body = []
            for case in cases:
                runs = sorted((r for r in mine if r.case == case), key=lambda r: r.seed)
                if not runs:
                    continue
                accs = [r.final_accuracy for r in runs if r.final_accuracy is not None]
                acc, spent = _mean(accs), _mean([r.time_s for r in runs])
                delta = "-" if acc is None or bsp_acc is None else f"{100 * (acc - bsp_acc):+.2f}"
                ratio = "-" if spent is None or not bsp_time else f"{spent / bsp_time:.2f}x"
                picked = [r.follower for r in runs if r.follower and r.follower.get("ratio")]
                ratios = [float(f["ratio"]) for f in picked]
                names = ", ".join(sorted({str(f["protocol"]) for f in picked}))
                chosen = [f"{names} (ratio {min(ratios):.2f}-{max(ratios):.2f})"] if picked else []
                at = [r.switched_at for r in runs if r.switched_at is not None]
                online = (f"left at {min(at):.3f}-{max(at):.3f}" if at else "") + (
                    f", {'; '.join(chosen)}" if chosen else ""
                )
                body.append(
                    [
                        case,
                        " / ".join(_pct(a) for a in accs),
                        _pct(acc),
                        delta,
                        f"{spent:.1f}" if spent is not None else "-",
                        ratio,
                        str(sum(r.rollbacks for r in runs)),
                        online or "-",
                        str(len(runs)),
                    ]
                )
            if not body:
                continue
            lines += [f"### {cluster}, {workers} workers", ""]
            columns = ("case", "accuracy by seed", "mean", "vs BSP (pt)", "time (s)",
                       "time / BSP", "rollbacks", "online: switch, follower", "runs")  # fmt: skip
            lines += markdown_table(columns, body)
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__, epilog=True)
    p.add_argument("table", choices=tuple(TABLES))
    add_out(p, None, "results folder (default benchmarks/results/slow-network-<table>)")
    add_keep(p)
    p.add_argument(
        "--show", action="store_true", help="rewrite table.md from runs.jsonl and print it"
    )
    p.add_argument("--workers", type=lambda t: comma_list(t, int), default=[8, 32])
    p.add_argument("--seeds", type=lambda t: comma_list(t, int), default=[0, 1, 2])
    p.add_argument(
        "--cases", type=lambda t: t.split(";"), default=None, help="';'-separated (default all)"
    )
    args = p.parse_args()
    out = args.out or Path(__file__).parent / "results" / f"slow-network-{args.table}"
    log = RunLog(out / "runs.jsonl")
    rows = [row_from(Row, r) for r in log.read()] if (args.keep or args.show) else []
    if not (args.keep or args.show):
        log.clear()
    if args.show:  # table.md rewritten from runs.jsonl (two processes may have added rows)
        save_text(out / "table.md", render(rows, args.table))
        print(render(rows, args.table))
        return
    unknown = [c for c in args.cases or () if c not in CASES]
    if unknown:
        p.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    from syncswitch.workloads import load_dataset

    job = TABLES[args.table].job
    dataset = load_dataset("mnist1d", mnist1d_samples=job.get("mnist1d_samples", 10000))
    done = {(r.case, r.cluster, r.workers, r.seed) for r in rows}
    for workers in args.workers:
        for seed in args.seeds:
            for cluster, cases in TABLES[args.table].cases.items():
                for case in cases:
                    if args.cases and case not in args.cases:
                        continue
                    if (case, cluster, workers, seed) in done:
                        continue
                    row = run_one(args.table, case, cluster, workers, seed, dataset)
                    log.append(row)
                    # Rows other processes added to the same folder come in with the table.
                    rows = [row_from(Row, r) for r in log.read()]
                    save_text(out / "table.md", render(rows, args.table))
                    print(
                        f"{cluster} w{workers} s{seed} {case}: {_pct(row.final_accuracy)} in "
                        f"{row.time_s:.1f} s SIMULATED (host {row.host_time_s} s, load "
                        f"{os.getloadavg()[0]:.1f}), rollbacks {row.rollbacks}",
                        flush=True,
                    )
    save_text(out / "table.md", render(rows, args.table))
    print(render(rows, args.table))


if __name__ == "__main__":
    main()
