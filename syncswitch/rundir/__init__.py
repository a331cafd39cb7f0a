"""The run directory: its file names and columns, the summary's schema, its writer and reader.

Everything in the package, the CLI and the benchmarks that reads or writes a run directory
goes through here (docs/architecture.md, "One schema per thing"):

    from syncswitch.rundir import names, read_summary
    summary = read_summary(run_dir)            # a typed Summary, checked as it is read
    print(summary.final_value, run_dir / names.METRICS)

Modules: `names` (files and CSV columns), `summary` (Summary and its parts, to/from JSON),
`writer` (RunWriter: the files written as a run goes), `events` (one record per kind of
events.jsonl line, written and read there), `reader` (load_run for reports, read_summary,
read_config, read_events), `timeline` (switches, straggler marks and episodes from
events.jsonl and config.json), `parsing` (bounded file reading). The switch and gradient
records and the checked field reads (`Fields`) are the leaf `syncswitch.records`, which the
synchronizer shares.
"""

from syncswitch.rundir import events, names
from syncswitch.rundir.names import (
    ACTORS,
    CHECKPOINTS,
    CONFIG,
    DROP_COLUMNS,
    DROPS,
    EVENTS,
    FINAL_WEIGHTS,
    LIBRARY_LOG,
    METRIC_COLUMNS,
    METRICS,
    SUMMARY,
    UPDATE_COLUMNS,
    UPDATES,
    WORKER_COLUMNS,
    WORKER_STEPS,
)
from syncswitch.rundir.reader import (
    Episode,
    Metrics,
    RunData,
    StragglerMark,
    TimingSignals,
    has_results,
    load_run,
    not_a_run_dir,
    read_config,
    read_events,
    read_summary,
    read_summary_if_any,
)
from syncswitch.rundir.summary import (
    SUMMARY_KEYS,
    OnlineTimingSummary,
    Reliability,
    Summary,
    Switch,
)
from syncswitch.rundir.writer import RunWriter, create_run_dir, default_run_dir, lock_run_dir

__all__ = [
    "ACTORS",
    "CHECKPOINTS",
    "CONFIG",
    "DROPS",
    "DROP_COLUMNS",
    "EVENTS",
    "FINAL_WEIGHTS",
    "LIBRARY_LOG",
    "METRICS",
    "METRIC_COLUMNS",
    "SUMMARY",
    "SUMMARY_KEYS",
    "UPDATES",
    "UPDATE_COLUMNS",
    "WORKER_COLUMNS",
    "WORKER_STEPS",
    "Episode",
    "Metrics",
    "OnlineTimingSummary",
    "Reliability",
    "RunData",
    "RunWriter",
    "StragglerMark",
    "Summary",
    "Switch",
    "TimingSignals",
    "create_run_dir",
    "default_run_dir",
    "events",
    "has_results",
    "load_run",
    "lock_run_dir",
    "names",
    "not_a_run_dir",
    "read_config",
    "read_events",
    "read_summary",
    "read_summary_if_any",
]
