"""Every file of a run directory, by name, and the columns of each CSV file.

The package, the CLI and the benchmarks name run-directory files only through these
constants, so the format has one description (docs/architecture.md, "run directory").
"""

from __future__ import annotations

CONFIG = "config.json"  # the resolved job, emulation and timing labels included
SUMMARY = "summary.json"  # the run's figures: rewritten as the run goes, final at the end
METRICS = "metrics.csv"  # one row per evaluation point
UPDATES = "updates.csv"  # one row per applied gradient (large: read lazily)
DROPS = "drops.csv"  # one row per dropped gradient, with its reason
EVENTS = "events.jsonl"  # switches, decisions, failures, checkpoints: one JSON object a line
WORKER_STEPS = "worker_steps.csv"  # per-worker step-time statistics, written at the end
# The trained model's state_dict (runs before 0.2: {"flat_weights": tensor}).
FINAL_WEIGHTS = "final_weights.pt"
BEST_WEIGHTS = "best_weights.pt"  # the best evaluation's (control/best.py)
CHECKPOINTS = "checkpoints"  # the checkpoint directory (syncswitch.core.reliability.checkpoints)
ACTORS = "actors.json"  # which process is which and where it runs (Ray runtime)
LIBRARY_LOG = "ray.log"  # Ray's and PyTorch's own output, unless --verbose
TENSORBOARD = "tensorboard"  # --logger tensorboard's event files
LOCK = ".syncswitch.lock"  # held by the one process writing the run (syncswitch.files)
TIMING_SIGNALS = "timing_signals.csv"  # an online phase's signals at each check of its rule

# What marks a directory as holding an earlier run (a new run must not write into it): any
# file a run writes, so a fresh run never appends to stray logs without their header. Not
# the lock file or the library log: the CLI makes those before the run's own check.
RUN_MARKERS = (
    CONFIG,
    SUMMARY,
    CHECKPOINTS,
    METRICS,
    UPDATES,
    DROPS,
    EVENTS,
    WORKER_STEPS,
    FINAL_WEIGHTS,
    BEST_WEIGHTS,
    ACTORS,
    TENSORBOARD,
    TIMING_SIGNALS,
)

# Every CSV row says how its times were made, so no figure passes for real-hardware timing.
TIMING_COLUMNS = ("emulated", "simulated")
# metrics.csv: these, then one column per measure of the evaluated split (its primary
# metric first, then its loss, then the other metrics: val_accuracy, val_loss, ...; runs from
# before validation splits have test_accuracy, test_loss), then these.
METRIC_HEAD = ("time_s", "samples", "fraction", "version", "protocol")
METRIC_TAIL = ("train_loss", "samples_per_s", *TIMING_COLUMNS)
# The columns of the default job (classification judged on validation accuracy).
METRIC_COLUMNS = (*METRIC_HEAD, "val_accuracy", "val_loss", *METRIC_TAIL)


def metric_columns(measured: tuple[str, ...]) -> tuple[str, ...]:
    """metrics.csv's header for these measure columns (e.g. ("val_mse", "val_loss"))."""
    return (*METRIC_HEAD, *measured, *METRIC_TAIL)


WORKER_COLUMNS = (
    "worker",
    "steps",
    "step_time_mean_s",
    "step_time_p50_s",
    "step_time_p90_s",
    "step_time_max_s",
    "compute_mean_s",
    "compute_cpu_mean_s",  # the same steps' CPU time (Ray workers; empty on the simulator)
    "wait_mean_s",
    *TIMING_COLUMNS,
)
# UpdateRecord's and DropRecord's fields, in order (spelled out so that reading a run directory
# never imports torch; tests/rundir checks they match the records).
UPDATE_COLUMNS = (
    "version",
    "worker",
    "sequence",
    "computed_version",
    "staleness",
    "protocol",
    "samples",
    "progress",
    "time_s",
    "loss",
    "step_time_s",
    "lr",
    "momentum",
    *TIMING_COLUMNS,
)
DROP_COLUMNS = ("worker", "sequence", "computed_version", "reason", "time_s")
# Online timing (control/timing.py): one row per check of the rule while the online phase
# runs; `signal` is what the rule compares with `threshold`, `decision` its reason then.
TIMING_SIGNAL_COLUMNS = (
    "samples",
    "fraction",
    "rule",
    "noise_trace",
    "grad_sq",
    "drift_sq",
    "drift_stderr",
    "drift_rounds",
    "noise_scale",
    "loss",
    "signal",
    "threshold",
    "decision",
    *TIMING_COLUMNS,
)
