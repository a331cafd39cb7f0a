"""The protocol engine driven by scripted gradients: no processes, milliseconds per test."""

import itertools

import pytest
import torch

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.hyperparams import MomentumPolicy
from syncswitch.core.sync.optimizer import FlatSGD, flat_gradient, flatten_parameters
from syncswitch.core.sync.protocol import ASP, BSP, Schedule
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.synchronizer import Synchronizer

BATCH = 4


def make_sync(schedule: str, workers: int = 4, total: int = 10_000, **kw) -> Synchronizer:
    ticks = itertools.count()
    config = SyncConfig(
        workers=workers,
        total_samples=total,
        schedule=Schedule.parse(schedule),
        lr=0.4,
        momentum=0.9,
        **kw,
    )
    return Synchronizer(config, FlatSGD(torch.zeros(3)), clock=lambda: next(ticks) * 0.001)


_SEQUENCES: dict[tuple[int, int], itertools.count] = {}


def grad(
    sync: Synchronizer, worker: int, version: int | None = None, seq: int | None = None
) -> Gradient:
    """A gradient of `worker`; each call is a new one (the next sequence) unless `seq` is given."""
    if seq is None:
        seq = next(_SEQUENCES.setdefault((id(sync), worker), itertools.count(1000)))
    return Gradient(
        worker=worker,
        sequence=seq,
        computed_version=sync.live.version if version is None else version,
        values=torch.full((3,), float(worker + 1)),
        samples=BATCH,
        loss=1.0,
        step_time_s=0.01,
    )


def test_bsp_waits_for_all_workers_then_releases_them_with_zero_staleness() -> None:
    sync = make_sync("bsp")
    for worker in range(3):
        outcome = sync.submit(grad(sync, worker))
        assert outcome.released == [] and outcome.applied == []
    assert sync.room.waiting == {0, 1, 2}
    outcome = sync.submit(grad(sync, 3))
    assert outcome.released == [0, 1, 2, 3]
    assert [r.staleness for r in outcome.applied] == [0, 0, 0, 0]
    assert sync.live.version == 1 and sync.live.samples == 4 * BATCH
    assert outcome.applied[0].lr == pytest.approx(0.4)  # full global batch: the BSP lr


def test_asp_applies_on_arrival_and_counts_staleness() -> None:
    sync = make_sync("asp")
    records = []
    for worker in range(4):  # all computed on version 0
        outcome = sync.submit(grad(sync, worker, version=0))
        assert outcome.released == [worker]
        records += outcome.applied
    assert [r.staleness for r in records] == [0, 1, 2, 3]
    assert all(r.lr == pytest.approx(0.1) for r in records)  # lr / workers
    assert all(r.momentum == pytest.approx(0.9 / 4) for r in records)  # scaled by default


def test_ssp_holds_a_worker_that_runs_more_than_s_steps_ahead() -> None:
    sync = make_sync("ssp-1", workers=2)
    assert sync.submit(grad(sync, 0, seq=0)).released == [0]  # clock 1 vs 0: within bound
    outcome = sync.submit(grad(sync, 0, seq=1))  # clock 2 vs 0: more than 1 ahead
    assert outcome.released == [] and len(outcome.applied) == 1
    assert sync.room.waiting == {0}
    outcome = sync.submit(grad(sync, 1, version=0))  # the slow worker catches up to clock 1
    assert sorted(outcome.released) == [0, 1]


def test_bsp_to_asp_switch_happens_in_place_at_the_phase_end() -> None:
    sync = make_sync("bsp:0.5,asp", total=16 * BATCH, momentum_policy=MomentumPolicy.SCALE)
    switches = []
    for step in range(2):  # two BSP updates: 8 of 16 batches, half the workload
        for worker in range(4):
            switches += sync.submit(grad(sync, worker, seq=step)).switches
    assert len(switches) == 1
    event = switches[0]
    assert (event.from_protocol, event.to_protocol) == ("bsp", "asp")
    assert event.at_fraction == pytest.approx(0.5)
    assert event.overhead_s >= 0
    after = sync.submit(grad(sync, 0, seq=2)).applied[0]
    assert after.protocol == "asp"
    assert after.lr == pytest.approx(0.1) and after.momentum == pytest.approx(0.9 / 4)


def test_bsp_asp_bsp_returns_to_the_barrier_and_full_lr() -> None:
    sync = make_sync("bsp:0.25,asp:0.5,bsp", total=16 * BATCH)
    protocols = []
    seq = 0
    while not sync.live.done:
        for worker in range(4):
            if sync.live.done:
                break
            outcome = sync.submit(grad(sync, worker, seq=seq))
            protocols += [(r.protocol, r.lr, r.momentum) for r in outcome.applied]
        seq += 1
    names = [p for p, _, _ in protocols]
    assert names[0] == "bsp" and "asp" in names and names[-1] == "bsp"
    assert [s.to_protocol for s in sync.live.switches] == ["asp", "bsp"]
    last_bsp = protocols[-1]
    assert last_bsp[1] == pytest.approx(0.4) and last_bsp[2] == pytest.approx(0.9)


def test_switch_mid_barrier_applies_caught_gradients_under_the_new_rule() -> None:
    sync = make_sync("bsp")
    sync.submit(grad(sync, 0))
    sync.submit(grad(sync, 1))
    outcome = sync.switch_to(Schedule.parse("asp").phases[0].spec, reason="test")
    assert sorted(outcome.released) == [0, 1]
    assert [r.protocol for r in outcome.applied] == ["asp", "asp"]
    assert sync.accounting().applied == 2


def test_accounting_and_late_gradients_after_completion() -> None:
    sync = make_sync("asp", total=2 * BATCH)
    sync.submit(grad(sync, 0))
    outcome = sync.submit(grad(sync, 1))
    assert outcome.done and outcome.evaluations[-1].fraction == 1.0
    late = sync.submit(grad(sync, 2))
    assert late.dropped[0].reason == "training_complete" and late.released == [2]
    acct = sync.accounting()
    assert acct.sent == acct.applied + sum(acct.dropped.values()) == 3


def test_evaluation_points_follow_progress() -> None:
    sync = make_sync("asp", total=10 * BATCH, eval_every=0.25)
    fractions = []
    while not sync.live.done:
        fractions += [p.fraction for p in sync.submit(grad(sync, 0)).evaluations]
    assert fractions == [0.25, 0.5, 0.75, 1.0]


def test_bsp_equals_single_process_sgd_on_the_concatenated_batch() -> None:
    """The oracle: n workers under BSP == one SGD step on all n batches at once."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    reference = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    reference.load_state_dict(model.state_dict())
    workers, steps = 4, 3
    config = SyncConfig(
        workers=workers,
        total_samples=10**6,
        schedule=Schedule.parse("bsp"),
        lr=0.3,
        momentum=0.9,
    )
    sync = Synchronizer(config, FlatSGD(flatten_parameters(model), weight_decay=1e-3))
    sgd = torch.optim.SGD(reference.parameters(), lr=0.3, momentum=0.9, weight_decay=1e-3)
    loss_fn = torch.nn.functional.cross_entropy
    for step in range(steps):
        batches = [(torch.randn(BATCH, 5), torch.randint(0, 3, (BATCH,))) for _ in range(workers)]
        for worker, (x, y) in enumerate(batches):
            torch.nn.utils.vector_to_parameters(sync.optimizer.weights.clone(), model.parameters())
            model.zero_grad()
            loss_fn(model(x), y).backward()
            sync.submit(
                Gradient(worker, step, sync.live.version, flat_gradient(model), BATCH, 0.0, 0.0)
            )
        sgd.zero_grad()
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        loss_fn(reference(x), y).backward()
        sgd.step()
    torch.testing.assert_close(
        sync.optimizer.weights, flatten_parameters(reference), rtol=1e-5, atol=1e-6
    )


def test_excluding_the_worker_a_barrier_waits_for_completes_it() -> None:
    sync = make_sync("bsp")
    for worker in range(3):
        sync.submit(grad(sync, worker))
    outcome = sync.exclude(3)
    assert outcome.released == [0, 1, 2] and len(outcome.applied) == 3
    assert outcome.applied[0].lr == pytest.approx(0.4 * 3 / 4)  # the smaller global batch
    late = sync.submit(grad(sync, 3, version=0))
    assert late.dropped[0].reason == "straggler_excluded" and late.released == [3]
    sync.readmit(3)
    for worker in range(3):
        assert sync.submit(grad(sync, worker)).applied == []  # waits for worker 3 again
    assert len(sync.submit(grad(sync, 3)).applied) == 4


def test_ssp_does_not_wait_for_an_excluded_worker() -> None:
    sync = make_sync("ssp-0", workers=2)
    sync.submit(grad(sync, 0, seq=0))
    assert sync.room.waiting == {0}  # one step ahead of worker 1 with bound 0
    assert sync.exclude(1).released == [0]
    assert sync.submit(grad(sync, 0, seq=1)).released == [0]
    sync.readmit(1)  # level with worker 0, not the many steps behind it really is
    assert sync.submit(grad(sync, 0, seq=2)).released == []  # one ahead of bound 0: waits
    assert sorted(sync.submit(grad(sync, 1, seq=0)).released) == [0, 1]  # one step of 1 frees 0


def test_bad_gradients_never_reach_the_weights_and_a_repeat_offender_is_quarantined() -> None:
    sync = make_sync("asp", workers=2)
    nan = grad(sync, 0)
    nan.values = torch.tensor([1.0, float("nan"), 0.0])
    assert sync.submit(nan).dropped[0].reason == "non_finite"
    short = grad(sync, 0)
    short.values = torch.ones(2)
    assert sync.submit(short).dropped[0].reason == "shape_mismatch"
    assert torch.equal(sync.optimizer.weights, torch.zeros(3)) and sync.live.version == 0
    inf = grad(sync, 0)
    inf.values = torch.tensor([float("inf"), 0.0, 0.0])
    outcome = sync.submit(inf)  # the third bad one in a row
    assert [d.action for d in outcome.decisions] == ["quarantine"] and 0 in sync.live.excluded
    assert sync.submit(grad(sync, 0)).dropped[0].reason == "quarantined"
    assert sync.submit(grad(sync, 1)).applied  # the healthy worker trains on
    assert sync.rejoin(0) > 0 and 0 not in sync.live.excluded  # restarted: admitted again
    assert sync.submit(grad(sync, 0, seq=sync.gate.ledger.next_sequence(0))).applied
    acct = sync.accounting()
    assert acct.unaccounted == 0 and acct.dropped == {
        "non_finite": 2,
        "shape_mismatch": 1,
        "quarantined": 1,
    }


def test_a_retried_gradient_is_applied_once() -> None:
    sync = make_sync("asp", workers=2)
    first = grad(sync, 0, seq=7)
    assert sync.submit(first).applied
    outcome = sync.submit(grad(sync, 0, seq=7))
    assert outcome.dropped[0].reason == "duplicate" and outcome.released == [0]
    assert sync.live.version == 1 and sync.accounting().sent == 2


def test_a_snapshot_restores_into_a_new_synchronizer_exactly() -> None:
    sync = make_sync("bsp:0.5,asp", total=16 * BATCH, checkpoint_every=0.25)
    snapshots = []
    for step in range(2):  # 2 BSP updates, the second one crossing the switch at 0.5
        for worker in range(4):
            snapshots += sync.submit(grad(sync, worker, seq=step)).snapshots
    assert [s.label for s in snapshots] == ["periodic", "periodic"]
    taken = snapshots[-1]
    assert taken.progress == pytest.approx(0.5) and taken.state.protocol == ASP
    fresh = make_sync("bsp:0.5,asp", total=16 * BATCH, checkpoint_every=0.25)
    fresh.restore(taken.state)
    assert (
        fresh.live.version == 2
        and fresh.live.spec.name == "asp"
        and fresh.live.samples == 8 * BATCH
    )
    assert torch.equal(fresh.optimizer.weights, taken.state.optimizer.weights)
    assert fresh.live.switches == sync.live.switches[:1] and fresh.accounting().unaccounted == 0
    assert fresh.rejoin(0) == 2  # worker 0 had sent sequences 0 and 1 before the snapshot
    assert fresh.submit(grad(fresh, 0, seq=2)).applied[0].protocol == "asp"


def test_roll_back_restores_weights_and_drops_what_was_computed_on_the_abandoned_ones() -> None:
    sync = make_sync("asp", workers=2, checkpoint_every=0.5, total=4 * BATCH)
    snapshot = None
    for step in range(2):
        snapshot = snapshot or next(iter(sync.submit(grad(sync, 0, seq=step)).snapshots), None)
    assert snapshot is not None and snapshot.version == 2
    before = sync.live.version
    stale = grad(sync, 1, version=before)  # computed on weights the rollback abandons
    outcome = sync.roll_back(
        snapshot.state,
        protocol=BSP,
        lr_scale=0.5,
        momentum_policy=MomentumPolicy.ZERO,
        reason="divergence",
    )
    assert [(s.to_protocol, s.reason) for s in outcome.switches] == [("bsp", "divergence")]
    assert torch.equal(sync.optimizer.weights, snapshot.state.optimizer.weights)
    assert sync.live.version == before + 1 and sync.live.samples == snapshot.samples
    assert sync.submit(stale).dropped[0].reason == "rolled_back"
    sync.submit(grad(sync, 0))
    update = sync.submit(grad(sync, 1)).applied  # BSP now, at half the learning rate
    assert [r.staleness for r in update] == [0, 0] and update[0].lr == pytest.approx(0.2)
    assert sync.live.pinned is not None and sync.live.spec.name == "bsp"
