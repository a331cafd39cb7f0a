"""The protocol engine: decides, gradient by gradient, when to update and who may go on.

It knows nothing of processes or Ray. A runtime hands it each arriving gradient with `submit`
and then does what the returned `Outcome` says: release the listed workers with the current
weights, snapshot the weights for the listed evaluation points, stop when `done`. The same
engine can therefore be driven by Ray actors, by a test, or by a simulator's virtual clock.

Rules, with n active workers:
- BSP: gradients wait at a barrier until n have arrived; their sample-weighted mean is applied
  as one update and all n workers go on with the new version (staleness 0).
- ASP: each gradient is applied on arrival and its worker goes on at once.
- SSP(s): like ASP, but a worker whose clock (gradients sent in this phase) is more than s ahead
  of the slowest active worker waits until the slowest catches up.
A switch happens in place after the update that crosses a phase end. Gradients caught at a BSP
barrier by a switch to an asynchronous protocol are applied one by one under the new rule;
gradients that arrive after the workload is complete are dropped with reason
`training_complete`. Nothing is lost silently: sent = applied + dropped + waiting.

Online policies act through three more entry points, each taking effect from the next
gradient: `exclude` / `readmit` change who the BSP barrier (and the SSP bound) waits for, and
`switch_to` leaves or resumes BSP out of schedule. An excluded worker keeps training; under
BSP its gradients are dropped as `straggler_excluded` and it goes on at once with the newest
weights. With `count_bsp_by_work`, a scheduled BSP phase ends when its planned samples have
been applied under BSP, so a detour through ASP postpones the planned switch instead of
eating into the BSP prefix.

Local-H phases (core/sync/local.py) use the BSP barrier for rounds of model deltas: a released
worker is told its round (`local_round`), takes H steps on its own and sends one delta; when
every active worker's delta is in, one outer step applies their mean. A gradient in a local
phase, or a delta outside one (sent across a switch), is applied at once on its own.

Beside it: core/sync/waitroom.py holds who is held back (the barrier, the SSP clocks);
core/sync/state.py takes, restores and rolls back its state (`SynchronizerState`).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from syncswitch.core.sync.admission import (
    DropReason,
    GradientLedger,
    QuarantinePolicy,
    check_gradient,
)
from syncswitch.core.sync.hyperparams import (
    LrSchedule,
    MomentumPolicy,
    async_momentum,
    update_learning_rate,
)
from syncswitch.core.sync.local import (
    LocalConfig,
    LocalRound,
    OuterOptimizer,
    StatePolicy,
    round_steps,
)
from syncswitch.core.sync.optimizer import FlatSGD
from syncswitch.core.sync.protocol import ASP, Protocol, ProtocolSpec, Schedule
from syncswitch.core.sync.records import (
    Accounting,
    DropRecord,
    EvalPoint,
    Gradient,
    Outcome,
    SwitchEvent,
    UpdateRecord,
)
from syncswitch.core.sync.state import take_snapshot
from syncswitch.core.sync.waitroom import WaitRoom
from syncswitch.core.timing.gradient_stats import RoundPartials, RoundStatsAccumulator
from syncswitch.core.timing.rules import TIMING_POLICY


@dataclass(frozen=True)
class SyncConfig:
    workers: int
    total_samples: int
    schedule: Schedule
    lr: float  # learning rate of one BSP update (global batch = workers x worker batch)
    momentum: float = 0.9
    momentum_policy: MomentumPolicy = MomentumPolicy.SCALE
    momentum_ramp_fraction: float = 0.1
    lr_schedule: LrSchedule = LrSchedule()
    eval_every: float = 0.05  # evaluate each time progress crosses a multiple of this
    count_bsp_by_work: bool = False  # a BSP phase ends on its planned BSP samples, not progress
    checkpoint_every: float = 0.0  # snapshot each time progress crosses a multiple; 0 = off
    quarantine_after: int = 3  # consecutive bad gradients that quarantine a worker
    # Coordinates of this slice the gradient statistics are measured on, while a phase whose
    # end the run decides is in force (0: all; None: not measured; see gradient_stats.py).
    stats_coordinates: int | None = None
    stats_every: int = 1  # measure one BSP round in this many (in pairs, for the drift)
    stats_workers: int = 0  # square this many workers' gradients per measured round (0: all)
    local: LocalConfig = field(default_factory=LocalConfig)  # local-H phases (core/sync/local.py)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.total_samples < 1:
            raise ValueError(f"total_samples must be >= 1, got {self.total_samples}")


class Synchronizer:
    def __init__(
        self,
        config: SyncConfig,
        optimizer: FlatSGD,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config
        self.optimizer = optimizer
        self._clock = clock
        self._t0 = clock()
        self.version = 0
        self.samples = 0
        self.phase_index = 0
        self.spec: ProtocolSpec = config.schedule.phases[0].spec
        self.excluded: set[int] = set()  # workers the barrier and the SSP bound do not wait for
        self.done = False
        # Exactly-once accounting: sent = applied + dropped (by reason) + waiting at a barrier.
        self.ledger = GradientLedger()
        self.quarantine = QuarantinePolicy(config.quarantine_after)
        self.lr_scale = 1.0  # lowered by a divergence rollback, if configured
        self.momentum_policy = config.momentum_policy  # a rollback may lower it
        # After a divergence rollback the run stays in this protocol whatever the schedule.
        self.pinned: ProtocolSpec | None = None
        # Gradients computed on weights older than this were computed on a branch that a
        # rollback abandoned; versions only ever increase, so the test is one comparison.
        self.version_floor = 0
        self._snapshot_requested = ""  # label of a snapshot to take at the next boundary
        self._numel = optimizer.weights.numel()
        # Seconds are floats (a Counter's values are typed as ints); a missing name reads 0.
        self.time_by_protocol: defaultdict[str, float] = defaultdict(float)
        self.samples_by_protocol: Counter[str] = Counter()
        self.switches: list[SwitchEvent] = []
        self._phase_bsp_samples = 0  # samples applied under BSP in the current phase
        self._phase_started_s = 0.0
        self._async_start = 0.0
        self.room = WaitRoom(config.workers)  # the barrier, who waits, the SSP clocks
        self._next_eval_index = 1
        self._next_checkpoint_index = 1
        # Version from which a re-admitted worker's gradients count again under BSP: one it
        # computed while excluded, on older weights, would be applied stale.
        self._admitted_from: dict[int, int] = {}
        # Gradient statistics of each BSP round, while the schedule's online phase (whose end
        # the run controller decides from them) is in force; None without one.
        self._online_index = config.schedule.online_index  # asked every round: kept
        self.stats: RoundStatsAccumulator | None = None
        if config.schedule.online_index is not None and config.stats_coordinates is not None:
            self.stats = RoundStatsAccumulator(
                self._numel,
                every=config.stats_every,
                workers=config.stats_workers,
                coordinates=config.stats_coordinates,
            )
        self.partials: list[RoundPartials] = []  # measured since the last update's outcome
        # Local phases: the outer step's optimizer, the version and progress the current local
        # phase began at (its epoch names it to the workers; QSR reads the lr there).
        self.outer = OuterOptimizer(config.local)
        self.local_epoch = 0
        self.local_start = 0.0
        self._before_local = ASP  # what a gradient that reaches a local phase was trained under
        # Measured at arrival: messages and bytes of values received, by protocol ("local":
        # deltas); samples of local steps a lost worker never sent, by reason.
        self.messages_by_protocol: Counter[str] = Counter()
        self.bytes_by_protocol: Counter[str] = Counter()
        self.unsent_samples: Counter[str] = Counter()

    # -- reading state ----------------------------------------------------------------------

    @property
    def progress(self) -> float:
        return min(self.samples / self.config.total_samples, 1.0)

    @property
    def active(self) -> frozenset[int]:
        """Workers the BSP barrier and the SSP bound wait for."""
        return frozenset(range(self.config.workers)) - self.excluded

    @property
    def scheduled_spec(self) -> ProtocolSpec:
        """The protocol the schedule asks for now (an online policy may have overridden it)."""
        return self.config.schedule.phases[self.phase_index].spec

    @property
    def weights(self) -> torch.Tensor:
        return self.optimizer.weights

    @property
    def waiting(self) -> frozenset[int]:
        return frozenset(self.room.waiting)

    def now_s(self) -> float:
        return self._clock() - self._t0

    def restart_clock(self) -> None:
        """Start the run's clock: time before the workers begin is not training time."""
        self._t0 = self._clock()
        self._phase_started_s = 0.0

    def accounting(self) -> Accounting:
        ledger = self.ledger
        return Accounting(
            sent=ledger.sent,
            applied=ledger.applied,
            dropped=dict(sorted(ledger.dropped_by_reason.items())),
            waiting=ledger.in_flight,
            unaccounted=ledger.unaccounted(),
        )

    # -- the protocol -----------------------------------------------------------------------

    def submit(self, gradient: Gradient) -> Outcome:
        """Take one gradient; return what the runtime must do next."""
        outcome = Outcome()
        reason = self._admission(gradient, outcome)
        if reason is not None:
            # Not applied, counted with its reason; the worker goes on with the newest weights.
            outcome.released.append(gradient.worker)
            outcome.done = self.done
            return outcome
        room = self.room
        room.tick(gradient.worker)
        if self.spec.protocol.has_barrier and not self._gathers(gradient):
            # Sent across a switch (a gradient in a local phase, a delta outside one): applied
            # on its own, and its worker goes on at once (core/sync/local.py).
            outcome.applied.extend(self._apply([gradient]))
            outcome.released.append(gradient.worker)
            outcome.merge(self._after_update())
        elif self.spec.protocol.has_barrier:
            room.pending.append(gradient)
            room.waiting.add(gradient.worker)
            outcome.merge(self._complete_barrier())
        else:
            outcome.applied.extend(self._apply([gradient]))
            room.waiting.add(gradient.worker)
            outcome.released.extend(room.release_within_bound(self.spec, self.active))
            outcome.merge(self._after_update())
        return outcome

    def _admission(self, gradient: Gradient, outcome: Outcome) -> str | None:
        """Why this gradient must not be used (it is then counted dropped), or None."""
        worker = gradient.worker
        settled = self.ledger.record_arrival(
            worker, gradient.sequence, batches=max(gradient.local_steps, 1)
        )
        kind = self._kind(gradient)
        self.messages_by_protocol[kind] += 1
        if isinstance(gradient.values, torch.Tensor):
            self.bytes_by_protocol[kind] += gradient.values.numel() * gradient.values.element_size()
        if settled is not None:  # a retry, or a late gradient of a replaced incarnation
            outcome.dropped.append(_drop_record(gradient, settled, self.now_s()))
            return settled
        reason: str | None = None
        if self.done:
            reason = DropReason.TRAINING_COMPLETE
        elif self.quarantine.is_quarantined(worker):
            reason = DropReason.QUARANTINED
        else:
            reason, gradient.squared_norm = check_gradient(
                gradient.values, self._numel, squared=self._squares_wanted()
            )
            verdict = self.quarantine.observe(worker, reason)
            if verdict is not None:
                outcome.decisions.append(verdict.to_decision(self.now_s(), self.progress))
                outcome.merge(self.exclude(worker))
            if reason is None and gradient.computed_version < self.version_floor:
                reason = DropReason.ROLLED_BACK
            elif (
                reason is None
                and self.spec.protocol.has_barrier
                and (
                    worker in self.excluded
                    or gradient.computed_version < self._admitted_from.get(worker, 0)
                )
            ):
                # The barrier no longer waits for it, or it was computed while it did not.
                reason = DropReason.STRAGGLER_EXCLUDED
        if reason is not None:
            outcome.dropped.append(self._drop(gradient, reason))
        return reason

    def exclude(self, worker: int) -> Outcome:
        """Stop waiting for `worker` at the barrier (elastic BSP); it may complete a barrier."""
        _check_worker(worker, self.config.workers)
        self.excluded.add(worker)
        outcome = Outcome()
        if self.spec.protocol.has_barrier:
            # Its gradient may already sit at the barrier: it stays, computed on this version.
            outcome.merge(self._complete_barrier())
        elif self.spec.protocol is Protocol.SSP:
            outcome.released.extend(self.room.release_within_bound(self.spec, self.active))
        return outcome

    def readmit(self, worker: int) -> Outcome:
        """Wait for `worker` again from its next gradient on."""
        _check_worker(worker, self.config.workers)
        if worker in self.excluded:
            # It rejoins the SSP bound level with the slowest of the others, so they are not
            # held back for the steps it missed while excluded.
            clocks = self.room.clocks
            clocks[worker] = max(clocks.get(worker, 0), self.room.slowest_clock(self.active))
            self.excluded.discard(worker)
            self._admitted_from[worker] = self.version
        return Outcome()

    def end_online_phase(self, reason: str) -> Outcome:
        """The run controller decided the online phase ends now: go on to the next phase (a
        protocol a divergence rollback pinned stays in force)."""
        index = self.config.schedule.online_index
        if index is None or self.phase_index != index or self.done:
            return Outcome()  # ended already (its ceiling), or no such phase
        return self._enter_phase(index + 1, reason)

    def _enter_phase(self, index: int, reason: str) -> Outcome:
        self.phase_index = index
        self._phase_bsp_samples = 0
        new_spec = self.pinned or self.config.schedule.phases[index].spec
        if new_spec != self.spec:
            return self.switch_to(new_spec, reason=reason)
        return Outcome()

    def switch_to(self, spec: ProtocolSpec, reason: str) -> Outcome:
        """Put a new protocol in force now, in place, at the current version."""
        started = self._clock()
        outcome = Outcome()
        old = self.spec
        self.spec = spec
        if spec.protocol.is_async and not old.protocol.is_async:
            self._async_start = self.progress
        self._local_switch(old, spec)
        room = self.room
        if spec.protocol is Protocol.SSP:
            room.reset_clocks()
        caught = [g for g in room.pending if not self._gathers(g)]
        if caught:
            # A barrier cut short by the switch: each caught gradient (or delta) the new rule
            # cannot gather is applied on its own (under ASP/SSP, as its worker's share).
            room.pending = [g for g in room.pending if self._gathers(g)]
            for gradient in caught:
                outcome.applied.extend(self._apply([gradient]))
        if spec.protocol.is_async:
            outcome.released.extend(room.release_within_bound(spec, self.active))
        else:
            outcome.released.extend(room.release_not_at_barrier())
        now_s = self.now_s()
        self.time_by_protocol[old.name] += now_s - self._phase_started_s
        self._phase_started_s = now_s
        event = SwitchEvent(
            at_fraction=self.progress,
            at_samples=self.samples,
            version=self.version,
            from_protocol=old.name,
            to_protocol=spec.name,
            time_s=now_s,
            overhead_s=self._clock() - started,
            reason=reason,
        )
        self.switches.append(event)
        outcome.switches.append(event)
        return outcome

    # -- failures, checkpoints and rollback ----------------------------------------------------

    def worker_lost(self, worker: int) -> Outcome:
        """A worker died or hung: the barrier and the SSP bound stop waiting for it. In a
        local phase, a worker not at the barrier was mid-round: the round it was given is
        lost unsent (at most that: it may have died before finishing it)."""
        if (
            self.spec.protocol is Protocol.LOCAL
            and worker not in self.room.waiting
            and worker not in self.excluded
        ):
            local = self.local_round()
            if local is not None:
                samples = local.steps * self.config.local.worker_batch
                self.local_steps_lost(worker, samples, DropReason.WORKER_DIED)
        return self.exclude(worker)

    def rejoin(self, worker: int) -> int:
        """A new incarnation of `worker` starts now; returns the sequence it must start at.

        Anything its old incarnation still has on the way is retired (dropped as worker_died
        if it arrives), and the barrier waits for it again from the current version.
        """
        start = self.ledger.restart_worker(worker)
        self.quarantine.release(worker)
        self.readmit(worker)
        return start

    def data_position(self, worker: int) -> int:
        """How many batches `worker` has drawn before the sequence `rejoin` gave it: where its
        data order resumes (a local round's delta stands for H of them)."""
        _check_worker(worker, self.config.workers)
        return self.ledger.data_position(worker)

    def local_round(self) -> LocalRound | None:
        """What a worker released now does before its next message in a local phase (None
        outside one): H steps of its own SGD at the job's learning rate, then one delta."""
        spec = self.spec
        if spec.protocol is not Protocol.LOCAL or self.done:
            return None
        cfg = self.config
        total = cfg.total_samples
        phase_end = round(cfg.schedule.phases[self.phase_index].end * total)
        left = phase_end - self.samples if phase_end > self.samples else total - self.samples
        factor = cfg.lr_schedule.factor(self.progress)
        steps = round_steps(
            spec,
            cfg.local,
            lr_factor_start=cfg.lr_schedule.factor(self.local_start),
            lr_factor_now=factor,
            samples_left=left,
            active_workers=len(self.active),
        )
        return LocalRound(
            steps=steps,
            lr=self.lr_scale * cfg.lr * factor * cfg.local.inner_lr_factor,
            momentum=cfg.momentum,
            weight_decay=self.optimizer.weight_decay,
            epoch=self.local_epoch,
            keep_inner_state=cfg.local.inner_state is StatePolicy.KEEP,
        )

    def local_steps_lost(self, worker: int, samples: int, reason: str) -> None:
        """A worker lost `samples` of local steps it never sent (it died mid-round): counted,
        with the reason, beside the messages the ledger counts."""
        _check_worker(worker, self.config.workers)
        if samples > 0:
            self.unsent_samples[str(reason)] += samples  # plain str: a checkpoint key

    def request_snapshot(self, label: str) -> None:
        """Take a snapshot at the next version boundary (e.g. a checkpoint due by time)."""
        self._snapshot_requested = label

    # -- internals --------------------------------------------------------------------------

    def _complete_barrier(self) -> Outcome:
        """Apply the barrier's update if every active worker's gradient is in."""
        outcome, room = Outcome(), self.room
        if not room.pending or not self.active <= room.pending_workers():
            return outcome
        outcome.applied.extend(self._apply(room.pending, gathered=True))
        room.pending = []
        outcome.released.extend(room.release_all())
        outcome.merge(self._after_update())
        return outcome

    def _apply(self, gradients: list[Gradient], *, gathered: bool = False) -> list[UpdateRecord]:
        """One update from `gradients`: a barrier's (`gathered`: BSP's, or a local round's
        outer step) or one message's own."""
        gradients, mean, total = self._combine(gradients)
        kind = self._kind(gradients[0])
        deltas = gradients[0].local_steps > 0
        lr, momentum = self._step(mean, count=len(gradients), deltas=deltas, gathered=gathered)
        applied_to = self.version
        self.version += 1
        self.samples += total
        self.samples_by_protocol[kind] += total
        if self.spec.protocol is Protocol.BSP:
            self._phase_bsp_samples += total
        for g in gradients:
            self.ledger.record_applied(g.worker, g.sequence)
        now_s = self.now_s()
        return [
            UpdateRecord(
                version=self.version,
                worker=g.worker,
                sequence=g.sequence,
                computed_version=g.computed_version,
                staleness=applied_to - g.computed_version,
                protocol=self.spec.name,
                samples=self.samples,
                progress=self.progress,
                time_s=now_s,
                loss=g.loss,
                step_time_s=g.step_time_s,
                lr=lr,
                momentum=momentum,
            )
            for g in gradients
        ]

    def _combine(self, gradients: list[Gradient]) -> tuple[list[Gradient], torch.Tensor, int]:
        """The update's direction: one message's own values, or a barrier's sample-weighted
        mean (measured on the way when the statistics want this round). Returns the gradients
        in the order they were summed, the mean and the samples it stands for."""
        if len(gradients) == 1:
            # Every asynchronous update: the gradient itself (FlatSGD only reads it).
            return gradients, gradients[0].values, gradients[0].samples
        # A fixed summation order keeps BSP bit-for-bit reproducible whatever the arrival order.
        gradients = sorted(gradients, key=lambda g: g.worker)
        total = sum(g.samples for g in gradients)
        rows = torch.stack([g.values * (g.samples / total) for g in gradients])
        mean = rows.sum(dim=0)
        if self.stats is not None and self._measuring and self.stats.wants(self.version + 1):
            # Measured before the update, while the stacked rows are at hand (they are let go
            # before the step, as without measuring); the round produces version + 1. The
            # admission check squared each gradient when asked (`_squares_wanted`).
            samples = [g.samples for g in gradients]
            squares = [g.squared_norm for g in gradients]
            partials = self.stats.observe_rows(
                self.version + 1, rows, samples, mean, squares=squares
            )
            if partials is not None:
                self.partials.append(partials)
        del rows
        return gradients, mean, total

    def _step(
        self, mean: torch.Tensor, *, count: int, deltas: bool, gathered: bool
    ) -> tuple[float, float]:
        """Move the weights by `mean`, the combination of `count` messages (gradients: an SGD
        step; model deltas: the outer step or a worker's share of an average). Returns the
        learning rate and momentum, as recorded: for deltas, the inner ones the workers used."""
        cfg = self.config
        if deltas:
            lr = (
                self.lr_scale
                * cfg.lr
                * cfg.lr_schedule.factor(self.progress)
                * cfg.local.inner_lr_factor
            )
            if gathered and self.spec.protocol is Protocol.LOCAL:
                self.outer.step(self.optimizer.weights, mean)
            else:
                # Its worker's share of an average of every worker's model.
                self.optimizer.weights.sub_(mean.to(self.optimizer.weights), alpha=1 / cfg.workers)
            return lr, cfg.momentum
        spec = ASP if self.spec.protocol is Protocol.LOCAL else self.spec
        lr = self.lr_scale * update_learning_rate(
            cfg.lr, cfg.lr_schedule, self.progress, count, cfg.workers
        )
        momentum = update_momentum(
            cfg, spec, self.momentum_policy, self.progress, self._async_start
        )
        self.optimizer.step(mean, lr=lr, momentum=momentum)
        return lr, momentum

    def _after_update(self) -> Outcome:
        outcome = Outcome()
        cfg = self.config
        if self.partials:
            outcome.partials, self.partials = self.partials, []
        while (
            self._next_eval_index * cfg.eval_every < 1.0 - 1e-9
            and self.progress >= self._next_eval_index * cfg.eval_every - 1e-12
        ):
            outcome.evaluations.append(self._eval_point(self._next_eval_index * cfg.eval_every))
            self._next_eval_index += 1
        if self.samples >= cfg.total_samples:
            self._finish(outcome)
            return outcome
        index = scheduled_phase(cfg, self.phase_index, self.progress, self._phase_bsp_samples)
        if index != self.phase_index:
            left_online = cfg.schedule.phases[self.phase_index].online
            outcome.merge(self._enter_phase(index, ONLINE_CEILING if left_online else "schedule"))
        label = self._snapshot_requested
        while (
            cfg.checkpoint_every > 0
            and self.progress >= self._next_checkpoint_index * cfg.checkpoint_every - 1e-12
        ):
            self._next_checkpoint_index += 1
            label = label or "periodic"
        if label and not self.room.pending:
            # At a version boundary with no gradient waiting, after any scheduled switch: a
            # consistent state to go back to.
            self._snapshot_requested = ""
            outcome.snapshots.append(take_snapshot(self, label))
        return outcome

    def finish_now(self) -> Outcome:
        """End the workload here: another shard has applied it all (shards that dropped a
        gradient differently can differ by a few samples). Gradients at the barrier are dropped
        as training_complete, every waiting worker is released, and the evaluation points not
        reached yet are taken now, so every shard reports the same points."""
        outcome = Outcome()
        if self.done:
            return outcome
        for gradient in self.room.pending:
            outcome.dropped.append(self._drop(gradient, DropReason.TRAINING_COMPLETE))
        self.room.pending = []
        cfg = self.config
        while self._next_eval_index * cfg.eval_every < 1.0 - 1e-9:
            outcome.evaluations.append(self._eval_point(self._next_eval_index * cfg.eval_every))
            self._next_eval_index += 1
        self._finish(outcome)
        return outcome

    def _finish(self, outcome: Outcome) -> None:
        self.done = True
        now_s = self.now_s()
        self.time_by_protocol[self.spec.name] += now_s - self._phase_started_s
        self._phase_started_s = now_s
        outcome.evaluations.append(self._eval_point(1.0))
        outcome.released.extend(self.room.release_all())
        outcome.done = True

    @property
    def _measuring(self) -> bool:
        """Whether this round's statistics are wanted: the online phase, under BSP."""
        return self.phase_index == self._online_index and self.spec.protocol is Protocol.BSP

    def _squares_wanted(self) -> bool:
        """Whether the admission check should square the gradient it checks: it joins a BSP
        round the statistics measure, and they take worker norms as they are (every worker,
        every coordinate)."""
        stats = self.stats
        return stats is not None and self._measuring and stats.needs_squares(self.version + 1)

    def _gathers(self, gradient: Gradient) -> bool:
        """Whether the protocol in force gathers this message at its barrier: BSP gradients,
        a local phase deltas."""
        if not self.spec.protocol.has_barrier:
            return False
        return (gradient.local_steps > 0) == (self.spec.protocol is Protocol.LOCAL)

    def _kind(self, gradient: Gradient) -> str:
        """The protocol a message's samples were trained under (samples_by_protocol's key)."""
        if gradient.local_steps > 0:
            return Protocol.LOCAL.value
        if self.spec.protocol is Protocol.LOCAL:
            return self._before_local.protocol.value
        return self.spec.protocol.value

    def _local_switch(self, old: ProtocolSpec, new: ProtocolSpec) -> None:
        """The configuration policy at a switch into or out of a local phase (local.py)."""
        entering = new.protocol is Protocol.LOCAL and old.protocol is not Protocol.LOCAL
        if entering:
            self.outer.reset()
            self.local_epoch = self.version
            self.local_start = self.progress
            self._before_local = old if old.protocol.is_async else ASP
        leaving = old.protocol is Protocol.LOCAL and new.protocol is not Protocol.LOCAL
        if leaving and self.config.local.server_momentum_after is StatePolicy.RESET:
            self.optimizer.reset_momentum()

    def _eval_point(self, fraction: float) -> EvalPoint:
        return EvalPoint(
            fraction=fraction,
            samples=self.samples,
            version=self.version,
            time_s=self.now_s(),
            protocol=self.spec.name,
        )

    def _drop(self, gradient: Gradient, reason: str) -> DropRecord:
        self.ledger.record_dropped(gradient.worker, gradient.sequence, reason)
        return _drop_record(gradient, reason, self.now_s())


# The reason a switch carries when an online phase reached its ceiling undecided.
ONLINE_CEILING = f"{TIMING_POLICY}: the BSP share's ceiling reached"


def scheduled_phase(config: SyncConfig, index: int, progress: float, phase_bsp_samples: int) -> int:
    """The schedule's phase after an update: `index` (the current one) or a later one, past
    every phase that has ended. A BSP phase counted by work ends when its planned samples have
    been applied under BSP (`phase_bsp_samples` so far in the current phase)."""
    phases = config.schedule.phases
    current = index
    while index < len(phases) - 1:
        phase = phases[index]
        if phase.online:
            # Ended by the run controller (`end_online_phase`), or here at its ceiling: a
            # detour through ASP does not postpone it.
            finished = progress >= phase.end
        elif config.count_bsp_by_work and phase.spec.protocol is Protocol.BSP:
            start = phases[index - 1].end if index else 0.0
            planned = (phase.end - start) * config.total_samples
            # A phase entered late (after an earlier detour) still gets its planned BSP work.
            done = phase_bsp_samples if index == current else 0
            finished = done >= planned - 1e-9
        else:
            finished = progress >= phase.end
        if not finished:
            break
        index += 1
    return index


def update_momentum(
    config: SyncConfig,
    spec: ProtocolSpec,
    policy: MomentumPolicy,
    progress: float,
    async_start: float,
) -> float:
    """The momentum of an update under `spec`: the configured one under BSP, the momentum
    policy's in an asynchronous phase that began at `async_start`."""
    if not spec.protocol.is_async:
        return config.momentum
    return async_momentum(
        config.momentum,
        policy,
        config.workers,
        progress,
        async_start,
        config.momentum_ramp_fraction,
    )


def _check_worker(worker: int, workers: int) -> None:
    if not 0 <= worker < workers:
        raise ValueError(f"worker {worker} out of range 0..{workers - 1}")


def _drop_record(gradient: Gradient, reason: str, time_s: float) -> DropRecord:
    return DropRecord(
        worker=gradient.worker,
        sequence=gradient.sequence,
        computed_version=gradient.computed_version,
        reason=reason,
        time_s=time_s,
    )
