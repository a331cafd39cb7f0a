"""Cost of online timing's gradient statistics per BSP round, on the real path (issue 21).

For cnn1d's and ResNet-20's parameter counts at n workers, times (one thread, medians of
--repeats blocks of --rounds rounds): the synchronizer's whole BSP round (n `submit`s: checks,
ledger, the weighted sum, the optimizer step; no network, so a conservative denominator)
under a plain `bsp` schedule and under `online` (the online phase measures every round: one
norm call over the stacked rows, the mean's norm and its drift against the previous mean; on
the plan's default coordinate subset, and on all coordinates),
and `RoundStatsAccumulator.observe_rows` alone on all coordinates and on fixed random subsets
of them. Prints a markdown table; the figures are the thread's CPU time (real, not wall).

    python benchmarks/gradient_stats_cost.py                 # 8 workers
    python benchmarks/gradient_stats_cost.py --workers 32
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import harness
import torch

from syncswitch.control.plan import STATS_COORDINATES
from syncswitch.core.gradient_stats import RoundStatsAccumulator
from syncswitch.core.optimizer import FlatSGD
from syncswitch.core.protocol import Schedule
from syncswitch.core.records import Gradient
from syncswitch.core.synchronizer import SyncConfig, Synchronizer

SIZES = {"cnn1d": 5_210, "resnet20": 269_722}
COORDINATES = (0, 4096, 1024)  # 0: all


def _median_us(run: Callable[[int], None], rounds: int, repeats: int) -> float:
    run(rounds)  # warm up
    times = []
    for _ in range(repeats):
        # The thread's CPU time, not the wall clock: on a shared, loaded machine the wall
        # clock counts other processes' turns; the cost asked is the server's CPU.
        started = time.thread_time()
        run(rounds)
        times.append((time.thread_time() - started) / rounds * 1e6)
    return statistics.median(times)


def _rounds(numel: int, workers: int, schedule: str, coordinates: int | None):
    generator = torch.Generator().manual_seed(0)
    grads = [torch.randn(numel, generator=generator) for _ in range(workers)]
    config = SyncConfig(
        workers=workers,
        total_samples=10**12,
        schedule=Schedule.parse(schedule),
        lr=1e-6,
        stats_coordinates=coordinates,
    )
    sync = Synchronizer(config, FlatSGD(torch.zeros(numel), weight_decay=0.0))
    sequence = [0] * workers

    def run(count: int) -> None:
        for _ in range(count):
            for w in range(workers):
                sync.submit(Gradient(w, sequence[w], sync.version, grads[w], 32, 0.0, 0.0))
                sequence[w] += 1

    return run


def measure(numel: int, workers: int, rounds: int, repeats: int) -> dict[str, float]:
    result = {
        "bsp": _median_us(_rounds(numel, workers, "bsp", None), rounds, repeats),
        "online": _median_us(_rounds(numel, workers, "online", STATS_COORDINATES), rounds, repeats),
        "online all": _median_us(_rounds(numel, workers, "online", 0), rounds, repeats),
    }
    generator = torch.Generator().manual_seed(1)
    rows = torch.randn(workers, numel, generator=generator) / workers
    mean = rows.sum(dim=0)
    samples = [32] * workers
    for coordinates in COORDINATES:
        accumulator = RoundStatsAccumulator(numel, coordinates=coordinates)
        version = [0]

        def observe(count: int, acc=accumulator, version=version) -> None:
            for _ in range(count):
                version[0] += 1
                acc.observe_rows(version[0], rows, samples, mean)

        result[_name(coordinates)] = _median_us(observe, rounds, repeats)
    return result


def _name(coordinates: int) -> str:
    return f"observe_rows, {coordinates or 'all'} coordinates"


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=64)
    harness.add_repeats(parser, 7, "blocks of rounds timed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    title = (
        f"Online timing's statistics per BSP round, {args.workers} workers, one thread, real "
        f"host CPU time; medians of {args.repeats} x {args.rounds} rounds (us; % of the round)"
    )
    print(harness.check_timing(title, harness.Timing.REAL))
    print()
    columns = ["model", "parameters", "BSP round (bsp)", "online, default subset", "difference"]
    columns += ["online, all coordinates", "difference"]
    columns += [_name(c) for c in COORDINATES]
    rows = []
    for name, numel in SIZES.items():
        r = measure(numel, args.workers, args.rounds, args.repeats)
        base = r["bsp"]
        row = [name, f"{numel:,}", f"{base:.0f}", f"{r['online']:.0f}"]
        row.append(f"{r['online'] - base:.1f} ({100 * (r['online'] - base) / base:.1f}%)")
        every = r["online all"]
        row += [f"{every:.0f}", f"{every - base:.1f} ({100 * (every - base) / base:.1f}%)"]
        row += [f"{r[_name(c)]:.1f} ({100 * r[_name(c)] / base:.1f}%)" for c in COORDINATES]
        rows.append(row)
    print("\n".join(harness.markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
