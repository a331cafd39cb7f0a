"""What a run directory must be before a run starts in it or resumes from it: never an
earlier run's (a new run), never a finished one, never one whose checkpoint describes another
workload (a resume); and a resumed run keeps the splits and ramps it began with."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from syncswitch.config import TrainConfig
from syncswitch.config.limits import MAX_CONFIG_FILE_BYTES
from syncswitch.control.controller import run_dir_in_use
from syncswitch.core.reliability.checkpoints import LoadedCheckpoint
from syncswitch.core.sync.local import SWITCH_WARMUP
from syncswitch.errors import ConfigError, RunDirError
from syncswitch.rundir import names, read_config, read_summary_if_any


def as_it_began(config: TrainConfig) -> TrainConfig:
    """A resumed run keeps the validation split it was started with: config.json's
    `val_fraction`, or none for a run from before validation splits (its decisions read the
    test set, and go on doing so); and no ramp into a local phase for a run from before it.
    Without a readable config.json, the config as given."""
    try:
        saved = read_config(Path(config.out or ""), MAX_CONFIG_FILE_BYTES)
    except (OSError, RunDirError):
        return config  # resuming then fails on its own, with its own message
    kept: dict[str, Any] = {}
    share = saved.get("val_fraction", 0.0)
    if share != config.val_fraction:
        kept["val_fraction"] = share
    if "local_switch_warmup" not in saved and config.local_switch_warmup == SWITCH_WARMUP:
        # A run from before the inner lr's ramp after a switch into a local phase goes on
        # without it, as it began (core/sync/local.py).
        kept["local_switch_warmup"] = 0.0
    if not kept:
        return config
    try:
        return replace(config, **kept)
    except ConfigError as error:
        raise ConfigError(f"cannot resume {config.out!r}: its {names.CONFIG}: {error}") from None


def refuse_used_run_dir(run_dir: Path) -> None:
    """A new run never writes into an earlier run's directory.

    Its files would append to the old ones, and the old checkpoints would be taken for its
    own by a server recovery or a divergence rollback before it has written any.
    """
    used = run_dir_in_use(run_dir)
    if used and names.CONFIG not in used:
        # Stray logs without the run's config: not a run --resume can continue, and a fresh
        # run would append to them without their header. Refused, never cleared.
        raise ConfigError(
            f"out {str(run_dir)!r} (--out) holds files a run writes ({', '.join(used)}) but "
            f"no {names.CONFIG}, so no run to continue; a new run does not write among them: "
            "choose another directory, or remove them"
        )
    if used:
        raise ConfigError(
            f"out {str(run_dir)!r} (--out) already holds a run ({', '.join(used)}); choose "
            f"another directory, remove this one, or continue that run (--resume {run_dir}, "
            "or resume=True)"
        )


def refuse_finished_run(run_dir: Path) -> None:
    """A finished run is not resumed: it would train past its end and rewrite its summary."""
    try:
        summary = read_summary_if_any(run_dir)
    except RunDirError as error:
        raise ConfigError(f"cannot resume {str(run_dir)!r}: {error}") from None
    if summary is not None and summary.complete:
        raise ConfigError(
            f"cannot resume {str(run_dir)!r}: the run is finished (its {names.SUMMARY} says "
            "complete); start a new run with another out directory (--out)"
        )


def refuse_changed_workload(run_dir: Path, checkpoint: LoadedCheckpoint, total: int) -> None:
    """A checkpoint taken under another workload than config.json now describes (e.g.
    `epochs` lowered or raised): resuming would report "complete" at some multiple or
    fraction of it. Checkpoints say their workload; older ones are judged by their samples."""
    contents = checkpoint.contents
    recorded = getattr(contents, "total_samples", None)
    samples = getattr(contents, "samples", None)
    if isinstance(recorded, int) and recorded != total:
        said = f"was taken in a workload of {recorded} samples"
    elif isinstance(samples, int) and samples >= total:
        said = f"was taken after {samples} samples"
    else:
        return
    raise ConfigError(
        f"cannot resume {str(run_dir)!r}: its checkpoint {said}, but {names.CONFIG} now "
        f"describes a workload of {total} samples (epochs x training samples); the config no "
        "longer matches the checkpoint"
    )
