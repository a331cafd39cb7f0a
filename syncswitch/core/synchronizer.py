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
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

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
    SwitchEvent,
    UpdateRecord,
)


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
        self.active: set[int] = set(range(config.workers))
        self.done = False
        self.sent = 0
        self.applied_count = 0
        self.dropped: Counter[str] = Counter()
        self.time_by_protocol: Counter[str] = Counter()
        self.switches: list[SwitchEvent] = []
        self._phase_started_s = 0.0
        self._async_start = 0.0
        self._pending: list[Gradient] = []  # gradients at the BSP barrier
        self._waiting: set[int] = set()  # workers told to wait (barrier or SSP bound)
        self._clocks: dict[int, int] = {w: 0 for w in self.active}
        self._next_eval_index = 1

    # -- reading state ----------------------------------------------------------------------

    @property
    def progress(self) -> float:
        return min(self.samples / self.config.total_samples, 1.0)

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
        return {
            "sent": self.sent,
            "applied": self.applied_count,
            "dropped": dict(self.dropped),
            "waiting": len(self._pending),
        }

    # -- the protocol -----------------------------------------------------------------------

    def submit(self, gradient: Gradient) -> Outcome:
        """Take one gradient; return what the runtime must do next."""
        self.sent += 1
        outcome = Outcome()
        if self.done:
            outcome.dropped.append(self._drop(gradient, "training_complete"))
            outcome.released.append(gradient.worker)
            outcome.done = True
            return outcome
        self._clocks[gradient.worker] = self._clocks.get(gradient.worker, 0) + 1
        if self.spec.protocol is Protocol.BSP:
            self._pending.append(gradient)
            self._waiting.add(gradient.worker)
            if len(self._pending) >= len(self.active):
                outcome.applied.extend(self._apply(self._pending))
                self._pending = []
                outcome.released.extend(sorted(self._waiting))
                self._waiting.clear()
        else:
            outcome.applied.extend(self._apply([gradient]))
            self._waiting.add(gradient.worker)
            outcome.released.extend(self._release_within_bound())
        if outcome.applied:
            outcome.merge(self._after_update())
        return outcome

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
            self._clocks = {w: 0 for w in self.active}
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

    # -- internals --------------------------------------------------------------------------

    def _pending_workers(self) -> set[int]:
        return {g.worker for g in self._pending}

    def _apply(self, gradients: list[Gradient]) -> list[UpdateRecord]:
        cfg = self.config
        # A fixed summation order keeps BSP bit-for-bit reproducible whatever the arrival order.
        gradients = sorted(gradients, key=lambda g: g.worker)
        total = sum(g.samples for g in gradients)
        if len(gradients) == 1:
            mean = gradients[0].values
        else:
            mean = torch.stack([g.values * (g.samples / total) for g in gradients]).sum(dim=0)
        lr = update_learning_rate(
            cfg.lr, cfg.lr_schedule, self.progress, len(gradients), cfg.workers
        )
        momentum = self._momentum()
        self.optimizer.step(mean, lr=lr, momentum=momentum)
        applied_to = self.version
        self.version += 1
        self.samples += total
        self.applied_count += len(gradients)
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
            cfg.momentum_policy,
            cfg.workers,
            self.progress,
            self._async_start,
            cfg.momentum_ramp_fraction,
        )

    def _release_within_bound(self) -> list[int]:
        """Waiting workers allowed to go on under the current asynchronous rule."""
        if self.spec.protocol is Protocol.SSP:
            bound = self.spec.staleness_bound or 0
            slowest = min(self._clocks.get(w, 0) for w in self.active)
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
        index = cfg.schedule.phase_index_at(self.progress)
        if index != self.phase_index:
            self.phase_index = index
            new_spec = cfg.schedule.phases[index].spec
            if new_spec != self.spec:
                outcome.merge(self.switch_to(new_spec, reason="schedule"))
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
        self.dropped[reason] += 1
        return DropRecord(
            worker=gradient.worker,
            sequence=gradient.sequence,
            computed_version=gradient.computed_version,
            reason=reason,
            time_s=self.now_s(),
        )
