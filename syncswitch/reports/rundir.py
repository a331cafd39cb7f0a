"""Reading a run directory back: only its files, never a runtime, and never trusting them.

A run directory may come from elsewhere (a colleague's run, a copy from a cluster), so every
file is read with bounds (JSON files and lines have a maximum size, CSV fields the csv
module's limit) and a file that does not parse ends in one `RunDirError` line naming it.
A run killed mid-write may leave the last line of an append-only file torn: that line alone
is skipped and noted; a bad line anywhere else is an error.

Big files are read lazily: updates.csv (one row per applied gradient) only when a staleness
histogram or a killed run's per-worker view asks for it, and then streamed.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from syncswitch.errors import RunDirError

MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024

T = TypeVar("T")

METRIC_FIELDS = ("time_s", "samples", "fraction", "protocol", "test_accuracy")


@dataclass(frozen=True)
class Metrics:
    """metrics.csv as columns: one entry per evaluation point, in training order."""

    time_s: np.ndarray
    samples: np.ndarray
    fraction: np.ndarray
    protocol: tuple[str, ...]
    test_accuracy: np.ndarray
    test_loss: np.ndarray
    train_loss: np.ndarray

    def __len__(self) -> int:
        return len(self.time_s)


@dataclass(frozen=True)
class Switch:
    at_fraction: float
    at_samples: int
    time_s: float
    from_protocol: str
    to_protocol: str
    overhead_s: float
    reason: str


@dataclass(frozen=True)
class StragglerMark:
    """A detection or recovery the run's straggler detector logged."""

    kind: str  # "detected" or "recovered"
    worker: int
    time_s: float
    progress: float
    false_detection: bool | None


@dataclass(frozen=True)
class Episode:
    """An emulated straggler episode as config.json records it (fractions or seconds)."""

    workers: tuple[int, ...]
    start: float | None
    duration: float | None
    start_s: float | None
    duration_s: float | None
    delay_ms: float | None
    factor: float | None

    def describe(self) -> str:
        when = (
            f"{self.start:.0%}-{self.start + self.duration:.0%} of samples"
            if self.start is not None and self.duration is not None
            else f"{self.start_s:g}-{(self.start_s or 0) + (self.duration_s or 0):g} s"
        )
        slow = f"+{self.delay_ms:g} ms" if self.delay_ms is not None else f"x{self.factor:g}"
        return f"{slow} at {when}"


@dataclass
class RunData:
    """Everything a report needs from one run directory."""

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any] | None
    metrics: Metrics
    switches: list[Switch]
    straggler_marks: list[StragglerMark]
    episodes: list[Episode]
    drops_by_reason: Counter[str]
    drops_by_worker: Counter[int]
    worker_stats: list[dict[str, float]] | None  # worker_steps.csv, written at the end
    notes: list[str] = field(default_factory=list)  # torn lines and other oddities

    # -- what kind of run ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.path.name or str(self.path)

    @property
    def status(self) -> str:
        if self.summary is None:
            return "no summary"
        return str(self.summary.get("status", "unknown"))

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def schedule(self) -> str:
        return str(self.config.get("schedule") or (self.summary or {}).get("schedule") or "?")

    @property
    def runtime(self) -> str:
        # Runs from before the simulator existed name no runtime: they ran on Ray.
        return str((self.summary or {}).get("runtime") or self.config.get("runtime") or "ray")

    @property
    def emulated(self) -> bool:
        block = (self.summary or {}).get("emulation") or self.config.get("emulation") or {}
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
                p: Counter({_int(s, "staleness"): n for s, n in c.items()})
                for p, c in counts.items()
            }

    @cached_property
    def applied_step_times(self) -> dict[int, np.ndarray]:
        """Step times (s) of each worker's applied gradients (updates.csv), for a run whose
        worker_steps.csv was never written."""
        times: dict[int, list[float]] = {}
        with _naming(self.path):
            for worker, step in self.update_columns(("worker", "step_time_s")):
                times.setdefault(_int(worker, "worker"), []).append(_float(step, "step_time_s"))
        return {w: np.asarray(t) for w, t in sorted(times.items())}

    def update_columns(self, names: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        path = self.path / "updates.csv"
        if not path.is_file():
            return
        yield from _stream_columns(path, names)


# -- loading ---------------------------------------------------------------------------------


def load_run(path: str | Path) -> RunData:
    """Read a run directory, or raise RunDirError with one line saying what is wrong."""
    run_dir = Path(path)
    if not run_dir.exists():
        raise RunDirError(f"{str(run_dir)!r} does not exist")
    if not run_dir.is_dir():
        raise RunDirError(f"{str(run_dir)!r} is not a directory")
    if not (run_dir / "config.json").is_file():
        raise RunDirError(
            f"{str(run_dir)!r} is not a run directory: it has no config.json "
            "(`syncswitch train --out DIR` makes one)"
        )
    with _naming(run_dir):
        return _load(run_dir)


@contextmanager
def _naming(run_dir: Path) -> Iterator[None]:
    """Errors about a file inside a run directory name the directory too."""
    try:
        yield
    except RunDirError as error:
        raise RunDirError(f"run directory {str(run_dir)!r}: {error}") from None
    except OSError as error:
        raise RunDirError(f"run directory {str(run_dir)!r}: {error.strerror}") from None


def _load(run_dir: Path) -> RunData:
    notes: list[str] = []
    config = _read_json_object(run_dir / "config.json")
    summary_path = run_dir / "summary.json"
    summary = _read_json_object(summary_path) if summary_path.is_file() else None
    events = _read_events(run_dir / "events.jsonl", notes)
    drops_by_reason, drops_by_worker = _read_drops(run_dir / "drops.csv", notes)
    return RunData(
        path=run_dir,
        config=config,
        summary=summary,
        metrics=_read_metrics(run_dir / "metrics.csv", notes),
        switches=_switches(events, summary),
        straggler_marks=_straggler_marks(events),
        episodes=_episodes(config),
        drops_by_reason=drops_by_reason,
        drops_by_worker=drops_by_worker,
        worker_stats=_read_worker_stats(run_dir / "worker_steps.csv", notes),
        notes=notes,
    )


def _read_json_object(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise RunDirError(f"{path.name} is {size:,} bytes, more than a run writes; not read")
    try:
        data = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunDirError(f"{path.name} is not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path.name} must hold a JSON object, not {type(data).__name__}")
    return data


def _lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, is last line) with each line's length bounded."""
    with path.open("rb") as handle:
        number = 0
        line = handle.readline(MAX_LINE_BYTES + 1)
        while line:
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise RunDirError(f"{path.name} line {number} is over {MAX_LINE_BYTES:,} bytes")
            following = handle.readline(MAX_LINE_BYTES + 1)
            yield number, line.decode("utf-8", errors="replace"), not following
            line = following


def _read_events(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    events = []
    for number, line, last in _lines(path):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict):
                raise ValueError("not an object")
        except ValueError as error:
            if last and not line.endswith("\n"):
                notes.append("events.jsonl: last line torn (run killed mid-write), skipped")
                continue
            raise RunDirError(f"{path.name} line {number} is not a JSON object ({error})") from None
        events.append(event)
    return events


def _csv_records(
    path: Path, required: tuple[str, ...], notes: list[str], parse: Callable[[dict[str, str]], T]
) -> list[T]:
    """Each row of a CSV file parsed by `parse` (which raises ValueError on a bad value)."""
    torn_tail = _ends_without_newline(path)
    records: list[T] = []
    with path.open(newline="", encoding="utf-8", errors="replace") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                return records
            missing = [c for c in required if c not in header]
            if missing:
                raise RunDirError(f"{path.name} lacks column(s) {', '.join(missing)}")
            values = next(reader, None)
            while values is not None:
                number = reader.line_num
                following = next(reader, None)
                try:
                    if len(values) != len(header):
                        raise ValueError(f"{len(values)} fields, the header has {len(header)}")
                    records.append(parse(dict(zip(header, values, strict=True))))
                except (ValueError, KeyError) as error:
                    if following is not None or not torn_tail:
                        raise RunDirError(f"{path.name} line {number}: {error}") from None
                    notes.append(f"{path.name}: last line torn (run killed mid-write), skipped")
                values = following
        except csv.Error as error:
            raise RunDirError(f"{path.name} is not a valid CSV file ({error})") from None
    return records


def _ends_without_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(0, 2)
        if handle.tell() == 0:
            return False
        handle.seek(-1, 2)
        return handle.read(1) != b"\n"


def _read_metrics(path: Path, notes: list[str]) -> Metrics:
    def parse(row: dict[str, str]) -> tuple:
        return (
            _finite(row["time_s"]),
            int(row["samples"]),
            _finite(row["fraction"]),
            row["protocol"],
            _finite(row["test_accuracy"]),
            _number(row.get("test_loss", "")),
            _number(row.get("train_loss", "")),
        )

    rows = _csv_records(path, METRIC_FIELDS, notes, parse) if path.is_file() else []
    columns = list(zip(*rows, strict=True)) if rows else [()] * 7
    return Metrics(
        time_s=np.asarray(columns[0], dtype=float),
        samples=np.asarray(columns[1], dtype=np.int64),
        fraction=np.asarray(columns[2], dtype=float),
        protocol=tuple(columns[3]),
        test_accuracy=np.asarray(columns[4], dtype=float),
        test_loss=np.asarray(columns[5], dtype=float),
        train_loss=np.asarray(columns[6], dtype=float),
    )


def _read_drops(path: Path, notes: list[str]) -> tuple[Counter[str], Counter[int]]:
    if not path.is_file():
        return Counter(), Counter()
    drops = _csv_records(
        path, ("worker", "reason"), notes, lambda row: (int(row["worker"]), row["reason"])
    )
    return Counter(reason for _, reason in drops), Counter(worker for worker, _ in drops)


_WORKER_FIELDS = (
    "worker",
    "steps",
    "step_time_p50_s",
    "step_time_p90_s",
    "step_time_max_s",
    "wait_mean_s",
)


def _read_worker_stats(path: Path, notes: list[str]) -> list[dict[str, float]] | None:
    if not path.is_file():
        return None
    return _csv_records(
        path, _WORKER_FIELDS, notes, lambda row: {n: _finite(row[n]) for n in _WORKER_FIELDS}
    )


def _stream_columns(path: Path, names: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The named columns of a big CSV file, row by row, without holding the file."""
    with path.open(newline="", encoding="utf-8", errors="replace") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None:
                return
            missing = [n for n in names if n not in header]
            if missing:
                raise RunDirError(f"{path.name} lacks column(s) {', '.join(missing)}")
            indices = [header.index(n) for n in names]
            width = len(header)
            for values in reader:
                if len(values) != width:
                    continue  # a torn last row of a killed run; anything else fails to parse
                yield tuple(values[i] for i in indices)
        except csv.Error as error:
            raise RunDirError(f"{path.name} is not a valid CSV file ({error})") from None


# -- events ----------------------------------------------------------------------------------


def _switches(events: list[dict[str, Any]], summary: dict[str, Any] | None) -> list[Switch]:
    # events.jsonl has every switch as it happened (also for a killed run); summary.json
    # only as of its last rewrite.
    records = [e for e in events if e.get("event") == "switch"]
    if not records and summary and isinstance(summary.get("switches"), list):
        records = [s for s in summary["switches"] if isinstance(s, dict)]
    switches = []
    for record in records:
        try:
            switches.append(
                Switch(
                    at_fraction=_finite(record["at_fraction"]),
                    at_samples=int(record["at_samples"]),
                    time_s=_finite(record["time_s"]),
                    from_protocol=str(record["from"]),
                    to_protocol=str(record["to"]),
                    overhead_s=_finite(record.get("overhead_s", 0.0)),
                    reason=str(record.get("reason", "")),
                )
            )
        except (KeyError, TypeError, ValueError):
            raise RunDirError(
                f"events.jsonl: a switch record is malformed: {_short(record)}"
            ) from None
    return switches


def _straggler_marks(events: list[dict[str, Any]]) -> list[StragglerMark]:
    marks = []
    for event in events:
        kind = str(event.get("event", ""))
        if kind not in ("straggler_detected", "straggler_recovered"):
            continue
        try:
            marks.append(
                StragglerMark(
                    kind=kind.removeprefix("straggler_"),
                    worker=int(event["worker"]),
                    time_s=_finite(event["time_s"]),
                    progress=_finite(event.get("progress", math.nan), allow_nan=True),
                    false_detection=event.get("false_detection"),
                )
            )
        except (KeyError, TypeError, ValueError):
            raise RunDirError(
                f"events.jsonl: a straggler event is malformed: {_short(event)}"
            ) from None
    return marks


def _episodes(config: dict[str, Any]) -> list[Episode]:
    emulation = config.get("emulation")
    listed = emulation.get("stragglers") if isinstance(emulation, dict) else None
    if not isinstance(listed, list):
        return []  # "none", or a run without emulation
    episodes = []
    for item in listed:
        try:
            workers = tuple(int(w) for w in item["workers"])
            episodes.append(
                Episode(
                    workers=workers,
                    **{
                        name: _optional_float(item.get(name))
                        for name in (
                            "start",
                            "duration",
                            "start_s",
                            "duration_s",
                            "delay_ms",
                            "factor",
                        )
                    },
                )
            )
        except (KeyError, TypeError, ValueError):
            raise RunDirError(
                f"config.json: a straggler episode is malformed: {_short(item)}"
            ) from None
    return episodes


# -- values ----------------------------------------------------------------------------------


def _finite(value: Any, allow_nan: bool = False) -> float:
    number = float(value)
    if not math.isfinite(number) and not (allow_nan and math.isnan(number)):
        raise ValueError(f"{value!r} is not a finite number")
    return number


def _number(text: str) -> float:
    """A loss cell: a number, 'nan' (no training step in the interval) or empty."""
    return float(text) if text.strip() else math.nan


def _optional_float(value: Any) -> float | None:
    return None if value is None else _finite(value)


def _int(text: str, column: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RunDirError(f"updates.csv: {column} {text!r} is not an integer") from None


def _float(text: str, column: str) -> float:
    try:
        return _finite(text)
    except ValueError:
        raise RunDirError(f"updates.csv: {column} {text!r} is not a finite number") from None


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
