"""What went wrong in a run and how the controller recovered: the entries of the run record's
failures (summary.json's reliability.failures, a checkpoint's run record, and the payloads of
the worker_failed / server_failed / run_resumed events). Each kind's plain form is written and
read here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkerFailure:
    """A worker died or hung (killed) and was restarted."""

    worker: int
    reason: str
    restart: int  # how many times this worker has been restarted, this one included
    at_fraction: float
    time_s: float
    recovery: str

    def to_plain(self) -> dict[str, Any]:
        return {
            "kind": "worker",
            "worker": self.worker,
            "reason": self.reason,
            "restart": self.restart,
            "at_fraction": self.at_fraction,
            "time_s": self.time_s,
            "recovery": self.recovery,
        }

    @classmethod
    def from_plain(cls, record: dict[str, Any]) -> WorkerFailure:
        return cls(
            worker=int(record["worker"]),
            reason=str(record["reason"]),
            restart=int(record["restart"]),
            at_fraction=float(record["at_fraction"]),
            time_s=float(record["time_s"]),
            recovery=str(record["recovery"]),
        )


@dataclass(frozen=True)
class ServerFailure:
    """The parameter servers were lost and restored from a checkpoint."""

    reason: str
    at_fraction: float
    recovery: str
    checkpoint_samples: int
    samples_lost: int
    refused_checkpoints: tuple[str, ...]  # newer checkpoints passed over: "file: why"

    def to_plain(self) -> dict[str, Any]:
        return {
            "kind": "server",
            "reason": self.reason,
            "at_fraction": self.at_fraction,
            "recovery": self.recovery,
            "checkpoint_samples": self.checkpoint_samples,
            "samples_lost": self.samples_lost,
            "refused_checkpoints": list(self.refused_checkpoints),
        }

    @classmethod
    def from_plain(cls, record: dict[str, Any]) -> ServerFailure:
        return cls(
            reason=str(record["reason"]),
            at_fraction=float(record["at_fraction"]),
            recovery=str(record["recovery"]),
            checkpoint_samples=int(record["checkpoint_samples"]),
            samples_lost=int(record["samples_lost"]),
            refused_checkpoints=_texts(record, "refused_checkpoints"),
        )


@dataclass(frozen=True)
class Resumption:
    """The run went on from a checkpoint (after a crash, a kill or a stop)."""

    checkpoint: dict[str, Any]  # the checkpoint's manifest record (CheckpointInfo.to_plain())
    refused_checkpoints: tuple[str, ...]  # newer checkpoints passed over: "file: why"

    def to_plain(self) -> dict[str, Any]:
        return {"kind": "resumed", **self.event()}

    def event(self) -> dict[str, Any]:
        """The run_resumed event's payload: the entry without its kind."""
        return {
            "checkpoint": self.checkpoint,
            "refused_checkpoints": list(self.refused_checkpoints),
        }

    @classmethod
    def from_plain(cls, record: dict[str, Any]) -> Resumption:
        checkpoint = record["checkpoint"]
        if not isinstance(checkpoint, dict):
            raise ValueError(f"a resumed entry's checkpoint is a {type(checkpoint).__name__}")
        return cls(checkpoint=checkpoint, refused_checkpoints=_texts(record, "refused_checkpoints"))


FailureEntry = WorkerFailure | ServerFailure | Resumption

_KINDS: dict[str, type[WorkerFailure] | type[ServerFailure] | type[Resumption]] = {
    "worker": WorkerFailure,
    "server": ServerFailure,
    "resumed": Resumption,
}


def failure_from_record(record: dict[str, Any]) -> FailureEntry:
    """Back from an entry's `to_plain()` (a checkpointed run record); raises on a malformed
    one."""
    kind = record["kind"]
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"a failure entry has kind = {kind!r}")
    return _KINDS[kind].from_plain(record)


def _texts(record: dict[str, Any], key: str) -> tuple[str, ...]:
    values = record[key]
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"a failure entry's {key} is not a list of strings")
    return tuple(values)
