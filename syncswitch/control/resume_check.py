"""Does a loaded checkpoint's state fit the run about to continue from it? (No Ray here.)

A checkpoint's hash only shows that it is the file its manifest describes; whoever wrote the
directory wrote both. So before a resumed run hands a state to its servers and its record,
the state is restored once here, in the driver, into throwaway objects of this run's shapes:
the same code that will use it, so whatever it would trip over (a missing key, a string for
a number, weights of another model) is found now and refused in one line, and the store
falls back to the previous checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from syncswitch.control.checkpoints import CHECKPOINT_DIR
from syncswitch.control.plan import RunPlan
from syncswitch.control.run_state import RunCheckpoint
from syncswitch.core.reliability.checkpoints import (
    CheckpointError,
    CheckpointStore,
    LoadedCheckpoint,
)
from syncswitch.core.sync.server_optimizer import make_optimizer
from syncswitch.core.sync.sharding import parameter_shards
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.core.sync.synchronizer import Synchronizer
from syncswitch.errors import ConfigError
from syncswitch.terminal import say

# Beyond the tensors (weights and momentum, 4 bytes per parameter each), a state holds the
# run's record: metrics, decisions and failures, a few MB even for a long run.
_RECORD_ALLOWANCE_BYTES = 256 << 20


@dataclass(frozen=True)
class ResumeCheck:
    """Called by CheckpointStore.load_latest on each candidate state; raises to refuse it."""

    plan: RunPlan
    parameters: int  # length of the model's flat parameter vector

    @property
    def max_bytes(self) -> int:
        # Weights, momentum or Adam's two moments, the best evaluation's weights.
        return 4 * 4 * self.parameters + _RECORD_ALLOWANCE_BYTES

    def __call__(self, state: dict[str, Any]) -> RunCheckpoint:
        """The checkpoint's typed state, if this run can continue from it."""
        # One line naming what does not fit; the run record's rows, events and failure
        # entries are checked as they are built (control/record.py).
        checkpoint = RunCheckpoint.from_plain(state)
        expected = self.plan.job.servers
        if len(checkpoint.servers) != expected:
            raise ValueError(
                f"it holds {len(checkpoint.servers)} server states, this run has "
                f"servers = {expected}"
            )
        shards = parameter_shards(self.parameters, expected)
        for index, (shard_state, shard) in enumerate(zip(checkpoint.servers, shards, strict=True)):
            try:
                self._check_shard(shard_state, shard.stop - shard.start)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
                detail = f"missing {error}" if isinstance(error, KeyError) else str(error)
                raise ValueError(f"server {index}: {detail}") from None
        for best in checkpoint.record.bests:  # control/best.py: loaded into this model
            _check_vector(torch.from_numpy(best.weights), "the best weights", self.parameters)
        return checkpoint

    def _check_shard(self, shard_state: SynchronizerState, length: int) -> None:
        optimizer = shard_state.optimizer
        _check_vector(optimizer.weights, "weights", length)
        if optimizer.momentum_buffer is not None:
            _check_vector(optimizer.momentum_buffer, "momentum_buffer", length)
        if optimizer.second_moment is not None:
            _check_vector(optimizer.second_moment, "second_moment", length)
        kind = self.plan.sync.optimizer.kind
        if (optimizer.adam is not None) != self.plan.sync.optimizer.is_adam:
            held = "Adam's" if optimizer.adam is not None else "SGD's"
            raise ValueError(f"it holds {held} optimizer state, this run's optimizer is {kind}")
        # The synchronizer a server shard restores the state into, with this run's settings.
        server = make_optimizer(self.plan.sync.optimizer, torch.zeros(length))
        Synchronizer(self.plan.sync, server).restore(shard_state)
        named = set(shard_state.clocks) | set(shard_state.excluded)
        workers = self.plan.sync.workers
        if not named <= set(range(workers)):
            raise ValueError(f"it names workers beyond this run's {workers}")


def _check_vector(value: Any, name: str, length: int) -> None:
    if type(value) is not torch.Tensor or value.dim() != 1 or value.numel() != length:
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ValueError(f"{name} is {shape}, this run's model needs ({length},)")
    if not value.is_floating_point():
        raise ValueError(f"{name} has dtype {value.dtype}, not a floating point type")


def say_refused(loaded: LoadedCheckpoint, action: str) -> None:
    """One line on the terminal when newer checkpoints were refused and an older one used."""
    refused = "; ".join(f"{r.path.name}: {r.reason}" for r in loaded.refused)
    line = (
        f"syncswitch: {action} from {loaded.info.path.name}, past {len(loaded.refused)} "
        f"refused checkpoint(s) ({refused})"
    )
    # On the terminal, also while library output goes to the run's log (terminal.say).
    say(" ".join(line.split())[:1000])


def say_resumed(run_dir: Path, loaded: LoadedCheckpoint, total_samples: int) -> None:
    """One line on the terminal: which checkpoint a resumed run continues from, and where."""
    info = loaded.info
    share = f"{info.samples / total_samples:.1%} of the samples" if total_samples else "its start"
    say(
        f"syncswitch: resuming {run_dir} from {info.path.name} ({info.label}), taken at "
        f"{share} ({info.samples:,} of {total_samples:,})"
    )


def checkpoint_or_none(run_dir: Path, fits: ResumeCheck) -> LoadedCheckpoint | None:
    """The checkpoint a resumed run continues from; None when the run stopped before its
    first (a failure at the start, a full disk): it starts again from the beginning, said."""
    store = CheckpointStore(run_dir / CHECKPOINT_DIR)
    if store.sequences() or store.directory.is_symlink():  # a link is refused there
        return load_resume_checkpoint(run_dir, fits)
    say(f"syncswitch: resuming: {str(run_dir)!r} holds no checkpoint; the run starts over")
    return None


def load_resume_checkpoint(run_dir: Path, fits: ResumeCheck | None = None) -> LoadedCheckpoint:
    """The last good checkpoint of a run directory, or a one-line error saying why not.

    `fits` refuses a state this run cannot continue from (the directory is not trusted);
    a checkpoint passed over on the way is said on the terminal, not only in events.jsonl.
    """
    store = CheckpointStore(run_dir / CHECKPOINT_DIR)
    try:
        if fits is None:
            loaded = store.load_latest()
        else:
            loaded = store.load_latest(max_bytes=fits.max_bytes, validate=fits)
    except CheckpointError as error:
        raise ConfigError(f"cannot resume {str(run_dir)!r}: {error}") from None
    if loaded.refused:
        say_refused(loaded, "resuming")
    return loaded
