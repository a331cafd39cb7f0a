"""The run's phases and the only ways from one to another.

Every phase change goes through `PhaseMachine.fire(event)`, which looks the change up in
`TRANSITIONS`; a change not in the table is a bug in the controller (or in a runtime calling
it out of turn) and raises `IllegalTransition` rather than letting the run drift into a state
nobody designed for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from syncswitch.control.decisions import RunDecision


class RunPhase(StrEnum):
    STARTING = "starting"  # actors starting; nothing trains yet
    TRAINING = "training"
    RECOVERING = "recovering"  # server shards being replaced from a checkpoint
    ROLLING_BACK = "rolling_back"  # shards going back to a checkpoint in place (divergence)
    FINISHING = "finishing"  # workload done, every worker back; evaluations outstanding
    FINISHED = "finished"
    FAILED = "failed"


class PhaseEvent(StrEnum):
    """What moves the run from one phase to another (the controller fires these)."""

    START = "start"  # start(): the actors are up
    SERVERS_LOST = "servers_lost"  # on_server_died() with a checkpoint to restore from
    SERVERS_RESTORED = "servers_restored"  # on_servers_restored()
    DIVERGED = "diverged"  # on_drained(): the guard saw divergence, a checkpoint to go back to
    ROLLED_BACK = "rolled_back"  # on_rolled_back()
    WORKLOAD_DONE = "workload_done"  # the workload applied, every worker back, slices all in
    FINISH = "finish"  # finish(): final checkpoint and summary written
    STOP = "stop"  # a Stop decision: the run cannot go on
    FAIL = "fail"  # fail(): the runtime raised


_LIVE = (
    RunPhase.STARTING,
    RunPhase.TRAINING,
    RunPhase.RECOVERING,
    RunPhase.ROLLING_BACK,
    RunPhase.FINISHING,
)

TRANSITIONS: dict[tuple[RunPhase, PhaseEvent], RunPhase] = {
    (RunPhase.STARTING, PhaseEvent.START): RunPhase.TRAINING,
    (RunPhase.TRAINING, PhaseEvent.SERVERS_LOST): RunPhase.RECOVERING,
    (RunPhase.RECOVERING, PhaseEvent.SERVERS_RESTORED): RunPhase.TRAINING,
    (RunPhase.TRAINING, PhaseEvent.DIVERGED): RunPhase.ROLLING_BACK,
    (RunPhase.ROLLING_BACK, PhaseEvent.ROLLED_BACK): RunPhase.TRAINING,
    # A drain may return both a RollBack and a Stop (every worker quarantined as the loss
    # blew up): the runtime carries out the rollback before it meets the Stop; the run
    # stays failed.
    (RunPhase.FAILED, PhaseEvent.ROLLED_BACK): RunPhase.FAILED,
    (RunPhase.TRAINING, PhaseEvent.WORKLOAD_DONE): RunPhase.FINISHING,
    (RunPhase.FINISHING, PhaseEvent.FINISH): RunPhase.FINISHED,
    **{(phase, PhaseEvent.STOP): RunPhase.FAILED for phase in _LIVE},
    # fail() follows a Stop too (the runtime raised it), so FAILED may fail again.
    **{(phase, PhaseEvent.FAIL): RunPhase.FAILED for phase in (*_LIVE, RunPhase.FAILED)},
}


class IllegalTransition(RuntimeError):
    """A phase change not in TRANSITIONS: a bug, never the user's doing."""


@dataclass(frozen=True)
class Step:
    """What the controller answers to every event: the phase before and after, and the
    decisions the runtime must carry out, in order."""

    before: RunPhase
    after: RunPhase
    decisions: list[RunDecision] = field(default_factory=list)


@dataclass
class PhaseMachine:
    phase: RunPhase = RunPhase.STARTING

    def fire(self, event: PhaseEvent) -> RunPhase:
        """Move to the phase the table gives for (the current phase, `event`)."""
        after = TRANSITIONS.get((self.phase, event))
        if after is None:
            raise IllegalTransition(f"no transition from {self.phase} on {event}")
        self.phase = after
        return after
