"""The synchronizer's typed state: its plain form survives torch.save/weights_only, a restored
synchronizer behaves exactly as the one the snapshot was taken of, and a state that does not
fit is refused in one line naming the field."""

import io
import itertools
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest
import torch

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.protocol import ASP, Schedule
from syncswitch.core.sync.records import Gradient, Outcome, Snapshot, WorkerStats
from syncswitch.core.sync.server_optimizer import OptimizerConfig, OptimizerKind, make_optimizer
from syncswitch.core.sync.state import (
    StateFormatError,
    SynchronizerState,
)
from syncswitch.core.sync.synchronizer import Synchronizer

BATCH = 4
WORKERS = 4


def make_sync(
    schedule: str = "bsp:0.5,ssp-1:0.75,asp", optimizer: OptimizerKind = OptimizerKind.SGD
) -> Synchronizer:
    ticks = itertools.count()
    config = SyncConfig(
        optimizer=OptimizerConfig(optimizer, weight_decay=0.01),
        workers=WORKERS,
        total_samples=64 * BATCH,
        schedule=Schedule.parse(schedule),
        lr=0.4,
        momentum=0.9,
        momentum_policy=MomentumPolicy.RAMP,
        checkpoint_every=0.25,
        eval_every=0.1,
    )
    weights = make_optimizer(config.optimizer, torch.zeros(5))
    return Synchronizer(config, weights, clock=lambda: next(ticks) * 0.001)


def gradient(sync: Synchronizer, worker: int, sequence: int) -> Gradient:
    """Values that differ per worker and step, so any difference in state shows in weights."""
    values = torch.tensor([worker + 1.0, -sequence, 0.5 * worker, 1.0 / (sequence + 1), 0.1])
    return Gradient(worker, sequence, sync.live.version, values, BATCH, 1.0, 0.01)


def drive(sync: Synchronizer, steps: range) -> tuple[Outcome, list[Snapshot]]:
    """Each worker sends one gradient per step, in a fixed rotating order."""
    total, snapshots = Outcome(), []
    for step in steps:
        for offset in range(WORKERS):
            outcome = sync.submit(gradient(sync, (step + offset) % WORKERS, step))
            snapshots += outcome.snapshots
            total.merge(outcome)
    return total, snapshots


def through_a_file(plain: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    return torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def applied(outcome: Outcome) -> list[tuple]:
    return [
        (r.version, r.worker, r.staleness, r.protocol, r.lr, r.momentum) for r in outcome.applied
    ]


@pytest.mark.parametrize("kind", [OptimizerKind.SGD, OptimizerKind.ADAMW])
def test_a_restored_synchronizer_behaves_exactly_as_the_original(kind) -> None:
    # Adam's moments and counters go through the checkpoint's plain form and a file too.
    original = make_sync(optimizer=kind)
    first, snapshots = drive(original, range(6))
    taken = snapshots[0]  # at 0.25, a BSP barrier: every worker's step 3 is in
    assert taken.label == "periodic" and taken.state.protocol.name == "bsp"
    state = SynchronizerState.from_plain(through_a_file(taken.state.to_plain()))
    fresh = make_sync(optimizer=kind)
    fresh.restore(state)
    assert [fresh.rejoin(w) for w in range(WORKERS)] == [4] * WORKERS
    # The original went on past the snapshot; the restored one is given the same gradients.
    again, _ = drive(fresh, range(4, 6))
    assert applied(again) == [r for r in applied(first) if r[0] > taken.version] != []
    rest_original, _ = drive(original, range(6, 64))
    rest_fresh, _ = drive(fresh, range(6, 64))
    assert applied(rest_fresh) == applied(rest_original)
    assert {r.protocol for r in rest_fresh.applied} == {"bsp", "ssp-1", "asp"}
    assert torch.equal(fresh.optimizer.weights, original.optimizer.weights)
    assert [(e.from_protocol, e.to_protocol, e.version) for e in fresh.live.switches] == [
        (e.from_protocol, e.to_protocol, e.version) for e in original.live.switches
    ]
    assert fresh.live.done and original.live.done and fresh.accounting() == original.accounting()


def test_a_rollback_restores_adams_moments() -> None:
    sync = make_sync(optimizer=OptimizerKind.ADAM)
    _, snapshots = drive(sync, range(6))
    taken = snapshots[0]
    drive(sync, range(6, 40))  # on into SSP and ASP: the moments move on
    sync.roll_back(
        taken.state,
        protocol=taken.state.protocol,
        lr_scale=0.5,
        momentum_policy=MomentumPolicy.SCALE,
        reason="test",
    )
    now, then = sync.optimizer.state_dict(), taken.state.optimizer.as_dict()
    assert now.keys() == then.keys() and now["steps"] == then["steps"] > 0
    for key in ("weights", "momentum_buffer", "second_moment"):
        assert torch.equal(now[key], then[key]), key


def test_a_state_read_back_from_a_file_equals_the_one_written() -> None:
    sync = make_sync()
    _, snapshots = drive(sync, range(40))
    in_ssp = next(s for s in snapshots if s.state.protocol.name == "ssp-1")
    back = SynchronizerState.from_plain(through_a_file(in_ssp.state.to_plain()))
    for name in ("optimizer",):
        assert torch.equal(getattr(back, name).weights, getattr(in_ssp.state, name).weights)
    same = [f for f in vars(back) if f != "optimizer"]
    assert all(getattr(back, f) == getattr(in_ssp.state, f) for f in same)
    two = [make_sync(), make_sync()]
    two[0].restore(in_ssp.state)
    two[1].restore(back)
    outcomes = [drive(s, range(40, 64))[0] for s in two]
    assert applied(outcomes[0]) == applied(outcomes[1]) and outcomes[0].applied
    assert torch.equal(two[0].optimizer.weights, two[1].optimizer.weights)


def test_the_plain_form_is_what_checkpoints_have_always_held() -> None:
    """The 21 keys (and their plain types) of checkpoints written before the state was typed,
    and "local" (local phases, read as empty where absent)."""
    sync = make_sync()
    drive(sync, range(3))
    plain = sync.snapshot("test").state.to_plain()
    old = _unversioned_snapshot_state(sync)
    assert set(plain) - {"local"} == set(old) and len(plain) == 22
    for key, value in old.items():
        if key == "optimizer":
            assert torch.equal(plain[key]["weights"], value["weights"])
        elif key != "time_s":  # the clock ticks on between the two
            assert plain[key] == value and type(plain[key]) is type(value), key
    # An old state loads as it is.
    assert SynchronizerState.from_plain(through_a_file(old)).version == sync.live.version


def _unversioned_snapshot_state(sync: Synchronizer) -> dict[str, Any]:
    """Synchronizer.snapshot()'s state as the code before the typed state wrote it."""
    return {
        "optimizer": sync.optimizer.state_dict(),
        "version": sync.live.version,
        "samples": sync.live.samples,
        "phase_index": sync.live.phase_index,
        "protocol": sync.live.spec.name,
        "excluded": sorted(sync.live.excluded),
        "clocks": {str(w): c for w, c in sorted(sync.room.clocks.items())},
        "time_s": sync.now_s(),
        "phase_started_s": sync.live.phase_started_s,
        "time_by_protocol": dict(sync.live.time_by_protocol),
        "samples_by_protocol": dict(sync.live.samples_by_protocol),
        "switches": [asdict(e) for e in sync.live.switches],
        "async_start": sync.live.async_start,
        "phase_bsp_samples": sync.live.phase_bsp_samples,
        "next_eval_index": sync.live.next_eval_index,
        "next_checkpoint_index": sync.live.next_checkpoint_index,
        "lr_scale": sync.live.lr_scale,
        "momentum_policy": sync.live.momentum_policy.value,
        "pinned": sync.live.pinned.name if sync.live.pinned else None,
        "version_floor": sync.live.version_floor,
        "ledger": sync.gate.ledger.to_plain(),
    }


def _without(key: str) -> Callable[[dict], dict]:
    return lambda s: {k: v for k, v in s.items() if k != key}


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (_without("version"), "missing 'version'"),
        (lambda s: {**s, "samples": "many"}, "samples = 'many' (str); expected an int >= 0"),
        (lambda s: {**s, "lr_scale": float("nan")}, "lr_scale = nan"),
        (lambda s: {**s, "time_s": -1.0}, "time_s = -1.0"),
        (lambda s: {**s, "protocol": "fast"}, "protocol: unknown protocol 'fast'"),
        (lambda s: {**s, "pinned": 3}, "pinned = 3 (int)"),
        (lambda s: {**s, "momentum_policy": "lots"}, "momentum_policy = 'lots'"),
        (lambda s: {**s, "excluded": ["0"]}, "excluded = ['0']"),
        (lambda s: {**s, "clocks": {"a": 1}}, "clocks = "),
        (lambda s: {**s, "switches": [{"to": "asp"}]}, "switches = "),
        (lambda s: {**s, "optimizer": {"weights": [0.0], "momentum_buffer": None}}, "weights"),
        (lambda s: [s], "a list, not a server state"),
    ],
)
def test_a_wrong_typed_or_missing_field_is_refused_in_one_line(damage, fragment) -> None:
    sync = make_sync()
    drive(sync, range(2))
    plain = sync.snapshot("test").state.to_plain()
    with pytest.raises(StateFormatError) as error:
        SynchronizerState.from_plain(damage(plain))
    message = str(error.value)
    assert fragment in message and "\n" not in message and len(message) < 200


def test_a_restored_state_keeps_its_protocols_as_values() -> None:
    sync = make_sync("asp")
    drive(sync, range(2))
    state = SynchronizerState.from_plain(sync.snapshot("test").state.to_plain())
    assert state.protocol == ASP and state.pinned is None
    assert state.momentum_policy is MomentumPolicy.RAMP


def test_worker_stats_summarise_steps_and_leave_unmeasured_cells_empty() -> None:
    stats = WorkerStats.of_steps(2, [0.1, 0.3, 0.2], [0.05, 0.15, 0.1], [0.0, 0.1, 0.2])
    assert stats.steps == 3 and stats.step_time_p50_s == pytest.approx(0.2)
    assert stats.step_time_max_s == pytest.approx(0.3) and stats.compute_cpu_mean_s is None
    row = stats.to_plain()
    assert "compute_cpu_mean_s" not in row and row["worker"] == 2
    assert row["wait_mean_s"] == pytest.approx(0.1)
    idle = WorkerStats.of_steps(0, [], [], [], compute_cpu_times=[])
    assert idle.steps == 0 and idle.step_time_mean_s == 0.0 and idle.compute_cpu_mean_s == 0.0


def test_switches_are_written_in_the_state_layout_and_read_from_either() -> None:
    sync = make_sync()
    drive(sync, range(40))  # past the first switch
    plain = sync.snapshot("test").state.to_plain()
    assert plain["switches"] and plain["switches"] == [asdict(e) for e in sync.live.switches]
    assert SynchronizerState.from_plain(plain).switches == tuple(sync.live.switches)
    # The run record's layout (to_plain: "from", "to", rounded) reads too.
    summary_layout = {**plain, "switches": [e.to_plain() for e in sync.live.switches]}
    assert SynchronizerState.from_plain(summary_layout).switches == tuple(
        e.rounded() for e in sync.live.switches
    )
