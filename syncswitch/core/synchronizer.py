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
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from syncswitch.core.gradients import (
    DropReason,
    GradientLedger,
    QuarantinePolicy,
    gradient_problem,
)
from syncswitch.core.hyperparams import (
    LrSchedule,
    MomentumPolicy,
    async_momentum,
    update_learning_rate,
)
from syncswitch.core.optimizer import FlatSGD
from syncswitch.core.protocol import Protocol, ProtocolSpec, Schedule
from syncswitch.core.records import (
    DropRecord,
    EvalPoint,
    Gradient,
    Outcome,
    Snapshot,
    SwitchEvent,
    UpdateRecord,
)

# What a BSP round's observer gets: the synchronizer, the round's gradients, their mean.
RoundObserver = Callable[["Synchronizer", list[Gradient], torch.Tensor], None]


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
        self.time_by_protocol: Counter[str] = Counter()
        self.samples_by_protocol: Counter[str] = Counter()
        self.switches: list[SwitchEvent] = []
        self._phase_bsp_samples = 0  # samples applied under BSP in the current phase
        self._phase_started_s = 0.0
        self._async_start = 0.0
        self._pending: list[Gradient] = []  # gradients at the BSP barrier
        self._waiting: set[int] = set()  # workers told to wait (barrier or SSP bound)
        self._clocks: dict[int, int] = {w: 0 for w in range(config.workers)}
        self._next_eval_index = 1
        self._next_checkpoint_index = 1
        # Version from which a re-admitted worker's gradients count again under BSP: one it
        # computed while excluded, on older weights, would be applied stale.
        self._admitted_from: dict[int, int] = {}
        # Called with each BSP round's gradients (in worker order) and their mean, after the
        # update: where gradient statistics are measured (issue 21; prototype hook).
        self.round_observer: RoundObserver | None = None

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
        return frozenset(self._waiting)

    def now_s(self) -> float:
        return self._clock() - self._t0

    def restart_clock(self) -> None:
        """Start the run's clock: time before the workers begin is not training time."""
        self._t0 = self._clock()
        self._phase_started_s = 0.0

    def accounting(self) -> dict:
        ledger = self.ledger
        return {
            "sent": ledger.sent,
            "applied": ledger.applied,
            "dropped": dict(sorted(ledger.dropped_by_reason.items())),
            "waiting": ledger.in_flight,
            "unaccounted": ledger.unaccounted(),
        }

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
        self._clocks[gradient.worker] = self._clocks.get(gradient.worker, 0) + 1
        if self.spec.protocol is Protocol.BSP:
            self._pending.append(gradient)
            self._waiting.add(gradient.worker)
            outcome.merge(self._complete_barrier())
        else:
            outcome.applied.extend(self._apply([gradient]))
            self._waiting.add(gradient.worker)
            outcome.released.extend(self._release_within_bound())
            outcome.merge(self._after_update())
        return outcome

    def _admission(self, gradient: Gradient, outcome: Outcome) -> str | None:
        """Why this gradient must not be used (it is then counted dropped), or None."""
        worker = gradient.worker
        settled = self.ledger.record_arrival(worker, gradient.sequence)
        if settled is not None:  # a retry, or a late gradient of a replaced incarnation
            outcome.dropped.append(self._drop_record(gradient, settled))
            return settled
        reason: str | None = None
        if self.done:
            reason = DropReason.TRAINING_COMPLETE
        elif self.quarantine.is_quarantined(worker):
            reason = DropReason.QUARANTINED
        else:
            reason = gradient_problem(gradient.values, self._numel)
            verdict = self.quarantine.observe(worker, reason)
            if verdict is not None:
                outcome.decisions.append(verdict.to_decision(self.now_s(), self.progress))
                outcome.merge(self.exclude(worker))
            if reason is None and gradient.computed_version < self.version_floor:
                reason = DropReason.ROLLED_BACK
            elif (
                reason is None
                and self.spec.protocol is Protocol.BSP
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
        self._check_worker(worker)
        self.excluded.add(worker)
        outcome = Outcome()
        if self.spec.protocol is Protocol.BSP:
            # Its gradient may already sit at the barrier: it stays, computed on this version.
            outcome.merge(self._complete_barrier())
        elif self.spec.protocol is Protocol.SSP:
            outcome.released.extend(self._release_within_bound())
        return outcome

    def readmit(self, worker: int) -> Outcome:
        """Wait for `worker` again from its next gradient on."""
        self._check_worker(worker)
        if worker in self.excluded:
            # It rejoins the SSP bound level with the slowest of the others, so they are not
            # held back for the steps it missed while excluded.
            self._clocks[worker] = max(self._clocks.get(worker, 0), self._slowest_clock())
            self.excluded.discard(worker)
            self._admitted_from[worker] = self.version
        return Outcome()

    def switch_to(self, spec: ProtocolSpec, reason: str) -> Outcome:
        """Put a new protocol in force now, in place, at the current version."""
        started = self._clock()
        outcome = Outcome()
        old = self.spec
        self.spec = spec
        if spec.protocol.is_async and not old.protocol.is_async:
            self._async_start = self.progress
        if spec.protocol is Protocol.SSP:
            # Clocks count steps within the phase, so an SSP phase starts with no one ahead.
            self._clocks = {w: 0 for w in range(self.config.workers)}
        if spec.protocol.is_async and self._pending:
            # A barrier cut short by the switch: each caught gradient is applied under ASP/SSP.
            caught, self._pending = self._pending, []
            for gradient in caught:
                outcome.applied.extend(self._apply([gradient]))
        if spec.protocol.is_async:
            outcome.released.extend(self._release_within_bound())
        else:
            # Workers held by an SSP bound join the coming barrier instead of waiting.
            released = sorted(w for w in self._waiting if w not in self._pending_workers())
            self._waiting -= set(released)
            outcome.released.extend(released)
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
        """A worker died or hung: the barrier and the SSP bound stop waiting for it."""
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

    def request_snapshot(self, label: str) -> None:
        """Take a snapshot at the next version boundary (e.g. a checkpoint due by time)."""
        self._snapshot_requested = label

    def snapshot(self, label: str) -> Snapshot:
        if self._pending:
            raise RuntimeError("a snapshot is taken at a version boundary, with no one waiting")
        now_s = self.now_s()
        state = {
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            "samples": self.samples,
            "phase_index": self.phase_index,
            "protocol": self.spec.name,
            "excluded": sorted(self.excluded),
            "clocks": {str(w): c for w, c in sorted(self._clocks.items())},
            "time_s": now_s,
            "phase_started_s": self._phase_started_s,
            "time_by_protocol": dict(self.time_by_protocol),
            "samples_by_protocol": dict(self.samples_by_protocol),
            "switches": [asdict(e) for e in self.switches],
            "async_start": self._async_start,
            "phase_bsp_samples": self._phase_bsp_samples,
            "next_eval_index": self._next_eval_index,
            "next_checkpoint_index": self._next_checkpoint_index,
            "lr_scale": self.lr_scale,
            "momentum_policy": self.momentum_policy.value,
            "pinned": self.pinned.name if self.pinned else None,
            "version_floor": self.version_floor,
            "ledger": self.ledger.to_state(),
        }
        return Snapshot(label, self.samples, self.progress, self.version, now_s, state)

    def restore(self, state: dict[str, Any]) -> None:
        """Become the synchronizer a snapshot was taken of (a new server, or a resumed run).

        The clock continues from the snapshot's time, so time lost to the failure is not
        counted as training time. Every worker must `rejoin` before it trains again.
        """
        self._load_position(state)
        self.version = int(state["version"])
        self.version_floor = int(state["version_floor"])
        self.ledger = GradientLedger.from_state(state["ledger"])
        self.time_by_protocol = Counter(state["time_by_protocol"])
        self.switches = [SwitchEvent(**e) for e in state["switches"]]
        self._t0 = self._clock() - float(state["time_s"])
        self._phase_started_s = float(state["phase_started_s"])
        self.done = False

    def roll_back(
        self,
        state: dict[str, Any],
        *,
        protocol: str,
        lr_scale: float,
        momentum_policy: MomentumPolicy,
        reason: str,
    ) -> Outcome:
        """Go back to a snapshot's weights and position, in place, while workers run on, and
        stay in `protocol` from then on (a divergence guard's response).

        Versions keep increasing: the restored weights get a new version, and anything
        computed before it (on the abandoned weights) is dropped as rolled_back when it
        arrives. Accounting and time are not rolled back: what happened, happened.
        """
        outcome = Outcome()
        for gradient in self._pending:
            outcome.dropped.append(self._drop(gradient, DropReason.ROLLED_BACK))
        self._pending = []
        self._load_position(state)
        self.version = max(self.version, int(state["version"])) + 1
        self.version_floor = self.version
        self.excluded.clear()
        self.lr_scale = lr_scale
        self.momentum_policy = momentum_policy
        self.pinned = ProtocolSpec.parse(protocol)
        if self.spec != self.pinned:
            outcome.merge(self.switch_to(self.pinned, reason=reason))
        outcome.released.extend(sorted(self._waiting))
        self._waiting.clear()
        return outcome

    def _load_position(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.samples = int(state["samples"])
        self.phase_index = int(state["phase_index"])
        self.spec = ProtocolSpec.parse(state["protocol"])
        self.excluded = set(state["excluded"])
        self._clocks = {int(w): int(c) for w, c in state["clocks"].items()}
        self.samples_by_protocol = Counter(state["samples_by_protocol"])
        self._async_start = float(state["async_start"])
        self._phase_bsp_samples = int(state["phase_bsp_samples"])
        self._next_eval_index = int(state["next_eval_index"])
        self._next_checkpoint_index = int(state["next_checkpoint_index"])
        self.lr_scale = float(state["lr_scale"])
        self.momentum_policy = MomentumPolicy(state["momentum_policy"])
        self.pinned = ProtocolSpec.parse(state["pinned"]) if state["pinned"] else None

    # -- internals --------------------------------------------------------------------------

    def _complete_barrier(self) -> Outcome:
        """Apply the barrier's update if every active worker's gradient is in."""
        outcome = Outcome()
        if not self._pending or not self.active <= self._pending_workers():
            return outcome
        outcome.applied.extend(self._apply(self._pending))
        self._pending = []
        outcome.released.extend(sorted(self._waiting))
        self._waiting.clear()
        outcome.merge(self._after_update())
        return outcome

    def _check_worker(self, worker: int) -> None:
        if not 0 <= worker < self.config.workers:
            raise ValueError(f"worker {worker} out of range 0..{self.config.workers - 1}")

    def _slowest_clock(self) -> int:
        return min((self._clocks.get(w, 0) for w in self.active), default=0)

    def _pending_workers(self) -> set[int]:
        return {g.worker for g in self._pending}

    def _apply(self, gradients: list[Gradient]) -> list[UpdateRecord]:
        cfg = self.config
        if len(gradients) == 1:
            # Every asynchronous update: the gradient itself (FlatSGD only reads it).
            total = gradients[0].samples
            mean = gradients[0].values
        else:
            # A fixed summation order keeps BSP bit-for-bit reproducible whatever the arrival
            # order.
            gradients = sorted(gradients, key=lambda g: g.worker)
            total = sum(g.samples for g in gradients)
            mean = torch.stack([g.values * (g.samples / total) for g in gradients]).sum(dim=0)
        lr = self.lr_scale * update_learning_rate(
            cfg.lr, cfg.lr_schedule, self.progress, len(gradients), cfg.workers
        )
        momentum = self._momentum()
        self.optimizer.step(mean, lr=lr, momentum=momentum)
        applied_to = self.version
        self.version += 1
        self.samples += total
        self.samples_by_protocol[self.spec.protocol.value] += total
        if self.spec.protocol is Protocol.BSP:
            self._phase_bsp_samples += total
        if self.round_observer is not None and len(gradients) > 1:
            self.round_observer(self, gradients, mean)
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

    def _momentum(self) -> float:
        cfg = self.config
        if not self.spec.protocol.is_async:
            return cfg.momentum
        return async_momentum(
            cfg.momentum,
            self.momentum_policy,
            cfg.workers,
            self.progress,
            self._async_start,
            cfg.momentum_ramp_fraction,
        )

    def _release_within_bound(self) -> list[int]:
        """Waiting workers allowed to go on under the current asynchronous rule."""
        if self.spec.protocol is Protocol.SSP:
            bound = self.spec.staleness_bound or 0
            slowest = self._slowest_clock()
            released = sorted(w for w in self._waiting if self._clocks.get(w, 0) - slowest <= bound)
        else:
            released = sorted(self._waiting)
        self._waiting -= set(released)
        return released

    def _after_update(self) -> Outcome:
        outcome = Outcome()
        cfg = self.config
        while (
            self._next_eval_index * cfg.eval_every < 1.0 - 1e-9
            and self.progress >= self._next_eval_index * cfg.eval_every - 1e-12
        ):
            outcome.evaluations.append(self._eval_point(self._next_eval_index * cfg.eval_every))
            self._next_eval_index += 1
        if self.samples >= cfg.total_samples:
            self._finish(outcome)
            return outcome
        index = self.phase_index
        while index < len(cfg.schedule.phases) - 1 and self._phase_finished(index):
            index += 1
        if index != self.phase_index:
            self.phase_index = index
            self._phase_bsp_samples = 0
            new_spec = self.pinned or cfg.schedule.phases[index].spec
            if new_spec != self.spec:
                outcome.merge(self.switch_to(new_spec, reason="schedule"))
        label = self._snapshot_requested
        while (
            cfg.checkpoint_every > 0
            and self.progress >= self._next_checkpoint_index * cfg.checkpoint_every - 1e-12
        ):
            self._next_checkpoint_index += 1
            label = label or "periodic"
        if label and not self._pending:
            # At a version boundary with no gradient waiting, after any scheduled switch: a
            # consistent state to go back to.
            self._snapshot_requested = ""
            outcome.snapshots.append(self.snapshot(label))
        return outcome

    def _phase_finished(self, index: int) -> bool:
        cfg = self.config
        phase = cfg.schedule.phases[index]
        if cfg.count_bsp_by_work and phase.spec.protocol is Protocol.BSP:
            start = cfg.schedule.phases[index - 1].end if index else 0.0
            planned = (phase.end - start) * cfg.total_samples
            # A phase entered late (after an earlier detour) still gets its planned BSP work.
            done = self._phase_bsp_samples if index == self.phase_index else 0
            return done >= planned - 1e-9
        return self.progress >= phase.end

    def finish_now(self) -> Outcome:
        """End the workload here: another shard has applied it all (shards that dropped a
        gradient differently can differ by a few samples). Gradients at the barrier are dropped
        as training_complete, every waiting worker is released, and the evaluation points not
        reached yet are taken now, so every shard reports the same points."""
        outcome = Outcome()
        if self.done:
            return outcome
        for gradient in self._pending:
            outcome.dropped.append(self._drop(gradient, DropReason.TRAINING_COMPLETE))
        self._pending = []
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
        outcome.released.extend(sorted(self._waiting))
        self._waiting.clear()
        outcome.done = True

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
        return self._drop_record(gradient, reason)

    def _drop_record(self, gradient: Gradient, reason: str) -> DropRecord:
        return DropRecord(
            worker=gradient.worker,
            sequence=gradient.sequence,
            computed_version=gradient.computed_version,
            reason=reason,
            time_s=self.now_s(),
        )
