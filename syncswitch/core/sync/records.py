"""Plain facts exchanged between the synchronizer and whatever runtime drives it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

import numpy as np
import torch

from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.core.timing.gradient_stats import RoundPartials
from syncswitch.core.timing.rules import TIMING_POLICY
from syncswitch.records import Switch


@dataclass
class Gradient:
    """One worker's gradient, computed on the weights of `computed_version`."""

    worker: int
    sequence: int  # per-worker counter, so each gradient can be named exactly once
    computed_version: int
    # Flat float32, mean over the worker's batch; empty once a barrier has summed it (its
    # values then live only in the round's sum: core/sync/barrier_sum.py).
    values: torch.Tensor
    samples: int
    loss: float
    step_time_s: float  # the worker's step: real compute plus any emulated device time
    # 0: a gradient. H >= 1: a local phase's model delta (pulled - current) after H steps,
    # `samples` being all of them (core/sync/local.py).
    local_steps: int = 0
    # abs(values)^2, written by the synchronizer's admission check when the round it joins is
    # measured for online timing (the check's by-product; core/timing/gradient_stats.py), else None.
    squared_norm: float | None = None
    # The whole gradient's L2 norm, measured by its worker when the run clips gradients
    # (core/sync/clipping.py): every shard scales its slice of a lone update by it.
    norm: float | None = None


@dataclass(frozen=True)
class NormPartial:
    """One shard's share of a BSP round's squared global norm, for the other shards
    (core/sync/clipping.py)."""

    shard: int
    version: int  # the version the round produces
    squared: float


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

    `state` is typed; its plain-data form (what torch.save writes and weights_only reads) is
    made and read in core/sync/state.py.
    """

    label: str  # why it was taken: "periodic", "requested", "final", ...
    samples: int
    progress: float
    version: int
    time_s: float
    state: SynchronizerState


@dataclass
class Outcome:
    """What a runtime must do after handing the synchronizer a gradient.

    Every list field is a kind of record; `merge` extends each, so a new kind is added here
    once and flows to the runtime, the controller and the results without further listing.
    """

    released: list[int] = field(default_factory=list)  # workers that may pull and go on
    applied: list[UpdateRecord] = field(default_factory=list)
    dropped: list[DropRecord] = field(default_factory=list)
    switches: list[Switch] = field(default_factory=list)
    evaluations: list[EvalPoint] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)  # e.g. a quarantine, with its reason
    snapshots: list[Snapshot] = field(default_factory=list)  # states to checkpoint
    # Gradient statistics of BSP rounds over this shard's slice (an online phase only).
    partials: list[RoundPartials] = field(default_factory=list)
    # This shard's part of a held BSP round's norm, for the runtime to send the other shards.
    norm_partials: list[NormPartial] = field(default_factory=list)
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


class Action(StrEnum):
    """What a `Decision` does. The straggler policies' four are carried out by the synchronizer
    (core/stragglers/monitor.py carry_out), and so is online timing's switch (an
    `EndOnlinePhase`); the others are logged by whoever made them."""

    SWITCH = "switch"  # greedy: leave BSP for ASP now (online timing: end the online phase)
    RETURN = "return"  # greedy with return: back to the scheduled protocol
    EXCLUDE = "exclude"  # elastic: the barrier stops waiting for a worker
    READMIT = "readmit"  # elastic: the barrier waits for it again
    QUARANTINE = "quarantine"  # gradient admission: a worker sent too many bad gradients
    ROLLBACK = "rollback"  # divergence guard: back to the last good checkpoint
    GIVE_UP = "give_up"  # divergence guard: no rollback left; the run goes on as it is


@dataclass(frozen=True)
class Decision:
    """What a policy decided, and why; the synchronizer carries it out in place."""

    action: Action
    policy: str
    reason: str
    time_s: float
    progress: float
    worker: int | None = None
    protocol: ProtocolSpec | None = None  # the protocol a switch, return or rollback puts in force

    def to_plain(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "policy": self.policy,
            "worker": self.worker,
            "protocol": self.protocol.name if self.protocol else None,
            "time_s": round(self.time_s, 6),
            "progress": round(self.progress, 6),
            "reason": self.reason,
        }

    @classmethod
    def from_plain(cls, record: dict[str, Any]) -> Decision:
        """Back from `to_plain()` (a checkpointed run record); raises on a malformed one."""
        worker, protocol = record["worker"], record["protocol"]
        return cls(
            action=Action(record["action"]),
            policy=str(record["policy"]),
            reason=str(record["reason"]),
            time_s=float(record["time_s"]),
            progress=float(record["progress"]),
            worker=None if worker is None else int(worker),
            protocol=None if protocol is None else ProtocolSpec.parse(protocol),
        )


@dataclass(frozen=True)
class EndOnlinePhase(Decision):
    """Online timing's switch: the schedule's online phase ends now, in `protocol` (the next
    phase's). `carry_out` (core/stragglers/monitor.py) tells it from a straggler policy's switch
    by its type; it is recorded like any decision (action "switch", policy "online_timing")."""

    def __post_init__(self) -> None:
        if self.action is not Action.SWITCH or self.policy != TIMING_POLICY:
            raise ValueError(
                f"online timing only switches, as {TIMING_POLICY!r}: not {self.action.value} "
                f"by {self.policy!r}"
            )

    @classmethod
    def at(
        cls, reason: str, time_s: float, progress: float, protocol: ProtocolSpec
    ) -> EndOnlinePhase:
        return cls(
            action=Action.SWITCH,
            policy=TIMING_POLICY,
            reason=reason,
            time_s=time_s,
            progress=progress,
            protocol=protocol,
        )


@dataclass(frozen=True)
class WorkerStats:
    """One worker's step-time statistics, returned by its training loop (a row of
    worker_steps.csv)."""

    worker: int
    steps: int
    step_time_mean_s: float
    step_time_p50_s: float
    step_time_p90_s: float
    step_time_max_s: float
    compute_mean_s: float
    compute_cpu_mean_s: float | None  # CPU time of the same steps; None where not measured
    wait_mean_s: float

    @classmethod
    def of_steps(
        cls,
        worker: int,
        step_times: list[float],
        compute_times: list[float],
        wait_times: list[float],
        compute_cpu_times: list[float] | None = None,
    ) -> WorkerStats:
        """Summarise one worker's measured steps (a worker with none reports zeros)."""
        steps = np.array(step_times) if step_times else np.zeros(1)
        return cls(
            worker=worker,
            steps=len(step_times),
            step_time_mean_s=float(steps.mean()),
            step_time_p50_s=float(np.percentile(steps, 50)),
            step_time_p90_s=float(np.percentile(steps, 90)),
            step_time_max_s=float(steps.max()),
            compute_mean_s=float(np.mean(compute_times or [0.0])),
            compute_cpu_mean_s=(
                None if compute_cpu_times is None else float(np.mean(compute_cpu_times or [0.0]))
            ),
            wait_mean_s=float(np.mean(wait_times or [0.0])),
        )

    def to_plain(self) -> dict[str, int | float]:
        """A row of worker_steps.csv (a value not measured is left out, so its cell is empty)."""
        return {k: v for k, v in asdict(self).items() if v is not None}
