"""Plain facts exchanged between the synchronizer and whatever runtime drives it."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch


@dataclass
class Gradient:
    """One worker's gradient, computed on the weights of `computed_version`."""

    worker: int
    sequence: int  # per-worker counter, so each gradient can be named exactly once
    computed_version: int
    values: torch.Tensor  # flat float32, mean over the worker's batch
    samples: int
    loss: float
    step_time_s: float  # the worker's step: real compute plus any emulated device time


@dataclass(frozen=True)
class UpdateRecord:
    """One gradient applied to the weights (a BSP update yields one record per gradient)."""

    version: int  # weights version after the update
    worker: int
    sequence: int
    computed_version: int
    staleness: int  # version it was applied to minus version it was computed on
    protocol: str
    samples: int  # samples applied so far, including this update
    progress: float
    time_s: float  # since the run began
    loss: float
    step_time_s: float
    lr: float
    momentum: float


@dataclass(frozen=True)
class DropRecord:
    worker: int
    sequence: int
    computed_version: int
    reason: str
    time_s: float


@dataclass(frozen=True)
class SwitchEvent:
    at_fraction: float
    at_samples: int
    version: int
    from_protocol: str
    to_protocol: str
    time_s: float
    overhead_s: float  # wall time to put the new rule in force, in place
    reason: str

    def to_summary(self) -> dict:
        return {
            "at_fraction": round(self.at_fraction, 6),
            "at_samples": self.at_samples,
            "version": self.version,
            "from": self.from_protocol,
            "to": self.to_protocol,
            "time_s": round(self.time_s, 6),
            "overhead_s": self.overhead_s,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class EvalPoint:
    """A progress mark crossed by an update: the runtime evaluates the weights as of now."""

    fraction: float
    samples: int
    version: int
    time_s: float
    protocol: str


@dataclass(frozen=True)
class Snapshot:
    """The synchronizer's whole state at a version boundary: what a checkpoint holds of it.

    `state` is plain data (tensors, numbers, strings, lists, str-keyed dicts), so it can be
    written with torch.save and read back with weights_only=True.
    """

    label: str  # why it was taken: "periodic", "requested", "final", ...
    samples: int
    progress: float
    version: int
    time_s: float
    state: dict


@dataclass
class Outcome:
    """What a runtime must do after handing the synchronizer a gradient.

    Every list field is a kind of record; `merge` extends each, so a new kind is added here
    once and flows to the runtime, the controller and the results without further listing.
    """

    released: list[int] = field(default_factory=list)  # workers that may pull and go on
    applied: list[UpdateRecord] = field(default_factory=list)
    dropped: list[DropRecord] = field(default_factory=list)
    switches: list[SwitchEvent] = field(default_factory=list)
    evaluations: list[EvalPoint] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)  # e.g. a quarantine, with its reason
    snapshots: list[Snapshot] = field(default_factory=list)  # states to checkpoint
    done: bool = False

    def merge(self, other: Outcome) -> None:
        # Called twice or more per applied gradient, mostly with little to merge: the record
        # kinds are listed once (below the class), not by dataclasses.fields() per call.
        self.done = self.done or other.done
        if other.released:
            self.released.extend(w for w in other.released if w not in self.released)
        for name in _RECORD_KINDS:
            records = getattr(other, name)
            if records:
                getattr(self, name).extend(records)


# Every list field of Outcome but `released`, which merge de-duplicates.
_RECORD_KINDS: tuple[str, ...] = tuple(
    f.name for f in fields(Outcome) if f.name not in ("released", "done")
)


@dataclass(frozen=True)
class StepObservation:
    """A worker's step as the server saw it arrive: what the straggler detector reads."""

    worker: int
    step_time_s: float
    time_s: float  # run seconds at arrival
    progress: float  # fraction of the training samples applied at arrival


@dataclass(frozen=True)
class Decision:
    """What an online policy decided, and why; the synchronizer carries it out in place.

    Actions: `switch` (greedy: leave BSP for the asynchronous protocol now), `return` (greedy
    with return: back to the scheduled protocol), `exclude` and `readmit` (elastic: a worker
    leaves or rejoins the BSP barrier).
    """

    action: str
    policy: str
    reason: str
    time_s: float
    progress: float
    worker: int | None = None
    protocol: str | None = None  # the protocol a switch or return puts in force

    def to_record(self) -> dict:
        return {
            "action": self.action,
            "policy": self.policy,
            "worker": self.worker,
            "protocol": self.protocol,
            "time_s": round(self.time_s, 6),
            "progress": round(self.progress, 6),
            "reason": self.reason,
        }
