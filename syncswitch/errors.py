"""Errors a user sees, in one place.

`UserError` and its kinds are mistakes in what the user gave (flags, files, directories): the
CLI prints their one-line message and exits 2, never a traceback. `TrainingStalled` is not a
mistake but a run that cannot go on; the CLI exits 1 and the results so far stay on disk.
Nothing here imports Ray or torch, so the CLI can catch these without loading either.
"""

from __future__ import annotations

import errno


class UserError(Exception):
    """A mistake in the user's input; the message names the value and what is allowed."""


class ConfigError(UserError, ValueError):
    """A user mistake in the job description."""


class WorkloadError(UserError, ValueError):
    """A dataset or model that cannot be built from what was given."""


class RegistryError(UserError):
    """The job registry cannot be opened, read or written; the message says which and why."""


class OutputPathError(UserError):
    """An output path (`--plot`, `--html`, `calibrate -o`) that cannot be written as a file."""


class RunDirError(UserError):
    """A run directory that cannot be read: missing, not a run, or with a malformed file."""


class TrainingStalled(RuntimeError):
    """The run cannot make progress (e.g. every worker quarantined); results so far are kept."""


class RunStopped(TrainingStalled):
    """The run reached a limit it may not pass (e.g. a worker's `max_worker_restarts`): the
    CLI prints the one-line reason and exits 1, like a stall; results so far are kept."""


class DiskFull(TrainingStalled):
    """A write found no space left on its file system (or its quota spent): the run stops with
    one line; every file written so far stays parseable, and `--resume` continues from the
    last checkpoint once space is freed (a line the full disk cut is dropped then)."""


# A full file system, a spent quota, a file over its size limit: space, not a mistake.
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in NO_SPACE_ERRNOS


class CallbackError(RuntimeError):
    """A callback given to train() raised (or answered what a hook may not): the run stopped
    there as if it had asked, its files written (summary.json's `stopped_early` says which
    hook and what it raised); the message is one line, the callback's error its cause."""


class Interrupted(Exception):
    """Ctrl-C stopped a run: its message says where the run is and how to go on (resume it,
    or, when nothing was worth resuming, run the command again); the CLI exits 130."""
