"""Reading a run directory back: only its files, never a runtime, and never trusting them.

Every file is read through `syncswitch.rundir.parsing` (bounded, one-line errors) and its
records are built by the classes that own their schema (`Summary`, `Switch`, the event
records of `syncswitch.rundir.events`). Big files are
read lazily: updates.csv (one row per applied gradient) only when a staleness histogram or a
killed run's per-worker view asks for it, and then streamed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from syncswitch.errors import RunDirError
from syncswitch.records.metric import COLUMN_PREFIX, VALIDATION
from syncswitch.records.switch import rule_name
from syncswitch.rundir import names
from syncswitch.rundir.parsing import (
    MAX_JSON_BYTES,
    csv_records,
    finite,
    float_cell,
    int_cell,
    loss_cell,
    measure_cell,
    read_json_object,
    stream_columns,
)
from syncswitch.rundir.parsing import read_events as read_events_file
from syncswitch.rundir.summary import COMPLETE, Summary, Switch
from syncswitch.rundir.timeline import (
    Episode,
    StragglerMark,
    episodes,
    straggler_marks,
    switches_of,
)

METRIC_FIELDS = ("time_s", "samples", "fraction", "protocol")
_WORKER_FIELDS = (
    "worker",
    "steps",
    "step_time_p50_s",
    "step_time_p90_s",
    "step_time_max_s",
    "wait_mean_s",
)


@dataclass(frozen=True)
class Metrics:
    """metrics.csv as columns: one entry per evaluation point, in training order."""

    time_s: np.ndarray
    samples: np.ndarray
    fraction: np.ndarray
    protocol: tuple[str, ...]
    value: np.ndarray  # the primary metric on `split`
    loss: np.ndarray  # the loss on `split`
    train_loss: np.ndarray
    metric: str = "accuracy"  # the primary metric's name (the first measure column)
    split: str = "validation"  # test: a run from before validation splits
    measures: dict[str, np.ndarray] = field(default_factory=dict)  # every one, by name

    def __len__(self) -> int:
        return len(self.time_s)


@dataclass(frozen=True)
class TimingSignals:
    """timing_signals.csv as columns: the online rule's signal and threshold at each check."""

    samples: np.ndarray
    fraction: np.ndarray
    signal: np.ndarray  # NaN where the rule had no value yet
    threshold: np.ndarray
    decision: tuple[str, ...]
    rule: str

    def __len__(self) -> int:
        return len(self.samples)


@dataclass
class RunData:
    """Everything a report needs from one run directory."""

    path: Path
    config: dict[str, Any]
    summary: Summary | None
    metrics: Metrics
    switches: list[Switch]
    straggler_marks: list[StragglerMark]
    episodes: list[Episode]
    drops_by_reason: Counter[str]
    drops_by_worker: Counter[int]
    worker_stats: list[dict[str, float]] | None  # worker_steps.csv, written at the end
    notes: list[str] = field(default_factory=list)  # torn lines and other oddities
    timing_signals: TimingSignals | None = None  # an online phase's signal, when there was one

    # -- what kind of run ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def status(self) -> str:
        return "no summary" if self.summary is None else self.summary.status

    @property
    def complete(self) -> bool:
        return self.status == COMPLETE

    @property
    def schedule(self) -> str:
        schedule = self.config.get("schedule") or (self.summary and self.summary.schedule)
        return str(schedule or "?")

    @property
    def runtime(self) -> str:
        # Runs from before the simulator existed name no runtime: they ran on Ray.
        if self.summary is not None:
            return self.summary.runtime
        return str(self.config.get("runtime") or "ray")

    @property
    def emulated(self) -> bool:
        if self.summary is not None:
            return self.summary.emulated
        block = self.config.get("emulation") or {}
        return bool(isinstance(block, dict) and block.get("enabled"))

    @property
    def timing(self) -> str:
        """How the times were made: real hardware, emulated device time, or a simulator."""
        if self.runtime == "sim":
            return "simulated"
        return "emulated" if self.emulated else "real"

    @property
    def workers(self) -> int | None:
        value = self.config.get("workers")
        return value if isinstance(value, int) else None

    # -- the large file, read when asked -------------------------------------------------------

    @cached_property
    def staleness_counts(self) -> dict[str, Counter[int]]:
        """Applied gradients per staleness value, per protocol (from updates.csv)."""
        counts: dict[str, Counter[str]] = {}
        with _naming(self.path):
            for protocol, staleness in self.update_columns(("protocol", "staleness")):
                counts.setdefault(protocol, Counter())[staleness] += 1
            return {
                p: Counter({int_cell(s, "staleness"): n for s, n in c.items()})
                for p, c in counts.items()
            }

    @cached_property
    def applied_step_times(self) -> dict[int, np.ndarray]:
        """Step times (s) of each worker's applied gradients (updates.csv), for a run whose
        worker_steps.csv was never written."""
        times: dict[int, list[float]] = {}
        with _naming(self.path):
            for worker, step in self.update_columns(("worker", "step_time_s")):
                times.setdefault(int_cell(worker, "worker"), []).append(
                    float_cell(step, "step_time_s")
                )
        return {w: np.asarray(t) for w, t in sorted(times.items())}

    @cached_property
    def compute_cpu(self) -> list[tuple[int, float]]:
        """(steps, compute CPU seconds per step) of each worker that recorded its compute's
        CPU time (worker_steps.csv; Ray workers do, the simulator leaves it empty)."""
        path = self.path / names.WORKER_STEPS
        if not path.is_file():
            return []
        rows = []
        with _naming(self.path):
            for steps, cpu in stream_columns(path, ("steps", "compute_cpu_mean_s")):
                if cpu.strip():
                    rows.append((int_cell(steps, "steps"), float_cell(cpu, "compute_cpu_mean_s")))
        return rows

    def update_columns(self, columns: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        path = self.path / names.UPDATES
        if not path.is_file():
            return
        yield from stream_columns(path, columns)


# -- loading ---------------------------------------------------------------------------------


def load_run(path: str | Path) -> RunData:
    """Read a run directory, or raise RunDirError with one line saying what is wrong."""
    run_dir = Path(path)
    problem = not_a_run_dir(run_dir)
    if problem:
        raise RunDirError(f"{str(run_dir)!r} {problem}")
    with _naming(run_dir):
        return _load(run_dir)


def not_a_run_dir(run_dir: Path) -> str | None:
    """Why `run_dir` is no run directory at all ("does not exist", ...), or None."""
    if not run_dir.exists():
        return "does not exist"
    if not run_dir.is_dir():
        return "is not a directory"
    if not (run_dir / names.CONFIG).is_file():
        # e.g. left empty by a run refused before it started
        return (
            f"is not a run directory: it has no {names.CONFIG} "
            "(`syncswitch train --out DIR` makes one)"
        )
    return None


def has_results(run: RunData) -> bool:
    """Whether a run got far enough to report: a summary or at least one evaluation."""
    return run.summary is not None or len(run.metrics) > 0


def read_config(run_dir: str | Path, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """config.json as the dict it holds (FileNotFoundError when absent; RunDirError, one
    line, when it is not a regular file of at most `max_bytes` holding a JSON object)."""
    return read_json_object(Path(run_dir) / names.CONFIG, max_bytes)


def read_events(run_dir: str | Path) -> list[dict[str, Any]]:
    """events.jsonl's lines in order, each a JSON object ([] when there is none; a torn last
    line is skipped). `syncswitch.rundir.events.of_kind(lines, Kind)` makes records of them."""
    directory = Path(run_dir)
    with _naming(directory):
        return read_events_file(directory / names.EVENTS, [])


def read_summary(run_dir: str | Path) -> Summary:
    """summary.json as a `Summary`, or RunDirError in one line naming the directory, the field
    and what is allowed (FileNotFoundError when the run has written none yet)."""
    directory = Path(run_dir)
    with _naming(directory):
        return _summary(directory / names.SUMMARY)


def read_summary_if_any(run_dir: str | Path) -> Summary | None:
    """As `read_summary`, but None when there is no summary.json (a run killed early)."""
    try:
        return read_summary(run_dir)
    except FileNotFoundError:
        return None


def _summary(path: Path) -> Summary:
    return Summary.from_plain(read_json_object(path), path.name)


@contextmanager
def _naming(run_dir: Path) -> Iterator[None]:
    """Errors about a file inside a run directory name the directory too."""
    try:
        yield
    except RunDirError as error:
        raise RunDirError(f"run directory {str(run_dir)!r}: {error}") from None
    except FileNotFoundError:
        raise
    except OSError as error:
        raise RunDirError(f"run directory {str(run_dir)!r}: {error.strerror}") from None


def _load(run_dir: Path) -> RunData:
    notes: list[str] = []
    config = read_config(run_dir)
    summary_path = run_dir / names.SUMMARY
    summary = _summary(summary_path) if summary_path.is_file() else None
    events = read_events_file(run_dir / names.EVENTS, notes)
    drops_by_reason, drops_by_worker = _read_drops(run_dir / names.DROPS, notes)
    return RunData(
        path=run_dir,
        config=config,
        summary=summary,
        metrics=_read_metrics(run_dir / names.METRICS, notes),
        switches=switches_of(events, summary),
        straggler_marks=straggler_marks(events),
        episodes=episodes(config),
        drops_by_reason=drops_by_reason,
        drops_by_worker=drops_by_worker,
        worker_stats=_read_worker_stats(run_dir / names.WORKER_STEPS, notes),
        notes=notes,
        timing_signals=_read_timing_signals(run_dir / names.TIMING_SIGNALS, notes),
    )


def _read_metrics(path: Path, notes: list[str]) -> Metrics:
    """metrics.csv's columns; the measure columns (val_accuracy, val_loss, ...; test_... in
    runs from before validation splits) are found by their prefix, the primary one first."""
    found: dict[str, Any] = {}

    def parse(row: dict[str, str]) -> tuple:
        if not found:
            found.update(_measure_columns(row))
        measures = [measure_cell(row[column]) for column in found["columns"].values()]
        return (
            finite(row["time_s"]),
            int(row["samples"]),
            finite(row["fraction"]),
            row["protocol"],
            loss_cell(row.get("train_loss", "")),
            *measures,
        )

    rows = csv_records(path, METRIC_FIELDS, notes, parse) if path.is_file() else []
    measured = list(found.get("columns", {"accuracy": "", "loss": ""}))
    columns = list(zip(*rows, strict=True)) if rows else [()] * (5 + len(measured))
    measures = {name: np.asarray(columns[5 + i], dtype=float) for i, name in enumerate(measured)}
    nan = np.full(len(columns[0]), np.nan)
    return Metrics(
        time_s=np.asarray(columns[0], dtype=float),
        samples=np.asarray(columns[1], dtype=np.int64),
        fraction=np.asarray(columns[2], dtype=float),
        protocol=tuple(columns[3]),
        value=measures[measured[0]],
        loss=measures.get("loss", nan),
        train_loss=np.asarray(columns[4], dtype=float),
        metric=measured[0],
        split=found.get("split", VALIDATION),
        measures=measures,
    )


def _measure_columns(row: dict[str, str]) -> dict[str, Any]:
    for split, prefix in COLUMN_PREFIX.items():
        columns = {key[len(prefix) + 1 :]: key for key in row if key.startswith(prefix + "_")}
        if columns:
            return {"split": split, "columns": columns}
    raise ValueError("no measure column (val_... or test_...)")


def _read_timing_signals(path: Path, notes: list[str]) -> TimingSignals | None:
    if not path.is_file():
        return None

    def parse(row: dict[str, str]) -> tuple:
        signal = row["signal"].strip()
        return (
            int(row["samples"]),
            finite(row["fraction"]),
            float(signal) if signal else math.nan,  # inf: a noise scale over a gradient of 0
            finite(row["threshold"]),
            row["decision"],
            rule_name(row["rule"]),
        )

    required = ("samples", "fraction", "rule", "signal", "threshold", "decision")
    rows = csv_records(path, required, notes, parse)
    if not rows:
        return None
    columns = list(zip(*rows, strict=True))
    return TimingSignals(
        samples=np.asarray(columns[0], dtype=np.int64),
        fraction=np.asarray(columns[1], dtype=float),
        signal=np.asarray(columns[2], dtype=float),
        threshold=np.asarray(columns[3], dtype=float),
        decision=tuple(columns[4]),
        rule=str(columns[5][-1]),
    )


def _read_drops(path: Path, notes: list[str]) -> tuple[Counter[str], Counter[int]]:
    if not path.is_file():
        return Counter(), Counter()
    drops = csv_records(
        path, ("worker", "reason"), notes, lambda row: (int(row["worker"]), row["reason"])
    )
    return Counter(reason for _, reason in drops), Counter(worker for worker, _ in drops)


def _read_worker_stats(path: Path, notes: list[str]) -> list[dict[str, float]] | None:
    if not path.is_file():
        return None
    return csv_records(
        path, _WORKER_FIELDS, notes, lambda row: {n: finite(row[n]) for n in _WORKER_FIELDS}
    )
