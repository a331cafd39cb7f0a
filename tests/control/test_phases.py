"""The phase table: every listed transition goes through, anything else raises; the shared
decision-dispatch loop refuses incomplete handlers and carries out follow-up steps."""

from __future__ import annotations

import pytest

from syncswitch.control.decisions import FinishShards, RequestSnapshot, StartWorker, Stop
from syncswitch.control.dispatch import DECISION_TYPES, DecisionDispatch, raise_stop
from syncswitch.control.phases import (
    TRANSITIONS,
    IllegalTransition,
    PhaseEvent,
    PhaseMachine,
    RunPhase,
    Step,
)
from syncswitch.errors import TrainingStalled
from tests.control.scripted import PARAMETERS, ScriptedRun


@pytest.mark.parametrize(("before", "event"), sorted(TRANSITIONS))
def test_every_transition_in_the_table_goes_through(before, event):
    machine = PhaseMachine(before)
    assert machine.fire(event) is TRANSITIONS[before, event]
    assert machine.phase is TRANSITIONS[before, event]


FORBIDDEN = [
    (phase, event)
    for phase in RunPhase
    for event in PhaseEvent
    if (phase, event) not in TRANSITIONS
]


@pytest.mark.parametrize(("before", "event"), FORBIDDEN)
def test_a_transition_not_in_the_table_raises_and_keeps_the_phase(before, event):
    machine = PhaseMachine(before)
    with pytest.raises(IllegalTransition, match=f"from {before} on {event}"):
        machine.fire(event)
    assert machine.phase is before


def test_the_table_tells_the_runs_story():
    # The happy path, a recovery and a rollback, each back to TRAINING; a finished run is
    # final (nothing leaves FINISHED), and a failed one only fails again.
    machine = PhaseMachine()
    for event in (
        PhaseEvent.START,
        PhaseEvent.SERVERS_LOST,
        PhaseEvent.SERVERS_RESTORED,
        PhaseEvent.DIVERGED,
        PhaseEvent.ROLLED_BACK,
        PhaseEvent.WORKLOAD_DONE,
        PhaseEvent.FINISH,
    ):
        machine.fire(event)
    assert machine.phase is RunPhase.FINISHED
    assert not [key for key in TRANSITIONS if key[0] is RunPhase.FINISHED]
    assert {TRANSITIONS[key] for key in TRANSITIONS if key[0] is RunPhase.FAILED} == {
        RunPhase.FAILED
    }
    # Divergence is watched in TRAINING only: a second one mid-rollback would be a bug.
    assert (RunPhase.ROLLING_BACK, PhaseEvent.DIVERGED) not in TRANSITIONS


def _handlers(seen: list) -> dict:
    return {kind: seen.append for kind in DECISION_TYPES}


def test_dispatch_refuses_handlers_missing_a_decision_type():
    handlers = _handlers([])
    del handlers[Stop]
    with pytest.raises(TypeError, match="missing \\['Stop'\\]"):
        DecisionDispatch(handlers)


def test_dispatch_runs_decisions_in_order_and_follow_ups_before_the_rest():
    seen: list = []
    steps: list[Step] = []
    follow_up = Step(RunPhase.TRAINING, RunPhase.TRAINING, [RequestSnapshot("timed", "r")])
    handlers = _handlers(seen)
    handlers[StartWorker] = lambda d: (seen.append(d), follow_up)[1]
    dispatch = DecisionDispatch(handlers, on_step=steps.append)
    start = StartWorker(0, 0, "run started")
    finish = FinishShards("done")
    dispatch(Step(RunPhase.STARTING, RunPhase.TRAINING, [start, finish]))
    assert seen == [start, follow_up.decisions[0], finish]
    assert len(steps) == 2 and steps[1] is follow_up


def test_a_stop_raises_stalled_or_runtime_error():
    with pytest.raises(TrainingStalled, match="quarantined"):
        raise_stop(Stop("every worker quarantined", stalled=True))
    with pytest.raises(RuntimeError, match="no checkpoint"):
        raise_stop(Stop("no checkpoint"))


def test_the_controller_raises_on_an_event_out_of_turn(tmp_path):
    run = ScriptedRun(tmp_path)
    for shard in run.shards:
        shard.begin()
    run.handle(run.controller.start(PARAMETERS, setup_s=0.0))
    assert run.controller.phase is RunPhase.TRAINING
    with pytest.raises(IllegalTransition, match="from training on servers_restored"):
        run.controller.on_servers_restored()  # no server was lost
    assert run.controller.phase is RunPhase.TRAINING
