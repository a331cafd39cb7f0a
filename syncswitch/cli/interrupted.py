"""What Ctrl-C leaves of a run, and the one line that says so.

A run interrupted after a checkpoint keeps its directory, and the line names it and the
exact command that continues it. A run interrupted before its first checkpoint (Ray still
starting, or the first few percent of training) has nothing to resume from: what this
attempt wrote is removed, so the same command, or the same `--out`, starts it again, and
the line says that instead.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from syncswitch.command import program
from syncswitch.errors import Interrupted
from syncswitch.rundir import names


def entries(run_dir: Path) -> set[str]:
    """The names in `run_dir` now (none when it does not exist)."""
    return {p.name for p in run_dir.iterdir()} if run_dir.is_dir() else set()


def interrupted(run_dir: Path, *, before: set[str], made_here: bool) -> Interrupted:
    """The `Interrupted` to raise for a run stopped by Ctrl-C in `run_dir`; with no checkpoint
    to resume from, what this attempt added to the directory (all of it if it made the
    directory; `before` is what was there before) is removed first."""
    # Here, not at the top: `--help` answers without importing torch.
    from syncswitch.core.reliability.checkpoints import CheckpointStore

    samples = CheckpointStore(run_dir / names.CHECKPOINTS).newest_samples()
    quoted = shlex.quote(str(run_dir))
    if samples is not None:
        at = f" (its last checkpoint at {samples:,} samples)" if samples >= 0 else ""
        return Interrupted(
            f"interrupted; the run so far is in {run_dir}{at}; continue it with: "
            f"{program()} train --resume {quoted}"
        )
    if made_here:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        for name in entries(run_dir) - before:
            path = run_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    return Interrupted(
        f"interrupted before the run's first checkpoint: nothing to resume, so what it wrote "
        f"in {run_dir} is removed; run the same command again to start it over"
    )
