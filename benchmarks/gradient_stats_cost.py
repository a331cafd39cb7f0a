"""Cost of online timing's gradient statistics per BSP round, on the real path (issue 21).

For cnn1d's and ResNet-20's parameter counts at n workers, the synchronizer's whole BSP round
(n `submit`s: checks, ledger, the weighted sum, the optimizer step; no network) under a plain
`bsp` schedule and under `online` with the shards' measuring settings: one round in `every`
measured (in pairs: the round before only keeps its mean), every worker's gradient squared, on
the plan's coordinate subset where the slice is large. Two ways of squaring the workers'
gradients: "admission" (what runs: the admission check's reduction is the dot of each gradient
with itself instead of its sum on a measured round, and the statistics sum those; used where
every coordinate is measured) and "rows" (the third round's way, forced here: one norm of the
stacked rows). Also the measurement alone (`wants` + `RoundStatsAccumulator.observe_rows` per
round, averaged over rounds; given the squares for "admission"), which does not depend on the
round's other work. One thread; the thread's CPU time (real, not wall); blocks of --rounds
rounds, each setting timed in turn within every repeat, so a difference is taken between
blocks timed moments apart, and the median of the differences is reported. Prints a markdown
table (microseconds per round; % of the plain BSP round, and of that round plus the server's
socket reads of n gradients, the capacity run's figures in docs/performance.md).

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
from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import Schedule
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.core.timing.gradient_stats import RoundStatsAccumulator

SIZES = {"cnn1d": 5_210, "resnet20": 269_722}
# The server's CPU to read one gradient off its socket (docs/performance.md, capacity run).
READ_US = {"cnn1d": 54.0, "resnet20": 434.0}
# (label, every, squares from the admission check): the plan measures one round in every
# (control/plan.py stats_every: 4, 2, 1 at 8, 16, 32 workers on the scale study's job).
SETTINGS = (
    ("every 1, admission", 1, True),
    ("every 1, rows", 1, False),
    ("every 2, admission", 2, True),
    ("every 2, rows", 2, False),
    ("every 4, admission", 4, True),
    ("every 4, rows", 4, False),
)


def _block_us(run: Callable[[int], None], rounds: int) -> float:
    # The thread's CPU time, not the wall clock: on a shared, loaded machine the wall clock
    # counts other processes' turns; the cost asked is the server's CPU.
    started = time.thread_time()
    run(rounds)
    return (time.thread_time() - started) / rounds * 1e6


def _rounds(numel: int, workers: int, schedule: str, every: int, admission: bool):
    generator = torch.Generator().manual_seed(0)
    grads = [torch.randn(numel, generator=generator) for _ in range(workers)]
    config = SyncConfig(
        workers=workers,
        total_samples=10**12,
        schedule=Schedule.parse(schedule),
        lr=1e-6,
        stats_coordinates=STATS_COORDINATES if schedule == "online" else None,
        stats_every=every,
    )
    sync = Synchronizer(config, FlatSGD(torch.zeros(numel), weight_decay=0.0))
    if sync.updater.stats is not None and not admission:
        sync.updater.stats._takes_squares = False  # the third round's way: the stacked rows' norm
    sequence = [0] * workers

    def run(count: int) -> None:
        for _ in range(count):
            for w in range(workers):
                sync.submit(Gradient(w, sequence[w], sync.live.version, grads[w], 32, 0.0, 0.0))
                sequence[w] += 1
            sync.live.partials.clear()  # the shard hands them on with its report

    return run


def _measurement(numel: int, workers: int, every: int, admission: bool):
    generator = torch.Generator().manual_seed(1)
    grads = [torch.randn(numel, generator=generator) for _ in range(workers)]
    rows = torch.stack(grads) / workers
    mean = rows.sum(dim=0)
    samples = [32] * workers
    coordinates = STATS_COORDINATES if numel > 2 * STATS_COORDINATES else 0
    accumulator = RoundStatsAccumulator(numel, every=every, coordinates=coordinates)
    # What the admission check hands over (its dot replaces its sum, so costs it nothing more
    # at cnn1d's size: core/sync/admission.py check_gradient).
    squares = [float(torch.dot(g, g)) for g in grads] if admission else None
    version = [0]

    def run(count: int) -> None:
        for _ in range(count):
            version[0] += 1
            if accumulator.wants(version[0]):
                accumulator.observe_rows(version[0], rows, samples, mean, squares=squares)

    return run


def measure(numel: int, workers: int, rounds: int, repeats: int) -> dict[str, float]:
    runs = {"bsp": _rounds(numel, workers, "bsp", 1, 0)}
    for label, every, admission in SETTINGS:
        runs[label] = _rounds(numel, workers, "online", every, admission)
        runs[f"alone: {label}"] = _measurement(numel, workers, every, admission)
    for run in runs.values():
        run(rounds)  # warm up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(_block_us(run, rounds))
    result = {"bsp": statistics.median(times["bsp"])}
    for label, _, _ in SETTINGS:
        diffs = [a - b for a, b in zip(times[label], times["bsp"], strict=True)]
        result[label] = statistics.median(diffs)
        result[f"alone: {label}"] = statistics.median(times[f"alone: {label}"])
    return result


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=64)
    harness.add_repeats(parser, 9, "blocks of rounds timed per setting")
    args = parser.parse_args()
    torch.set_num_threads(1)
    title = (
        f"Online timing's statistics per BSP round, {args.workers} workers, one thread, real "
        f"host CPU time; medians of {args.repeats} x {args.rounds} rounds (us per round; % of "
        "the plain BSP round / % of it plus the server's reads of n gradients)"
    )
    print(harness.check_timing(title, harness.Timing.REAL))
    print()
    columns = ["model", "parameters", "BSP round (bsp)", "+ reads"]
    columns += [f"{label}: in the round" for label, _, _ in SETTINGS]
    columns += [f"{label}: alone" for label, _, _ in SETTINGS]
    rows = []
    for name, numel in SIZES.items():
        r = measure(numel, args.workers, args.rounds, args.repeats)
        base = r["bsp"]
        server = base + args.workers * READ_US[name]
        row = [name, f"{numel:,}", f"{base:.0f}", f"{server:.0f}"]
        for key in [label for label, _, _ in SETTINGS] + [
            f"alone: {label}" for label, _, _ in SETTINGS
        ]:
            row.append(f"{r[key]:.1f} ({100 * r[key] / base:.1f}% / {100 * r[key] / server:.1f}%)")
        rows.append(row)
    print("\n".join(harness.markdown_table(columns, rows)))


if __name__ == "__main__":
    main()
