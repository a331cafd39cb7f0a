"""What a report says about one run, derived from its files: figures, phases, per-worker rows.

Every figure is derived from the append-only files (metrics.csv, events.jsonl, drops.csv), so
a killed run, whose summary.json is stale or missing, is described as far as it got.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncswitch.config import DEFAULT_MODEL
from syncswitch.records.metric import TEST, MetricSpec, known_direction
from syncswitch.rundir import RunData, Switch
from syncswitch.rundir.changes import schedule_changes

# config.json may come from elsewhere: its worker count alone never sizes a table.
MAX_LISTED_WORKERS = 4096


@dataclass(frozen=True)
class ProtocolSpan:
    """A stretch of the run under one protocol."""

    protocol: str
    start_s: float
    end_s: float
    start_samples: int
    end_samples: int


@dataclass(frozen=True)
class RunOverview:
    """One row of the runs table."""

    label: str
    status: str  # complete, failed, incomplete
    status_detail: str  # why, for the notes under the table
    schedule: str
    runtime: str
    timing: str  # real, emulated, simulated
    dataset: str  # "dataset (model)", as config.json names them
    workers: int | None
    epochs: float | None  # the workload, in passes over the training set
    job: tuple[tuple[str, str], ...]  # what makes two runs the same job, for the warning
    metric: MetricSpec  # the primary metric and the split its values are on
    final_value: float | None
    measured_at_fraction: float | None  # where the last value was measured
    best_value: float | None
    test_value: float | None  # the final weights' primary metric on the test split
    wall_time_s: float | None
    samples: int | None
    samples_per_s: float | None
    switches: tuple[Switch, ...]
    switch_overhead_s: float
    dropped: int
    time_by_protocol_s: dict[str, float]
    notes: tuple[str, ...]  # oddities met reading the files (torn lines of a killed run)
    schedule_changes: tuple[str, ...] = ()  # what changed the planned schedule, if anything

    @property
    def complete(self) -> bool:
        return self.status == "complete"


def metric_of(run: RunData) -> MetricSpec:
    """The run's primary metric: its summary's, else what metrics.csv's columns say (a
    direction known for common names, else higher)."""
    if run.summary is not None:
        return run.summary.metric
    metric = run.metrics.metric
    higher = known_direction(metric)
    return MetricSpec(metric, True if higher is None else higher, run.metrics.split)


def _test_value(run: RunData, metric: MetricSpec) -> float | None:
    test = run.summary.test if run.summary is not None else None
    return None if not test or metric.split == TEST else test.get(metric.name)


def overview(run: RunData, label: str | None = None) -> RunOverview:
    metrics = run.metrics
    metric = metric_of(run)
    has_metrics = len(metrics) > 0
    end_s, end_samples = run_end(run)
    return RunOverview(
        label=label or run.name,
        status=_status(run),
        status_detail=_status_detail(run),
        schedule=run.schedule,
        runtime=run.runtime,
        timing=run.timing,
        dataset=f"{_named(run.config, 'dataset')} ({_model(run.config)})",
        workers=run.workers,
        epochs=_number(run.config.get("epochs")),
        job=job_of(run),
        metric=metric,
        final_value=float(metrics.value[-1]) if has_metrics else None,
        measured_at_fraction=float(metrics.fraction[-1]) if has_metrics else None,
        best_value=metric.best(float(v) for v in metrics.value),
        test_value=_test_value(run, metric),
        wall_time_s=end_s if has_metrics else None,
        samples=end_samples if has_metrics else None,
        samples_per_s=end_samples / end_s if has_metrics and end_s > 0 else None,
        switches=tuple(run.switches),
        switch_overhead_s=sum(s.overhead_s for s in run.switches),
        dropped=sum(run.drops_by_reason.values()),
        time_by_protocol_s=time_by_protocol(phases(run)),
        notes=(*run.notes, *_chosen_follower(run)),
        schedule_changes=schedule_changes(run.summary),
    )


def _chosen_follower(run: RunData) -> tuple[str, ...]:
    """`--schedule online`'s choice of what follows BSP, why and from what, as a note."""
    timing = run.summary.online_timing if run.summary is not None else None
    if timing is None or not timing.follower:
        return ()
    # Notes are escaped where they are shown (tables.py): the file's text goes in as it is.
    return (f"online timing chose what follows BSP: {timing.follower.get('describe', '')}",)


# What two runs must share to be the same job (a different seed, schedule, runtime or timing
# is what a report compares); the timing kind is there too: simulated seconds against real
# ones is not a time comparison.
JOB_KEYS = (
    "dataset", "model", "workers", "epochs", "batch_size", "lr", "mnist1d_samples",
    "pysource_bytes", "corpus_sha256",
)  # fmt: skip
MAX_NAME_CHARS = 60


def job_of(run: RunData) -> tuple[tuple[str, str], ...]:
    config = run.config
    values = {key: _named(config, key) for key in JOB_KEYS}
    values["model"] = _model(config)
    if values["dataset"] != "mnist1d":
        values.pop("mnist1d_samples")
    if values["dataset"] != "pysource":  # the language model's text: its size and checksum
        values.pop("pysource_bytes")
        values.pop("corpus_sha256")
    if (epochs := _number(config.get("epochs"))) is not None:
        values["epochs"] = f"{epochs:g}"
    values["timing"] = run.timing
    return tuple(values.items())


def job_differences(runs: list[RunOverview]) -> list[str]:
    """'key a vs b' for each job setting the runs do not share (values in first-seen order)."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        for key, value in run.job:
            values = seen.setdefault(key, [])
            if value not in values:
                values.append(value)
    return [f"{key} {' vs '.join(values)}" for key, values in seen.items() if len(values) > 1]


def _named(config: dict, key: str) -> str:
    # config.json may come from elsewhere: what it says is shown, bounded, on one line.
    value = config.get(key)
    text = "?" if value is None else " ".join(str(value).split())
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 3] + "..."


def _model(config: dict) -> str:
    if config.get("model") is None:  # the dataset's default model, named or not
        return DEFAULT_MODEL.get(str(config.get("dataset")), "?")
    return _named(config, "model")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if np.isfinite(value) else None


def run_end(run: RunData) -> tuple[float, int]:
    """Run time and samples at the last evaluation: the run's end when it completed.

    summary.json's wall time is this same point (the final evaluation), so the table agrees
    with it; for a killed run it is as far as the run was measured.
    """
    metrics = run.metrics
    if len(metrics) == 0:
        return 0.0, 0
    return float(metrics.time_s[-1]), int(metrics.samples[-1])


def phases(run: RunData) -> list[ProtocolSpan]:
    """The run's protocol phases, from its switches (or, without any, metrics.csv)."""
    end_s, end_samples = run_end(run)
    first = _first_protocol(run)
    if first is None:
        return []
    result = []
    start_s, start_samples, protocol = 0.0, 0, first
    for switch in sorted(run.switches, key=lambda s: s.time_s):
        result.append(
            ProtocolSpan(protocol, start_s, switch.time_s, start_samples, switch.at_samples)
        )
        start_s, start_samples, protocol = switch.time_s, switch.at_samples, switch.to_protocol
    result.append(
        ProtocolSpan(
            protocol, start_s, max(end_s, start_s), start_samples, max(end_samples, start_samples)
        )
    )
    return [p for p in result if p.end_s > p.start_s or p.end_samples > p.start_samples]


def time_by_protocol(run_phases: list[ProtocolSpan]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for phase in run_phases:
        totals[phase.protocol] = totals.get(phase.protocol, 0.0) + phase.end_s - phase.start_s
    return totals


def _first_protocol(run: RunData) -> str | None:
    if run.switches:
        return min(run.switches, key=lambda s: s.time_s).from_protocol
    if run.metrics.protocol:
        return run.metrics.protocol[0]
    first_phase = run.schedule.split(",")[0].split(":")[0].strip()
    return first_phase or None


def _status(run: RunData) -> str:
    if run.complete:
        return "complete"
    if run.status.startswith("failed"):
        return "failed"
    return "incomplete"


def _status_detail(run: RunData) -> str:
    status = run.status
    measured = (
        f"measured up to {run.metrics.fraction[-1]:.0%} of its samples"
        if len(run.metrics)
        else "no evaluation recorded"
    )
    if status == "complete":
        return "complete"
    if status.startswith("failed"):
        return f"{status} ({measured})"
    if status == "running":
        return f"summary.json says running: still running, or killed ({measured})"
    if status == "no summary":
        return f"no summary.json: killed before its first evaluation was summarised ({measured})"
    return f"status {status!r} ({measured})"


# -- per worker ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerRow:
    worker: int
    steps: int
    step_p50_s: float | None
    step_p90_s: float | None
    step_max_s: float | None
    wait_mean_s: float | None  # None when only updates.csv is there (a killed run)
    dropped: int
    episodes: tuple[str, ...]  # emulated straggler episodes, described
    detections: int
    false_detections: int


def worker_rows(run: RunData) -> tuple[list[WorkerRow], str]:
    """Per-worker rows and where their step times come from."""
    detections = [m for m in run.straggler_marks if m.kind == "detected"]
    ids: set[int] = set(run.drops_by_worker)
    stats: dict[int, dict] = {}
    if run.worker_stats is not None:
        stats = {int(s["worker"]): s for s in run.worker_stats}
        source = "worker_steps.csv (every step of every worker)"
    else:
        steps = run.applied_step_times
        stats = {
            w: {
                "steps": len(t),
                "step_time_p50_s": float(np.percentile(t, 50)),
                "step_time_p90_s": float(np.percentile(t, 90)),
                "step_time_max_s": float(t.max()),
                "wait_mean_s": None,
            }
            for w, t in steps.items()
            if len(t)
        }
        source = (
            "updates.csv (applied gradients only: worker_steps.csv is written at the end, and "
            "this run has none)"
        )
    ids |= set(stats)
    if run.workers and run.workers <= MAX_LISTED_WORKERS:
        ids |= set(range(run.workers))  # workers that never got a gradient applied, too
    rows = []
    for worker in sorted(ids):
        stat = stats.get(worker, {})
        mine = [m for m in detections if m.worker == worker]
        rows.append(
            WorkerRow(
                worker=worker,
                steps=int(stat.get("steps", 0)),
                step_p50_s=stat.get("step_time_p50_s"),
                step_p90_s=stat.get("step_time_p90_s"),
                step_max_s=stat.get("step_time_max_s"),
                wait_mean_s=stat.get("wait_mean_s"),
                dropped=run.drops_by_worker.get(worker, 0),
                episodes=tuple(e.describe() for e in run.episodes if worker in e.workers),
                detections=len(mine),
                false_detections=sum(1 for m in mine if m.false_detection),
            )
        )
    return rows, source
