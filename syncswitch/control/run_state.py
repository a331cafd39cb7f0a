"""What a run checkpoint holds, typed, and its plain-data form: written and read only here.

A checkpoint is every server shard's `SynchronizerState` and the controller's `RunRecord`. Its
plain form (a dict of tensors and plain data, written with torch.save and read with
weights_only=True by core/reliability/checkpoints.py) carries a format version:

- version 2 (this code writes it): {"format_version": 2, "servers": [...], "controller": {...},
  "total_samples": N} (the workload it was taken in, so a resume under a changed workload is
  refused; absent in the first version-2 checkpoints)
- version 1: the same without "format_version" (checkpoints written before it was versioned);
  read as it is, since its fields are the same.

A newer or unknown version is refused in one line; so is any missing or wrong-typed field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from syncswitch.control.record import RunRecord
from syncswitch.core.reliability.checkpoints import LoadedCheckpoint
from syncswitch.core.sync.state import StateFormatError, SynchronizerState

STATE_VERSION = 2
_READABLE = (1, 2)


@dataclass(frozen=True)
class RunCheckpoint:
    servers: tuple[SynchronizerState, ...]  # one per server shard, in shard order
    record: RunRecord
    total_samples: int | None = None  # the run's whole workload; None in older checkpoints

    @property
    def samples(self) -> int:
        return self.servers[0].samples

    @property
    def time_s(self) -> float:
        """Run seconds when it was taken (a resumed run's clock continues from here)."""
        return self.servers[0].time_s

    def to_plain(self) -> dict[str, Any]:
        plain: dict[str, Any] = {
            "format_version": STATE_VERSION,
            "servers": [state.to_plain() for state in self.servers],
            "controller": self.record.to_plain(),
        }
        if self.total_samples is not None:
            plain["total_samples"] = self.total_samples
        return plain

    @classmethod
    def from_plain(cls, plain: Any) -> RunCheckpoint:
        """Raises StateFormatError, one line naming what does not fit."""
        if not isinstance(plain, Mapping):
            raise StateFormatError(f"a {type(plain).__name__}, not a run checkpoint")
        version = plain.get("format_version", 1)
        if type(version) is not int or version not in _READABLE:
            raise StateFormatError(
                f"run state format_version {version!r}; this code reads versions "
                f"{_READABLE[0]} to {_READABLE[-1]} (a checkpoint from a newer syncswitch?)"
            )
        servers = plain.get("servers")
        if not isinstance(servers, list) or not servers:
            count = len(servers) if isinstance(servers, list) else type(servers).__name__
            raise StateFormatError(f"it holds {count} server states, expected a non-empty list")
        states = []
        for index, server in enumerate(servers):
            try:
                states.append(SynchronizerState.from_plain(server))
            except StateFormatError as error:
                raise StateFormatError(f"server {index}: {error}") from None
        record = plain.get("controller")
        if not isinstance(record, Mapping):
            raise StateFormatError("it has no controller record")
        try:
            run_record = RunRecord.from_plain(dict(record))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            detail = f"missing {error}" if isinstance(error, KeyError) else str(error)
            raise StateFormatError(f"controller record: {detail}") from None
        total = plain.get("total_samples")
        if total is not None and (type(total) is not int or total < 1):
            raise StateFormatError(f"total_samples {total!r} is not a positive integer")
        return cls(tuple(states), run_record, total)


def run_checkpoint(loaded: LoadedCheckpoint) -> RunCheckpoint:
    """The typed run state of a loaded checkpoint: as its validation built it (load_latest
    with validate=RunCheckpoint.from_plain or a ResumeCheck), else built from it now."""
    if isinstance(loaded.contents, RunCheckpoint):
        return loaded.contents
    return RunCheckpoint.from_plain(loaded.state)
