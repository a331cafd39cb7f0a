"""`syncswitch report`: tables, a paper-style figure and a page from run directories."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

_EXAMPLES = """examples:
  syncswitch report runs/bsp runs/asp runs/bsp025-asp            # one table, first run = 1.00x
  syncswitch report runs/* --plot report.png                     # accuracy vs time, per schedule
  syncswitch report runs/* --plot report.png --plot-style dashboard  # every panel, per run
  syncswitch report runs/* --plot report.svg --html report.html  # a self-contained page too
  syncswitch report --workers runs/bsp025-asp                    # per-worker steps, waits, drops
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "report",
        help="tables and plots from run directories",
        description="Summarise run directories (finished, failed or killed) in a table; "
        "directories that hold no run (or a run that recorded nothing) are skipped and named; "
        "optionally plot the primary metric against time (one panel; runs of the same job and "
        "schedule drawn as their mean with a min-max band, switches marked) or, with "
        "--plot-style dashboard, every panel per run (by time and samples, protocol phases, "
        "online timing, stragglers, staleness), and write one self-contained HTML page. "
        "Reads only the files in the run directories.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run directories")
    parser.add_argument("--plot", metavar="FILE", help="write the figure to FILE (.png or .svg)")
    parser.add_argument(
        "--plot-style",
        choices=("paper", "dashboard"),
        default="paper",
        help="paper (default): the primary metric against time, one line per schedule, the "
        "mean over seeds with a min-max band; dashboard: every panel, one line per run",
    )
    parser.add_argument(
        "--html", metavar="FILE", help="write one self-contained page (tables and figure)"
    )
    parser.add_argument(
        "--workers",
        action="store_true",
        help="show each run's workers (steps, step-time p50/p90/max, wait, dropped gradients, "
        "straggler episodes and detections) instead of the runs table",
    )
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from syncswitch.errors import RunDirError
    from syncswitch.files import check_output
    from syncswitch.reports import Report
    from syncswitch.reports.plots import PLOT_SUFFIXES
    from syncswitch.reports.tables import TERMINAL_TABLE_WIDTH
    from syncswitch.terminal import printable

    plot_path = Path(args.plot) if args.plot else None
    if plot_path is not None and plot_path.suffix.lower() not in PLOT_SUFFIXES:
        raise RunDirError(f"--plot {args.plot!r}: the file must end in .png or .svg")
    for path, what in ((plot_path, "--plot"), (Path(args.html) if args.html else None, "--html")):
        if path is not None:
            check_output(path, what)  # before the runs are read
    report = Report.load(args.run_dirs)
    for skipped in report.skipped:
        print(f"syncswitch: {printable(skipped.describe())}", file=sys.stderr)
    # Names and notes come from run directories: printed as they are, never as rich markup,
    # and with their control characters escaped (no escape sequence reaches the terminal).
    # At most TERMINAL_TABLE_WIDTH columns, narrower on a narrower terminal (a file or a pipe
    # has no width): the table's brief columns, their cells wrapped; all columns in the page.
    width = TERMINAL_TABLE_WIDTH
    if sys.stdout.isatty():
        width = min(width, Console().width)
    console = Console(highlight=False, markup=False, emoji=False, width=width)
    tables = report.worker_tables() if args.workers else [report.runs_table()]
    for table in tables:
        console.print(table.to_rich())
        for note in table.notes:
            console.print(f"  {printable(note)}", soft_wrap=True)
    figure = report.write_plot(plot_path, args.plot_style) if plot_path else None
    if plot_path:
        print(f"plot written to {printable(plot_path)}")
    if plot_path or args.html:
        for note in report.plot_notes(args.plot_style):
            print(f"note: {printable(note)}")
    if args.html:
        report.write_html(Path(args.html), figure, args.plot_style)
        print(f"page written to {printable(args.html)}")
    return 0
