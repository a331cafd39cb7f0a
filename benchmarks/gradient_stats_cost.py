"""Cost of the gradient statistics per BSP round, against the round itself (issue 21).

For cnn1d's and ResNet-20's parameter counts at n workers, times (one thread, medians of
--repeats blocks of --rounds rounds): the synchronizer's whole BSP round (n `submit`s: checks,
ledger, the weighted sum, the optimizer step; no network, so a conservative denominator),
the weighted sum alone, and `RoundStatsAccumulator.observe` amortised over rounds for several
settings of `every` (measure one round in `every`, in pairs) and `stride` (a strided subset
of coordinates) and `workers` (the norms of that many workers only). Prints a markdown table.

    python benchmarks/gradient_stats_cost.py
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from syncswitch.core.gradient_stats import RoundStatsAccumulator
from syncswitch.core.optimizer import FlatSGD
from syncswitch.core.protocol import Schedule
from syncswitch.core.records import Gradient
from syncswitch.core.synchronizer import SyncConfig, Synchronizer

SIZES = {"cnn1d": 5_210, "resnet20": 269_722}
# (every, stride, workers measured; 0 = all)
SETTINGS = [(1, 1, 0), (1, 1, 3), (4, 1, 0), (4, 1, 3), (8, 1, 0), (8, 1, 3), (4, 8, 0)]


def _median_us(run, rounds: int, repeats: int) -> float:
    run(rounds)  # warm up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run(rounds)
        times.append((time.perf_counter() - started) / rounds * 1e6)
    return statistics.median(times)


def measure(numel: int, workers: int, rounds: int, repeats: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(numel, generator=gen) for _ in range(workers)]
    samples = [32] * workers
    config = SyncConfig(
        workers=workers, total_samples=10**12, schedule=Schedule.parse("bsp"), lr=0.01
    )
    sync = Synchronizer(config, FlatSGD(torch.zeros(numel), weight_decay=0.0))
    sequence = [0] * workers

    def bsp_rounds(count: int) -> None:
        for _ in range(count):
            for w in range(workers):
                gradient = Gradient(w, sequence[w], sync.version, grads[w], 32, 0.0, 0.0)
                sequence[w] += 1
                sync.submit(gradient)

    def weighted_sum(count: int) -> None:
        for _ in range(count):
            torch.stack([g * (1 / workers) for g in grads]).sum(dim=0)

    mean = torch.stack([g * (1 / workers) for g in grads]).sum(dim=0)
    result = {
        "round": _median_us(bsp_rounds, rounds, repeats),
        "sum": _median_us(weighted_sum, rounds, repeats),
    }
    for every, stride, measured in SETTINGS:
        acc = RoundStatsAccumulator(numel, every=every, stride=stride, workers=measured)
        version = [0]

        def observe(count: int, acc=acc, version=version) -> None:
            for _ in range(count):
                version[0] += 1
                acc.observe(version[0], grads, samples, mean)

        result[_name(every, stride, measured)] = _median_us(observe, rounds, repeats)
    return result


def _name(every: int, stride: int, measured: int) -> str:
    return f"every {every}, stride {stride}, {measured or 'all'} workers"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(
        f"Gradient statistics per BSP round, {args.workers} workers, one thread; "
        f"medians of {args.repeats} x {args.rounds} rounds (us per round; % of the round)"
    )
    print()
    print(
        "| model | parameters | BSP round | weighted sum | "
        + " | ".join(_name(*setting) for setting in SETTINGS)
        + " |"
    )
    print("|" + "---|" * (4 + len(SETTINGS)))
    for name, numel in SIZES.items():
        r = measure(numel, args.workers, args.rounds, args.repeats)
        cells = [f"{r['round']:.0f}", f"{r['sum']:.0f} ({100 * r['sum'] / r['round']:.0f}%)"]
        for setting in SETTINGS:
            cost = r[_name(*setting)]
            cells.append(f"{cost:.1f} ({100 * cost / r['round']:.1f}%)")
        print(f"| {name} | {numel:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
