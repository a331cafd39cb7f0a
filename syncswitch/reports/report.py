"""A report over run directories: the runs table, per-worker tables, the figure, a page."""

from __future__ import annotations

import base64
import html
import io
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from matplotlib.figure import Figure

from syncswitch.errors import RunDirError
from syncswitch.files import write_output
from syncswitch.reports.overview import overview, worker_rows
from syncswitch.reports.paper import paper_figure, paper_notes
from syncswitch.reports.plots import plot_notes, plot_runs, save_figure
from syncswitch.reports.tables import Table, runs_table, workers_table
from syncswitch.rundir import RunData, has_results, load_run, not_a_run_dir

PAPER = "paper"  # one panel: the primary metric against time, mean and band over seeds
DASHBOARD = "dashboard"  # every panel: metric by time and samples, phases, stragglers, ...
PLOT_STYLES = (PAPER, DASHBOARD)

_ALT_TEXT = {
    PAPER: "the primary metric against time per schedule: the mean over runs of a job, a "
    "min-max band, switches marked",
    DASHBOARD: "the primary metric against time and samples, protocol phases, stragglers and "
    "staleness per run",
}


@dataclass(frozen=True)
class Skipped:
    """A directory given to the report that holds no run to report, and why."""

    path: Path
    reason: str

    def describe(self) -> str:
        return f"skipped {str(self.path)!r}: {self.reason}"


class Report:
    def __init__(self, runs: list[RunData], skipped: list[Skipped] | None = None) -> None:
        self.runs = runs
        self.skipped = skipped or []
        self.labelled = list(zip(plot_labels(runs), runs, strict=True))

    @classmethod
    def load(cls, paths: list[str | Path]) -> Report:
        """The runs among `paths`; a path that is no run directory, or a run that recorded
        nothing yet (refused or killed before its first evaluation), is skipped and named,
        so that `report runs/*` reports the others. A run directory whose files are broken
        is refused in one line. With no run left, one line names what was skipped."""
        runs, skipped = [], []
        for given in paths:
            path = Path(given)
            problem = not_a_run_dir(path)
            if problem:
                skipped.append(Skipped(path, problem))
                continue
            run = load_run(path)
            if has_results(run):
                runs.append(run)
            else:
                skipped.append(
                    Skipped(path, "no results: no summary.json and no evaluation recorded")
                )
        if not runs:
            raise RunDirError(
                "no run to report: " + "; ".join(f"{str(s.path)!r} {s.reason}" for s in skipped)
            )
        return cls(runs, skipped)

    def runs_table(self) -> Table:
        return runs_table([overview(run) for run in self.runs])

    def worker_tables(self) -> list[Table]:
        tables = []
        for label, run in self.labelled:
            rows, source = worker_rows(run)
            table = workers_table(f"{run.name} ({label})", rows, source)
            tables.append(table)
        return tables

    def figure(self, style: str = PAPER) -> Figure:
        _check_style(style)
        return paper_figure(self.runs) if style == PAPER else plot_runs(self.labelled)

    def plot_notes(self, style: str = PAPER) -> list[str]:
        """What the figure leaves out to stay readable (and fast to draw)."""
        _check_style(style)
        return paper_notes(self.runs) if style == PAPER else plot_notes(self.labelled)

    def write_plot(self, path: Path, style: str = PAPER) -> Figure:
        figure = self.figure(style)
        save_figure(figure, path)
        return figure

    def write_html(self, path: Path, figure: Figure | None = None, style: str = PAPER) -> None:
        """One self-contained page: the tables and the figure (an embedded PNG; `figure`, when
        given, is the one drawn in `style`)."""
        figure = figure or self.figure(style)
        png = io.BytesIO()
        figure.savefig(png, format="png", dpi=100)
        image = base64.b64encode(png.getvalue()).decode("ascii")
        tables = self.runs_table().to_html("runs")
        workers = "\n".join(
            f"<details><summary>{html.escape(t.title)}</summary>\n{t.to_html('workers')}</details>"
            for t in self.worker_tables()
        )
        page = _PAGE.format(
            generated=datetime.now().strftime("%Y-%m-%d %H:%M"),
            count=len(self.runs),
            noun="directory" if len(self.runs) == 1 else "directories",
            dirs=", ".join(html.escape(str(run.path)) for run in self.runs),
            skipped="".join(
                f'<p class="notes">{html.escape(s.describe())}</p>\n' for s in self.skipped
            ),
            table=tables,
            image=image,
            alt=html.escape(_ALT_TEXT[style]),
            workers=workers,
        )
        write_output(path, page, "--html")


def _check_style(style: str) -> None:
    if style not in PLOT_STYLES:
        raise RunDirError(f"plot style {style!r}: choose one of {', '.join(PLOT_STYLES)}")


def plot_labels(runs: list[RunData]) -> list[str]:
    """Legend labels: the schedule, with the directory name where schedules repeat, and the
    status of a run that did not complete."""
    repeated = Counter(run.schedule for run in runs)
    labels = []
    for run in runs:
        label = run.schedule if repeated[run.schedule] == 1 else f"{run.schedule} ({run.name})"
        if not run.complete:
            label += " [failed]" if run.status.startswith("failed") else " [incomplete]"
        labels.append(label)
    return labels


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Sync-Switch report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
caption {{ text-align: left; font-weight: bold; padding: 0.3em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
td.text, th.text {{ text-align: left; }}
thead {{ background: #f0f0f0; }}
img {{ max-width: 100%; }}
.notes {{ font-size: 0.9em; color: #555; }}
</style>
</head>
<body>
<h1>Sync-Switch report</h1>
<p>Generated {generated} from {count} run {noun}: {dirs}.</p>
{skipped}
{table}
<figure><img alt="{alt}" src="data:image/png;base64,{image}"></figure>
<h2>Workers</h2>
{workers}
</body>
</html>
"""
