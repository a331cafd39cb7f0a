"""Local-update phases evaluated (issue 22): one command per table, SIMULATED or EMULATED.

    python benchmarks/local_eval.py sim    # simulator, 8 and 32 workers, 2 seeds, 2 clusters
    python benchmarks/local_eval.py ray    # Ray, 8 workers, 1 seed, 20 ms steps (EMULATED)

Each command appends one JSON line per run to OUT-<table>/runs.jsonl as the run ends and
rewrites OUT-<table>/table.md after every run; `--keep` resumes (runs already in runs.jsonl
are not run again), `--show` prints the tables without running.

sim: MNIST-1D (20,000 samples), batch 32, lr 0.2 (cosine), momentum 0.9, 20 ms steps with
jitter 0.2, divergence guard off, on the default cluster (10 GbE, 50 us) and on the
bandwidth-poor preset wan-1g (1 Gbps per worker, 25 ms one way; core/cluster/model.py says where
the numbers come from). Cases: BSP, ASP, bsp:0.25,asp, local-4, local-16, post-local
(bsp:0.25,local-16), adaptive H (bsp:0.25,local-4 with --local-steps-rule qsr) and DiLoCo
(bsp:0.25,local-16 with --outer-optimizer nesterov --outer-lr 0.7). Columns: final accuracy,
simulated time to the end, time to reach BSP's final accuracy minus 1 point, bytes the
servers received (measured as messages arrived: summary.json's traffic) and bytes per sample
in the local phase against BSP's. Under the tables: the issue's goals, PASS or FAIL.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import (
    RunLog,
    Timing,
    add_keep,
    add_out,
    check_timing,
    comma_list,
    markdown_table,
    parser,
    row_from,
    save_text,
)

from syncswitch.config import TrainConfig
from syncswitch.rundir import load_run

SIM_JOB: dict[str, Any] = {
    "runtime": "sim",
    "epochs": 20.0,
    "batch_size": 32,
    "lr": 0.2,
    "mnist1d_samples": 20000,
    "step_time_ms": 20.0,
    "jitter_sigma": 0.2,
    "eval_every": 0.05,
    "checkpoint_every": 0.0,
    "divergence_guard": False,  # compare the schedules themselves, divergence included
    "progress": False,
}
RAY_JOB: dict[str, Any] = {
    "workers": 8,
    "epochs": 20.0,
    "batch_size": 32,
    "lr": 0.2,
    "mnist1d_samples": 20000,
    "divergence_guard": False,
    "step_time_ms": 20.0,
    "eval_every": 0.05,
    "checkpoint_every": 0.0,
    "progress": False,
}

CASES: dict[str, dict[str, Any]] = {
    "bsp": {"schedule": "bsp"},
    "asp": {"schedule": "asp"},
    "bsp:0.25,asp": {"schedule": "bsp:0.25,asp"},
    "local-4": {"schedule": "local-4"},
    "local-16": {"schedule": "local-16"},
    "bsp:0.25,local-16": {"schedule": "bsp:0.25,local-16"},
    "qsr bsp:0.25,local-4": {"schedule": "bsp:0.25,local-4", "local_steps_rule": "qsr"},
    "diloco bsp:0.25,local-16": {
        "schedule": "bsp:0.25,local-16",
        "outer_optimizer": "nesterov",
        "outer_lr": 0.7,
    },
    # DiLoCo's outer step at a learning rate that undoes its momentum's gain (0.1 x 1/(1-0.9)
    # = 1): DiLoCo's 0.7 was tuned for a small inner AdamW step, ours is SGD at BSP's lr.
    "diloco lr 0.1 bsp:0.25,local-16": {
        "schedule": "bsp:0.25,local-16",
        "outer_optimizer": "nesterov",
        "outer_lr": 0.1,
    },
}
# Post-local with a smaller inner learning rate: a 32-batch step at BSP's lr (set for the
# global batch) is what knocks post-local off course at 32 workers (docs/local-updates.md).
CASES["bsp:0.25,local-16 inner lr x0.25"] = {
    "schedule": "bsp:0.25,local-16",
    "local_lr_factor": 0.25,
}
# Local SGD from the start with QSR's growing H, and local-4 at half the inner lr: the
# candidates for the wan-1g goal (within 0.5 point of BSP in half its time) at 32 workers.
CASES["qsr local-4"] = {"schedule": "local-4", "local_steps_rule": "qsr"}
CASES["local-4 inner lr x0.5"] = {"schedule": "local-4", "local_lr_factor": 0.5}
# A second round of candidates for the same goal, each estimated beforehand to end within half
# of BSP's simulated time there (docs/local-updates.md): QSR from a smaller H (short rounds
# while the learning rate is high, where local steps drift most), a short BSP phase first or
# last (to start from or end on exact global steps), and outer steps with a gain above
# plain averaging (local-4 trails BSP from the start, as an under-stepped run does).
CASES["qsr local-2"] = {"schedule": "local-2", "local_steps_rule": "qsr"}
CASES["qsr bsp:0.1,local-3"] = {"schedule": "bsp:0.1,local-3", "local_steps_rule": "qsr"}
CASES["qsr local-4:0.85,bsp"] = {"schedule": "local-4:0.85,bsp", "local_steps_rule": "qsr"}
CASES["local-4:0.95,bsp"] = {"schedule": "local-4:0.95,bsp"}
CASES["local-4 outer lr 1.5"] = {"schedule": "local-4", "outer_lr": 1.5}
CASES["diloco lr 0.1 local-4"] = {
    "schedule": "local-4",
    "outer_optimizer": "nesterov",
    "outer_lr": 0.1,
}
MAIN_CASES = tuple(CASES)[:8]  # the list; the cases added after it are run by --cases
RAY_CASES = ("bsp", "bsp:0.25,local-16", "bsp:0.25,asp")
CLUSTERS = ("default", "wan-1g")
GOAL_POINTS = 0.5  # "within 0.5 point of BSP's accuracy"
GOAL_TIME = 0.5  # "in at most half of BSP's simulated time"
TARGET_POINTS = 1.0  # the time column: to BSP's final accuracy minus 1 point


@dataclass
class LocalRow:
    table: str
    case: str
    cluster: str
    workers: int
    seed: int
    schedule: str
    timing: str  # SIMULATED or EMULATED
    final_accuracy: float | None = None
    time_s: float | None = None  # simulated seconds (sim) or wall seconds (Ray, emulated)
    host_time_s: float | None = None
    bytes_sent: int | None = None
    bytes_by_protocol: dict[str, int] = field(default_factory=dict)
    samples_by_protocol: dict[str, int] = field(default_factory=dict)
    curve: list[list[float]] = field(default_factory=list)  # [time_s, test accuracy]
    load: str = ""  # `uptime`'s load averages when the run ended (the machine is shared)
    status: str = ""


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def run_one(
    table: str, case: str, cluster: str, workers: int, seed: int, scratch: Path, dataset: Any
) -> LocalRow:
    from syncswitch.runtime.train import train

    job = SIM_JOB if table == "sim" else RAY_JOB
    values = {**job, **CASES[case], "workers": workers, "seed": seed}
    if table == "sim":
        values["cluster"] = cluster
    out = scratch / f"{table}-{cluster}-w{workers}-{case.replace(' ', '_')}-s{seed}"
    values["out"] = str(out)
    config = TrainConfig(**values)
    started = time.perf_counter()
    result = train(config, dataset=dataset, print_summary=False)
    host_s = time.perf_counter() - started
    summary = result.summary
    metrics = load_run(out).metrics
    traffic = summary.traffic or {}
    row = LocalRow(
        table=table,
        case=case,
        cluster=cluster,
        workers=workers,
        seed=seed,
        schedule=config.schedule,
        timing="SIMULATED" if table == "sim" else "EMULATED",
        final_accuracy=summary.final_value,
        time_s=summary.wall_time_s,
        host_time_s=round(host_s, 2),
        bytes_sent=traffic.get("bytes_sent"),
        bytes_by_protocol=dict(traffic.get("bytes_by_protocol", {})),
        samples_by_protocol=dict(summary.samples_by_protocol),
        curve=[[float(t), float(a)] for t, a in zip(metrics.time_s, metrics.value, strict=True)],
        load=load_average(),
        status=summary.status,
    )
    shutil.rmtree(out, ignore_errors=True)  # the row keeps what the tables need
    return row


# -- tables --------------------------------------------------------------------------------------


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def time_to(curve: list[list[float]], target: float) -> float | None:
    """The first evaluation time at which accuracy reached `target` (None: never)."""
    return next((t for t, a in curve if a >= target), None)


def per_sample(row: LocalRow, protocol: str) -> float | None:
    samples = row.samples_by_protocol.get(protocol)
    sent = row.bytes_by_protocol.get(protocol)
    return sent / samples if samples and sent is not None else None


@dataclass
class CaseMeans:
    accuracy: float | None
    time_s: float | None
    to_target_s: float | None
    reached: str  # "2/2": seeds that reached the target
    bytes_sent: float | None
    local_bytes_ratio: float | None  # BSP bytes per sample / local bytes per sample
    runs: int
    load: str


def case_means(rows: list[LocalRow], bsp_rows: list[LocalRow]) -> CaseMeans:
    bsp_final = _mean([r.final_accuracy for r in bsp_rows])
    target = None if bsp_final is None else bsp_final - TARGET_POINTS / 100
    reached = [time_to(r.curve, target) if target is not None else None for r in rows]
    bsp_per_sample = _mean([per_sample(r, "bsp") for r in bsp_rows])
    local = _mean([per_sample(r, "local") for r in rows])
    return CaseMeans(
        accuracy=_mean([r.final_accuracy for r in rows]),
        time_s=_mean([r.time_s for r in rows]),
        to_target_s=_mean(reached) if all(t is not None for t in reached) else None,
        reached=f"{sum(t is not None for t in reached)}/{len(rows)}",
        bytes_sent=_mean([float(r.bytes_sent) if r.bytes_sent is not None else None for r in rows]),
        local_bytes_ratio=(bsp_per_sample / local) if bsp_per_sample and local else None,
        runs=len(rows),
        load=", ".join(sorted({r.load for r in rows})),
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _bytes(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.1f} MB"


def tables(rows: list[LocalRow], table: str, cases: tuple[str, ...]) -> str:
    kind = Timing.SIMULATED if table == "sim" else Timing.EMULATED
    lines: list[str] = []
    groups = sorted({(r.cluster, r.workers) for r in rows if r.table == table})
    for cluster, workers in groups:
        mine = [
            r for r in rows if r.table == table and (r.cluster, r.workers) == (cluster, workers)
        ]
        bsp_rows = [r for r in mine if r.case == "bsp"]
        seeds = sorted({r.seed for r in mine})
        where = f"{cluster} cluster" if table == "sim" else "one machine"
        title = check_timing(
            f"{kind.value} times, {where}, {workers} workers, seeds {','.join(map(str, seeds))}",
            kind,
        )
        lines += [f"### {title}", ""]
        body = []
        for case in cases:
            case_rows = [r for r in mine if r.case == case]
            if not case_rows:
                continue
            m = case_means(case_rows, bsp_rows)
            body.append(
                [
                    case,
                    _pct(m.accuracy),
                    _secs(m.time_s),
                    f"{_secs(m.to_target_s)} ({m.reached})",
                    _bytes(m.bytes_sent),
                    "-" if m.local_bytes_ratio is None else f"{m.local_bytes_ratio:.1f}x",
                    m.runs,
                ]
            )
        lines += markdown_table(
            [
                "case",
                "final accuracy",
                "time to end (s)",
                "time to BSP-1pt (s) (seeds reaching)",
                "bytes sent (as received)",
                "bytes/sample: BSP / local phase",
                "runs",
            ],
            body,
        )
        ones = [float(r.load.split()[0]) for r in mine if r.load and r.load != "?"]
        if ones:
            lines += [
                "",
                f"1-minute load average when the runs ended (2 cores shared with other work): "
                f"{min(ones):.1f}-{max(ones):.1f}; "
                + (
                    "SIMULATED times do not depend on it."
                    if kind is Timing.SIMULATED
                    else "EMULATED times include waiting for a core: one noisy run each."
                ),
            ]
        lines.append("")
    return "\n".join(lines)


GOAL_GROUP = ("wan-1g", 32)  # the time/accuracy goal's cluster and workers
BSP_THEN_ASP = "bsp:0.25,asp"  # the goal's report shows the passing schedules beside it


@dataclass
class WanGoal:
    bsp_accuracy: float
    bsp_time_s: float
    passing: list[tuple[str, float, float]]  # (case, mean accuracy, time / BSP's time)


def wan_goal(rows: list[LocalRow]) -> WanGoal | None:
    """The first goal on the rows run (None before BSP ran there): the schedules with a
    local phase whose mean accuracy is within GOAL_POINTS of BSP's in GOAL_TIME of its time."""
    poor = [r for r in rows if r.table == "sim" and (r.cluster, r.workers) == GOAL_GROUP]
    bsp = [r for r in poor if r.case == "bsp"]
    bsp_acc, bsp_time = _mean([r.final_accuracy for r in bsp]), _mean([r.time_s for r in bsp])
    if bsp_acc is None or bsp_time is None:
        return None
    passing = []
    for case in CASES:
        if "local" not in case:
            continue
        mine = [r for r in poor if r.case == case]
        acc, spent = _mean([r.final_accuracy for r in mine]), _mean([r.time_s for r in mine])
        if acc is None or spent is None:
            continue
        if acc >= bsp_acc - GOAL_POINTS / 100 and spent <= GOAL_TIME * bsp_time:
            passing.append((case, acc, spent / bsp_time))
    return WanGoal(bsp_acc, bsp_time, passing)


def goals(rows: list[LocalRow]) -> str:
    """The issue's goals, on what was run."""
    out = ["### Goals", ""]
    sims = [r for r in rows if r.table == "sim"]
    goal = wan_goal(rows)
    if goal is not None:
        passing = [f"{case} ({_pct(acc)} in {ratio:.2f}x BSP's time)"
                   for case, acc, ratio in goal.passing]  # fmt: skip
        out.append(
            f"- wan-1g, 32 workers: a schedule with a local phase within {GOAL_POINTS} point of "
            f"BSP ({_pct(goal.bsp_accuracy)}) in at most half its time "
            f"({_secs(goal.bsp_time_s)} s): {'PASS' if passing else 'FAIL'}"
            + (f": {'; '.join(passing)}" if passing else "")
        )
    else:
        out.append("- wan-1g, 32 workers: not run yet")
    ratios = []
    for r in sims:
        steps = _local_steps(r.schedule)
        bsp_rows = [
            b for b in sims if b.case == "bsp" and (b.cluster, b.workers) == (r.cluster, r.workers)
        ]
        bsp_ps = _mean([per_sample(b, "bsp") for b in bsp_rows])
        local_ps = per_sample(r, "local")
        if steps and bsp_ps and local_ps and r.case != "qsr bsp:0.25,local-4":
            ratios.append((r.case, steps, bsp_ps / local_ps))
    if ratios:
        worst = min(ratios, key=lambda x: x[2] / x[1])
        ok = all(ratio >= steps / 2 for _, steps, ratio in ratios)
        out.append(
            f"- bytes per sample fall by at least H/2 in local-H phases (measured): "
            f"{'PASS' if ok else 'FAIL'}; worst {worst[0]}: {worst[2]:.1f}x for H = {worst[1]}"
        )
    return "\n".join(out)


def _local_steps(schedule: str) -> int | None:
    last = schedule.split(",")[-1].split(":")[0]
    return int(last.removeprefix("local-")) if last.startswith("local-") else None


def plot(rows: list[LocalRow], path: Path, title: str) -> None:
    """Test accuracy against time, one line per case (the mean curve over seeds), one panel
    per (cluster, workers): what the tables summarise. In the goal's panel (wan-1g, 32
    workers) the schedules that meet it are drawn bold beside BSP and BSP-then-ASP, the rest
    faint, with the goal's bounds dotted (BSP's accuracy - 0.5 point, half its time)."""
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = sorted({(r.cluster, r.workers) for r in rows})
    if not groups:
        return
    figure = Figure(figsize=(6 * len(groups), 4.5))
    FigureCanvasAgg(figure)
    for index, (cluster, workers) in enumerate(groups, start=1):
        axes = figure.add_subplot(1, len(groups), index)
        mine = [r for r in rows if (r.cluster, r.workers) == (cluster, workers)]
        goal = wan_goal(rows) if (cluster, workers) == GOAL_GROUP else None
        passing = [case for case, _, _ in goal.passing] if goal is not None else []
        bold = {"bsp", BSP_THEN_ASP, *passing} if passing else set()
        if goal is not None and passing:
            axes.axhline(goal.bsp_accuracy - GOAL_POINTS / 100, color="grey", linestyle=":")
            axes.axvline(GOAL_TIME * goal.bsp_time_s, color="grey", linestyle=":")
        for number, case in enumerate(CASES):
            curves = [r.curve for r in mine if r.case == case and r.curve]
            if not curves:
                continue
            points = min(len(c) for c in curves)
            times = [statistics.mean(c[i][0] for c in curves) for i in range(points)]
            accuracy = [statistics.mean(c[i][1] for c in curves) for i in range(points)]
            # tab20: one colour per case (the default cycle repeats after ten).
            color = colormaps["tab20"](number % 20)
            style = "-" if number < 8 else "--"  # the cases solid, the added dashed
            width, alpha = (2.2, 1.0) if case in bold else (1.2, 0.35 if bold else 1.0)
            if case in passing:
                style = "-"  # a passing case stands out however late it was added
            axes.plot(times, accuracy, style, color=color, label=case, linewidth=width,
                      alpha=alpha)  # fmt: skip
        axes.set_title(f"{cluster}, {workers} workers", fontsize=9)
        axes.set_xlabel(f"{title} time (s)")
        axes.set_ylabel("test accuracy")
        axes.set_ylim(0, 1)
        axes.grid(alpha=0.3)
    figure.axes[0].legend(fontsize=6, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    p = parser(__doc__, epilog=True)
    p.add_argument("table", choices=("sim", "ray"))
    add_out(p, None, "results folder (default benchmarks/results/local-<table>)")
    add_keep(p)
    p.add_argument("--show", action="store_true", help="print the tables without running")
    p.add_argument("--workers", type=comma_list, default=None, help="sim: e.g. 8,32")
    p.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (sim 2, ray 1)")
    p.add_argument("--clusters", type=comma_list, default=list(CLUSTERS), help="sim clusters")
    p.add_argument(
        "--cases",
        type=lambda text: text.split(";"),
        default=None,
        help="cases to run, separated by ';' (default: the issue's list)",
    )
    p.add_argument("--epochs", type=float, default=None, help="epochs instead of 20")
    args = p.parse_args()
    out = args.out or Path(__file__).parent / "results" / f"local-{args.table}"
    log = RunLog(out / "runs.jsonl")
    rows = [row_from(LocalRow, r) for r in log.read()] if (args.keep or args.show) else []
    if not (args.keep or args.show):
        log.clear()
    cases = tuple(args.cases or (MAIN_CASES if args.table == "sim" else RAY_CASES))
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        p.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    if args.epochs is not None:
        SIM_JOB["epochs"] = RAY_JOB["epochs"] = args.epochs

    def report() -> None:
        text = tables(rows, args.table, tuple(CASES)) + "\n" + goals(rows) + "\n"
        save_text(out / "table.md", text)
        kind = "SIMULATED" if args.table == "sim" else "EMULATED"
        plot([r for r in rows if r.table == args.table], out / "accuracy.png", kind)

    if args.show:
        report()  # table.md rewritten from runs.jsonl (several processes may have added rows)
        print(tables(rows, args.table, tuple(CASES)) + "\n" + goals(rows))
        return
    from syncswitch.workloads import load_dataset

    dataset = load_dataset("mnist1d", mnist1d_samples=SIM_JOB["mnist1d_samples"])
    done = {(r.case, r.cluster, r.workers, r.seed) for r in rows}
    workers_list = [int(w) for w in (args.workers or ([8, 32] if args.table == "sim" else [8]))]
    seeds = args.seeds if args.seeds is not None else (2 if args.table == "sim" else 1)
    clusters = args.clusters if args.table == "sim" else ["local"]
    with tempfile.TemporaryDirectory(prefix="local-eval-") as scratch:
        # Cheapest first: every table fills in before the 32-worker runs.
        for workers in workers_list:
            for cluster in clusters:
                for seed in range(seeds):
                    for case in cases:
                        if (case, cluster, workers, seed) in done:
                            continue
                        row = run_one(args.table, case, cluster, workers, seed, Path(scratch),
                                      dataset)  # fmt: skip
                        log.append(row)
                        rows.append(row)
                        report()
                        print(
                            f"{args.table} {cluster} w{workers} s{seed} {case}: "
                            f"{_pct(row.final_accuracy)} in {_secs(row.time_s)} s "
                            f"(host {row.host_time_s} s, load {row.load})",
                            flush=True,
                        )
    report()
    print(tables(rows, args.table, tuple(CASES)) + "\n" + goals(rows))


if __name__ == "__main__":
    main()
