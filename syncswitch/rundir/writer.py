"""The run directory written as the run goes, so a crash loses nothing made.

Files (names and columns: syncswitch.rundir.names): config.json (resolved job, emulation
included), summary.json (rewritten atomically as the run goes, final at the end), metrics.csv
(test accuracy/loss and train loss over time and samples), updates.csv (one row per applied
gradient), drops.csv, events.jsonl (switches and other decisions) and worker_steps.csv
(per-worker step-time statistics). Each CSV row carries `emulated` and `simulated` columns so
no figure can be mistaken for real-hardware timing (simulated: times are seconds of the
simulator's clock, docs/simulator.md). What the files receive also goes to a RecordSink
(rundir/sink.py), where the run has one: the runtime's LoggerFeed around the configured
loggers (TensorBoard, MLflow).
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from syncswitch.errors import ConfigError, DiskFull, is_disk_full
from syncswitch.files import (
    DirectoryBusy,
    DirectoryLock,
    UnsafeFileError,
    append_bytes,
    atomic_writer,
    drop_torn_tail,
    open_append_fd,
    open_regular,
    write_json_atomic,
)
from syncswitch.rundir import names
from syncswitch.rundir.events import LoggerFailed, RunEvent, to_line
from syncswitch.rundir.sink import RecordSink
from syncswitch.rundir.summary import Summary

if TYPE_CHECKING:
    from syncswitch.core.sync.records import DropRecord, UpdateRecord

_TIMED_WORKERS = names.WORKER_COLUMNS[: -len(names.TIMING_COLUMNS)]
_TIMED_SIGNALS = names.TIMING_SIGNAL_COLUMNS[: -len(names.TIMING_COLUMNS)]


def default_run_dir(schedule: str) -> Path:
    """runs/<time>-<schedule>, e.g. runs/20261202-180501-bsp0.25-asp."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    label = schedule.replace(":", "").replace(",", "-")
    return Path("runs") / f"{stamp}-{label}"


class CsvLog:
    """A CSV file that grows a batch of rows at a time. Each batch is one unbuffered append,
    so a failed write (a full disk) leaves nothing pending and at most a cut last line, which
    a resume drops."""

    def __init__(self, path: Path, columns: tuple[str, ...]) -> None:
        self.path = path
        self.columns = columns
        self._log = AppendLog(path)
        self._text = io.StringIO()
        self._writer = csv.writer(self._text)
        if self._log.empty:  # new, or emptied by a resume (its header was cut)
            self.write([columns])

    def write(self, rows: list[tuple | list]) -> None:
        if rows:
            self._writer.writerows(rows)
            text = self._text.getvalue()
            self._text.seek(0)
            self._text.truncate()
            self._log.append(text)

    def close(self) -> None:
        self._log.close()


class AppendLog:
    """A run-directory log opened for appending (never through a symlink), written with no
    buffer of ours; a full disk is one DiskFull line naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = _open_log_fd(path)

    @property
    def empty(self) -> bool:
        return os.fstat(self._fd).st_size == 0

    def append(self, text: str) -> None:
        with _disk_full_said(self.path):
            append_bytes(self._fd, text.encode())

    def close(self) -> None:
        os.close(self._fd)


class RunWriter:
    def __init__(
        self,
        out_dir: str | Path,
        config: dict[str, Any],
        emulation: dict,
        *,
        simulated: bool = False,
        faults: list[dict] | None = None,
        resume_at: tuple[int, float] | None = None,
        sink: RecordSink | None = None,
        measured: tuple[str, ...] = ("val_accuracy", "val_loss"),
    ) -> None:
        """`resume_at` (samples, run seconds of the checkpoint): a resumed run keeps what the
        files say up to that point and appends from there. `sink` (the loggers' feed) is
        handed what the files receive; it starts before anything is written, so a logger
        that cannot start leaves the directory free for the next try. `measured` are metrics.csv's
        columns of the evaluated split (names.metric_columns)."""
        self.dir = Path(out_dir)
        create_run_dir(self.dir)
        self._lock = lock_run_dir(self.dir)  # before anything is read back or truncated
        try:
            self._start(config, emulation, simulated, faults, resume_at, sink, measured)
        except BaseException:
            self._lock.release()
            raise

    def _start(
        self,
        config: dict[str, Any],
        emulation: dict,
        simulated: bool,
        faults: list[dict] | None,
        resume_at: tuple[int, float] | None,
        sink: RecordSink | None,
        measured: tuple[str, ...],
    ) -> None:
        self._metrics_through: float | None = None  # the last samples metrics.csv kept
        self._emulated = bool(emulation.get("enabled"))
        self._simulated = simulated
        labels = {
            "emulation": emulation,
            "simulated": simulated,
            "faults_injected": faults or None,
        }
        self._feed = sink
        if sink is not None:
            resume_samples = resume_at[0] if resume_at else None
            sink.start({**config, **labels}, resume_samples, on_failure=self._logger_failed)
        if resume_at is None:
            write_json_atomic(self.dir / names.CONFIG, {**config, **labels})
        else:
            samples, time_s = resume_at
            drop_torn_lines(self.dir)
            # Rows after the checkpoint describe training that the resumed run does again.
            self._metrics_through = _truncate_csv(self.dir / names.METRICS, "samples", samples)
            _truncate_csv(self.dir / names.UPDATES, "samples", samples)
            _truncate_csv(self.dir / names.DROPS, "time_s", time_s)
            _truncate_csv(self.dir / names.TIMING_SIGNALS, "samples", samples)
        self._updates = CsvLog(self.dir / names.UPDATES, names.UPDATE_COLUMNS)
        self._drops = CsvLog(self.dir / names.DROPS, names.DROP_COLUMNS)
        columns = names.metric_columns(measured)
        self._metric_cells = columns[: -len(names.TIMING_COLUMNS)]
        self._metrics = CsvLog(self.dir / names.METRICS, columns)
        self._events = AppendLog(self.dir / names.EVENTS)
        self._signals: CsvLog | None = None  # opened by the first row (online runs only)

    @property
    def _labels(self) -> list[bool]:
        return [self._emulated, self._simulated]

    def updates(self, records: list[UpdateRecord]) -> None:
        self._updates.write([(*_row(r), *self._labels) for r in records])
        if self._feed:
            self._feed.updates(records)

    def drops(self, records: list[DropRecord]) -> None:
        self._drops.write([_row(r) for r in records])
        if self._feed:
            self._feed.drops(records)

    def metric(self, row: dict[str, Any]) -> None:
        self._metrics.write([[row.get(c, "") for c in self._metric_cells] + self._labels])
        if self._feed:
            self._feed.metric(row)

    def restore_metrics(self, rows: list[dict[str, Any]]) -> None:
        """On resume, the checkpoint's evaluation rows (in order) that metrics.csv lost past
        its last kept row (a line a full disk cut, and every one after it)."""
        lost = [
            r for r in rows if self._metrics_through is None or r["samples"] > self._metrics_through
        ]
        self._metrics.write(
            [[r.get(c, "") for c in self._metric_cells] + self._labels for r in lost]
        )

    def timing_signal(self, row: dict[str, Any]) -> None:
        """One check of an online phase's rule (names.TIMING_SIGNAL_COLUMNS)."""
        if self._signals is None:
            self._signals = CsvLog(self.dir / names.TIMING_SIGNALS, names.TIMING_SIGNAL_COLUMNS)
        cells = ["" if row.get(c) is None else row[c] for c in _TIMED_SIGNALS]
        self._signals.write([cells + self._labels])
        if self._feed:
            self._feed.timing_signal(row)

    def event(self, event: RunEvent) -> None:
        """One line of events.jsonl (syncswitch.rundir.events has every kind)."""
        self._events.append(to_line(event))
        if self._feed:
            self._feed.event(event)

    def worker_stats(self, rows: list[dict[str, Any]]) -> None:
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(names.WORKER_COLUMNS)
        for row in rows:
            writer.writerow([row.get(c, "") for c in _TIMED_WORKERS] + self._labels)
        path = self.dir / names.WORKER_STEPS
        with _disk_full_said(path), atomic_writer(path) as handle:
            handle.write(text.getvalue().encode())
        if self._feed:
            self._feed.worker_stats(rows)

    def summary(self, summary: Summary) -> None:
        with _disk_full_said(self.dir / names.SUMMARY):
            write_json_atomic(self.dir / names.SUMMARY, summary.to_plain())
        if self._feed:
            self._feed.summary(summary)

    def close(self) -> None:
        if self._feed:
            self._feed.close()
        for log in (self._updates, self._drops, self._metrics, self._signals):
            if log is not None:
                log.close()
        self._events.close()
        self._lock.release()

    def _logger_failed(self, name: str, reason: str) -> None:
        self.event(LoggerFailed(name, reason))


def lock_run_dir(directory: Path) -> DirectoryLock:
    """The run directory's lock, held by the one process that writes the run, or one
    ConfigError line when another live process holds it (a dead one's lock is gone)."""
    try:
        return DirectoryLock(directory, names.LOCK)
    except DirectoryBusy as busy:
        holder = f" (process {busy.holder})" if busy.holder.isdigit() else ""
        raise ConfigError(
            f"run directory {str(directory)!r} is in use by another syncswitch run{holder}; "
            "one process writes a run at a time: wait for it to end, or stop it first"
        ) from None
    except UnsafeFileError as error:
        raise ConfigError(f"run directory: {error}") from None
    except OSError as error:
        if is_disk_full(error):
            raise
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"run directory {str(directory)!r} cannot be locked: {reason}") from None


def create_run_dir(directory: Path) -> None:
    """Create the run directory, or one ConfigError line when `--out` cannot be one."""
    if directory.exists() and not directory.is_dir():
        raise ConfigError(
            f"--out {str(directory)!r} is a file, not a directory; give a directory for the "
            "run's results"
        )
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"--out {str(directory)!r} cannot be created: {reason}") from None


# The logs a run appends to as it goes: a line cut by a crash or a full disk may end each.
GROWING_LOGS = (names.METRICS, names.UPDATES, names.DROPS, names.TIMING_SIGNALS, names.EVENTS)


def drop_torn_lines(directory: Path) -> None:
    """Before a resume appends: each growing log cut back to its last complete line (the
    checkpoint says what happened after it), said in one line on the terminal."""
    from syncswitch.terminal import say

    for name in GROWING_LOGS:
        try:
            dropped = drop_torn_tail(directory / name)
        except UnsafeFileError as error:
            raise ConfigError(f"run directory: {error}") from None
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise ConfigError(f"cannot resume: {str(directory / name)!r}: {reason}") from None
        if dropped:
            say(
                f"syncswitch: resuming: {name}'s last line was cut ({dropped} bytes with no "
                "line end, as a crash or a full disk leaves it); dropped, the run redoes it "
                "from the checkpoint"
            )


@contextmanager
def _disk_full_said(path: Path) -> Iterator[None]:
    """A full disk while writing `path` is one DiskFull line; other errors pass unchanged."""
    try:
        yield
    except OSError as error:
        if not is_disk_full(error):
            raise
        raise DiskFull(
            f"no space left to write {str(path)!r} ({error.strerror}); free space, then "
            f"continue the run with --resume {path.parent}"
        ) from None


def _open_log_fd(path: Path) -> int:
    """A run-directory log opened for appending: a regular file, never through a symlink."""
    try:
        return open_append_fd(path)
    except UnsafeFileError as error:
        raise ConfigError(f"run directory: {error}") from None
    except OSError as error:
        if is_disk_full(error):
            raise
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"run directory: {str(path)!r} cannot be opened: {reason}") from None


def _truncate_csv(path: Path, column: str, limit: float) -> float | None:
    """Keep the rows whose `column` is <= `limit`, streaming (the file may be large); the
    last kept row's value is returned (None: no row kept).

    The file comes from a run directory, so a malformed row is one ConfigError line naming
    the file, the row and what was expected, not a traceback.
    """
    if not path.exists():
        return None
    try:
        fd = open_regular(path, follow_symlinks=False)
    except OSError as error:
        raise ConfigError(f"cannot resume: {error}") from None
    with os.fdopen(fd, newline="") as handle, _disk_full_said(path), atomic_writer(path) as out:
        text_out = io.TextIOWrapper(out, newline="", write_through=True)
        try:
            return _copy_rows_up_to(handle, text_out, path, column, limit)
        finally:
            text_out.detach()


def _copy_rows_up_to(
    source: IO[str], sink: IO[str], path: Path, column: str, limit: float
) -> float | None:
    kept = None
    try:
        reader = csv.reader(source)
        header = next(reader, None)
        if header is None:
            return None
        if column not in header:
            raise ConfigError(
                f"cannot resume: {str(path)!r} has no {column!r} column (header "
                f"{_short(','.join(header))}); it is not this run's file"
            )
        index = header.index(column)
        writer = csv.writer(sink)
        writer.writerow(header)
        for line, row in enumerate(reader, start=2):
            value = _number(row, index, len(header))
            if value is None:
                raise ConfigError(
                    f"cannot resume: {str(path)!r} line {line} is malformed ({_short(row)}); "
                    f"every row needs {len(header)} fields with a number in {column!r}"
                )
            if value <= limit:
                writer.writerow(row)
                kept = value
    except (csv.Error, UnicodeDecodeError) as error:
        raise ConfigError(
            f"cannot resume: {str(path)!r} is not a readable CSV file ({_short(str(error))})"
        ) from None
    return kept


def _number(row: list[str], index: int, width: int) -> float | None:
    if len(row) != width:
        return None
    try:
        value = float(row[index])
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _short(value: Any, limit: int = 80) -> str:
    text = " ".join(repr(value).split()) if not isinstance(value, str) else value
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _row(record: Any) -> tuple:
    # Not asdict(): it deep-copies every field, about 15x slower, and this runs per gradient.
    return tuple(getattr(record, f.name) for f in fields(record))
