"""The search's directories: the job's own (claimed by its `job.json`) and its trials' (each
made under a `trial.json`); nothing is deleted that this job's search did not make, and a link,
a file or a foreign directory where one should be is refused in one line (see search.py).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from syncswitch.errors import UserError
from syncswitch.files import UnsafeFileError, read_regular, write_json_atomic


class SearchDirError(UserError):
    """A search directory or trial directory this job did not make, or not a directory."""


JOB_MARKER = "job.json"  # in the job's search directory: whose it is
TRIAL_MARKER = "trial.json"  # in each trial directory: which job and trial made it
_MARKER_BYTES = 4096


def claim_job_dir(directory: Path, job_fp: str) -> Path:
    """Make (or check) the job's search directory: a real directory whose `job.json` names this
    job; one that belongs to another job, or is a link or a file, is refused in one line."""
    if lstat_or_none(directory) is None:
        directory.mkdir(parents=True, exist_ok=True)
    require_plain_dir(directory, "search directory")
    marker = directory / JOB_MARKER
    if lstat_or_none(marker) is None:
        # A directory of this name from before markers existed is adopted: its trials are
        # still read (recovered) but never deleted, as they have no trial.json.
        write_json_atomic(marker, {"fingerprint": job_fp})
        return directory
    owner = _read_marker(marker).get("fingerprint")
    if owner != job_fp:
        raise SearchDirError(
            f"{str(directory)!r} belongs to another job ({str(owner)[:64]!r}); move it away or "
            "choose another --search-dir"
        )
    return directory


def clear_unfinished(directory: Path, source: dict[str, Any]) -> None:
    """Remove what an interrupted attempt of this trial left (its files append, not replace),
    but only a directory whose `trial.json` says this job's search made it for this trial."""
    if lstat_or_none(directory) is None:
        return
    require_plain_dir(directory, "trial directory")
    marker = directory / TRIAL_MARKER
    owner = _read_marker(marker) if lstat_or_none(marker) is not None else None
    if owner != source:
        raise SearchDirError(
            f"{str(directory)!r} exists and was not made by this trial of this job's search "
            f"(no matching {TRIAL_MARKER}); move it away so that the trial can be run there"
        )
    shutil.rmtree(directory)


def lstat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise SearchDirError(f"{str(path)!r} cannot be read: {error.strerror}") from None


def require_plain_dir(path: Path, what: str) -> None:
    """A directory, not a link to one (never followed: it could point anywhere)."""
    info = lstat_or_none(path)
    if info is None or not stat.S_ISDIR(info.st_mode):
        found = (
            "missing"
            if info is None
            else ("a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory")
        )
        raise SearchDirError(f"{what} {str(path)!r} is {found}; it must be a plain directory")


def _read_marker(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(read_regular(path, _MARKER_BYTES, follow_symlinks=False))
    except (UnsafeFileError, OSError, ValueError, RecursionError) as error:
        raise SearchDirError(f"{str(path)!r} cannot be read as a search marker: {error}") from None
    if not isinstance(value, dict):
        raise SearchDirError(f"{str(path)!r} must hold a JSON object (a search marker)")
    return value
