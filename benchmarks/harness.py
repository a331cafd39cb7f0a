"""What every benchmark script shares: its arguments, its result files, its tables.

- Arguments: `parser(__doc__)` and the options several scripts have (`--out`, `--repeats`,
  `--seeds`, `--keep`, `--quick`, `--table`), spelt and explained once.
- Result files: `RunLog`, a runs.jsonl that gets one JSON line per run as each run ends
  (flushed and fsynced), so an interrupted benchmark keeps what it measured; a line torn by a
  crash is dropped, not misread; `--keep` skips the runs already in it. Rows are dicts or
  dataclasses (`row_from` builds one back from a line). `save_text` / `save_json` rewrite a
  table or a whole-run record atomically, after every run.
- Tables: `markdown_table` renders rows in the one format every script prints; `medians` and
  `cell` are the arithmetic and formatting they repeat; `check_timing` makes sure a table's
  title says how its times were taken (EMULATED device time, SIMULATED clock, or real).
- Run directories: `read_summary` / `read_config` are the only places a benchmark reads a
  run's summary or config, through the package's run-directory module.

Scripts import it as `harness` (their folder is on sys.path when they run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
from collections.abc import Callable, Hashable, Iterable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from syncswitch import rundir
from syncswitch.files import write_atomic
from syncswitch.rundir import Summary

Row = TypeVar("Row")

# -- arguments -----------------------------------------------------------------------------------


def parser(doc: str | None, *, epilog: bool = False) -> argparse.ArgumentParser:
    """A script's parser, described by its docstring: the first line, or with `epilog` the
    first paragraph, the rest shown after the options as written."""
    text = doc or ""
    if not epilog:
        return argparse.ArgumentParser(description=text.splitlines()[0] if text else None)
    first, _, rest = text.partition("\n\n")
    return argparse.ArgumentParser(
        description=first,
        epilog=rest,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_out(parser: argparse.ArgumentParser, default: Path | str | None, what: str = "") -> None:
    """--out: the results folder (a Path; None when the script picks one per mode)."""
    shown = f" (default {default})" if default is not None else ""
    parser.add_argument(
        "--out",
        type=Path,
        default=None if default is None else Path(default),
        help=(what or "results folder") + shown,
    )


def add_repeats(parser: argparse.ArgumentParser, default: int, what: str = "") -> None:
    parser.add_argument(
        "--repeats", type=int, default=default, help=f"{what or 'runs'} (default {default})"
    )


def add_seeds(parser: argparse.ArgumentParser, default: int) -> None:
    parser.add_argument(
        "--seeds",
        type=int,
        default=default,
        help=f"runs per case, seeds 0..N-1 (default {default})",
    )


def add_keep(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep", action="store_true", help="skip the runs already in --out/runs.jsonl"
    )


def add_quick(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--quick", action="store_true", help=what)


def add_table(parser: argparse.ArgumentParser, what: str = "") -> None:
    parser.add_argument(
        "--table",
        action="store_true",
        help="run nothing: print the table from --out/runs.jsonl" + (f" ({what})" if what else ""),
    )


def add_links(parser: argparse.ArgumentParser, whose: str) -> None:
    """--link-gbps, --link-latency-ms and --server-link-gbps: EMULATED links for `whose`
    messages (syncswitch train's options of the same names)."""
    parser.add_argument(
        "--link-gbps",
        type=float,
        default=0.0,
        help=f"an EMULATED link for {whose} messages, Gbit/s per worker each way (default 0: none)",
    )
    parser.add_argument(
        "--link-latency-ms", type=float, default=0.05, help="its latency per message (0.05)"
    )
    parser.add_argument(
        "--server-link-gbps",
        type=float,
        default=0.0,
        help="an EMULATED link of each syncswitch server's own, Gbit/s each way, which its "
        "workers' messages take in turn (default 0: none)",
    )


def link_folder(out: Path, args: argparse.Namespace) -> Path:
    """Where results over `add_links`' links go: link-<G>gbps/ under `out`, named
    ...-servers-<S>gbps with a servers' link."""
    if args.link_gbps:
        out = out / f"link-{args.link_gbps:g}gbps"
    if args.server_link_gbps:
        out = out.with_name(f"{out.name}-servers-{args.server_link_gbps:g}gbps")
    return out


def args_record(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments as JSON can hold them (paths as text), for a results file."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def comma_list(text: str, kind: Callable[[str], Any] = str) -> list[Any]:
    """'8,16,32' -> [8, 16, 32] with kind=int; empty items are ignored."""
    return [kind(item) for item in text.split(",") if item]


# -- result files --------------------------------------------------------------------------------


class RunLog:
    """runs.jsonl: one JSON object per line, one line per run, appended as each run ends.

    Each line is written in one call, flushed and fsynced before `append` returns, so a run
    that ended is on disk whatever happens next. A crash while writing leaves at most the last
    line torn (no newline at its end, not a whole JSON object): `read` ignores it and the next
    `append` cuts it off, so it never joins the next row. A last line that is whole but lacks
    its newline (an edited file) is a row like the others.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> list[dict[str, Any]]:
        """Every complete row, oldest first ([] when there is no file yet)."""
        if not self.path.is_file():
            return []
        lines = self.path.read_text().split("\n")
        if _torn(lines[-1]):
            lines.pop()
        rows = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{self.path}:{number}: not a JSON line ({error.msg})") from None
        return rows

    def keys(self, key: Callable[[dict[str, Any]], Hashable]) -> set[Hashable]:
        """The keys of the runs already recorded, for --keep (or a resume) to skip them."""
        return {key(row) for row in self.read()}

    def append(self, row: Any) -> None:
        """Add one run's row (a dict or a dataclass) as a line, durable on return."""
        record = dataclasses.asdict(row) if dataclasses.is_dataclass(row) else row
        line = json.dumps(record, default=jsonable) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._drop_torn_tail()
        with self.path.open("a") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def clear(self) -> None:
        """Start the file afresh (for a script whose every run is measured again)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")

    def _drop_torn_tail(self) -> None:
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return
        tail = data[data.rfind(b"\n") + 1 :]
        with self.path.open("r+b") as handle:
            if _torn(tail.decode(errors="replace")):
                handle.truncate(len(data) - len(tail))
            else:  # a whole row without its newline: keep it, end its line
                handle.seek(0, os.SEEK_END)
                handle.write(b"\n")


def _torn(line: str) -> bool:
    """Whether the text after a file's last newline is a partly written row."""
    if not line.strip():
        return True  # nothing there (the usual case: the file ends with a newline)
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return True
    return False


def row_from(cls: type[Row], record: dict[str, Any]) -> Row:
    """A dataclass row built from a runs.jsonl line; keys it has no field for are ignored
    (rows written by an older version of the script may carry more)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in record.items() if k in names})


def save_text(path: Path, text: str) -> None:
    """Replace a results file (a table) in one step: a crash leaves the old or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


def save_json(path: Path, data: Any, *, indent: int | None = 1) -> None:
    """Replace a JSON results file in one step, indented as the committed ones are."""
    save_text(path, json.dumps(data, indent=indent, default=jsonable) + "\n")


def jsonable(value: Any) -> Any:
    """What JSON holds for a value it has no form of: a typed record of the package as its
    own JSON form (or its fields), an enum as its value, anything else as text."""
    if hasattr(value, "to_plain"):
        return value.to_plain()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Enum):
        return value.value
    return str(value)


# -- tables --------------------------------------------------------------------------------------


class Timing(Enum):
    """How a table's times were taken; its word must appear in the table's title."""

    EMULATED = "EMULATED"  # real run; workers sleep out a device time (a stand-in GPU step)
    SIMULATED = "SIMULATED"  # the simulator's virtual clock
    REAL = "real"  # real compute and real time, nothing emulated


def check_timing(title: str, *timings: Timing) -> str:
    """`title`, after checking it names each of `timings` (EMULATED and SIMULATED in capitals,
    real as a word in any case); a title that does not is a bug in the script."""
    if not timings:
        raise ValueError("a table title needs at least one timing kind")
    for timing in timings:
        if timing is Timing.REAL:
            found = re.search(r"\breal\b", title, re.IGNORECASE) is not None
        else:
            found = timing.value in title
        if not found:
            raise ValueError(f"table title does not say its timing is {timing.value}: {title!r}")
    return title


def markdown_table(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a markdown table: header, separator, one line per row (cells as str)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def cell(value: float | None, fmt: str, missing: str = "-") -> str:
    """A number formatted for a table, or `missing` when there is none (a failed run)."""
    return missing if value is None else format(value, fmt)


def medians(rows: Iterable[dict[str, float | None]]) -> dict[str, float | None]:
    """Per key, the median of the values that are not None (None when there are none)."""
    values: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            values.setdefault(key, [])
            if value is not None:
                values[key].append(value)
    return {k: statistics.median(v) if v else None for k, v in values.items()}


def ratio(top: float | None, bottom: float | None) -> float | None:
    """top / bottom, or None when either is missing (a failed run) or bottom is 0."""
    return top / bottom if top is not None and bottom else None


# -- run directories -----------------------------------------------------------------------------


def read_summary(run_dir: Path) -> Summary:
    """A run directory's summary, typed (`summary.final_value`), through the package's
    run-directory module (FileNotFoundError before the run has written one)."""
    return rundir.read_summary(run_dir)


def read_config(run_dir: Path) -> dict[str, Any]:
    """A run directory's resolved config, through the package's run-directory module."""
    return rundir.read_config(run_dir)
