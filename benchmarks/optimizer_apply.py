"""Server CPU per applied gradient by optimizer: SGD, Adam and AdamW on one server shard.

`ServerShard.submit` of one ASP gradient, the shard built as runtime/ray/server.py builds it
(8 workers, weight decay 5e-4, one thread): admission checks, the ledger, the optimizer's
step, the records the controller drains; nothing of the transport, which costs the same
whatever the optimizer (so the ratio here is the largest the whole server can show). For
cnn1d's parameter count (5,210, the default job) and ResNet-20's (~0.27M). Each repeat times
the three back to back; the ratios are medians of the per-repeat ratios to SGD; CPU is
`time.thread_time`, real timing, nothing emulated.

    .venv/bin/python benchmarks/optimizer_apply.py
"""

from __future__ import annotations

import os
import statistics
import sys

import torch
from harness import (
    Timing,
    add_out,
    add_repeats,
    check_timing,
    markdown_table,
    parser,
    save_json,
    save_text,
)
from server_apply import BATCH, RUN_UPDATES, WEIGHT_DECAY, WORKERS, model_sizes, time_submits

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.server_optimizer import OptimizerConfig, OptimizerKind

KINDS = (OptimizerKind.SGD, OptimizerKind.ADAM, OptimizerKind.ADAMW)
LR = {OptimizerKind.SGD: 0.1, OptimizerKind.ADAM: 1e-3, OptimizerKind.ADAMW: 1e-3}


def time_submit(kind: OptimizerKind, initial: torch.Tensor, gradient: torch.Tensor, updates: int):
    """(wall s, thread CPU s) of `updates` ASP submits to a fresh shard with `kind`."""
    config = SyncConfig(
        workers=WORKERS,
        total_samples=RUN_UPDATES * BATCH,
        schedule=Schedule.single(ASP),
        lr=LR[kind],
        optimizer=OptimizerConfig(kind, weight_decay=WEIGHT_DECAY),
    )
    return time_submits(config, initial, gradient, updates)


def measure(updates: int, repeats: int) -> dict:
    torch.set_num_threads(1)  # the Ray server's setting
    results = {}
    for name, numel in model_sizes():
        generator = torch.Generator().manual_seed(0)
        initial = torch.randn(numel, generator=generator)
        gradient = torch.randn(numel, generator=generator) * 1e-2
        cpu_us: dict[str, list[float]] = {k.value: [] for k in KINDS}
        for _ in range(repeats):
            for kind in KINDS:  # back to back: a change in load hits all three
                _, cpu_s = time_submit(kind, initial, gradient, updates)
                cpu_us[kind.value].append(1e6 * cpu_s / updates)
        results[name] = {"numel": numel, "cpu_us": cpu_us}
        print(f"measured {name} ({numel:,} parameters)", file=sys.stderr, flush=True)
    return {"torch": torch.__version__, "updates": updates, "repeats": repeats, "results": results}


def report(measured: dict, load: tuple[float, float]) -> str:
    rows = []
    for name, result in measured["results"].items():
        runs = result["cpu_us"]
        ratio = {
            kind: statistics.median(x / s for x, s in zip(runs[kind], runs["sgd"], strict=True))
            for kind in ("adam", "adamw")
        }
        rows.append(
            (
                f"{result['numel']:,} ({name})",
                *(f"{statistics.median(runs[k.value]):.1f}" for k in KINDS),
                f"{ratio['adam']:.2f}",
                f"{ratio['adamw']:.2f}",
            )
        )
    title = (
        f"Server CPU per applied ASP gradient (`ServerShard.submit`, one thread, thread CPU "
        f"microseconds; real timing, nothing emulated); medians of {measured['repeats']} "
        f"repeats x {measured['updates']:,} updates, ratios medians of per-repeat ratios. "
        f"torch {measured['torch']}; load average {load[0]:.1f} at the start, {load[1]:.1f} "
        f"at the end ({os.cpu_count()} cores, shared)."
    )
    columns = ("parameters", "sgd", "adam", "adamw", "adam/sgd", "adamw/sgd")
    return "\n".join([check_timing(title, Timing.REAL), "", *markdown_table(columns, rows), ""])


def main() -> None:
    cli = parser(__doc__)
    cli.add_argument("--updates", type=int, default=2000)
    add_repeats(cli, 5)
    add_out(cli, "benchmarks/results/optimizer-apply")
    args = cli.parse_args()
    start = os.getloadavg()[0]
    measured = measure(args.updates, args.repeats)
    text = report(measured, (start, os.getloadavg()[0]))
    print(text)
    if args.out:
        save_json(args.out / "results.json", measured)
        save_text(args.out / "results.md", text)


if __name__ == "__main__":
    main()
