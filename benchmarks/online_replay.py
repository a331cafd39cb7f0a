"""Prototype (issue 21): replay switch-timing rules on recorded BSP signals (SIMULATED).

Reads what the first round's prototype recorder (benchmarks/online_signals.py, removed once
the run itself measured the signals: see commit 1080066) recorded for pure-BSP runs in
benchmarks/results/online-signals/ (per-round estimates and the evaluator's curve), smooths
the per-round estimates again with a half-life given in training progress (the same for
every worker count), and prints, for each rule and threshold,
the BSP share at which a run would have switched: the first check at which `decide` says
switch. Checks happen every `--check-every` of progress (a run checks at each drain).

    python benchmarks/online_replay.py --workers 8,16,32 --seeds 0,1
    python benchmarks/online_replay.py --predict --exponents 0.5,1 --staleness 0.15,0.35 \
        --every auto     # each rule's shares and, from the runs made so far, their outcome

`--every auto` measures one round in what the plan takes for that worker count
(`control/plan.py` `stats_every`). `--predict` turns each replayed share into an accuracy and
a SIMULATED time by interpolating, seed by seed, between the runs of fixed shares already made
with that worker count and seed (the scale study's grid, the online evaluation's runs, the
replayed shares' runs), and prints the goals' terms against BSP and the search's share.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import statistics
from pathlib import Path

from syncswitch.control.plan import stats_every
from syncswitch.core.timing.gradient_stats import ExponentialAverage
from syncswitch.core.timing.rules import (
    GradientPoint,
    LossPlateauRule,
    LossPoint,
    NoiseScaleRule,
    OnlineSwitchDecision,
    ShareBounds,
    StalenessNoiseRule,
    decide,
    staleness_ratio,
)
from syncswitch.rundir.summary import FINAL_ACCURACY


def gradient_points(path: Path, half_life: float, every: int = 1) -> list[GradientPoint]:
    """The recorded rounds, smoothed with a half-life of `half_life` of training progress;
    `every` > 1 keeps only the rounds a `RoundStatsAccumulator(every=...)` would measure."""
    rows = list(csv.DictReader(path.open()))
    rows = [r for r in rows if int(r["version"]) % every == 0]
    decay = 0.5 ** (1.0 / max(half_life * len(rows), 1.0))  # per measured round
    noise, grad, drift = (ExponentialAverage(decay) for _ in range(3))
    points = []
    for row in rows:
        for ema, key in ((noise, "noise_trace"), (grad, "grad_sq"), (drift, "drift_sq")):
            if row[key]:
                ema.add(float(row[key]))
        n = int(row["workers"])
        noise_now, grad_now = noise.get(), grad.get()
        if noise_now is None or grad_now is None:
            continue
        points.append(
            GradientPoint(
                progress=float(row["progress"]),
                workers=n,
                worker_batch=int(row["samples"]) / n,
                noise_trace=noise_now,
                grad_sq=grad_now,
                drift_sq=drift.get(),
            )
        )
    return points


def loss_points(path: Path, column: str) -> list[LossPoint]:
    rows = list(csv.DictReader(path.open()))
    return [LossPoint(float(r["fraction"]), float(r[column])) for r in rows]


def replay(rule, history, bounds: ShareBounds, check_every: float) -> OnlineSwitchDecision:
    """The first decision to switch, checking every `check_every` of progress."""
    next_check = 0.0
    for end, point in enumerate(history, start=1):
        if point.progress + 1e-12 < next_check and end < len(history):
            continue
        next_check = point.progress + check_every
        decision = decide(rule, history[:end], point.progress, bounds)
        if decision.switch:
            return decision
    return decide(rule, history, 1.0, bounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="8,16,32")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--dir", default="benchmarks/results/online-signals")
    parser.add_argument("--half-life", type=float, default=0.02, help="in training progress")
    parser.add_argument("--check-every", type=float, default=0.005)
    parser.add_argument(
        "--every", default="1", help="measure one BSP round in this many ('auto': the plan's)"
    )
    parser.add_argument("--predict", action="store_true", help="predicted outcome per rule")
    parser.add_argument("--eval-runs", default="benchmarks/results/online-eval-sim/runs.jsonl")
    parser.add_argument("--floor", type=float, default=1 / 16)
    parser.add_argument("--ceiling", type=float, default=7 / 8)
    parser.add_argument("--staleness", default="0.25,0.5,1.0", help="thresholds")
    parser.add_argument("--exponents", default="1,2")
    parser.add_argument("--noise-scale", default="1,2,4", help="thresholds (x n b)")
    parser.add_argument("--plateau", default="0.02,0.05,0.1", help="min relative improvement")
    parser.add_argument("--signals", action="store_true", help="print the signals, not rules")
    parser.add_argument("--lags", action="store_true", help="print the drift over k updates")
    parser.add_argument(
        "--results", action="store_true", help="print the replayed shares' runs against BSP"
    )
    parser.add_argument("--scale-study", default="benchmarks/results/sim-scale/runs.jsonl")
    args = parser.parse_args()
    if args.results:
        print_results(Path(args.dir) / "runs.jsonl", Path(args.scale_study))
        return
    if args.lags:
        for w in (int(w) for w in args.workers.split(",")):
            for s in (int(s) for s in args.seeds.split(",")):
                print_lags(Path(args.dir) / f"w{w}-bsp-s{s}.csv", w, s)
        return
    if args.signals:
        for w in (int(w) for w in args.workers.split(",")):
            for s in (int(s) for s in args.seeds.split(",")):
                base = Path(args.dir) / f"w{w}-bsp-s{s}"
                print_signals(gradient_points(Path(f"{base}.csv"), args.half_life), w, s)
        return

    bounds = ShareBounds(args.floor, args.ceiling)
    workers = [int(w) for w in args.workers.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.predict:
        known = KnownRuns(
            [Path(args.scale_study), Path(args.eval_runs), Path(args.dir) / "runs.jsonl"]
        )
    rules = [
        StalenessNoiseRule(threshold=float(t), staleness_exponent=float(p))
        for p in args.exponents.split(",")
        for t in args.staleness.split(",")
    ]
    rules += [NoiseScaleRule(threshold=float(t)) for t in args.noise_scale.split(",")]
    plateau = [LossPlateauRule(min_improvement=float(t)) for t in args.plateau.split(",")]
    header = ["rule", *(f"{w} workers s{s}" for w in workers for s in seeds)]
    print("SIMULATED; BSP share each rule would have chosen (switch progress), replayed on")
    print(
        f"recorded BSP signals; half-life {args.half_life} of progress, bounds {bounds}, "
        f"one round in {args.every} measured"
    )
    print()
    if args.predict:
        header = ["rule", *(f"{w} workers" for w in workers)]
        print(
            "Each cell: the shares (per seed), then from the runs made so far the mean accuracy"
            " against BSP's (points) and the mean time against the search's share's (x)"
        )
        print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    out: dict[str, list[str]] = {}
    for w in workers:
        every = (
            stats_every(w, 0.02 * ROUNDS_AT_ONE / w) if args.every == "auto" else int(args.every)
        )
        if args.predict:
            available = [s for s in seeds if (Path(args.dir) / f"w{w}-bsp-s{s}.csv").exists()]
            series = {
                s: gradient_points(Path(args.dir) / f"w{w}-bsp-s{s}.csv", args.half_life, every)
                for s in available
            }
            for rule in rules:
                shares = {
                    s: replay(rule, points, bounds, args.check_every).progress
                    for s, points in series.items()
                }
                out.setdefault(_label(rule), []).append(known.cell(w, shares))
            continue
        for s in seeds:
            base = Path(args.dir) / f"w{w}-bsp-s{s}"
            points = gradient_points(Path(f"{base}.csv"), args.half_life, every)
            for rule in rules:
                decision = replay(rule, points, bounds, args.check_every)
                out.setdefault(_label(rule), []).append(_cell(decision))
            for column in ("test_loss", "train_loss"):
                losses = loss_points(Path(f"{base}-metrics.csv"), column)
                for rule in plateau:
                    decision = replay(rule, losses, bounds, 0.0)
                    out.setdefault(f"{_label(rule)} ({column})", []).append(_cell(decision))
    for label, cells in out.items():
        print(f"| {label} | " + " | ".join(cells) + " |")


# BSP rounds of the scale study's job at one worker (20,000 samples x 40 epochs / batch 32).
ROUNDS_AT_ONE = 25_000


class KnownRuns:
    """Runs of fixed BSP shares (and online runs, at the share they switched), by worker count
    and seed: a replayed share's accuracy and time, interpolated between the nearest two."""

    def __init__(self, paths: list[Path]) -> None:
        self.by_run: dict[tuple[int, int], dict[float, tuple[float, float]]] = {}
        self.search: dict[int, float] = {}
        for path in paths:
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                if line.strip():
                    self._add(json.loads(line))

    def _add(self, r: dict) -> None:
        accuracy, schedule = r.get(FINAL_ACCURACY), r.get("schedule", "")
        seconds = r.get("sim_time_s", r.get("time_s"))
        if r.get("case") == "search-decision":
            self.search[r["workers"]] = r["bsp_share"]
        if accuracy is None or seconds is None or r.get("variant"):
            return
        if schedule == "bsp":
            share: float | None = 1.0
        elif schedule.startswith("bsp:") and schedule.endswith(",asp"):
            share = float(schedule[4:-4])
        elif r.get("case") == "online":
            share = r.get("bsp_share")
        else:
            share = None
        if share is not None:
            runs = self.by_run.setdefault((r["workers"], r["seed"]), {})
            runs[round(share, 4)] = (100 * accuracy, seconds)

    def at(self, workers: int, seed: int, share: float) -> tuple[float, float] | None:
        known = sorted(self.by_run.get((workers, seed), {}).items())
        for (lo, (lo_acc, lo_s)), (hi, (hi_acc, hi_s)) in itertools.pairwise(known):
            if lo <= share <= hi:
                f = (share - lo) / (hi - lo) if hi > lo else 0.0
                return lo_acc + f * (hi_acc - lo_acc), lo_s + f * (hi_s - lo_s)
        return None

    def cell(self, workers: int, shares: dict[int, float]) -> str:
        shown = ", ".join(f"{v:.2f}" for v in shares.values())
        outcomes = [self.at(workers, s, v) for s, v in shares.items()]
        bsps = [self.at(workers, s, 1.0) for s in shares]
        search = self.search.get(workers)
        searched = [self.at(workers, s, search) for s in shares] if search is not None else []
        if not shares or None in outcomes or None in bsps:
            return f"{shown}: -"
        accuracy = statistics.fmean(o[0] for o in outcomes if o is not None)
        seconds = statistics.fmean(o[1] for o in outcomes if o is not None)
        bsp = statistics.fmean(b[0] for b in bsps if b is not None)
        text = f"{shown}: {accuracy - bsp:+.2f} pt"
        if searched and None not in searched:
            search_s = statistics.fmean(o[1] for o in searched if o is not None)
            text += f", {seconds / search_s:.3f}x"
        return text


def print_signals(points: list[GradientPoint], workers: int, seed: int) -> None:
    print(f"\n{workers} workers, seed {seed} (SIMULATED, pure BSP)\n")
    print(
        "| progress | tr(Sigma) | abs(G)^2 | drift D | B_simple | B_simple / nb | D / abs(G)^2 |"
        " staleness/noise (n-1) D b / tr(Sigma) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for mark in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 0.9):
        p = next(p for p in points if p.progress >= mark - 1e-9)
        ratio = staleness_ratio(p)
        scale = p.noise_trace / p.grad_sq if p.grad_sq > 0 else float("inf")
        drift = p.drift_sq if p.drift_sq is not None else float("nan")
        print(
            f"| {mark:.2f} | {p.noise_trace:.1f} | {p.grad_sq:.4f} | {drift:.4f} | {scale:.0f} | "
            f"{scale / (p.workers * p.worker_batch):.2f} | {drift / p.grad_sq:.2f} | "
            f"{ratio if ratio is not None else float('nan'):.3f} |"
        )


def print_lags(path: Path, workers: int, seed: int) -> None:
    """Mean drift over k updates against over 1, in windows of progress (unsmoothed rounds)."""
    rows = list(csv.DictReader(path.open()))
    print(
        f"\n{workers} workers, seed {seed}: drift over k BSP updates / drift over 1 "
        "(k^2: steady rotation; k: random walk; flat: uncorrelated)\n"
    )
    print("| progress | D (1 update) | k=2 | k=4 | k=8 | k=16 | 2 abs(G)^2 / D |")
    print("|---|---|---|---|---|---|---|")
    for lo, hi in ((0.05, 0.15), (0.15, 0.3), (0.3, 0.5), (0.5, 0.75), (0.75, 1.0)):
        window = [r for r in rows if lo <= float(r["progress"]) < hi]

        def mean(column: str, window=window) -> float:
            values = [float(r[column]) for r in window if r.get(column)]
            return sum(values) / len(values)

        d1 = mean("drift_sq")
        cells = " | ".join(f"{mean(f'drift_lag{k}') / d1:.2f}" for k in (2, 4, 8, 16))
        print(f"| {lo:.2f}-{hi:.2f} | {d1:.4f} | {cells} | {2 * mean('grad_sq') / d1:.2f} |")


def print_results(runs_path: Path, scale_path: Path) -> None:
    """Each hybrid run (a replayed share run as a fixed schedule) against BSP, same seed."""
    runs = [json.loads(line) for line in runs_path.read_text().splitlines() if line.strip()]
    bsp = {(r["workers"], r["seed"]): r for r in runs if r["schedule"] == "bsp"}
    print(
        "| workers | seed | share (replayed) | accuracy % | SIMULATED s | BSP accuracy % | "
        "BSP s | vs BSP (points) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(runs, key=lambda r: (r["workers"], r["seed"])):
        if r["schedule"] == "bsp" or (r["workers"], r["seed"]) not in bsp:
            continue
        base = bsp[(r["workers"], r["seed"])]
        share = r["schedule"].split(":")[1].split(",")[0]
        if r.get("variant"):
            share += f" ({r['variant']})"
        delta = 100 * (r[FINAL_ACCURACY] - base[FINAL_ACCURACY])
        print(
            f"| {r['workers']} | {r['seed']} | {share} | {100 * r['final_accuracy']:.2f} | "
            f"{r['sim_time_s']:.1f} | {100 * base['final_accuracy']:.2f} | "
            f"{base['sim_time_s']:.1f} | {delta:+.2f} |"
        )
    if not scale_path.exists():
        return
    scale = [json.loads(line) for line in scale_path.read_text().splitlines() if line.strip()]
    print()
    print(
        "| workers | online accuracy % / s (seeds) | BSP | bsp:0.25,asp | "
        "smallest fixed share within 0.5 pt | online time / its time |"
    )
    print("|---|---|---|---|---|---|")
    for workers in sorted({r["workers"] for r in runs}):
        # The chosen rule's runs only (variants, such as a cheaper measuring setting, are
        # shown in the table above but not averaged in).
        online = [
            r
            for r in runs
            if r["workers"] == workers and r["schedule"] != "bsp" and not r.get("variant")
        ]
        if not online:
            continue

        def mean(rows: list[dict]) -> tuple[float, float]:
            return (
                100 * statistics.fmean(r[FINAL_ACCURACY] for r in rows),
                statistics.fmean(r["sim_time_s"] for r in rows),
            )

        # Only seeds the scale study also ran (an extra seed has no fixed shares to compare).
        studied = {r["seed"] for r in scale if r["workers"] == workers}
        online = [r for r in online if r["seed"] in studied]
        if not online:
            continue
        seeds = {r["seed"] for r in online}

        def fixed(schedule: str, workers=workers, seeds=seeds) -> tuple[float, float]:
            # The same seeds as the online runs: seeds differ by points at 64 workers.
            return mean(
                [
                    r
                    for r in scale
                    if r["workers"] == workers and r["schedule"] == schedule and r["seed"] in seeds
                ]
            )

        acc, time_s = mean(online)
        bsp_acc, bsp_s = fixed("bsp")
        quarter = fixed("bsp:0.25,asp")
        holding = "none"
        ratio = ""
        for share in ("0.0625", "0.125", "0.25", "0.5", "0.75"):
            share_acc, share_s = fixed(f"bsp:{share},asp")
            if share_acc >= bsp_acc - 0.5:
                holding = f"{share}: {share_acc:.2f} / {share_s:.1f}"
                ratio = f"{time_s / share_s:.3f}x"
                break
        print(
            f"| {workers} | {acc:.2f} / {time_s:.1f} ({', '.join(map(str, sorted(seeds)))}) | "
            f"{bsp_acc:.2f} / {bsp_s:.1f} | {quarter[0]:.2f} / {quarter[1]:.1f} | "
            f"{holding} | {ratio or '-'} |"
        )


def _label(rule) -> str:
    if isinstance(rule, StalenessNoiseRule):
        return f"staleness/noise < {rule.threshold:g} (n-1)^{rule.staleness_exponent:g}"
    if isinstance(rule, NoiseScaleRule):
        return f"B_simple > {rule.threshold:g} n b"
    return f"loss plateau < {rule.min_improvement:g} per {rule.window:g}"


def _cell(decision: OnlineSwitchDecision) -> str:
    mark = "" if decision.reason == "signal" else f" ({decision.reason})"
    return f"{decision.progress:.3f}{mark}"


if __name__ == "__main__":
    main()
