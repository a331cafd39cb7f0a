"""The search's report, in its directory: the trace as it grows, then table, plot and decision.

trace.csv   one row per trial, appended as each finishes (reused trials first)
trace.json  the search settings, every row, and at the end the decision and time saved
            (rewritten atomically after every trial)
trace.md    the trace as a markdown table, one row per fraction in the order tried
accuracy_vs_fraction.png
            final accuracy against BSP fraction (log scale): each repeat, the mean, the
            tolerance band around BSP's mean, the chosen fraction marked
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from syncswitch.core.timing.fraction_search import (
    BASELINE,
    SearchDecision,
    SearchSpec,
    TrialKey,
    format_fraction,
)
from syncswitch.files import open_append, write_atomic, write_json_atomic
from syncswitch.recurring.results import SearchResult
from syncswitch.registry import TRACE_COLUMNS, TrialRecord


class TraceWriter:
    def __init__(
        self, search_dir: Path, fingerprint: str, job: dict[str, Any], spec: SearchSpec
    ) -> None:
        self.dir = search_dir
        self.header = {
            "fingerprint": fingerprint,
            "job": job,
            "search": {
                "tolerance_points": spec.tolerance_points,
                "repeats": spec.repeats,
                "seeds": list(spec.seeds),
                "resolution": spec.resolution,
                "max_trials": spec.max_trials,
            },
        }
        self.rows: list[TrialRecord] = []

    def start(self, reused: list[TrialRecord]) -> None:
        header = io.StringIO()
        csv.writer(header).writerow(TRACE_COLUMNS)
        write_atomic(self.dir / "trace.csv", header.getvalue())  # replaces, never follows
        for run in reused:
            self.append(run)

    def append(self, run: TrialRecord) -> None:
        self.rows.append(run)
        row = run.to_plain()
        with open_append(self.dir / "trace.csv") as handle:  # refuses a planted symlink
            csv.writer(handle).writerow([_cell(row[c]) for c in TRACE_COLUMNS])
        self.write_json()

    def write_json(self, **final: Any) -> None:
        write_json_atomic(
            self.dir / "trace.json",
            {**self.header, "trials": [r.to_plain() for r in self.rows], **final},
        )


def write_report(result: SearchResult, trace: TraceWriter) -> dict[str, str]:
    """Write the final table, plot and decision; return the files by kind."""
    decision = result.decision
    saved = result.time_saved
    trace.write_json(
        decision={**decision.to_plain(), "id": result.stored.id},
        time_saved=saved.to_plain() if saved else None,
        parallel_slots=result.slots,
    )
    table = trace_table(result)
    (result.search_dir / "trace.md").write_text(table + "\n")
    plot = result.search_dir / "accuracy_vs_fraction.png"
    plot_search(result, plot)
    return {
        "table": str(result.search_dir / "trace.md"),
        "plot": str(plot),
        "csv": str(result.search_dir / "trace.csv"),
        "json": str(result.search_dir / "trace.json"),
    }


def trace_table(result: SearchResult) -> str:
    """One row per fraction, in the order the search tried them (BSP first)."""
    decision = result.decision
    lines = [
        "| step | BSP fraction | final acc % per seed | mean acc % | vs BSP (points) | "
        f"within tolerance | mean {_time_kind(result)} s | time vs BSP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    bsp_wall = _mean_wall(result, BASELINE)
    fractions = [BASELINE] + [e.fraction for e in decision.evidence]
    for step, fraction in enumerate(fractions):
        if fraction == BASELINE:
            accuracies, mean, within = decision.baseline, decision.bsp_mean, "(baseline)"
            delta = "-"
        else:
            evidence = next(e for e in decision.evidence if e.fraction == fraction)
            accuracies, mean = evidence.accuracies, evidence.mean
            within = "yes" if evidence.holds else "no"
            delta = f"{0.0 - evidence.below_bsp_points:+.2f}"  # 0.0 - x: no "-0.00"
        wall = _mean_wall(result, fraction)
        chosen = fraction == decision.fraction
        label = format_fraction(fraction) + (" (BSP)" if fraction == BASELINE else "")
        lines.append(
            "| {} | {} | {} | {} | {} | {} | {} | {} |".format(
                step,
                f"**{label} (chosen)**" if chosen else label,
                ", ".join(_pct(a) for a in accuracies),
                _pct(mean),
                delta,
                within,
                f"{wall:.1f}" if wall is not None else "-",
                f"{wall / bsp_wall:.2f}x" if wall and bsp_wall else "-",
            )
        )
    lines.append("")
    lines.append(decision_text(result))
    return "\n".join(lines)


def decision_text(result: SearchResult) -> str:
    decision = result.decision
    spec = result.spec
    parts = [
        f"Chosen: **{format_fraction(decision.fraction)}** (`--schedule {decision.schedule}`), "
        f"decision #{result.stored.id} for job `{result.fingerprint[:12]}`; mean of "
        f"{spec.repeats} repeat(s) per fraction (seeds {', '.join(map(str, spec.seeds))}), "
        f"tolerance {spec.tolerance_points:g} points, resolution "
        f"{format_fraction(spec.resolution)}, {decision.trials_used} trials on the search's "
        f"path (budget {spec.max_trials}).",
        f"Why: {decision.reason}.",
    ]
    saved = result.time_saved
    if saved is not None:
        text = (
            f"Time against full BSP: {saved.chosen_wall_s:.1f} s instead of "
            f"{saved.bsp_wall_s:.1f} s (mean {_time_kind(result)}), {saved.saved_s:.1f} s saved "
            f"({100 * saved.saved_s / saved.bsp_wall_s:.0f}%, {saved.speedup:.2f}x)."
        )
        if not saved.comparable:
            text += (
                " Some of these trials ran at the same time as others on shared CPUs, so "
                "their wall times are not comparable; rerun with --parallel 1 for timing."
            )
        parts.append(text)
    return "\n\n".join(parts)


def _time_kind(result: SearchResult) -> str:
    """Which clock the trials' times are on: a simulated one must never pass for wall time."""
    return "SIMULATED time" if result.job.get("runtime") == "sim" else "wall time"


def plot_search(result: SearchResult, path: Path) -> None:
    # The object-oriented API with the Agg canvas: no pyplot state, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, NullLocator

    decision: SearchDecision = result.decision
    spec = result.spec
    figure = Figure(figsize=(7.5, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    bsp = 100 * decision.bsp_mean
    tolerance = spec.tolerance_points
    axes.axhspan(
        bsp - tolerance,
        bsp + tolerance,
        color="tab:blue",
        alpha=0.12,
        label=f"BSP mean ± tolerance ({tolerance:g} points)",
    )
    axes.axhline(bsp, color="tab:blue", linewidth=1)
    points = [(BASELINE, decision.baseline, bsp, True)] + [
        (e.fraction, e.accuracies, 100 * e.mean, e.holds) for e in decision.evidence
    ]
    for index, (fraction, accuracies, _, _) in enumerate(points):
        axes.scatter(
            [fraction] * len(accuracies),
            [100 * a for a in accuracies],
            s=16,
            color="0.55",
            zorder=2,
            label="each repeat (seed)" if index == 0 else None,
        )
    ordered = sorted(points)
    axes.plot([p[0] for p in ordered], [p[2] for p in ordered], color="0.3", zorder=2)
    for holds, colour, name in ((True, "tab:green", "within"), (False, "tab:red", "outside")):
        chosen = [p for p in points if p[3] == holds]
        axes.scatter(
            [p[0] for p in chosen],
            [p[2] for p in chosen],
            s=40,
            color=colour,
            zorder=3,
            label=f"mean of {spec.repeats}, {name} tolerance",
        )
    chosen_mean = 100 * decision.fraction_mean
    axes.scatter(
        [decision.fraction],
        [chosen_mean],
        s=260,
        marker="*",
        color="gold",
        edgecolor="black",
        zorder=4,
        label=f"chosen: {format_fraction(decision.fraction)}",
    )
    axes.annotate(
        f"{format_fraction(decision.fraction)}: {chosen_mean:.2f}%",
        (decision.fraction, chosen_mean),
        textcoords="offset points",
        xytext=(8, -16),
    )
    axes.set_xscale("log", base=2)
    ticks = sorted({p[0] for p in points})
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_minor_locator(NullLocator())
    # Refined fractions sit close together on the log axis: slanted labels do not overlap.
    axes.set_xticklabels(
        [format_fraction(t) + (" (BSP)" if t == 1 else "") for t in ticks],
        rotation=35,
        ha="right",
    )
    axes.set_xlabel("BSP fraction of the training samples (ASP after it)")
    axes.set_ylabel("final test accuracy (%)")
    job = result.job
    axes.set_title(
        f"Switch-point search: {job.get('model')} on {job.get('dataset')}, "
        f"{job.get('workers')} workers (job {result.fingerprint[:12]})",
        fontsize=10,
    )
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    figure.savefig(path, dpi=110)


def _mean_wall(result: SearchResult, fraction: float) -> float | None:
    walls = []
    for seed in result.spec.seeds:
        run = result.trials.get(TrialKey(fraction, seed))
        if run is None or run.wall_time_s is None:
            return None
        walls.append(run.wall_time_s)
    return sum(walls) / len(walls)


def _pct(value: float) -> str:
    return "nan" if value is None or math.isnan(value) else f"{100 * value:.2f}"


def _cell(value: Any) -> Any:
    return "" if value is None else value
