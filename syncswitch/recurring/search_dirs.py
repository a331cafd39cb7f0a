"""Where a switch-point search keeps its trials, and who may clear what there.

Trial directories: `<search_dir>/<fingerprint[:12]>/trial-<fraction>-s<seed>/`, a normal run
directory each. The job's own subdirectory keeps jobs that share a `--search-dir` apart, and it
holds `job.json` (the full fingerprint), so a job never works in another's directory even when
their fingerprints share a prefix. Each trial directory holds `trial.json` (job fingerprint,
fraction, seed), written before its trial starts: an unfinished trial is cleared only when that
file says this job made it. Nothing else is ever deleted; a link, a file or a foreign directory
where a directory of the search should be is refused in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

from syncswitch.core.timing.fraction_search import TrialKey, fraction_label
from syncswitch.errors import DiskFull, UserError, is_disk_full
from syncswitch.files import (
    DirectoryBusy,
    DirectoryLock,
    UnsafeFileError,
    read_regular,
    write_json_atomic,
)


class SearchDirError(UserError):
    """A search directory or trial directory this job did not make, or not a directory."""


JOB_MARKER = "job.json"  # in the job's search directory: whose it is
LOCK = ".syncswitch.lock"  # in the job's search directory: held by the search working there
TRIAL_MARKER = "trial.json"  # in each trial directory: which job and trial made it
_MARKER_BYTES = 4096


DEFAULT_SEARCH_ROOT = Path("searches")


def default_search_dir(job_fingerprint: str) -> Path:
    return job_search_dir(DEFAULT_SEARCH_ROOT, job_fingerprint)


def job_search_dir(search_root: Path, job_fingerprint: str) -> Path:
    """The job's own directory under a (possibly shared) search root."""
    return search_root / job_fingerprint[:12]


def trial_dir(search_dir: Path, key: TrialKey) -> Path:
    return search_dir / f"trial-{fraction_label(key.fraction)}-s{key.seed}"


def claim_job_dir(directory: Path, job_fp: str) -> Path:
    """Make (or check) the job's search directory: a real directory whose `job.json` names this
    job; one that belongs to another job, or is a link or a file, is refused in one line."""
    try:
        if lstat_or_none(directory) is None:
            directory.mkdir(parents=True, exist_ok=True)
        require_plain_dir(directory, "search directory")
        marker = directory / JOB_MARKER
        if lstat_or_none(marker) is None:
            # A directory of this name from before markers existed is adopted: its trials are
            # still read (recovered) but never deleted, as they have no trial.json.
            write_json_atomic(marker, {"fingerprint": job_fp})
            return directory
    except OSError as error:
        if is_disk_full(error):
            raise DiskFull(
                f"no space left to make the search directory {str(directory)!r} "
                f"({error.strerror}); free space and run the search again"
            ) from None
        raise SearchDirError(
            f"search directory {str(directory)!r} cannot be made: {error.strerror}"
        ) from None
    owner = _read_marker(marker).get("fingerprint")
    if owner != job_fp:
        raise SearchDirError(
            f"{str(directory)!r} belongs to another job ({str(owner)[:64]!r}); move it away or "
            "choose another --search-dir"
        )
    return directory


def lock_job_dir(directory: Path) -> DirectoryLock:
    """The job's search directory locked for one search (released when it ends, or by the
    kernel when its process dies); another live search there is one SearchDirError line."""
    try:
        return DirectoryLock(directory, LOCK)
    except DirectoryBusy as busy:
        holder = f" (process {busy.holder})" if busy.holder.isdigit() else ""
        raise SearchDirError(
            f"search directory {str(directory)!r} is in use by another search of this job"
            f"{holder}; wait for it to end, or stop it first"
        ) from None
    except OSError as error:
        raise SearchDirError(f"{str(directory / LOCK)!r} cannot be opened: {error}") from None


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
