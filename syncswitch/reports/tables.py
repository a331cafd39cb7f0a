"""The report's tables as plain cells, rendered for the terminal (rich) or a page (HTML)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from syncswitch.records.metric import VALIDATION
from syncswitch.reports.overview import RunOverview, WorkerRow, job_differences


@dataclass(frozen=True)
class Table:
    title: str
    columns: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    notes: list[str] = field(default_factory=list)
    numeric: frozenset[str] = frozenset()  # columns aligned right
    # The columns a terminal shows (all when empty): the rest are in the HTML page.
    brief: tuple[str, ...] = ()

    def to_rich(self):  # -> rich.table.Table; rich is imported only when a terminal asks
        from rich.table import Table as RichTable

        from syncswitch.terminal import printable  # cells come from run directories

        shown = [i for i, name in enumerate(self.columns) if not self.brief or name in self.brief]
        table = RichTable(title=printable(self.title), title_justify="left", show_lines=False)
        for index in shown:
            name = self.columns[index]
            justify: Literal["right", "left"] = "right" if name in self.numeric else "left"
            table.add_column(printable(name), justify=justify, overflow="fold")
        for row in self.rows:
            table.add_row(*(printable(row[i]) for i in shown))
        return table

    def to_html(self, css_class: str) -> str:
        kinds = ["num" if c in self.numeric else "text" for c in self.columns]
        head = "".join(
            f'<th class="{k}">{html.escape(c)}</th>'
            for c, k in zip(self.columns, kinds, strict=True)
        )
        body = "\n".join(
            "<tr>"
            + "".join(
                f'<td class="{k}">{html.escape(cell)}</td>'
                for cell, k in zip(row, kinds, strict=True)
            )
            + "</tr>"
            for row in self.rows
        )
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in self.notes)
        return (
            f'<table class="{css_class}"><caption>{html.escape(self.title)}</caption>\n'
            f"<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table>\n"
            + (f'<ul class="notes">{notes}</ul>\n' if notes else "")
        )


RUN_COLUMNS = (
    "run",
    "status",
    "schedule",
    "as planned",
    "runtime",
    "timing",
    "dataset",
    "workers",
    "workload",
    "final",
    "best",
    "test",
    "wall time",
    "samples/s",
    "time vs first",
    "switches",
    "switch overhead",
    "dropped",
)


# The runs table's columns on a terminal, which it fits in `TERMINAL_TABLE_WIDTH` columns;
# the HTML page (`report --html`) has all of RUN_COLUMNS.
RUN_COLUMNS_BRIEF = (
    "run",
    "status",
    "schedule",
    "timing",
    "final",
    "test",
    "wall time",
    "time vs first",
    "switches",
)
TERMINAL_TABLE_WIDTH = 120


def runs_table(runs: list[RunOverview]) -> Table:
    first = runs[0] if runs else None
    rows = [
        (
            run.label,
            run.status,
            run.schedule,
            "no (see notes)" if run.schedule_changes else "yes",
            run.runtime,
            run.timing,
            run.dataset,
            "-" if run.workers is None else str(run.workers),
            _workload(run),
            _final_value(run),
            _value(run, run.best_value),
            _value(run, run.test_value, split=False),
            _seconds(run.wall_time_s),
            f"{run.samples_per_s:,.0f}" if run.samples_per_s else "-",
            _relative_time(run, first),
            _switches(run),
            f"{run.switch_overhead_s * 1000:.2f} ms" if run.switches else "-",
            str(run.dropped),
        )
        for run in runs
    ]
    notes = [f"{run.label}: {run.status_detail}" for run in runs if not run.complete]
    notes += [f"{run.label}: {note}" for run in runs for note in run.notes]
    notes += [
        f"{run.label}: schedule changed: {change}"
        for run in runs
        for change in run.schedule_changes
    ]
    timings = {run.timing for run in runs}
    if "emulated" in timings:
        notes.append(
            "timing 'emulated': device time was emulated (sleep-padded steps on this machine, "
            "see config.json 'emulation'); times are not real-hardware times"
        )
    if "simulated" in timings:
        notes.append("timing 'simulated': times come from a simulator's virtual clock")
    if any(not run.complete for run in runs):
        notes.append(
            "an incomplete run's final value is its last measured one (@ the fraction of samples)"
        )
    notes.append(
        f"final, best: {_metrics_named(runs)} on the validation split, which every decision "
        "read; test: the final weights on the test split, measured once at the end"
    )
    notes.append("workload: the epochs the job asked for / the samples the run processed")
    differences = job_differences(runs)
    if differences:
        notes.insert(
            0,
            "warning: these runs are not the same job ("
            + "; ".join(differences)
            + "): their accuracies and 'time vs first' compare unlike things",
        )
    numeric = frozenset(
        ("workers", "final acc", "best acc", "wall time", "samples/s", "time vs first")
    ) | {"switch overhead", "dropped"}
    notes.append(
        "on the terminal: "
        + ", ".join(c for c in RUN_COLUMNS if c not in RUN_COLUMNS_BRIEF)
        + " are in the HTML page (report --html)"
    )
    return Table("runs", RUN_COLUMNS, rows, notes, numeric, brief=RUN_COLUMNS_BRIEF)


WORKER_COLUMNS = (
    "worker",
    "steps",
    "step p50",
    "step p90",
    "step max",
    "wait mean",
    "dropped",
    "straggler episodes (emulated)",
    "detected",
)


def workers_table(label: str, rows: list[WorkerRow], source: str) -> Table:
    cells = [
        (
            str(row.worker),
            str(row.steps),
            _ms(row.step_p50_s),
            _ms(row.step_p90_s),
            _ms(row.step_max_s),
            _ms(row.wait_mean_s),
            str(row.dropped),
            "; ".join(row.episodes) or "-",
            str(row.detections)
            + (f" ({row.false_detections} false)" if row.false_detections else ""),
        )
        for row in rows
    ]
    numeric = frozenset(WORKER_COLUMNS[1:7]) | {"detected"}
    return Table(
        f"workers of {label}", WORKER_COLUMNS, cells, [f"step times from {source}"], numeric
    )


def _workload(run: RunOverview) -> str:
    """Epochs the job asked for, and the samples the run processed."""
    epochs = "-" if run.epochs is None else f"{run.epochs:g} ep"
    return epochs if run.samples is None else f"{epochs} / {run.samples:,}"


def _metrics_named(runs: list[RunOverview]) -> str:
    named = sorted({run.metric.name for run in runs}) or ["accuracy"]
    return " / ".join(named)


def _final_value(run: RunOverview) -> str:
    text = _value(run, run.final_value)
    if run.final_value is not None and not run.complete and run.measured_at_fraction is not None:
        text += f" @{run.measured_at_fraction:.0%}"
    return text


def _value(run: RunOverview, value: float | None, *, split: bool = True) -> str:
    """The primary metric's value (accuracies in percent); "(test)" where a run from before
    validation splits measured it on the test set."""
    if value is None:
        return "-"
    metric = run.metric
    legacy = split and metric.split != VALIDATION
    return metric.show(value) + (" (test)" if legacy else "")


def _relative_time(run: RunOverview, first: RunOverview | None) -> str:
    # Only finished runs have a training time to compare.
    if first is None or not (run.complete and first.complete):
        return "-"
    if not run.wall_time_s or not first.wall_time_s:
        return "-"
    return f"{run.wall_time_s / first.wall_time_s:.2f}x"


def _switches(run: RunOverview) -> str:
    if not run.switches:
        return "-"
    shown = [f"{s.from_protocol}>{s.to_protocol} @{s.at_fraction:.0%}" for s in run.switches[:3]]
    more = len(run.switches) - len(shown)
    return ", ".join(shown) + (f" +{more} more" if more else "")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} s"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{1000 * value:.2f} ms"
