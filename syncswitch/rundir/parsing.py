"""Bounded reading of a run directory's files: JSON objects, JSON lines, CSV rows, values.

A run directory may come from elsewhere (a colleague's run, a copy from a cluster), so every
file is read with bounds (JSON files and lines have a maximum size, CSV fields the csv
module's limit) and a file that does not parse ends in one `RunDirError` line naming it.
A run killed mid-write may leave the last line of an append-only file torn: that line alone
is skipped and noted; a bad line anywhere else is an error.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

from syncswitch.errors import RunDirError
from syncswitch.files import UnsafeFileError, open_regular, read_regular

MAX_JSON_BYTES = 16 * 1024 * 1024
MAX_LINE_BYTES = 1024 * 1024
# Files read whole into records (events.jsonl, metrics.csv, drops.csv...): a long run writes
# a few MB; past this a file is not one a run wrote. updates.csv is streamed, not bounded.
MAX_RECORDS_FILE_BYTES = 256 * 1024 * 1024

T = TypeVar("T")


def read_json_object(path: Path, max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """A JSON object from a regular file of at most `max_bytes`, or one RunDirError line.

    Never through a symbolic link (a run writes none) and never a FIFO or device, which
    could block the reader. FileNotFoundError is left to the caller, which knows what a
    missing file means."""
    try:
        raw = read_regular(path, max_bytes, follow_symlinks=False)
    except FileNotFoundError:
        raise
    except UnsafeFileError as error:
        raise RunDirError(str(error)) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RunDirError(f"{path.name} cannot be read ({reason})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise RunDirError(f"{path.name} is not UTF-8 text (binary?)") from None
    except (RecursionError, ValueError) as error:  # JSONDecodeError, an int too long to read
        detail = " ".join(str(error).split())[:200]
        raise RunDirError(f"{path.name} is not valid JSON ({detail})") from None
    if not isinstance(data, dict):
        raise RunDirError(
            f"{path.name} holds a JSON {_json_kind(data)}; it must hold a JSON object"
        )
    return data


def _json_kind(value: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


@contextmanager
def open_run_file(
    path: Path, *, text: bool = False, max_bytes: int | None = MAX_RECORDS_FILE_BYTES
) -> Iterator[IO[Any]]:
    """A run directory's file, opened as `read_json_object` reads: never through a symbolic
    link, never a FIFO or device (checked on the descriptor, opened without blocking), of at
    most `max_bytes` (None: streamed, any size). One RunDirError line otherwise;
    FileNotFoundError is left to the caller."""
    try:
        fd = open_regular(path, follow_symlinks=False)
    except FileNotFoundError:
        raise
    except UnsafeFileError as error:
        raise RunDirError(str(error)) from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RunDirError(f"{path.name} cannot be read ({reason})") from None
    size = os.fstat(fd).st_size
    if max_bytes is not None and size > max_bytes:
        os.close(fd)
        raise RunDirError(
            f"{path.name} is {size:,} bytes; at most {max_bytes:,} are read from this file"
        )
    if text:
        handle: IO[Any] = os.fdopen(fd, "r", newline="", encoding="utf-8", errors="replace")
    else:
        handle = os.fdopen(fd, "rb")
    with handle:
        yield handle


def lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, is last line) with each line's length bounded."""
    with open_run_file(path) as handle:
        number = 0
        line = handle.readline(MAX_LINE_BYTES + 1)
        while line:
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise RunDirError(f"{path.name} line {number} is over {MAX_LINE_BYTES:,} bytes")
            following = handle.readline(MAX_LINE_BYTES + 1)
            yield number, line.decode("utf-8", errors="replace"), not following
            line = following


def read_events(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    events = []
    for number, line, last in lines(path):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            if not isinstance(event, dict):
                raise ValueError("not an object")
        except (ValueError, RecursionError) as error:  # RecursionError: nested too deeply
            if last and not line.endswith("\n"):
                notes.append(f"{path.name}: last line torn (run killed mid-write), skipped")
                continue
            raise RunDirError(f"{path.name} line {number} is not a JSON object ({error})") from None
        events.append(event)
    return events


def csv_records(
    path: Path, required: tuple[str, ...], notes: list[str], parse: Callable[[dict[str, str]], T]
) -> list[T]:
    """Each row of a CSV file parsed by `parse` (which raises ValueError on a bad value)."""
    torn_tail = ends_without_newline(path)
    records: list[T] = []
    with open_run_file(path, text=True) as handle:
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


def ends_without_newline(path: Path) -> bool:
    with open_run_file(path, max_bytes=None) as handle:
        handle.seek(0, 2)
        if handle.tell() == 0:
            return False
        handle.seek(-1, 2)
        return handle.read(1) != b"\n"


def stream_columns(path: Path, names: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The named columns of a big CSV file, row by row, without holding the file."""
    with open_run_file(path, text=True, max_bytes=None) as handle:
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


# -- values ----------------------------------------------------------------------------------


def finite(value: Any, allow_nan: bool = False) -> float:
    number = float(value)
    if not math.isfinite(number) and not (allow_nan and math.isnan(number)):
        raise ValueError(f"{value!r} is not a finite number")
    return number


def loss_cell(text: str) -> float:
    """A loss cell: a number, 'nan' (no training step in the interval) or empty."""
    return float(text) if text.strip() else math.nan


def measure_cell(text: str) -> float:
    """An evaluation's measure (metrics.csv's val_... and test_... columns): a number, or
    'nan', 'inf' or '-inf' as the run measured it (a diverged loss, a metric of the user's
    that returned one), or empty. A run records what it measured; readers show it."""
    return float(text) if text.strip() else math.nan


def optional_float(value: Any) -> float | None:
    return None if value is None else finite(value)


# A count of versions, workers or steps beyond this is no run's (and floats stop being exact).
MAX_CELL_INT = 2**53


def int_cell(text: str, column: str) -> int:
    """A whole number in [0, MAX_CELL_INT] (what every integer column of updates.csv and
    worker_steps.csv counts), or one RunDirError line."""
    try:
        value = int(text)
    except ValueError:
        raise RunDirError(f"updates.csv: {column} {short(text, 40)} is not an integer") from None
    if not 0 <= value <= MAX_CELL_INT:
        raise RunDirError(
            f"updates.csv: {column} {short(text, 40)} is out of range (0 to {MAX_CELL_INT})"
        )
    return value


def float_cell(text: str, column: str) -> float:
    try:
        return finite(text)
    except ValueError:
        raise RunDirError(f"updates.csv: {column} {text!r} is not a finite number") from None


def short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
