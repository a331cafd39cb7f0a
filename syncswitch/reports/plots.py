"""The report's figure, in the paper's style: the primary metric (validation accuracy for the
built-in jobs) against wall time and samples.

One line per run; each run's protocol phases are shaded on a strip below (and behind the
lines when one run is shown) and its switch points are marked on its line. For a run whose
schedule ended a phase online: its rule's signal and threshold against training progress with
the switch marked, beside its accuracy curve on the same axis. Below them: a
worker timeline of emulated straggler episodes and detections for runs that have any, and a
staleness histogram per run. Drawn with matplotlib's Agg canvas (files only, no display and
no pyplot state), so it works on a headless machine and in threads.

Bounded work: what a person can read is drawn, whatever the run directories hold. At most
`MAX_PLOTTED_RUNS` runs and `MAX_TIMELINE_RUNS` straggler timelines, each run's accuracy line
thinned to `MAX_LINE_POINTS` points and its switch markers to `MAX_MARKERS`, shapes of one kind
drawn as one collection, the figure at most `MAX_FIGURE_HEIGHT_IN` high; `plot_notes` says
what was left out. Text from the runs is drawn as text: `$` never starts matplotlib math.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from syncswitch.errors import RunDirError
from syncswitch.files import write_output
from syncswitch.reports.overview import phases, run_end
from syncswitch.reports.plot_common import (
    by_time_kind,
    plain_text,
    plotted,
    protocol_color,
    readable_x_ticks,
    short_label,
    thinned,
    time_label,
)
from syncswitch.rundir import RunData

PLOT_SUFFIXES = (".png", ".svg")
ACCURACY_VS_TIME = "metric vs time"
ACCURACY_VS_SAMPLES = "metric vs samples"
HISTOGRAM_COLUMNS = 4
MAX_HISTOGRAM_BARS = 120
MAX_TIMELINE_WORKERS = 64
MAX_PLOTTED_RUNS = 12
MAX_TIMELINE_RUNS = 4
MAX_LINE_POINTS = 4000
MAX_MARKERS = 200
MARKS_PER_LINE = 8  # markers along each accuracy line, each run its own shape
LINE_MARKERS = ("o", "s", "^", "v", "P", "X", "*", "<", ">", "h", "p", "8")
MAX_SHADED_PHASES = 200  # phases shaded behind a single run's accuracy lines
MAX_FIGURE_HEIGHT_IN = 60.0


def plot_notes(runs: list[tuple[str, RunData]]) -> list[str]:
    """What the figure of these runs leaves out (empty: everything is drawn)."""
    notes = []
    if len(runs) > MAX_PLOTTED_RUNS:
        notes.append(
            f"the figure shows the first {MAX_PLOTTED_RUNS} of {len(runs)} runs "
            "(the tables list all)"
        )
    shown = runs[:MAX_PLOTTED_RUNS]
    stragglers = sum(1 for _, run in shown if run.episodes or run.straggler_marks)
    if stragglers > MAX_TIMELINE_RUNS:
        notes.append(f"straggler timelines of the first {MAX_TIMELINE_RUNS} of {stragglers} runs")
    online = sum(1 for _, run in shown if run.timing_signals is not None)
    if online > MAX_TIMELINE_RUNS:
        notes.append(f"timing-signal panels of the first {MAX_TIMELINE_RUNS} of {online} runs")
    if any(len(run.metrics.time_s) > MAX_LINE_POINTS for _, run in shown):
        notes.append(f"accuracy lines thinned to {MAX_LINE_POINTS} points per run")
    if any(len(run.switches) > MAX_MARKERS for _, run in shown):
        notes.append(f"switch markers thinned to {MAX_MARKERS} per run")
    return notes


def plot_runs(runs: list[tuple[str, RunData]]) -> Figure:
    """The whole figure for labelled runs (label, run), in the order given (bounded: see the
    module docstring and `plot_notes`)."""
    runs = [(plain_text(label), run) for label, run in runs[:MAX_PLOTTED_RUNS]]
    straggler_runs = [(label, run) for label, run in runs if run.episodes or run.straggler_marks]
    straggler_runs = straggler_runs[:MAX_TIMELINE_RUNS]
    online_runs = [(label, run) for label, run in runs if run.timing_signals is not None]
    online_runs = online_runs[:MAX_TIMELINE_RUNS]
    # A panel is drawn only when it has something to show (no empty staleness histogram).
    histogram_runs = [(label, run) for label, run in runs if run.staleness_counts]
    histogram_rows = math.ceil(len(histogram_runs) / HISTOGRAM_COLUMNS)
    heights = [4.0, 0.45 * len(runs) + 0.9]
    heights += [3.2] * len(online_runs)
    heights += [_timeline_height(run) for _, run in straggler_runs]
    heights += [2.6] * histogram_rows
    height_in = min(sum(heights) + 0.8, MAX_FIGURE_HEIGHT_IN)
    figure = Figure(figsize=(13, height_in), layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(len(heights), 2, height_ratios=heights)
    # One time axis per kind of seconds (wall, simulated): never two kinds on one axis.
    kinds = by_time_kind(runs)
    colors = dict(zip((id(run) for _, run in runs), _run_colors(len(runs)), strict=True))
    top = grid[0, :].subgridspec(1, len(kinds) + 1)
    strips = grid[1, :].subgridspec(1, len(kinds) + 1)
    for column, (_, kind_runs) in enumerate(kinds):
        time_axes = figure.add_subplot(top[0, column])
        _accuracy(time_axes, kind_runs, colors, by_samples=False, mixed=len(kinds) > 1)
        strip = figure.add_subplot(strips[0, column], sharex=time_axes)
        _phase_strip(strip, kind_runs, by_samples=False)
    samples_axes = figure.add_subplot(top[0, len(kinds)])
    _accuracy(samples_axes, runs, colors, by_samples=True)
    _phase_strip(figure.add_subplot(strips[0, len(kinds)], sharex=samples_axes), runs, True)
    row = 2
    for label, run in online_runs:
        signal_axes = figure.add_subplot(grid[row, 0])
        _timing_signal(signal_axes, label, run)
        _accuracy_by_fraction(figure.add_subplot(grid[row, 1], sharex=signal_axes), label, run)
        row += 1
    for label, run in straggler_runs:
        _straggler_timeline(figure.add_subplot(grid[row, :]), label, run)
        row += 1
    cells = grid[row:, :].subgridspec(histogram_rows, HISTOGRAM_COLUMNS) if histogram_runs else None
    for index, (label, run) in enumerate(histogram_runs):
        assert cells is not None
        _staleness(
            figure.add_subplot(cells[index // HISTOGRAM_COLUMNS, index % HISTOGRAM_COLUMNS]),
            label,
            run,
        )
    timings = sorted({plain_text(run.timing) for _, run in runs})
    figure.suptitle(f"Sync-Switch runs (timing: {', '.join(timings)})", fontsize=13)
    return figure


def save_figure(figure: Figure, path: Path) -> None:
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise RunDirError(f"plot file {str(path)!r} must end in .png or .svg")
    # Drawn in memory, then written atomically: a bad path is one line, never a half file.
    image = io.BytesIO()
    figure.savefig(image, format=path.suffix.lower().lstrip("."), dpi=100)
    write_output(path, image.getvalue(), "--plot")


# -- panels ----------------------------------------------------------------------------------


def _run_colors(count: int) -> list[str]:
    return [f"C{index % 10}" for index in range(count)]


def _accuracy(
    axes,
    runs: list[tuple[str, RunData]],
    colors: dict[int, str],
    by_samples: bool,
    mixed: bool = False,
) -> None:
    drawn: list[tuple[str, np.ndarray, np.ndarray]] = []
    for index, (label, run) in enumerate(runs):
        color = colors[id(run)]
        metrics = run.metrics
        x = metrics.samples if by_samples else metrics.time_s
        accuracy, _ = plotted(run)
        line = thinned(len(x), MAX_LINE_POINTS)
        # A curve equal to one drawn before (BSP and an online run that stayed in BSP) would
        # hide it: it is dashed, its markers fall between the other's, and its label says so.
        same = next((other for other, ox, oy in drawn if _same(ox, oy, x, accuracy)), None)
        drawn.append((label, x, accuracy))
        every = max(1, len(line) // MARKS_PER_LINE)
        axes.plot(
            x[line],
            accuracy[line],
            color=color,
            label=label if same is None else f"{label} (same curve as {short_label(same)})",
            linewidth=1.6,
            linestyle="-" if same is None else (0, (4, 3)),
            marker=LINE_MARKERS[index % len(LINE_MARKERS)],
            markevery=(index * every // max(len(runs), 1) % every, every),
            markersize=5,
        )
        switches = [run.switches[i] for i in thinned(len(run.switches), MAX_MARKERS)]
        if switches:
            at = np.array([s.at_samples if by_samples else s.time_s for s in switches], float)
            y = np.interp(at, x, accuracy) if len(x) else np.full(len(at), np.nan)
            axes.plot(
                at,
                y,
                marker="D",
                markersize=7,
                markerfacecolor="white",
                markeredgecolor=color,
                markeredgewidth=1.8,
                linestyle="none",
                label="_switch",
                zorder=5,
            )
        if len(runs) == 1:
            for phase in phases(run)[:MAX_SHADED_PHASES]:
                start, end = (
                    (phase.start_samples, phase.end_samples)
                    if by_samples
                    else (phase.start_s, phase.end_s)
                )
                axes.axvspan(start, end, color=protocol_color(phase.protocol), alpha=0.12, lw=0)
    title = ACCURACY_VS_SAMPLES if by_samples else ACCURACY_VS_TIME
    if mixed:  # the figure has a panel per kind of time: this one's runs are one kind
        title += ": SIMULATED runs" if runs[0][1].timing == "simulated" else ": real-time runs"
    axes.set_title(title)
    axes.set_xlabel("samples processed" if by_samples else time_label(runs))
    readable_x_ticks(axes, by_samples)
    axes.set_ylabel(plotted(runs[0][1])[1] if runs else "")
    axes.grid(alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    if any(run.switches for _, run in runs):
        handles.append(
            Line2D([], [], marker="D", markerfacecolor="white", markeredgecolor="black", ls="none")
        )
        labels.append("switch")
    if handles:
        axes.legend(handles, labels, loc="lower right", fontsize=8)


def _same(x: np.ndarray, y: np.ndarray, other_x: np.ndarray, other_y: np.ndarray) -> bool:
    return len(x) > 0 and np.array_equal(x, other_x) and np.array_equal(y, other_y)


def _online_switch(run: RunData) -> float | None:
    """Where an online run left BSP (summary.json), or None."""
    timing = run.summary.online_timing if run.summary is not None else None
    return timing.at_fraction if timing is not None and timing.switched else None


def _timing_signal(axes, label: str, run: RunData) -> None:
    """An online run's signal against its threshold over training, the switch marked."""
    signals = run.timing_signals
    assert signals is not None
    shown = np.where(np.isfinite(signals.signal) & (signals.signal > 0), signals.signal, np.nan)
    rule = plain_text(signals.rule)  # from the file: never math text
    axes.plot(signals.fraction, shown, color="C0", linewidth=1.4, label=f"signal ({rule})")
    axes.plot(
        signals.fraction,
        signals.threshold,
        color="C3",
        linestyle="--",
        linewidth=1.2,
        label="threshold",
    )
    if np.any(np.isfinite(shown)):
        axes.set_yscale("log")
    switch = _online_switch(run)
    if switch is not None:
        axes.axvline(switch, color="black", linewidth=1.2, label=f"switch at {switch:.3f}")
    timing = run.summary.online_timing if run.summary is not None else None
    if timing is not None:
        for bound in (timing.floor, timing.ceiling):
            axes.axvline(bound, color="#8c8c8c", linestyle=":", linewidth=1.0)
    axes.set_title(f"{label}: online timing signal (floor and ceiling dotted)")
    axes.set_xlabel("training progress (fraction of samples)")
    axes.set_ylabel("signal")
    axes.set_xlim(0, 1)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right", fontsize=8)


def _accuracy_by_fraction(axes, label: str, run: RunData) -> None:
    metrics = run.metrics
    values, ylabel = plotted(run)
    axes.plot(metrics.fraction, values, color="C1", linewidth=1.6)
    switch = _online_switch(run)
    if switch is not None:
        axes.axvline(switch, color="black", linewidth=1.2)
    axes.set_title(f"{label}: {ylabel}, the switch marked")
    axes.set_xlabel("training progress (fraction of samples)")
    axes.set_ylabel(ylabel)
    axes.grid(alpha=0.3)


def _phase_strip(axes, runs: list[tuple[str, RunData]], by_samples: bool) -> None:
    seen: dict[str, str] = {}
    for row, (_, run) in enumerate(runs):
        bars: dict[str, list[tuple[float, float]]] = {}  # one collection per protocol
        for phase in phases(run):
            start, end = (
                (phase.start_samples, phase.end_samples)
                if by_samples
                else (phase.start_s, phase.end_s)
            )
            bars.setdefault(phase.protocol, []).append((start, end - start))
        for protocol, spans in bars.items():
            color = protocol_color(protocol)
            axes.broken_barh(spans, (row - 0.35, 0.7), color=color, alpha=0.8)
            seen.setdefault(plain_text(protocol), color)
        switches = [run.switches[i] for i in thinned(len(run.switches), MAX_MARKERS)]
        if switches:
            at = [s.at_samples if by_samples else s.time_s for s in switches]
            axes.plot(
                at, [row] * len(at), marker="|", markersize=14, color="black", mew=2, ls="none"
            )
    axes.set_yticks(range(len(runs)), [short_label(label) for label, _ in runs], fontsize=8)
    axes.set_ylim(len(runs) - 0.5, -0.5)
    axes.set_title("protocol phases (| = switch)", fontsize=9)
    axes.set_xlabel("samples processed" if by_samples else time_label(runs))
    readable_x_ticks(axes, by_samples)
    if seen:
        axes.legend(
            [Patch(color=c) for c in seen.values()],
            list(seen),
            loc="upper right",
            fontsize=7,
            ncols=len(seen),
        )


def _timeline_workers(run: RunData) -> list[int]:
    workers = {w for e in run.episodes for w in e.workers}
    workers |= {m.worker for m in run.straggler_marks}
    return sorted(workers)[:MAX_TIMELINE_WORKERS]


def _timeline_height(run: RunData) -> float:
    return 0.3 * len(_timeline_workers(run)) + 1.3


def _straggler_timeline(axes, label: str, run: RunData) -> None:
    """Which worker was slow when (emulated episodes) and when the detector flagged it."""
    workers = _timeline_workers(run)
    end_s, _ = run_end(run)
    fractions = np.concatenate([[0.0], run.metrics.fraction])
    times = np.concatenate([[0.0], run.metrics.time_s])
    # Collected first and drawn as one collection per kind: a run may hold thousands.
    episode_bars: dict[int, list[tuple[float, float]]] = {}
    for episode in run.episodes:
        if episode.start is not None and episode.duration is not None:
            start, stop = np.interp(
                [episode.start, episode.start + episode.duration], fractions, times
            )
        else:
            start = episode.start_s or 0.0
            stop = start + (episode.duration_s or 0.0)
        for worker in episode.workers:
            if worker in workers:
                episode_bars.setdefault(workers.index(worker), []).append((start, stop - start))
    for row, spans in episode_bars.items():
        axes.broken_barh(spans, (row - 0.4, 0.8), color="#f4a6a6", alpha=0.9)
    flagged: dict[int, float] = {}
    flagged_bars: dict[int, list[tuple[float, float]]] = {}
    detections: dict[str, tuple[list[float], list[int]]] = {
        "#7f7f7f": ([], []),
        "#b22222": ([], []),
    }
    for mark in sorted(run.straggler_marks, key=lambda m: m.time_s):
        if mark.worker not in workers:
            continue
        row = workers.index(mark.worker)
        if mark.kind == "detected":
            flagged[mark.worker] = mark.time_s
            times_of, rows_of = detections["#7f7f7f" if mark.false_detection else "#b22222"]
            times_of.append(mark.time_s)
            rows_of.append(row)
        elif mark.worker in flagged:
            began = flagged.pop(mark.worker)
            flagged_bars.setdefault(row, []).append((began, mark.time_s - began))
    for worker, began in flagged.items():  # still flagged when the run ended
        flagged_bars.setdefault(workers.index(worker), []).append((began, max(end_s - began, 0)))
    for row, spans in flagged_bars.items():
        axes.broken_barh(spans, (row - 0.12, 0.24), color="#b22222")
    for color, (times_of, rows_of) in detections.items():
        keep = thinned(len(times_of), MAX_MARKERS * 10)
        if keep:
            axes.plot(
                [times_of[i] for i in keep],
                [rows_of[i] for i in keep],
                marker="v",
                color=color,
                markersize=9,
                ls="none",
                zorder=5,
            )
    axes.set_yticks(range(len(workers)), [f"worker {w}" for w in workers], fontsize=8)
    axes.set_ylim(len(workers) - 0.5, -0.5)
    axes.set_xlim(0, max(end_s, 1e-9))
    axes.set_xlabel(time_label([(label, run)]))
    readable_x_ticks(axes, by_samples=False)
    axes.set_title(f"stragglers: {label}", fontsize=9)
    axes.legend(
        [
            Patch(color="#f4a6a6"),
            Patch(color="#b22222"),
            Line2D([], [], marker="v", color="#b22222", ls="none"),
        ],
        ["emulated episode", "flagged by the detector", "detection"],
        loc="upper right",
        fontsize=7,
        ncols=3,
    )


def _staleness(axes, label: str, run: RunData) -> None:
    counts = run.staleness_counts
    axes.set_title(f"staleness: {label}", fontsize=9)
    axes.set_xlabel("staleness (versions)", fontsize=8)
    axes.set_ylabel("applied gradients", fontsize=8)
    if not counts:
        axes.text(0.5, 0.5, "no applied gradients recorded", ha="center", transform=axes.transAxes)
        return
    everything = [v for by_value in counts.values() for v in by_value]
    low, high = min(everything), max(everything)
    if high - low + 1 <= MAX_HISTOGRAM_BARS:
        edges = np.arange(low, high + 2) - 0.5
    else:
        edges = np.linspace(low, high + 1, MAX_HISTOGRAM_BARS + 1)
    bottom = np.zeros(len(edges) - 1)
    # Stacked in the order the run went through its protocols: BSP's zeros at the bottom.
    order = [p.protocol for p in phases(run)]
    for protocol in sorted(counts, key=lambda p: (order.index(p) if p in order else len(order), p)):
        by_value = counts[protocol]
        values = np.fromiter(by_value.keys(), dtype=float, count=len(by_value))
        weights = np.fromiter(by_value.values(), dtype=float, count=len(by_value))
        heights, _ = np.histogram(values, bins=edges, weights=weights)
        mean = float(np.average(values, weights=weights))
        axes.bar(
            edges[:-1],
            heights,
            width=np.diff(edges),
            bottom=bottom,
            align="edge",
            color=protocol_color(protocol),
            label=f"{plain_text(protocol)} (mean {mean:.2f})",
        )
        bottom += heights
    axes.set_xlim(low - 0.5, max(high, low + 4) + 0.5)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(fontsize=7)
    axes.tick_params(labelsize=7)
