"""Simulator overhead: host time of a simulated run against a plain loop computing the same
gradients, at 8 and 256 workers.

The plain loop is what the simulator cannot avoid: one model, each gradient's weights copied
in, its batch prepared, forward and backward, the gradient copied out. The simulated run adds
the events, the network and server queues, the server shards (the real synchronizer and
optimizer), the controller and the run directory. Each repeat times both back to back (ratios
measured in the same run; medians over --repeats). Evaluation runs once, at the end, and is
timed apart.

    python benchmarks/sim_overhead.py
"""

from __future__ import annotations

import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from harness import (
    Timing,
    add_out,
    add_repeats,
    check_timing,
    comma_list,
    markdown_table,
    parser,
    save_json,
    save_text,
)

from syncswitch.config import TrainConfig
from syncswitch.core.sync.optimizer import FlatParameters
from syncswitch.core.sync.sharding import BatchStream, worker_shard
from syncswitch.runtime.train import train
from syncswitch.workloads import build_model, load_dataset, prepare_batch


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--workers", default="8,256")
    cli.add_argument("--mnist1d-samples", type=int, default=20000)
    cli.add_argument("--epochs", type=float, default=10.0)
    add_repeats(cli, 3)
    add_out(cli, "benchmarks/results/sim-overhead")
    args = cli.parse_args()

    out = args.out
    dataset = load_dataset("mnist1d", mnist1d_samples=args.mnist1d_samples)
    torch.set_num_threads(1)  # the simulator computes on one thread, as each Ray worker does
    rows = []
    for workers in comma_list(args.workers, int):
        sims, plains = [], []
        for repeat in range(args.repeats):
            sim = _simulate(dataset, workers, args.epochs, repeat)
            plain_s = _plain_loop(dataset, workers, sim["gradients"], repeat)
            sims.append(sim)
            plains.append(plain_s)
            print(
                f"{workers} workers, repeat {repeat}: simulated run {sim['loop_s']:.2f} host s "
                f"(+ setup {sim['setup_s']:.2f} s), plain loop {plain_s:.2f} s, "
                f"{sim['gradients']} gradients",
                flush=True,
            )
        ratios = [s["loop_s"] / p for s, p in zip(sims, plains, strict=True)]
        rows.append(
            {
                "workers": workers,
                "gradients": sims[0]["gradients"],
                "sim_host_s": statistics.median(s["loop_s"] for s in sims),
                "setup_s": statistics.median(s["setup_s"] for s in sims),
                "plain_s": statistics.median(plains),
                "ratio": statistics.median(ratios),
                "us_per_gradient_overhead": statistics.median(
                    1e6 * (s["loop_s"] - p) / s["gradients"]
                    for s, p in zip(sims, plains, strict=True)
                ),
            }
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    title = (
        f"Simulator host time vs a plain gradient loop (MNIST-1D cnn1d, batch 32, "
        f"{args.mnist1d_samples} samples x {args.epochs:g} epochs; medians of {args.repeats}; "
        f"peak RSS of this process {peak_mb:.0f} MB); real host time, nothing emulated"
    )
    columns = ("workers", "gradients", "simulated run (host s)", "plain loop (s)", "ratio")
    columns += ("overhead per gradient (us)", "setup (s)")
    cells = [
        (
            r["workers"],
            r["gradients"],
            f"{r['sim_host_s']:.2f}",
            f"{r['plain_s']:.2f}",
            f"{r['ratio']:.2f}x",
            f"{r['us_per_gradient_overhead']:.0f}",
            f"{r['setup_s']:.2f}",
        )
        for r in rows
    ]
    table = "\n".join([check_timing(title, Timing.REAL), "", *markdown_table(columns, cells)])
    save_text(out / "table.md", table + "\n")
    save_json(out / "rows.json", rows)
    print(table)


def _simulate(dataset, workers: int, epochs: float, seed: int) -> dict:
    scratch = Path(tempfile.mkdtemp(prefix="sim-overhead-"))
    try:
        config = TrainConfig(
            runtime="sim",
            workers=workers,
            schedule="bsp:0.25,asp",
            epochs=epochs,
            seed=seed,
            mnist1d_samples=len(dataset.y_train) + len(dataset.y_test),
            eval_every=1.0,
            checkpoint_every=0.0,
            divergence_guard=False,
            progress=False,
            out=str(scratch / "run"),
        )
        started = time.perf_counter()
        summary = train(config, dataset=dataset, print_summary=False).summary
        total_s = time.perf_counter() - started
        gradients = summary.gradients.sent
        return {
            "loop_s": total_s - summary.setup_time_s,
            "setup_s": summary.setup_time_s,
            "gradients": gradients,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _plain_loop(dataset, workers: int, gradients: int, seed: int) -> float:
    torch.manual_seed(seed)
    model = build_model("cnn1d", dataset)
    flat = FlatParameters(model)
    weights = flat.values.numpy().copy()
    samples = len(dataset.y_train)
    streams = [
        BatchStream(worker_shard(samples, w, workers, seed), 32, seed, w) for w in range(workers)
    ]
    started = time.perf_counter()
    for step in range(gradients):
        flat.load(weights)
        indices = streams[step % workers].next_indices()
        x, y = prepare_batch(
            dataset, dataset.x_train[indices], dataset.y_train[indices], train=True
        )
        flat.zero_grad()
        F.cross_entropy(model(x), y).backward()
        flat.gradient.numpy().copy()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
