"""What the report's figures share: the kinds of time on an axis, short tick labels, colours,
the plotted metric, thinning (plots.py, paper.py)."""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, MaxNLocator

from syncswitch.rundir import RunData

MAX_TICK_LABEL_CHARS = 40
X_TICKS = 6  # at most this many labelled ticks on an x axis, so labels never overlap
# The kinds of seconds a run's times are: the host's wall clock (real, or real with emulated
# device time slept out), or the simulator's virtual clock. One axis carries one kind.
WALL, SIMULATED = "wall", "simulated"

_PROTOCOL_COLORS = {"bsp": "#4c72b0", "asp": "#dd8452", "ssp": "#55a868"}


def time_kind(run: RunData) -> str:
    """`SIMULATED` for a simulator's run, else `WALL` (real, or emulated device time)."""
    return SIMULATED if run.timing == "simulated" else WALL


def by_time_kind(runs: list[tuple[str, RunData]]) -> list[tuple[str, list[tuple[str, RunData]]]]:
    """The runs split by the kind of their seconds (wall first), each kind with runs only."""
    kinds = [
        (kind, [(label, run) for label, run in runs if time_kind(run) == kind])
        for kind in (WALL, SIMULATED)
    ]
    return [(kind, some) for kind, some in kinds if some] or [(WALL, [])]


def protocol_color(protocol: str) -> str:
    return _PROTOCOL_COLORS.get(protocol.split("-")[0], "#8c8c8c")


def plain_text(text: str) -> str:
    """Text from a run directory as matplotlib draws it literally (no `$...$` math)."""
    return str(text).replace("$", r"\$")


def time_label(runs: list[tuple[str, RunData]]) -> str:
    """The time axis's label, true to how the runs' times were made: a simulator's virtual
    seconds are "simulated time"; mixed with real or emulated runs, the label says which."""
    simulated = [label for label, run in runs if run.timing == "simulated"]
    if not simulated:
        return "wall time (s)"
    if len(simulated) == len(runs):
        return "simulated time (s)"
    return f"time (s): simulated for {', '.join(simulated)}; wall time for the others"


def readable_x_ticks(axes, by_samples: bool) -> None:
    axes.xaxis.set_major_locator(MaxNLocator(nbins=X_TICKS))
    if by_samples:
        axes.xaxis.set_major_formatter(FuncFormatter(compact_count))


def compact_count(value: float, _position: int | None = None) -> str:
    """640000 -> '640k', 1200000 -> '1.2M': short tick labels at any figure size."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:g}{suffix}"
    return f"{value:g}"


def short_label(label: str) -> str:
    return (
        label if len(label) <= MAX_TICK_LABEL_CHARS else label[: MAX_TICK_LABEL_CHARS - 3] + "..."
    )


def plotted(run: RunData) -> tuple[np.ndarray, str]:
    """A run's primary metric as plotted (accuracies in percent) and its axis label."""
    metrics = run.metrics
    if metrics.metric.endswith("accuracy"):
        return 100 * metrics.value, f"{metrics.split} {metrics.metric} (%)"
    return metrics.value, f"{metrics.split} {metrics.metric}"


def thinned(count: int, limit: int) -> list[int]:
    """Indices of at most `limit` of `count` items, evenly spread, first and last kept."""
    if count <= limit:
        return list(range(count))
    return sorted({round(i * (count - 1) / (limit - 1)) for i in range(limit)})
