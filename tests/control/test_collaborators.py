"""The controller's collaborators on their own: evaluation assembly across shards and out of
order results, and the timed checkpoint by the injected clock."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from syncswitch.control.checkpoints import CheckpointKeeper
from syncswitch.control.evaluations import EvaluationAssembly
from syncswitch.control.record import RunRecord
from syncswitch.core.sync.records import EvalPoint
from syncswitch.rundir import RunWriter


def _point(fraction: float) -> EvalPoint:
    return EvalPoint(fraction, int(fraction * 100), int(fraction * 10), fraction, "asp")


def _report(points: list[EvalPoint], value: float) -> SimpleNamespace:
    weights = [np.full(2, value, np.float32) for _ in points]
    return SimpleNamespace(outcome=SimpleNamespace(evaluations=points), eval_weights=weights)


def test_a_point_is_evaluated_once_every_shard_sent_its_slice():
    assembly = EvaluationAssembly()
    half, whole = _point(0.5), _point(1.0)
    # Shard 0 is drained after both points, shard 1 only after the first.
    first = assembly.add([_report([half, whole], 0.0), _report([half], 1.0)], lambda: 0.25)
    assert [e.point for e in first] == [half]
    assert first[0].weights.tolist() == [0.0, 0.0, 1.0, 1.0]
    assert assembly.slices_waiting
    second = assembly.add([_report([], 0.0), _report([whole], 1.0)], lambda: 0.125)
    assert [e.point for e in second] == [whole] and not assembly.slices_waiting
    assert assembly.outstanding == 2


def test_results_are_released_in_training_order_with_their_train_loss():
    assembly = EvaluationAssembly()
    half, whole = _point(0.5), _point(1.0)
    losses = iter([0.25, 0.125])
    assembly.add([_report([half, whole], 0.0)], lambda: next(losses))
    assert assembly.result(whole, {"accuracy": 0.9, "loss": 0.1}) == []  # the earlier is out
    released = assembly.result(half, {"accuracy": 0.8, "loss": 0.2})
    assert [(e.point, e.values["accuracy"], e.train_loss) for e in released] == [
        (half, 0.8, 0.25),
        (whole, 0.9, 0.125),
    ]
    row = released[0].metric_row()
    assert row.to_plain()["val_accuracy"] == 0.8 and row.loss == 0.2
    assert released[0].metric_row().samples_per_s == 100.0 and assembly.outstanding == 0


def test_a_timed_checkpoint_is_due_by_the_injected_clock_once(tmp_path):
    now = [0.0]
    writer = RunWriter(tmp_path, {}, {})
    keeper = CheckpointKeeper(writer, RunRecord(), every_s=2.0, clock=lambda: now[0])
    assert not keeper.timed_due()
    now[0] = 2.0
    assert keeper.timed_due() and not keeper.timed_due()  # asked for once
    now[0] = 3.9
    assert not keeper.timed_due()
    now[0] = 4.0
    assert keeper.timed_due()
    writer.close()
