"""Reports from run directories: tables, paper-style figures and a self-contained page.

Ray-free and runtime-free: everything is read through syncswitch.rundir from the files a run
writes (config.json, summary.json, metrics.csv, updates.csv, drops.csv, events.jsonl,
worker_steps.csv), so a finished, failed or killed run can be reported on any machine, long
after it ran.
"""

from syncswitch.reports.report import Report, plot_labels
from syncswitch.rundir import RunData, load_run

__all__ = ["Report", "RunData", "load_run", "plot_labels"]
