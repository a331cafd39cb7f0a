"""Local-H phases on the core alone: the grammar, the outer step, the policy at switches, and
oracles against BSP and against sequential SGD, driven by a tiny runtime in this file."""

from __future__ import annotations

import io
from collections import deque

import numpy as np
import pytest
import torch

from syncswitch.core.sync.config import SyncConfig
from syncswitch.core.sync.hyperparams import LrSchedule, LrScheduleKind
from syncswitch.core.sync.local import (
    QSR_MAX_GROWTH,
    InnerLoop,
    LocalConfig,
    LocalRound,
    LocalStepsRule,
    ModelBuffers,
    OuterOptimizer,
    OuterOptimizerKind,
    StatePolicy,
    qsr_steps,
    round_steps,
    switch_ramp,
)
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import ASP, BSP, Schedule, ScheduleError
from syncswitch.core.sync.protocols import LocalH
from syncswitch.core.sync.records import Gradient
from syncswitch.core.sync.server_optimizer import OptimizerConfig, OptimizerKind
from syncswitch.core.sync.state import SynchronizerState
from syncswitch.core.sync.synchronizer import Synchronizer

BATCH = 4
DIM = 6


# -- a tiny runtime: linear regression, each worker its own batches ----------------------------


class Problem:
    """Least squares on fixed random data; worker w's k-th batch is always the same rows."""

    def __init__(self, workers: int, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(workers, 64, DIM, generator=gen)
        self.y = self.x @ torch.randn(DIM, generator=gen) + 0.1 * torch.randn(
            workers, 64, generator=gen
        )
        self.used = [0] * workers  # batches each worker has taken

    def gradient(self, worker: int, weights: np.ndarray) -> tuple[np.ndarray, float]:
        k = self.used[worker]
        self.used[worker] += 1
        rows = [(k * BATCH + i) % 64 for i in range(BATCH)]
        x, y = self.x[worker, rows], self.y[worker, rows]
        w = torch.from_numpy(np.array(weights))
        residual = x @ w - y
        return (2 * x.T @ residual / BATCH).numpy(), float((residual**2).mean())


def make_sync(
    schedule: str,
    workers: int,
    total: int,
    *,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    local: LocalConfig | None = None,
    lr_schedule: LrSchedule | None = None,
) -> Synchronizer:
    config = SyncConfig(
        workers=workers,
        total_samples=total,
        schedule=Schedule.parse(schedule),
        lr=0.05,
        momentum=momentum,
        lr_schedule=lr_schedule or LrSchedule(),
        local=local or LocalConfig(worker_batch=BATCH),
    )
    optimizer = FlatSGD(torch.zeros(DIM), weight_decay=weight_decay)
    return Synchronizer(config, optimizer, clock=lambda: 0.0)


def drive(sync: Synchronizer, problem: Problem, *, lose: dict[int, int] | None = None) -> None:
    """Every released worker computes its next message at once, in worker order: a gradient,
    or in a local phase H steps of its own SGD and one delta. `lose`: worker -> the message
    after which it dies and is never restarted (its round in progress is lost unsent)."""
    workers = sync.config.workers
    inner = [InnerLoop() for _ in range(workers)]
    sequence = [0] * workers
    ready = deque(range(workers))
    while ready and not sync.live.done:
        worker = ready.popleft()
        weights = sync.optimizer.weights.numpy().copy()
        local = sync.local_round()
        if local is None:
            values, loss = problem.gradient(worker, weights)
            steps = 0
        else:
            values, loss = inner[worker].run(
                weights, local, lambda w, worker=worker: problem.gradient(worker, w)
            )
            steps = local.steps
        if lose is not None and lose.get(worker) == sequence[worker]:
            outcome = sync.worker_lost(worker)  # mid-round: its round is counted lost
        else:
            message = Gradient(
                worker=worker,
                sequence=sequence[worker],
                computed_version=sync.live.version,
                values=torch.from_numpy(np.array(values)),
                samples=BATCH * max(steps, 1),
                loss=loss,
                step_time_s=0.01,
                local_steps=steps,
            )
            sequence[worker] += 1
            outcome = sync.submit(message)
        ready.extend(w for w in outcome.released if w not in ready)


# -- the grammar ---------------------------------------------------------------------------


def test_local_h_parses_anywhere_in_a_schedule_and_prints_back() -> None:
    for text in ("bsp:0.1,local-16", "bsp:0.25,asp:0.5,local-8", "local-4", "local-2:0.5,bsp"):
        assert str(Schedule.parse(text)) == text
    spec = Schedule.parse("bsp:0.25,asp:0.5,local-8").phases[2].spec
    assert spec == LocalH(8) and spec.name == "local-8" and spec.local_steps == 8
    assert not spec.is_async and spec.barrier and spec.gathers_deltas


@pytest.mark.parametrize("bad", ["local-0", "local-abc", "local-", "local--3", "local-1.5"])
def test_bad_local_steps_are_refused_in_one_line(bad: str) -> None:
    with pytest.raises(ScheduleError) as error:
        Schedule.parse(f"bsp:0.5,{bad}")
    assert "\n" not in str(error.value) and "local-H" in str(error.value)


def test_a_spec_checks_its_own_local_steps() -> None:
    with pytest.raises(ScheduleError):
        LocalH(0)
    with pytest.raises(TypeError):
        LocalH()  # type: ignore[call-arg]


# -- oracles -------------------------------------------------------------------------------


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_local_1_with_plain_averaging_equals_bsp(weight_decay: float) -> None:
    """A round of one local step each, averaged, is one BSP update of the same batches (with
    no momentum: BSP's lives on the server, a local step's on each worker)."""
    runs = {}
    for schedule in ("bsp", "local-1"):
        sync = make_sync(schedule, workers=4, total=4 * BATCH * 40, weight_decay=weight_decay)
        drive(sync, Problem(4))
        assert sync.live.done and sync.live.version == 40
        runs[schedule] = sync
    assert torch.allclose(
        runs["bsp"].optimizer.weights, runs["local-1"].optimizer.weights, atol=1e-6, rtol=1e-5
    )
    assert runs["local-1"].live.samples_by_protocol == {"local": 4 * BATCH * 40}
    assert not torch.equal(runs["bsp"].optimizer.weights, torch.zeros(DIM))  # it did train


def test_local_phases_with_one_worker_equal_sequential_sgd() -> None:
    """One worker: the outer average is the worker's own model, and its momentum carries over
    from round to round (keep), so local-4 is plain SGD with momentum, step for step."""
    steps = 48
    sync = make_sync("local-4", workers=1, total=BATCH * steps, momentum=0.9)
    drive(sync, Problem(1))
    assert sync.live.done and sync.live.version == steps // 4
    problem, sgd = Problem(1), FlatSGD(torch.zeros(DIM))
    for _ in range(steps):
        values, _ = problem.gradient(0, sgd.weights.numpy().copy())
        sgd.step(torch.from_numpy(values), lr=0.05, momentum=0.9)
    assert torch.allclose(sync.optimizer.weights, sgd.weights, atol=1e-5, rtol=1e-5)


def test_local_phases_and_bsp_before_them_with_one_worker_equal_sequential_sgd() -> None:
    """bsp:0.5,local-3 with one worker, no momentum: the switch changes nothing."""
    steps = 60
    sync = make_sync("bsp:0.5,local-3", workers=1, total=BATCH * steps)
    drive(sync, Problem(1))
    problem, sgd = Problem(1), FlatSGD(torch.zeros(DIM))
    for _ in range(steps):
        values, _ = problem.gradient(0, sgd.weights.numpy().copy())
        sgd.step(torch.from_numpy(values), lr=0.05, momentum=0.0)
    assert torch.allclose(sync.optimizer.weights, sgd.weights, atol=1e-5, rtol=1e-5)
    assert sync.live.samples_by_protocol == {"bsp": BATCH * 30, "local": BATCH * 30}


# -- the outer step ------------------------------------------------------------------------


def test_nesterov_outer_step_is_sgd_with_nesterov_momentum_over_the_mean_delta() -> None:
    config = LocalConfig(outer=OuterOptimizerKind.NESTEROV, outer_lr=0.7, outer_momentum=0.9)
    outer, weights = OuterOptimizer(config), torch.zeros(3)
    reference = torch.nn.Parameter(torch.zeros(3))
    torch_sgd = torch.optim.SGD([reference], lr=0.7, momentum=0.9, nesterov=True)
    for delta in (torch.tensor([1.0, -2.0, 0.5]), torch.tensor([0.5, 0.5, 0.0])):
        outer.step(weights, delta)
        reference.grad = delta.clone()
        torch_sgd.step()
        assert torch.allclose(weights, reference.detach())


def test_a_round_applies_the_outer_step_to_the_workers_mean_delta() -> None:
    config = LocalConfig(outer=OuterOptimizerKind.NESTEROV, outer_lr=0.7, worker_batch=BATCH)
    sync = make_sync("local-2", workers=2, total=1000, local=config)
    deltas = [torch.tensor([1.0] * DIM), torch.tensor([3.0] * DIM)]
    for worker, delta in enumerate(deltas):
        sync.submit(Gradient(worker, 0, 0, delta, 2 * BATCH, 1.0, 0.01, local_steps=2))
    assert sync.live.version == 1
    assert torch.allclose(sync.optimizer.weights, torch.full((DIM,), -0.7 * (2.0 + 0.9 * 2.0)))
    # A restarted worker's data order resumes after the two batches its delta stood for.
    assert sync.rejoin(1) == 1 and sync.gate.ledger.data_position(1) == 2


# -- the policy at switches, accounting ----------------------------------------------------


def test_a_switch_into_and_out_of_a_local_phase_counts_every_sample_once() -> None:
    total = 4 * BATCH * 60
    sync = make_sync("bsp:0.25,local-4:0.75,asp", workers=4, total=total, momentum=0.9)
    drive(sync, Problem(4))
    accounting = sync.accounting()
    assert sync.live.done and accounting.unaccounted == 0 and accounting.waiting == 0
    assert accounting.sent == accounting.applied + sum(accounting.dropped.values())
    by = sync.live.samples_by_protocol
    assert sum(by.values()) == sync.live.samples >= total
    # The local phase ran to its end exactly: its rounds were cut to fit.
    assert by["bsp"] == total // 4 and by["local"] == total // 2
    assert [(e.from_protocol, e.to_protocol) for e in sync.live.switches] == [
        ("bsp", "local-4"),
        ("local-4", "asp"),
    ]
    # Messages and bytes are counted as they arrive: a local round is one message per H steps.
    messages = sync.live.messages_by_protocol
    rounds = -(-by["local"] // (4 * 4 * BATCH))  # 7.5 rounds of H = 4: the last one cut
    assert messages["local"] == 4 * rounds == 32
    assert messages["bsp"] == by["bsp"] // BATCH
    assert sync.live.bytes_by_protocol["local"] == messages["local"] * DIM * 4


def test_server_momentum_reset_at_the_end_of_a_local_phase_is_observable() -> None:
    """Right after local -> bsp, `reset` has no buffer and `keep` has the pre-local one."""
    buffers = {}
    for policy in (StatePolicy.RESET, StatePolicy.KEEP):
        local = LocalConfig(server_momentum_after=policy, worker_batch=BATCH)
        sync = make_sync("bsp:0.5,local-2", workers=2, total=2 * BATCH * 20, local=local,
                         momentum=0.9)  # fmt: skip
        drive(sync, Problem(2))
        before = sync.optimizer.state_dict()["momentum_buffer"]
        assert before is not None  # the BSP phase built one; the local phase never used it
        sync.switch_to(BSP, reason="test")
        buffers[policy] = sync.optimizer.state_dict()["momentum_buffer"]
    assert buffers[StatePolicy.RESET] is None
    assert buffers[StatePolicy.KEEP] is not None


def test_inner_state_reset_starts_every_round_without_momentum() -> None:
    """With `reset`, one worker's local-4 equals SGD whose momentum restarts every 4 steps."""
    local = LocalConfig(inner_state=StatePolicy.RESET, worker_batch=BATCH)
    sync = make_sync("local-4", workers=1, total=BATCH * 24, momentum=0.9, local=local)
    drive(sync, Problem(1))
    problem, weights = Problem(1), torch.zeros(DIM)
    for _ in range(6):
        sgd = FlatSGD(weights)
        for _ in range(4):
            values, _ = problem.gradient(0, sgd.weights.numpy().copy())
            sgd.step(torch.from_numpy(values), lr=0.05, momentum=0.9)
        weights = sgd.weights.clone()
    assert torch.allclose(sync.optimizer.weights, weights, atol=1e-5, rtol=1e-5)


def test_a_gradient_sent_before_a_switch_into_a_local_phase_is_applied_at_once() -> None:
    sync = make_sync("asp:0.1,local-4", workers=2, total=10_000)
    for sequence in range(25):  # 25 x 40 samples: 0.1 of 10,000, so the phase ends
        sync.submit(Gradient(0, sequence, sync.live.version, torch.ones(DIM), 40, 1.0, 0.01))
    assert sync.live.spec.gathers_deltas
    version = sync.live.version
    outcome = sync.submit(Gradient(1, 0, 0, torch.ones(DIM), 40, 1.0, 0.01))
    assert outcome.released == [1] and sync.live.version == version + 1
    assert sync.live.samples_by_protocol["asp"] == 26 * 40  # trained under ASP, counted there


def test_a_delta_caught_by_a_switch_out_of_a_local_phase_is_applied_as_its_share() -> None:
    sync = make_sync("local-4", workers=2, total=10_000)
    sync.submit(Gradient(0, 0, 0, torch.full((DIM,), 2.0), 4 * BATCH, 1.0, 0.01, local_steps=4))
    assert sync.room.waiting == {0}
    outcome = sync.switch_to(ASP, reason="test")
    assert outcome.released == [0] and len(outcome.applied) == 1
    assert torch.allclose(sync.optimizer.weights, torch.full((DIM,), -1.0))  # 2.0 x 1/2 workers
    assert sync.live.samples_by_protocol == {"local": 4 * BATCH}


def test_a_lost_worker_loses_only_its_unsent_steps_and_the_round_goes_on() -> None:
    sync = make_sync("local-4", workers=3, total=3 * 4 * BATCH * 10)
    drive(sync, Problem(3), lose={2: 3})
    assert sync.live.done
    assert sync.live.unsent_samples == {"worker_died": 4 * BATCH}
    accounting = sync.accounting()
    assert accounting.unaccounted == 0 and accounting.sent == accounting.applied


def test_an_excluded_worker_s_delta_is_dropped_with_a_reason() -> None:
    sync = make_sync("local-2", workers=2, total=10_000)
    sync.exclude(1)
    sync.submit(Gradient(0, 0, 0, torch.ones(DIM), 2 * BATCH, 1.0, 0.01, local_steps=2))
    assert sync.live.version == 1  # the barrier did not wait for worker 1
    outcome = sync.submit(Gradient(1, 0, 0, torch.ones(DIM), 2 * BATCH, 1.0, 0.01, local_steps=2))
    assert [d.reason for d in outcome.dropped] == ["straggler_excluded"]


# -- checkpoints ---------------------------------------------------------------------------


def test_the_outer_optimizer_state_survives_a_checkpoint_and_resume() -> None:
    config = LocalConfig(outer=OuterOptimizerKind.NESTEROV, outer_lr=0.7, worker_batch=BATCH)
    total = 3 * 2 * BATCH * 12
    original = make_sync("bsp:0.25,local-2", workers=3, total=total, local=config)
    problem = Problem(3)
    drive_rounds(original, problem, rounds=8)  # 6 BSP updates, then 2 local rounds
    assert original.live.spec.gathers_deltas and original.local.outer.buffer is not None
    state = original.snapshot("test").state
    buffer = io.BytesIO()
    torch.save(state.to_plain(), buffer)
    buffer.seek(0)
    back = SynchronizerState.from_plain(torch.load(buffer, weights_only=True))
    assert back.local == state.local and back.local.epoch == original.live.local_epoch
    resumed = make_sync("bsp:0.25,local-2", workers=3, total=total, local=config)
    resumed.restore(back)
    assert resumed.local.outer.buffer is not None
    assert torch.equal(resumed.local.outer.buffer, original.local.outer.buffer)
    assert resumed.local_round() == original.local_round()
    assert resumed.live.bytes_by_protocol == original.live.bytes_by_protocol


def test_a_checkpoint_without_local_state_still_loads() -> None:
    sync = make_sync("bsp", workers=1, total=100)
    plain = sync.snapshot("test").state.to_plain()
    del plain["local"]
    state = SynchronizerState.from_plain(plain)
    assert state.local.outer_buffer is None and state.local.epoch == 0


def drive_rounds(sync: Synchronizer, problem: Problem, rounds: int) -> None:
    """`rounds` updates in lockstep (every worker one message per update)."""
    workers = sync.config.workers
    inner = [InnerLoop() for _ in range(workers)]
    for sequence in range(rounds):
        local = sync.local_round()
        weights = sync.optimizer.weights.numpy().copy()
        for worker in range(workers):
            if local is None:
                values, loss = problem.gradient(worker, weights)
                steps = 0
            else:
                values, loss = inner[worker].run(
                    weights, local, lambda w, worker=worker: problem.gradient(worker, w)
                )
                steps = local.steps
            sync.submit(
                Gradient(worker, sequence, sync.live.version, torch.from_numpy(np.array(values)),
                         BATCH * max(steps, 1), loss, 0.01, local_steps=steps)
            )  # fmt: skip


# -- the adaptive H ------------------------------------------------------------------------


def test_qsr_grows_h_as_the_learning_rate_decays_and_is_capped() -> None:
    assert qsr_steps(4, 1.0, 1.0) == 4
    assert qsr_steps(4, 1.0, 0.5) == 16
    assert qsr_steps(4, 1.0, 0.01) == 4 * QSR_MAX_GROWTH
    assert qsr_steps(4, 1.0, 0.0) == 4 * QSR_MAX_GROWTH
    assert qsr_steps(4, 0.5, 1.0) == 4  # never below the phase's H


def test_a_round_is_cut_to_the_phase_s_end() -> None:
    spec = LocalH(16)
    config = LocalConfig(worker_batch=4)
    kw = {"lr_factor_start": 1.0, "lr_factor_now": 1.0, "active_workers": 2}
    assert round_steps(spec, config, samples_left=1000, **kw) == 16
    assert round_steps(spec, config, samples_left=40, **kw) == 5
    assert round_steps(spec, config, samples_left=1, **kw) == 1


def test_qsr_rounds_lengthen_under_a_cosine_schedule() -> None:
    local = LocalConfig(steps_rule=LocalStepsRule.QSR, worker_batch=BATCH)
    cosine = LrSchedule(kind=LrScheduleKind.COSINE)
    sync = make_sync("bsp:0.25,local-2", workers=2, total=2 * BATCH * 400, local=local,
                     lr_schedule=cosine)  # fmt: skip
    seen: list[int] = []
    inner = [InnerLoop(), InnerLoop()]
    problem = Problem(2)
    sequence = 0
    while not sync.live.done:
        local_round = sync.local_round()
        weights = sync.optimizer.weights.numpy().copy()
        steps = 0 if local_round is None else local_round.steps
        if local_round is not None:
            seen.append(steps)
        for worker in range(2):
            if local_round is None:
                values, loss = problem.gradient(worker, weights)
            else:
                values, loss = inner[worker].run(
                    weights, local_round, lambda w, worker=worker: problem.gradient(worker, w)
                )
            sync.submit(
                Gradient(worker, sequence, sync.live.version, torch.from_numpy(np.array(values)),
                         BATCH * max(steps, 1), loss, 0.01, local_steps=steps)
            )  # fmt: skip
        sequence += 1
    assert seen[0] == 2 and max(seen) == 2 * QSR_MAX_GROWTH
    assert seen == sorted(seen[:-1]) + seen[-1:]  # non-decreasing but for the cut last round


def test_the_inner_learning_rate_is_the_jobs_times_its_factor() -> None:
    plain = make_sync("local-4", workers=2, total=1000).local_round()
    local = LocalConfig(inner_lr_factor=0.25, worker_batch=BATCH)
    scaled = make_sync("local-4", workers=2, total=1000, local=local).local_round()
    assert plain is not None and scaled is not None
    assert plain.lr == pytest.approx(0.05) and scaled.lr == pytest.approx(0.05 * 0.25)


def test_the_switch_ramp_starts_at_one_over_sqrt_workers_and_reaches_the_full_lr() -> None:
    config = LocalConfig(switch_warmup=0.2)
    assert switch_ramp(config, 16, 0.1, 0.1) == pytest.approx(0.25)
    assert switch_ramp(config, 16, 0.1, 0.2) == pytest.approx(0.625)  # halfway
    assert switch_ramp(config, 16, 0.1, 0.31) == 1.0
    assert switch_ramp(config, 16, 0.1, 0.9) == 1.0
    # After a longer BSP phase the ramp lasts 1.2x its share: 0.3 of training from 0.25.
    assert switch_ramp(config, 16, 0.25, 0.40) == pytest.approx(0.625)
    assert switch_ramp(config, 16, 0.25, 0.54) < 1.0 == switch_ramp(config, 16, 0.25, 0.551)
    # No ramp: from the start of training, with one worker, or switched off.
    assert switch_ramp(config, 16, 0.0, 0.01) == 1.0
    assert switch_ramp(config, 1, 0.25, 0.25) == 1.0
    assert switch_ramp(LocalConfig(switch_warmup=0.0), 16, 0.25, 0.25) == 1.0
    assert switch_ramp(LocalConfig(switch_warmup=0.2, switch_lr_start=2.0), 16, 0.25, 0.25) == 0.5


def test_a_round_after_a_switch_from_bsp_runs_at_the_ramped_lr() -> None:
    """bsp:0.2,local-4 with 4 workers: the first local round's inner lr is half the job's
    (1/sqrt(4)); the ramp is over after its fraction of training."""
    local = LocalConfig(worker_batch=BATCH, switch_warmup=0.25)
    sync = make_sync("bsp:0.2,local-4", workers=4, total=4000, local=local)
    problem = Problem(4)
    seen: list[tuple[float, float]] = []
    workers = range(4)
    sequence = 0
    while not sync.live.done:
        plan = sync.local_round()
        weights = sync.optimizer.weights.numpy().copy()
        if plan is not None:
            seen.append((sync.config.progress(sync.live.samples), plan.lr))
        for worker in workers:
            if plan is None:
                values, loss = problem.gradient(worker, weights)
            else:
                values, loss = InnerLoop().run(
                    weights, plan, lambda w, worker=worker: problem.gradient(worker, w)
                )
            steps = 0 if plan is None else plan.steps
            sync.submit(
                Gradient(worker, sequence, sync.live.version, torch.from_numpy(np.array(values)),
                         BATCH * max(steps, 1), loss, 0.01, local_steps=steps)
            )  # fmt: skip
        sequence += 1
    assert seen[0] == (pytest.approx(0.2), pytest.approx(0.05 * 0.5))
    ramp = [lr for progress, lr in seen if progress < 0.45]
    assert ramp == sorted(ramp) and ramp[-1] < 0.05
    assert all(lr == pytest.approx(0.05) for progress, lr in seen if progress >= 0.45)


def test_a_bsp_gradient_caught_by_a_switch_into_a_local_phase_counts_as_bsp() -> None:
    # Issue 47: it was counted under an `asp` bucket though no ASP phase ran.
    sync = make_sync("bsp", workers=2, total=10_000)
    sync.submit(Gradient(0, 0, 0, torch.ones(DIM), BATCH, 1.0, 0.01))
    sync.switch_to(LocalH(4), reason="test")
    sync.submit(Gradient(1, 0, 0, torch.ones(DIM), BATCH, 1.0, 0.01))
    assert set(sync.live.samples_by_protocol) <= {"bsp", "local"}
    assert sync.live.samples_by_protocol["bsp"] == 2 * BATCH


class BufferedModel:
    """A worker's model as FlatParameters keeps it: weights and gradient in flat buffers of its
    own, weights copied in unless already there (FlatParameters.load)."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.buffers = ModelBuffers(np.zeros(DIM, np.float32), np.zeros(DIM, np.float32))
        self.copies_in = 0

    def gradient(self, weights: np.ndarray) -> tuple[np.ndarray, float]:
        if weights.ctypes.data != self.buffers.weights.ctypes.data:
            np.copyto(self.buffers.weights, weights)
            self.copies_in += 1
        values, loss = self.problem.gradient(0, self.buffers.weights)
        np.copyto(self.buffers.gradient, values)
        return self.buffers.gradient, loss


@pytest.mark.parametrize("kind", [OptimizerKind.SGD, OptimizerKind.ADAMW])
def test_local_steps_in_the_model_s_own_buffers_give_the_same_bits(kind: OptimizerKind) -> None:
    """Stepping the model's weights in place (the Ray worker) is the copying path (the
    simulator) to the last bit, across rounds that keep the inner state."""
    results = {}
    for in_place in (False, True):
        model = BufferedModel(Problem(1))
        inner = InnerLoop(OptimizerConfig(kind=kind, max_grad_norm=0.5))
        pulled = np.full(DIM, 0.25, np.float32)
        deltas = []
        for _ in range(3):
            plan = LocalRound(
                4, lr=0.05, momentum=0.9, weight_decay=0.01, epoch=0, keep_inner_state=True
            )
            delta, _ = inner.run(pulled, plan, model.gradient, model.buffers if in_place else None)
            deltas.append(delta.copy())
            pulled = pulled - 0.5 * delta
        results[in_place] = deltas
        if in_place:  # only the weights each round pulled are copied in
            assert model.copies_in == 0
            assert delta is model.buffers.gradient  # left where the request is sent from
    for copied, placed in zip(results[False], results[True], strict=True):
        np.testing.assert_array_equal(copied, placed)
