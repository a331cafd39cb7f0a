"""Rates over a run's steady window: the arithmetic that benchmarks/throughput.py and
benchmarks/hot_path.py share (pure functions, no timing; tested in
tests/runtime/test_throughput_arith.py). Medians and ratios of per-repeat figures are the
harness's (re-exported here).

A run's step time stamps (optimizer steps, or rows of syncswitch's updates.csv, one per applied
gradient) span its first to its last step. The steady window is a fixed share of that span,
20% to 90% by default: start-up (process launch, first steps, warm caches) and the tail (workers
finishing at different times) fall outside it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from harness import medians, ratio

__all__ = [
    "WINDOW",
    "count_in",
    "medians",
    "ratio",
    "read_csv_rows",
    "steady_rate",
    "steady_window",
]

WINDOW = (0.2, 0.9)  # the span of the time from the first to the last step that is measured


def steady_window(
    times_s: Sequence[float], span: tuple[float, float] = WINDOW
) -> tuple[float, float]:
    """The (start, end) seconds that cover `span` of the time from the first to the last stamp."""
    if not 0 <= span[0] < span[1] <= 1:
        raise ValueError(f"window span must satisfy 0 <= start < end <= 1, got {span}")
    if len(times_s) < 2:
        raise ValueError(f"need at least 2 step times for a window, got {len(times_s)}")
    first, last = min(times_s), max(times_s)
    if last <= first:
        raise ValueError("every step has the same time stamp: no window to measure over")
    length = last - first
    return first + span[0] * length, first + span[1] * length


def count_in(times_s: Iterable[float], window: tuple[float, float]) -> int:
    """How many stamps fall in [start, end)."""
    start, end = window
    return sum(1 for t in times_s if start <= t < end)


def steady_rate(times_s: Sequence[float], span: tuple[float, float] = WINDOW) -> float:
    """Steps per second in the steady window: the stamps in [start, end) over end - start.

    Stamps may come from several processes and in any order, and a BSP update's gradients share
    one stamp. Counting the stamps inside a fixed window (rather than from the first to the last
    stamp inside it) keeps such groups from biasing the rate.
    """
    window = steady_window(times_s, span)
    return count_in(times_s, window) / (window[1] - window[0])


def read_csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of one of a run's CSV files (updates.csv: one per applied gradient), as text."""
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))
