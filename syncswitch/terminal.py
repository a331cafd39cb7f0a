"""The terminal during a run: the project's own lines on it, every library's output in a file.

Ray and PyTorch write from Python (loggers, warnings, worker output that Ray forwards to the
driver) and from C++ (Ray's core worker logs straight to the process's stderr). Only the file
descriptors catch both: `library_output_to` points descriptors 1 and 2 at a log file for the
duration of a run, so whatever any library or child process (Ray's raylet and GCS inherit
them) prints lands there, while the project's live display keeps the real terminal through
`project_console()`. Nothing is lost: `--verbose` simply leaves the descriptors alone.

Text that comes from a file or the registry (a run directory's config.json, a stored
decision's reason, a directory's name) may hold escape sequences that would clear the screen,
set the window title or fake a line: `printable` shows every control character as its escape
(`\\x1b`), and `say` prints a line of ours that way on the terminal.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from rich.console import Console

from syncswitch.errors import ConfigError
from syncswitch.files import UnsafeFileError, open_append_fd

# C0 and C1 controls, DEL, and the bidirectional overrides and isolates (which reorder what is
# shown): each is written as its Python escape, so the text reads as it is stored.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def printable(text: object) -> str:
    """`text` with every control character escaped (`\\x1b`, `\\n`, `\\u202e`), safe to print."""
    return _UNPRINTABLE.sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def say(line: str) -> None:
    """One line of ours on the terminal (stderr), also while library output goes to the run's
    log; control characters escaped."""
    stream = _terminal_console.file if _terminal_console is not None else sys.stderr
    print(printable(line), file=stream, flush=True)


# The terminal is one per process, like its file descriptors, so the console on it is too.
_terminal_console: Console | None = None


def project_console() -> Console:
    """The console for syncswitch's own live output (progress): the terminal's stderr, also
    while library output is captured. (stderr keeps stdout for results, e.g. `--json`.)"""
    return _terminal_console or _console(sys.stderr)


# A file or a pipe has no width; rich would assume 80 columns and cut the live line there.
NOT_A_TERMINAL_WIDTH = 400


def _console(file: IO[str]) -> Console:
    is_tty = hasattr(file, "isatty") and file.isatty()
    return Console(file=file, highlight=False, width=None if is_tty else NOT_A_TERMINAL_WIDTH)


@contextmanager
def library_output_to(log_path: Path) -> Iterator[Path]:
    """Send everything written to stdout and stderr (by any code, in any language) to
    `log_path` (appended) until the block ends; `project_console()` still reaches the
    terminal."""
    global _terminal_console
    sys.stdout.flush()
    sys.stderr.flush()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Inside the run directory (not trusted on --resume): never through a symbolic link (a
    # dangling one would create its target), never blocking on a FIFO, a regular file only.
    try:
        log_fd = open_append_fd(log_path)
    except UnsafeFileError as error:
        raise ConfigError(f"run directory: {error}") from None
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise ConfigError(f"run directory: {str(log_path)!r} cannot be opened: {reason}") from None
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_err), "w", buffering=1)
    previous = _terminal_console, sys.stdout, sys.stderr
    _terminal_console = _console(terminal)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        # Python-level writes too, also where sys.stdout is not descriptor 1 (a notebook, a
        # test runner's capture).
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        yield log_path
    finally:
        # Library text still buffered in Python belongs to the log, not the terminal.
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):
                stream.flush()
        _terminal_console, sys.stdout, sys.stderr = previous
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err, log_fd):
            os.close(fd)
        terminal.close()
