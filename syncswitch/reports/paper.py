"""The report's default figure, as a paper draws it: the primary metric against time, one panel.

Runs of the same job (`overview.job_of`: a different seed does not make a different job) and
schedule are one *group*, drawn as one line: the mean over its runs on a common time grid,
with a band from the lowest to the highest run (min-max: with the few seeds a study runs, a
band that shows every seed says more than a standard deviation). The grid spans the time all
of a group's runs cover (from the latest first evaluation to the earliest last one), so every
point of the mean is a mean over every run. A group of one run is its own line, no band.
Each run's switches are marked on its group's line. Up to `MAX_GROUPS` groups get distinct
styles (colour, line style and marker all differ, so the figure reads in grey too); the legend
sits outside the axes, never over a curve.

Bounded like the dashboard (plots.py): at most `MAX_GROUPS` groups, a lone run's line thinned
to `MAX_LINE_POINTS`, switch markers to `MAX_MARKERS` per group; `paper_notes` says what was
left out. Runs whose primary metric differs from the first run's (a regression job beside a
classifier) cannot share the y axis: they are left out and named.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from syncswitch.reports.overview import job_of
from syncswitch.reports.plot_common import (
    SIMULATED,
    WALL,
    plain_text,
    plotted,
    thinned,
    time_kind,
    time_label,
)
from syncswitch.reports.plots import MAX_LINE_POINTS, MAX_MARKERS
from syncswitch.rundir import RunData

MAX_GROUPS = 12
GRID_POINTS = 200  # points of a group's common time grid

# Colour-blind-safe colours (Okabe and Ito), then the same six dashed; each with its own marker.
_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
_MARKERS = ("o", "s", "^", "v", "P", "X", "*", "<", ">", "h", "p", "8")
STYLES: tuple[tuple[str, str, str], ...] = tuple(
    (_COLORS[i % len(_COLORS)], "-" if i < len(_COLORS) else "--", _MARKERS[i])
    for i in range(MAX_GROUPS)
)
MARKS_PER_LINE = 8  # style markers along a line (switches have their own, hollow diamonds)


@dataclass(frozen=True)
class Group:
    """Runs of one job and schedule, and how the figure labels them."""

    label: str
    runs: tuple[RunData, ...]


@dataclass(frozen=True)
class Curve:
    """A group's line: the mean (and the band's bounds) on its grid, or a lone run's line."""

    time_s: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray


def groups_of(runs: list[RunData]) -> list[Group]:
    """Runs grouped by (job, schedule, finished or not), in the order first met; labelled by
    schedule, with the job settings that tell groups apart when the runs are of several jobs."""
    keyed: dict[tuple, list[RunData]] = {}
    for run in runs:
        keyed.setdefault((job_of(run), run.schedule, _status(run)), []).append(run)
    jobs = list(dict.fromkeys(job for job, _, _ in keyed))
    differing = _differing_keys(jobs)
    groups = []
    for (job, schedule, status), members in keyed.items():
        label = schedule
        settings = dict(job)
        if differing:
            label += " (" + ", ".join(f"{key} {settings.get(key, '-')}" for key in differing) + ")"
        if status:
            label += f" [{status}]"
        if len(members) > 1:
            label += f", {len(members)} runs"
        groups.append(Group(plain_text(label), tuple(members)))
    return groups


def _status(run: RunData) -> str:
    if run.complete:
        return ""
    return "failed" if run.status.startswith("failed") else "incomplete"


def _differing_keys(jobs: list[tuple[tuple[str, str], ...]]) -> list[str]:
    """The settings the jobs do not all share (a setting one job lacks counts as differing)."""
    keys = list(dict.fromkeys(key for job in jobs for key, _ in job))
    return [key for key in keys if len({dict(job).get(key) for job in jobs}) > 1]


def curve(runs: tuple[RunData, ...]) -> Curve:
    """The group's mean and min-max band on a common grid over the time every run covers (a
    lone run, or runs that share no time: the first run's own points)."""
    lines = [(run.metrics.time_s, plotted(run)[0]) for run in runs if len(run.metrics)]
    if not lines:
        empty = np.array([], float)
        return Curve(empty, empty, empty, empty)
    start = max(float(t[0]) for t, _ in lines)
    end = min(float(t[-1]) for t, _ in lines)
    if len(lines) == 1 or end <= start:
        time_s, values = lines[0]
        keep = thinned(len(time_s), MAX_LINE_POINTS)
        return Curve(time_s[keep], values[keep], values[keep], values[keep])
    grid = np.linspace(start, end, GRID_POINTS)
    on_grid = np.stack([np.interp(grid, t, v) for t, v in lines])
    return Curve(grid, on_grid.mean(axis=0), on_grid.min(axis=0), on_grid.max(axis=0))


def shown_runs(runs: list[RunData]) -> tuple[list[Group], list[str]]:
    """The groups the figure draws, and notes on what it leaves out."""
    notes = []
    if runs:
        axis = plotted(runs[0])[1]
        other = [run for run in runs if plotted(run)[1] != axis]
        if other:
            names = ", ".join(plain_text(run.name) for run in other)
            notes.append(f"runs measured by another metric than {axis!r} are not drawn: {names}")
            runs = [run for run in runs if plotted(run)[1] == axis]
    groups = groups_of(runs)
    if len(groups) > MAX_GROUPS:
        notes.append(
            f"the figure shows the first {MAX_GROUPS} of {len(groups)} schedules "
            "(the tables list all runs)"
        )
    groups = groups[:MAX_GROUPS]
    for group in groups:
        if len(group.runs) == 1 and len(group.runs[0].metrics) > MAX_LINE_POINTS:
            notes.append(f"{group.label}: line thinned to {MAX_LINE_POINTS} points")
        if sum(len(run.switches) for run in group.runs) > MAX_MARKERS:
            notes.append(f"{group.label}: switch markers thinned to {MAX_MARKERS}")
    return groups, notes


def paper_notes(runs: list[RunData]) -> list[str]:
    return shown_runs(runs)[1]


def paper_figure(runs: list[RunData]) -> Figure:
    """Each group's mean with its min-max band against time, switches marked: one panel, or
    one per kind of seconds when real and simulated runs are drawn together (one axis never
    carries two kinds of time)."""
    groups, _ = shown_runs(runs)
    kinds = [
        (kind, [g for g in groups if time_kind(g.runs[0]) == kind]) for kind in (WALL, SIMULATED)
    ]
    kinds = [(kind, some) for kind, some in kinds if some] or [(WALL, [])]
    figure = Figure(figsize=(6 + 4 * len(kinds), 5), layout="constrained")
    FigureCanvasAgg(figure)
    panels = figure.subplots(1, len(kinds), sharey=True, squeeze=False)[0]
    styles = dict(zip((g.label for g in groups), STYLES, strict=False))
    handles: list = []
    labels: list[str] = []
    banded = False
    drawn: list[tuple[str, Curve]] = []
    for axes, (kind, kind_groups) in zip(panels, kinds, strict=True):
        for group in kind_groups:
            color, linestyle, marker = styles[group.label]
            line = curve(group.runs)
            # A curve equal to one drawn before would hide it: its markers fall between the
            # other's, and its label says so.
            same = next((label for label, other in drawn if _same_curve(line, other)), None)
            every = max(1, len(line.time_s) // MARKS_PER_LINE)
            label = group.label if same is None else f"{group.label} (same curve as {same})"
            (line_drawn,) = axes.plot(
                line.time_s,
                line.mean,
                color=color,
                linestyle=linestyle if same is None else (0, (4, 3)),
                marker=marker,
                markevery=(every // 2 if same is not None else 0, every),
                markersize=5,
                linewidth=1.8,
                label=label,
            )
            drawn.append((group.label, line))
            handles.append(line_drawn)
            labels.append(label)
            if len(group.runs) > 1 and np.any(line.high > line.low):
                axes.fill_between(
                    line.time_s, line.low, line.high, color=color, alpha=0.18, lw=0,
                    label=f"_band {group.label}",
                )  # fmt: skip
                banded = True
            _mark_switches(axes, group, line, color)
        shown = [(run.name, run) for group in kind_groups for run in group.runs]
        axes.set_xlabel(time_label(shown))
        axes.grid(alpha=0.3)
        axes.spines[["top", "right"]].set_visible(False)
        if len(kinds) > 1:
            # One panel per kind of seconds: a simulator's are not the wall clock's.
            axes.set_title("SIMULATED runs" if kind == SIMULATED else "real-time runs")
    if any(run.switches for group in groups for run in group.runs):
        handles.append(
            Line2D([], [], marker="D", markerfacecolor="white", markeredgecolor="black", ls="none")
        )
        labels.append("switch")
    if banded:
        handles.append(Patch(color="#8c8c8c", alpha=0.3))
        labels.append("min-max over runs")
    every_run = [run for group in groups for run in group.runs]
    axis = plotted(every_run[0])[1] if every_run else "primary metric"
    panels[0].set_ylabel(axis)
    if len(kinds) == 1:
        panels[0].set_title(f"{axis} vs time")
    if handles:
        figure.legend(handles, labels, loc="outside right upper", fontsize=9, frameon=False)
    return figure


def _same_curve(a: Curve, b: Curve) -> bool:
    return (
        len(a.time_s) > 0 and np.array_equal(a.time_s, b.time_s) and np.array_equal(a.mean, b.mean)
    )


def _mark_switches(axes, group: Group, line: Curve, color: str) -> None:
    """Each run's switches, on the group's line (a hollow diamond each)."""
    at = np.array([s.time_s for run in group.runs for s in run.switches], float)
    at = at[thinned(len(at), MAX_MARKERS)]
    if not len(at) or not len(line.time_s):
        return
    axes.plot(
        at,
        np.interp(at, line.time_s, line.mean),
        marker="D",
        markersize=7,
        markerfacecolor="white",
        markeredgecolor=color,
        markeredgewidth=1.6,
        linestyle="none",
        label=f"_switch {group.label}",
        zorder=5,
    )
