"""Writing files so that a reader never sees half of one, and a crash never leaves one torn.

Every result file that is rewritten while a run goes (summary.json, actors.json, checkpoints,
a truncated CSV on resume) goes through `write_atomic`: a temp file with an unpredictable name
made with O_EXCL in the same directory (so it never follows a planted symlink), flushed and
fsynced, then renamed over the target (atomic on POSIX within one file system; a symlink at the
target is replaced, not followed), and the directory fsynced so the rename survives a crash.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

TMP_SUFFIX = ".tmp"


def write_atomic(path: Path, data: bytes | str, *, tmp_prefix: str = ".write-") -> None:
    """Replace `path` by `data` in one step (see the module docstring)."""
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=tmp_prefix, suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str))


def fsync_directory(directory: Path) -> None:
    """Make a rename inside `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
