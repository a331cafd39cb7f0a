"""Online timing across jobs (issue 33 item 6): one rule, three jobs, 8-32 workers, SIMULATED.

    python benchmarks/online_transfer.py record    # BSP runs that record the signals
    python benchmarks/online_transfer.py grid      # fixed shares 0.25, 0.5, 0.75 of BSP
    python benchmarks/online_transfer.py online    # the default online rule, end to end
    python benchmarks/online_transfer.py replay    # rule variants replayed on the recordings
    python benchmarks/online_transfer.py table     # BSP against online (and the grid)

Defaults: all three jobs, 8, 16 and 32 workers, seeds 0-2 (the committed grid is
`--jobs regression,sequence`).

The jobs: the scale study's MNIST-1D (benchmarks/online_eval.py SIM_JOB), and the regression
and sequence examples' jobs (examples/regression.py, examples/sequence.py: their data, model,
batch, lr and epochs), all on the simulator's default cluster with the scale study's 20 ms
steps and jitter 0.2, divergence guard off. `record` runs BSP with the online phase held to
the end (no rule can fire: the staleness rule at its largest threshold, the ceiling at
0.999), so each run is both BSP's reference and a recording of the signals the rule reads at
every check (timing_signals.csv, kept under OUT/signals/). `replay` then asks rule variants
where they would have left BSP without training again. Every run appends one line to
OUT/runs.jsonl; `--keep` skips runs already there.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import itertools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.nn.functional as F
from online_eval import SIM_JOB

from syncswitch.config import TrainConfig
from syncswitch.config.limits import MAX_SWITCH_THRESHOLD
from syncswitch.core.timing.rules import GradientPoint, ShareBounds, StalenessNoiseRule, decide
from syncswitch.runtime.train import train

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import regression  # noqa: E402  (examples/regression.py: its dataset and model)
import sequence  # noqa: E402

OUT = ROOT / "benchmarks/results/online-transfer"
CLUSTER: dict[str, Any] = {
    "runtime": "sim",
    "step_time_ms": 20.0,
    "jitter_sigma": 0.2,
    "eval_every": 0.05,
    "checkpoint_every": 0.0,
    "divergence_guard": False,
    "progress": False,
}
# Held BSP: an online phase no rule ends before 0.999 of training (BSP, with its signals):
# the staleness rule at its largest threshold never sees its ratio above it, so never arms.
HELD = {"schedule": "online", "switch_rule": "staleness"}
HELD_LIMITS = {"switch_threshold": MAX_SWITCH_THRESHOLD, "switch_ceiling": 0.999}


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    fields: dict[str, Any]  # TrainConfig fields besides the cluster's
    data: Callable[[], dict[str, Any]]  # train()'s data keywords
    tolerance: str  # "points" (accuracy, within 0.5 point) or "relative" (loss, within 2%)


def _mnist1d() -> dict[str, Any]:
    from syncswitch.workloads import load_dataset

    return {"dataset": load_dataset("mnist1d", mnist1d_samples=SIM_JOB["mnist1d_samples"])}


def _regression() -> dict[str, Any]:
    return {
        "model_factory": regression.make_model,
        "train_data": functools.partial(regression.LinearTargets, 4096, seed=1),
        "val_data": functools.partial(regression.LinearTargets, 512, seed=2),
        "loss_fn": F.mse_loss,
        "metrics": {"mse": regression.mse},
        "primary_metric": "mse",
        "dataset_name": "linear-targets",
    }


def _sequence() -> dict[str, Any]:
    return {
        "model_factory": sequence.Tagger,
        "train_data": functools.partial(sequence.DelayedCopy, 4096, seed=1),
        "val_data": functools.partial(sequence.DelayedCopy, 512, seed=2),
        "dataset_name": "delayed-copy",
    }


_MNIST = {k: v for k, v in SIM_JOB.items() if k not in CLUSTER}
JOBS = {
    "mnist1d": Job("mnist1d", _MNIST, _mnist1d, "points"),
    "regression": Job(
        "regression", {"epochs": 5.0, "batch_size": 32, "lr": 0.05}, _regression, "relative"
    ),
    "sequence": Job("sequence", {"epochs": 6.0, "batch_size": 32, "lr": 0.5}, _sequence, "points"),
}
CASES = {"bsp": HELD, "online": {"schedule": "online"}}
# Fixed BSP shares: what each share would have ended at, to read a replayed share against.
GRID = ("bsp:0.25,asp", "bsp:0.5,asp", "bsp:0.75,asp")
CASES.update({share: {"schedule": share} for share in GRID})


def run_one(job: Job, case: str, workers: int, seed: int, out: Path, data: dict[str, Any]) -> dict:
    fields = {**CLUSTER, **job.fields, **CASES[case], "workers": workers, "seed": seed}
    if case == "bsp":
        fields.update(HELD_LIMITS)
    scratch = Path(tempfile.mkdtemp(prefix="transfer-"))
    started = time.perf_counter()
    try:
        summary = train(
            TrainConfig(**fields, out=str(scratch / "run")), **data, print_summary=False
        ).summary
        signals = scratch / "run" / "timing_signals.csv"
        name = f"{job.name}-w{workers}-s{seed}-{case}.csv"
        if signals.is_file():
            (out / "signals").mkdir(parents=True, exist_ok=True)
            shutil.copy(signals, out / "signals" / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    timing = summary.online_timing
    return {
        "job": job.name,
        "case": case,
        "workers": workers,
        "seed": seed,
        "timing": "SIMULATED",
        "metric": summary.metric.name,
        "higher_is_better": summary.metric.higher_is_better,
        "final_value": summary.final_value,
        "validation": summary.validation,
        "time_s": summary.wall_time_s,
        "host_time_s": round(time.perf_counter() - started, 1),
        "share": _share(case, timing.at_fraction if timing is not None else None),
        "reason": timing.reason if timing is not None else "",
        "describe": timing.describe if timing is not None else "",
    }


def _share(case: str, online_at: float | None) -> float:
    if case == "online":
        return online_at if online_at is not None else 1.0
    return float(case.split(":")[1].split(",")[0]) if case in GRID else 1.0


def read_runs(out: Path) -> list[dict[str, Any]]:
    path = out / "runs.jsonl"
    return [json.loads(line) for line in path.open()] if path.is_file() else []


def run_cases(args: argparse.Namespace, cases: tuple[str, ...]) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    done = {(r["job"], r["case"], r["workers"], r["seed"]) for r in read_runs(out)}
    for job_name in args.jobs.split(","):
        job = JOBS[job_name]
        data = job.data()
        for workers in _ints(args.workers):
            for seed, case in itertools.product(_ints(args.seeds), cases):
                if args.keep and (job.name, case, workers, seed) in done:
                    continue
                row = run_one(job, case, workers, seed, out, data)
                with (out / "runs.jsonl").open("a") as log:
                    log.write(json.dumps(row) + "\n")
                print(
                    f"{job.name} {case} w{workers} s{seed}: {row['metric']} "
                    f"{row['final_value']:.4f} share {row['share']:.3f} "
                    f"{row['time_s']:.1f} s SIMULATED ({row['host_time_s']} s host) "
                    f"{row['reason']}",
                    flush=True,
                )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


# -- replay --------------------------------------------------------------------------------------


def recorded_points(path: Path, batch: int) -> list[GradientPoint]:
    """The points a run's checks saw, back from its timing_signals.csv."""

    def number(text: str) -> float | None:
        return float(text) if text else None

    points = []
    for row in csv.DictReader(path.open()):
        if not row["noise_trace"]:
            continue
        points.append(
            GradientPoint(
                progress=float(row["fraction"]),
                workers=int(path.name.split("-w")[1].split("-")[0]),
                worker_batch=float(batch),
                noise_trace=float(row["noise_trace"]),
                grad_sq=float(row["grad_sq"]),
                drift_sq=number(row["drift_sq"]),
                drift_stderr=number(row.get("drift_stderr", "")),
                drift_rounds=int(float(row.get("drift_rounds") or 0)),
            )
        )
    return points


def replay_share(rule: Any, points: list[GradientPoint], bounds: ShareBounds) -> float:
    """Where the rule would have ended BSP on these checks (the ceiling if never)."""
    for end in range(1, len(points) + 1):
        progress = points[end - 1].progress
        if progress >= bounds.ceiling:
            break
        if decide(rule, points[:end], progress, bounds).switch:
            return progress
    return bounds.ceiling


# The rule variants replayed: the rule before issue 33 (no confidence, no noise condition),
# then each addition, and their settings' neighbours.
BEFORE = {"threshold": 0.15, "confidence": 0.0, "min_drift_rounds": 0, "min_noise_scale": 0.0}
VARIANTS: dict[str, dict[str, Any]] = {
    "before": BEFORE,
    "n1": {**BEFORE, "min_noise_scale": 1.0},
    "z2": {"threshold": 0.15, "min_noise_scale": 0.0},
    "z1": {"threshold": 0.15, "confidence": 1.0, "min_noise_scale": 0.0},
    "z2 t.3": {"threshold": 0.3, "min_noise_scale": 0.0},
    "z2+n1": {"threshold": 0.15},
    "z2+n1 t.25 (default)": {},
    "z2+n1 t.3": {"threshold": 0.3},
    "z2+n1 t.4": {"threshold": 0.4},
    "z1+n1 t.2": {"threshold": 0.2, "confidence": 1.0},
    "z2+n.5 t.3": {"threshold": 0.3, "min_noise_scale": 0.5},
    "z2+n2 t.3": {"threshold": 0.3, "min_noise_scale": 2.0},
}


def replay(args: argparse.Namespace) -> None:
    out = Path(args.out)
    rules = {name: StalenessNoiseRule(**fields) for name, fields in VARIANTS.items()}
    bounds = ShareBounds()
    print("| recording | " + " | ".join(rules) + " |")
    print("|---|" + "---|" * len(rules))
    for path in sorted((out / "signals").glob("*-bsp.csv")):
        job = JOBS[path.name.split("-w")[0]]
        points = recorded_points(path, int(job.fields["batch_size"]))
        shares = [f"{replay_share(rule, points, bounds):.3f}" for rule in rules.values()]
        print(f"| {path.stem} | " + " | ".join(shares) + " |")


# -- table ---------------------------------------------------------------------------------------


def table(args: argparse.Namespace) -> str:
    runs = read_runs(Path(args.out))
    bsp = {(r["job"], r["workers"], r["seed"]): r for r in runs if r["case"] == "bsp"}
    lines = [
        "| job | workers | seed | metric | BSP value | online value | online behind BSP "
        "| within | share | BSP time | online time | timing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted((r for r in runs if r["case"] == "online"), key=_order):
        ref = bsp.get((r["job"], r["workers"], r["seed"]))
        if ref is None:
            continue
        gap, within = _gap(JOBS[r["job"]], ref, r)
        lines.append(
            f"| {r['job']} | {r['workers']} | {r['seed']} | {r['metric']} | "
            f"{ref['final_value']:.4f} | {r['final_value']:.4f} | {gap} | "
            f"{'yes' if within else 'NO'} | {r['share']:.3f} | {ref['time_s']:.1f} s | "
            f"{r['time_s']:.1f} s | SIMULATED |"
        )
    return "\n".join(lines)


def means(args: argparse.Namespace) -> str:
    """Per job and worker count: BSP's and online's mean, the gap, and the runs within."""
    runs = read_runs(Path(args.out))
    bsp = {(r["job"], r["workers"], r["seed"]): r for r in runs if r["case"] == "bsp"}
    groups: dict[tuple[str, int], list[tuple[dict, dict]]] = {}
    for r in sorted((r for r in runs if r["case"] == "online"), key=_order):
        ref = bsp.get((r["job"], r["workers"], r["seed"]))
        if ref is not None:
            groups.setdefault((r["job"], r["workers"]), []).append((ref, r))
    lines = [
        "| job | workers | seeds | BSP mean | online mean | online behind BSP (means) "
        "| runs within | shares | BSP time | online time | timing |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (name, workers), pairs in groups.items():
        job = JOBS[name]
        ref = _mean_row([p[0] for p in pairs])
        online = _mean_row([p[1] for p in pairs])
        gap, _ = _gap(job, ref, online)
        within = sum(_gap(job, a, b)[1] for a, b in pairs)
        shares = ", ".join(f"{b['share']:.2f}" for _, b in pairs)
        lines.append(
            f"| {name} | {workers} | {len(pairs)} | {ref['final_value']:.4f} | "
            f"{online['final_value']:.4f} | {gap} | {within}/{len(pairs)} | {shares} | "
            f"{ref['time_s']:.1f} s | {online['time_s']:.1f} s | SIMULATED |"
        )
    return "\n".join(lines)


def grid_table(args: argparse.Namespace) -> str:
    """Per job and worker count: BSP's mean against each fixed share's (what a switch there
    would have cost)."""
    runs = read_runs(Path(args.out))
    cases = ("bsp", *GRID)
    lines = [
        "| job | workers | seeds | " + " | ".join(cases) + " | timing |",
        "|---|---|---|" + "---|" * len(cases) + "---|",
    ]
    keys = sorted(
        {(r["job"], r["workers"]) for r in runs}, key=lambda k: (list(JOBS).index(k[0]), k[1])
    )
    for name, workers in keys:
        by_case = {
            c: [r for r in runs if (r["job"], r["workers"], r["case"]) == (name, workers, c)]
            for c in cases
        }
        if not all(by_case.values()):
            continue
        cells = [f"{_mean_row(rows)['final_value']:.4f}" for rows in by_case.values()]
        lines.append(
            f"| {name} | {workers} | {len(by_case['bsp'])} | "
            + " | ".join(cells)
            + " | SIMULATED |"
        )
    return "\n".join(lines)


def _mean_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "final_value": sum(r["final_value"] for r in rows) / len(rows),
        "time_s": sum(r["time_s"] for r in rows) / len(rows),
        "higher_is_better": rows[0]["higher_is_better"],
    }


def _order(row: dict[str, Any]) -> tuple:
    return (list(JOBS).index(row["job"]), row["workers"], row["seed"])


def _gap(job: Job, bsp: dict[str, Any], online: dict[str, Any]) -> tuple[str, bool]:
    """How far online ended behind BSP, and whether within the goal's tolerance."""
    sign = 1.0 if online["higher_is_better"] else -1.0
    behind = sign * (bsp["final_value"] - online["final_value"])
    if job.tolerance == "points":
        return f"{100 * behind:+.2f} pt", 100 * behind <= 0.5
    relative = behind / abs(bsp["final_value"])
    return f"{100 * relative:+.1f}%", relative <= 0.02


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["record", "online", "grid", "replay", "table"])
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--workers", default="8,16,32")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--keep", action="store_true", help="skip runs already in runs.jsonl")
    args = parser.parse_args()
    if args.command in ("record", "online", "grid"):
        cases = {"record": ("bsp",), "online": ("online",), "grid": GRID}[args.command]
        run_cases(args, cases)
    elif args.command == "replay":
        replay(args)
    else:
        text = table(args) + "\n\n" + means(args) + "\n\n" + grid_table(args)
        print(text)
        (Path(args.out) / "table.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
