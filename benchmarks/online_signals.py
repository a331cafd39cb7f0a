"""Prototype (issue 21): record the gradient statistics of every BSP round of a simulated run.

Trains the scale study's job (benchmarks/sim_scale.py's settings: MNIST-1D 20,000 samples, 40
epochs, batch 32, lr 0.2, default cluster with 20 ms steps and jitter 0.2, guard off) on the
simulator and writes, per BSP round, the round's own and the smoothed estimates of the
sampling noise tr(Sigma), |G|^2 and the drift |G_t - G_{t-1}|^2 to OUT/w{N}-{schedule}-s{seed}.csv,
with the evaluator's curve beside it (…-metrics.csv) and one JSON line per run in
OUT/runs.jsonl (final accuracy, simulated time). SIMULATED.

The estimator is attached to every synchronizer the run creates through the synchronizer's
`round_observer` hook; the second round of issue 21 wires it through the shards and the
controller instead.

    python benchmarks/online_signals.py --workers 8,16,32                  # pure BSP
    python benchmarks/online_signals.py --workers 32 --schedule bsp:0.75,asp
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from syncswitch.config import TrainConfig
from syncswitch.core.gradient_stats import GradientStatsEstimator, RoundStatsAccumulator
from syncswitch.core.records import Gradient
from syncswitch.core.synchronizer import Synchronizer
from syncswitch.runtime.train import train
from syncswitch.workloads import load_dataset

COLUMNS = [
    "version",
    "progress",
    "workers",
    "samples",
    "lr",
    "train_loss",
    "noise_trace",
    "grad_sq",
    "drift_sq",
    "ema_noise_trace",
    "ema_grad_sq",
    "ema_drift_sq",
    "observe_us",
]
LAGS = (2, 4, 8, 16)  # diagnostic: the drift over k BSP updates, to see how it grows with k


class Recorder:
    """The shard side and the controller side of the statistics, in one process."""

    def __init__(self, half_life_rounds: float) -> None:
        self.rows: list[dict] = []
        self.half_life_rounds = half_life_rounds
        self._accumulator: RoundStatsAccumulator | None = None
        self._estimator = GradientStatsEstimator(half_life_rounds)
        self._history: list[tuple[int, torch.Tensor, float]] = []  # (version, mean, S / B)

    def __call__(self, sync: Synchronizer, gradients: list[Gradient], mean: torch.Tensor) -> None:
        if self._accumulator is None:
            self._accumulator = RoundStatsAccumulator(mean.numel())
        started = time.perf_counter()
        partials = self._accumulator.observe(
            sync.version, [g.values for g in gradients], [g.samples for g in gradients], mean
        )
        observe_us = 1e6 * (time.perf_counter() - started)
        if partials is None:
            return
        estimate = self._estimator.add(partials)
        signals = self._estimator.signals
        lagged = self._lagged_drifts(sync.version, mean, estimate.noise_trace, partials.samples)
        self.rows.append(
            {
                "version": sync.version,
                "progress": sync.progress,
                "workers": len(gradients),
                "samples": partials.samples,
                "lr": sync.config.lr * sync.lr_scale,
                "train_loss": statistics.fmean(g.loss for g in gradients),
                "noise_trace": estimate.noise_trace,
                "grad_sq": estimate.grad_sq,
                "drift_sq": estimate.drift_sq,
                "ema_noise_trace": signals.noise_trace if signals else None,
                "ema_grad_sq": signals.grad_sq if signals else None,
                "ema_drift_sq": signals.drift_sq if signals else None,
                "observe_us": observe_us,
                **lagged,
            }
        )

    def _lagged_drifts(
        self, version: int, mean: torch.Tensor, noise: float | None, samples: int
    ) -> dict[str, float | None]:
        """|G_t - G_{t-k}|^2, noise-corrected, for k in LAGS (None where not available)."""
        here = None if noise is None else noise / samples
        out: dict[str, float | None] = {}
        by_version = {v: (m, n) for v, m, n in self._history}
        for k in LAGS:
            then = by_version.get(version - k)
            value = None
            if then is not None and here is not None:
                value = float((mean - then[0]).square().sum()) - here - then[1]
            out[f"drift_lag{k}"] = value
        if here is not None:
            self._history.append((version, mean.clone(), here))
            self._history = self._history[-max(LAGS) :]
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="8,16,32")
    parser.add_argument("--schedule", default="bsp")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mnist1d-samples", type=int, default=20000)
    parser.add_argument("--epochs", type=float, default=40.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--step-time-ms", type=float, default=20.0)
    parser.add_argument("--jitter-sigma", type=float, default=0.2)
    parser.add_argument("--half-life-rounds", type=float, default=50.0)
    parser.add_argument("--out", default="benchmarks/results/online-signals")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dataset = load_dataset("mnist1d", mnist1d_samples=args.mnist1d_samples)
    scratch = Path(tempfile.mkdtemp(prefix="online-signals-"))
    original_init = Synchronizer.__init__
    try:
        for workers in (int(w) for w in args.workers.split(",")):
            recorder = Recorder(args.half_life_rounds)

            def attach(self, *a, _recorder=recorder, **k) -> None:
                original_init(self, *a, **k)
                self.round_observer = _recorder

            Synchronizer.__init__ = attach  # type: ignore[method-assign]
            name = f"w{workers}-{args.schedule.replace(':', '').replace(',', '-')}-s{args.seed}"
            config = TrainConfig(
                runtime="sim",
                workers=workers,
                schedule=args.schedule,
                epochs=args.epochs,
                batch_size=args.batch_size,
                lr=args.lr,
                mnist1d_samples=args.mnist1d_samples,
                seed=args.seed,
                eval_every=0.025,
                checkpoint_every=0.0,
                divergence_guard=False,
                progress=False,
                step_time_ms=args.step_time_ms,
                jitter_sigma=args.jitter_sigma,
                out=str(scratch / name),
            )
            started = time.perf_counter()
            summary = train(config, dataset=dataset).summary
            host_s = time.perf_counter() - started
            _write_csv(out / f"{name}.csv", recorder.rows)
            shutil.copy(Path(config.out) / "metrics.csv", out / f"{name}-metrics.csv")
            row = {
                "simulated": True,
                "workers": workers,
                "schedule": args.schedule,
                "seed": args.seed,
                "final_accuracy": summary["final_accuracy"],
                "sim_time_s": summary["wall_time_s"],
                "host_time_s": round(host_s, 1),
                "bsp_rounds": len(recorder.rows),
                "observe_us_median": (
                    statistics.median(r["observe_us"] for r in recorder.rows)
                    if recorder.rows
                    else None
                ),
            }
            with (out / "runs.jsonl").open("a") as log:
                log.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    finally:
        Synchronizer.__init__ = original_init  # type: ignore[method-assign]
        shutil.rmtree(scratch, ignore_errors=True)


def _write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[*COLUMNS, *(f"drift_lag{k}" for k in LAGS)])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})


if __name__ == "__main__":
    main()
