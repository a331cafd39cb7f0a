"""What the run controller tells a runtime to do: typed values, each with its reason.

A runtime carries a decision out and reports what happened back as an event (a method call on
the controller). Decisions name workers by index and server shards by position; they never
hold actors, processes or futures, so every runtime can carry them out its own way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.protocol import ProtocolSpec
from syncswitch.core.sync.records import Decision, EvalPoint
from syncswitch.core.sync.state import SynchronizerState


@dataclass(frozen=True)
class StartWorker:
    """Start (or start again) `worker`'s training loop against the current servers."""

    worker: int
    incarnation: int  # 0 for the first; an injected crash or hang happens in the first only
    reason: str


@dataclass(frozen=True)
class Evaluate:
    """Measure test accuracy and loss of these weights, off the workers' path."""

    point: EvalPoint
    weights: np.ndarray
    reason: str


@dataclass(frozen=True)
class RequestSnapshot:
    """Ask every shard to snapshot at its next version boundary (a checkpoint due by time)."""

    label: str
    reason: str


@dataclass(frozen=True)
class RestartWorker:
    """`worker` died or was killed: the servers stop waiting for it and it is started again."""

    worker: int
    restart: int  # how many times it has been restarted, this one included
    reason: str


@dataclass(frozen=True)
class KillWorker:
    """`worker` hung: kill it (a restart follows, as for any dead worker)."""

    worker: int
    reason: str


@dataclass(frozen=True)
class RestoreServers:
    """Replace every shard by one restored from these snapshot states (a checkpoint)."""

    shard_states: tuple[SynchronizerState, ...]
    checkpoint: str
    reason: str


@dataclass(frozen=True)
class RollBack:
    """Divergence: every shard goes back to these states in place and stays in `protocol`."""

    shard_states: tuple[SynchronizerState, ...]
    protocol: ProtocolSpec
    lr_scale: float
    momentum: MomentumPolicy
    label: str  # "divergence rollback N", the reason a switch it causes carries
    reason: str


@dataclass(frozen=True)
class ApplyPolicyDecision:
    """A straggler policy's decision (exclude, readmit, switch, return), or online timing's
    `EndOnlinePhase`, for every shard."""

    decision: Decision

    @property
    def reason(self) -> str:
        return self.decision.reason


@dataclass(frozen=True)
class FinishShards:
    """One shard has applied the whole workload: every shard ends the workload now.

    Workers stop once any shard says done; a shard a few samples behind would otherwise hold
    them at its barrier.
    """

    reason: str


@dataclass(frozen=True)
class Stop:
    """The run cannot go on; `reason` is the one line the user sees.

    `stalled`: nothing is broken but nothing can be applied (every worker quarantined); the
    runtime raises TrainingStalled. Otherwise a failure beyond recovery (RunStopped).
    """

    reason: str
    stalled: bool = False


RunDecision = (
    StartWorker
    | Evaluate
    | RequestSnapshot
    | RestartWorker
    | KillWorker
    | RestoreServers
    | RollBack
    | ApplyPolicyDecision
    | FinishShards
    | Stop
)
