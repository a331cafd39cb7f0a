"""Simulator validation: predict Ray runs it never saw from a model calibrated on one or two.

Trains a list of jobs on Ray (EMULATED 20 ms steps on this machine): the calibration runs
(marked *), held-out runs that differ in schedule (SSP and ASP-first among them), seed,
worker count (2 to 16), jitter and stragglers, and one run measured three times (the
reference's own repeatability). Then fits a cluster model to the calibration runs alone
(`syncswitch calibrate`: nodes, host CPU per role, latency) and simulates every job with it.
Prints predicted against measured: wall time (Ray: measured seconds of training; simulator:
SIMULATED seconds), mean and p90 staleness of asynchronous gradients, final accuracy, and the
machine's load (`os.getloadavg`, 1 minute) when each Ray run ended. Writes OUT/runs.jsonl
(one line per run, as it ends), OUT/cluster.yaml, OUT/calibration.json and OUT/table.md.

    python benchmarks/sim_validation.py            # the table in docs/simulator.md
    python benchmarks/sim_validation.py --reuse-ray   # predict again from the kept Ray runs
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from harness import (
    RunLog,
    Timing,
    add_out,
    check_timing,
    markdown_table,
    parser,
    read_summary,
    save_text,
)

from syncswitch.calibration import calibrate, cluster_yaml
from syncswitch.config import TrainConfig
from syncswitch.rundir import Summary, load_run
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

CALIBRATE, HELD_OUT, REPEAT = "calibration", "held-out", "repeat"
# A straggler episode: worker 2 three times slower for 30% of the training, inside BSP.
_STRAGGLER = [{"workers": [2], "start": 0.1, "duration": 0.3, "factor": 3.0}]


@dataclass(frozen=True)
class Case:
    """One job of the list: how it differs from the base job, and its role."""

    name: str
    role: str
    workers: int
    schedule: str
    seed: int = 0
    jitter_sigma: float = 0.0
    stragglers: list[dict[str, Any]] | None = None
    same_as: str | None = None  # a repeat: the case whose job it measures again
    servers: int = 1  # --servers (benchmarks/sim_validation_large.py's sharded cases)


CASES = (
    Case("8w hybrid s0", CALIBRATE, 8, "bsp:0.25,asp"),
    # 16 workers, half BSP: their ASP phase starts from a trained model (at a quarter, the
    # first try's replay diverged and rolled back where the Ray run had not).
    Case("16w bsp:0.5,asp s0", CALIBRATE, 16, "bsp:0.5,asp"),
    Case("8w bsp s0", HELD_OUT, 8, "bsp"),
    Case("8w asp s1", HELD_OUT, 8, "asp", seed=1),
    Case("8w ssp-3 s0", HELD_OUT, 8, "ssp-3"),
    Case("8w asp-first s0", HELD_OUT, 8, "asp:0.25,bsp"),
    Case("8w hybrid s0 (repeat 2)", REPEAT, 8, "bsp:0.25,asp", same_as="8w hybrid s0"),
    Case("2w hybrid s0", HELD_OUT, 2, "bsp:0.25,asp"),
    Case("4w hybrid s1", HELD_OUT, 4, "bsp:0.25,asp", seed=1),
    Case("12w bsp:0.5,asp s0", HELD_OUT, 12, "bsp:0.5,asp"),
    Case("16w asp s1", HELD_OUT, 16, "asp", seed=1),
    Case("8w hybrid jitter 0.2", HELD_OUT, 8, "bsp:0.25,asp", jitter_sigma=0.2),
    Case("8w bsp:0.5,asp straggler", HELD_OUT, 8, "bsp:0.5,asp", stragglers=_STRAGGLER),
    Case("8w hybrid s0 (repeat 3)", REPEAT, 8, "bsp:0.25,asp", same_as="8w hybrid s0"),
)


@dataclass
class Facts:
    """One run's figures, measured on Ray or predicted by the simulator (a runs.jsonl line)."""

    case: str
    role: str
    runtime: str
    workers: int
    schedule: str
    seed: int
    wall_time_s: float
    final_accuracy: float
    staleness_mean: float | None
    staleness_p90: float | None
    load_1m: float | None = None  # os.getloadavg() when the Ray run ended
    load_before_1m: float | None = None
    host_time_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--epochs", type=float, default=20.0)
    cli.add_argument("--step-time-ms", type=float, default=20.0)
    cli.add_argument("--mnist1d-samples", type=int, default=10000)
    add_out(cli, "benchmarks/results/sim-validation-nodes")
    cli.add_argument(
        "--reuse-ray", action="store_true", help="keep complete Ray runs from an earlier try"
    )
    cli.add_argument("--only", help="comma-separated case names to run (a quick check)")
    args = cli.parse_args()

    cases = [c for c in CASES if not args.only or c.name in args.only.split(",")]
    out = args.out
    runs = out / "runs"
    if not args.reuse_ray:
        shutil.rmtree(runs, ignore_errors=True)
    runs.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset("mnist1d", mnist1d_samples=args.mnist1d_samples)
    log = RunLog(out / "runs.jsonl")
    log.clear()
    measured = _measure_on_ray(args, cases, runs, dataset, log)
    basis = [runs / _dir("ray", c) for c in cases if c.role == CALIBRATE]
    model, report = calibrate(basis)
    (out / "cluster.yaml").write_text(cluster_yaml(model))
    save_text(
        out / "calibration.json",
        json.dumps(
            {
                "runs": report["runs"],
                "worst_error": report["worst_error"],
                "replays": [r.to_plain() for r in report["replays"]],
                "host_cpu_ms": report["host_cpu_ms"],
                "refine_rounds": report["refine_rounds"],
            },
            indent=1,
        )
        + "\n",
    )
    print(f"calibrated on {[b.name for b in basis]}: worst replay error "
          f"{100 * report['worst_error']:.1f}%", flush=True)  # fmt: skip
    predicted = {}
    for case in cases:
        if case.same_as:
            continue
        config = _config(args, case, runs / _dir("sim", case))
        shutil.rmtree(config.out or "", ignore_errors=True)
        cluster = out / "cluster.yaml"
        if case.jitter_sigma:
            # The job's own jitter on top of the spread the calibration found (independent
            # lognormal factors: their sigmas add in quadrature).
            sigma = float(np.hypot(model.compute.jitter_sigma, case.jitter_sigma))
            jittered = model.with_compute(replace(model.compute, jitter_sigma=round(sigma, 4)))
            cluster = runs / f"cluster-{_dir('sim', case)}.yaml"
            cluster.write_text(cluster_yaml(jittered))
        config = TrainConfig(
            **{
                **config.to_plain(),
                "runtime": "sim",
                "cluster": str(cluster),
                "step_time_ms": 0.0,
                "jitter_sigma": 0.0,
            }
        )
        summary = train(config, dataset=dataset, print_summary=False).summary
        predicted[case.name] = _facts(case, "sim", summary, Path(config.out or ""))
        log.append(predicted[case.name])
        print(f"sim {case.name}: {predicted[case.name]}", flush=True)
    table = _table(args, cases, measured, predicted)
    save_text(out / "table.md", table + "\n")
    print(table)


def _measure_on_ray(args, cases: list[Case], runs: Path, dataset, log: RunLog) -> dict:
    from syncswitch.runtime.ray.connect import start_local

    start_local(max(c.workers for c in cases) + 4)
    if not args.reuse_ray:
        # A fresh Ray instance runs its first job slower (its own processes still starting):
        # one short run, not measured, takes that.
        warm = Case("warm-up", "warm-up", 8, "asp")
        train(
            _config(args, warm, runs / "warm-up", epochs=2.0), dataset=dataset, print_summary=False
        )
    measured = {}
    for case in cases:
        config = _config(args, case, runs / _dir("ray", case))
        summary = _earlier(Path(config.out or "")) if args.reuse_ray else None
        before = os.getloadavg()[0]
        if summary is None:
            shutil.rmtree(config.out or "", ignore_errors=True)
            summary = train(config, dataset=dataset, print_summary=False).summary
        facts = _facts(case, "ray", summary, Path(config.out or ""))
        facts.load_before_1m, facts.load_1m = round(before, 2), round(os.getloadavg()[0], 2)
        measured[case.name] = facts
        log.append(facts)
        print(f"ray {case.name}: {facts}", flush=True)
    import ray

    ray.shutdown()  # the simulator needs no Ray; its cores go back to the simulations
    return measured


def _config(args, case: Case, out: Path, epochs: float | None = None) -> TrainConfig:
    return TrainConfig(
        workers=case.workers,
        schedule=case.schedule,
        epochs=epochs or args.epochs,
        seed=case.seed,
        mnist1d_samples=args.mnist1d_samples,
        step_time_ms=args.step_time_ms,
        jitter_sigma=case.jitter_sigma,
        stragglers=case.stragglers,
        progress=False,
        out=str(out),
    )


def _dir(runtime: str, case: Case) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in case.name)
    return f"{runtime}-{safe}"


def _earlier(run_dir: Path) -> Summary | None:
    """The summary of a complete Ray run kept from an earlier try (--reuse-ray), or None."""
    try:
        summary = read_summary(run_dir)
    except FileNotFoundError:
        return None
    if not summary.complete:
        raise SystemExit(f"{run_dir} is not complete: rerun without --reuse-ray")
    return summary


def _facts(case: Case, runtime: str, summary: Summary, run_dir: Path) -> Facts:
    counts = load_run(run_dir).staleness_counts
    staleness = np.concatenate(
        [np.repeat(list(c), list(c.values())) for p, c in counts.items() if p != "bsp" and c]
        or [np.array([])]
    )
    return Facts(
        case=case.same_as or case.name,
        role=case.role,
        runtime=runtime,
        workers=case.workers,
        schedule=summary.schedule,
        seed=case.seed,
        wall_time_s=summary.wall_time_s,
        final_accuracy=summary.final_value,
        staleness_mean=float(np.mean(staleness)) if len(staleness) else None,
        staleness_p90=float(np.percentile(staleness, 90)) if len(staleness) else None,
        host_time_s=summary.host_time_s if runtime == "sim" else None,
    )


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _table(args, cases: list[Case], measured: dict, predicted: dict) -> str:
    title = (
        f"MNIST-1D ({args.mnist1d_samples} samples), {args.epochs:g} epochs, batch 32. Ray: "
        f"EMULATED {args.step_time_ms:g} ms steps on this 2-core machine, measured wall "
        "seconds of training. Simulator: SIMULATED seconds under the cluster model calibrated "
        "on the runs marked * alone; every other row is a prediction. Load: the machine's "
        "1-minute load average before / after the Ray run."
    )
    columns = (
        "run",
        "wall s Ray",
        "wall s sim",
        "error",
        "mean staleness Ray / sim",
        "error",
        "p90 staleness Ray / sim",
        "error",
        "accuracy % Ray / sim",
        "diff (pt)",
        "load",
    )
    rows = []
    held: dict[str, list[float]] = {"wall": [], "stale": [], "acc": []}
    for case in cases:
        m = measured.get(case.name)
        p = predicted.get(case.same_as or case.name)
        if m is None or p is None:
            continue
        wall = _error(p.wall_time_s, m.wall_time_s)
        stale = _error(p.staleness_mean, m.staleness_mean)
        diff = 100 * (p.final_accuracy - m.final_accuracy)
        if case.role == HELD_OUT:
            held["wall"].append(abs(wall or 0.0))
            held["acc"].append(abs(diff))
            if stale is not None:
                held["stale"].append(abs(stale))
        mark = "*" if case.role == CALIBRATE else ""
        rows.append(
            (
                f"{case.name}{mark}",
                f"{m.wall_time_s:.2f}",
                f"{p.wall_time_s:.2f}",
                _pct(wall),
                f"{_fmt(m.staleness_mean)} / {_fmt(p.staleness_mean)}",
                _pct(stale),
                f"{_fmt(m.staleness_p90)} / {_fmt(p.staleness_p90)}",
                _pct(_error(p.staleness_p90, m.staleness_p90)),
                f"{100 * m.final_accuracy:.2f} / {100 * p.final_accuracy:.2f}",
                f"{diff:+.2f}",
                f"{_fmt(m.load_before_1m)} / {_fmt(m.load_1m)}",
            )
        )
    check_timing(title, Timing.EMULATED, Timing.SIMULATED)
    lines = [title, "", *markdown_table(columns, rows), ""]
    repeats = [measured[c.name].wall_time_s for c in cases if c.name in measured and (
        c.same_as == "8w hybrid s0" or c.name == "8w hybrid s0")]  # fmt: skip
    if len(repeats) > 1:
        mean = statistics.mean(repeats)
        lines.append(
            f"- Repeatability of the reference: the same Ray job (`8w hybrid s0`) measured "
            f"{len(repeats)} times took {', '.join(f'{r:.2f}' for r in repeats)} s: spread "
            f"{100 * (max(repeats) - min(repeats)) / mean:.1f}% of the mean, standard "
            f"deviation {100 * statistics.pstdev(repeats) / mean:.1f}%."
        )
    if held["wall"]:
        median = statistics.median(held["wall"])
        worst = max(held["wall"])
        lines.append(
            f"- Held-out wall time ({len(held['wall'])} runs): median absolute error "
            f"{100 * median:.1f}% (goal <= 5%: {'met' if median <= 0.05 else 'NOT met'}), "
            f"largest {100 * worst:.1f}% (goal every run <= 10%: "
            f"{'met' if worst <= 0.10 else 'NOT met'})."
        )
        lines.append(
            f"- Held-out accuracy: largest difference {max(held['acc']):.2f} points (goal <= 1: "
            f"{'met' if max(held['acc']) <= 1 else 'NOT met'}); mean staleness: largest error "
            f"{100 * max(held['stale'] or [0.0]):.1f}% (goal <= 10%: "
            f"{'met' if max(held['stale'] or [0.0]) <= 0.10 else 'NOT met'})."
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
